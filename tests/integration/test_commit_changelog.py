"""The commit protocol with a Kafka changelog: publish once, roll forward after a crash
between the Kafka commit and the store commit, and a follower converging to the leader."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_statestore.changelog import partition_for_key
from spark_statestore.connectors.kafka.follower.source import KafkaChangelogSource
from spark_statestore.connectors.kafka.sink.publisher import KafkaChangelogPublisher
from spark_statestore.follower import Follower, FollowerState
from spark_statestore.sink.commit import BatchToCommit, CommitOutcome, commit_batch
from spark_statestore.sink.staging import StagedFile, StagingArea, staged_schema
from spark_statestore.store import Role, Store, StoreOptions, StoreSpec
from tests.kafka_util import caught_up_follower, settled_changelog

pytestmark = pytest.mark.integration

APP = "shop"


def staged(
    staging: StagingArea, batch_id: int, rows: list[tuple[bytes, bytes | None, int]]
) -> StagedFile:
    keys, values, offsets = (list(c) for c in zip(*rows, strict=True))
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(["orders"] * len(keys), pa.string()),
            pa.array([0] * len(keys), pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array([1_700_000_000_000] * len(keys), pa.int64()),
        ],
        schema=staged_schema(),
    )
    return staging.stage("q", batch_id, 0, 0, [batch])


@pytest.fixture
def changelog(kafka_broker: Any, make_topic: Callable[..., str]) -> str:
    topic = f"{APP}-{make_topic(partitions=3, suffix='-changelog')}"
    kafka_broker.create_topic(topic, 3, compacted=False)  # read back record for record
    kafka_broker.create_topic(f"{topic}-progress", 1)
    return topic


def content(store: Store) -> dict[bytes, bytes]:
    with store.snapshot() as snapshot:
        return dict(snapshot.items())


class CrashAfterPublish(Exception):
    pass


def crashing_publisher(bootstrap: str, topic: str) -> KafkaChangelogPublisher:
    """A publisher whose ``publish`` commits the Kafka transaction, then "crashes" before
    the store commit (the test closes it, as the crashed process's would be)."""
    publisher = KafkaChangelogPublisher(bootstrap, topic, application_id=APP)
    real_publish = publisher.publish

    def publish_then_crash(*args: Any, **kwargs: Any) -> dict[int, int]:
        real_publish(*args, **kwargs)
        raise CrashAfterPublish

    publisher.publish = publish_then_crash  # type: ignore[method-assign]
    return publisher


def test_publish_once_then_roll_forward_after_a_crash(
    kafka_broker: Any, changelog: str, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    path = tmp_path / "leader"
    spec = StoreSpec(Role.LEADER, changelog, 3)
    staging = StagingArea(path)
    with Store.open(path, spec, options=StoreOptions(sync=False)) as store:
        first = BatchToCommit("q", 0, [staged(staging, 0, [(b"a", b"1", 10), (b"b", b"2", 11)])])
        with KafkaChangelogPublisher(bootstrap, changelog, application_id=APP) as publisher:
            assert commit_batch(store, staging, first, publisher) is CommitOutcome.COMMITTED
        # The envelope of each key names the changelog record that wrote it.
        records = {r.key: r for r in settled_changelog(bootstrap, changelog)}
        with store.snapshot() as snapshot:
            for key in (b"a", b"b"):
                stored = snapshot.get_record(key)
                assert stored is not None
                assert (stored.partition, stored.offset) == (
                    records[key].partition,
                    records[key].offset,
                )
                assert stored.partition == partition_for_key(key, 3)
        assert records[b"a"].position is not None

        # Crash between the Kafka commit and the store commit.
        second = BatchToCommit(
            "q", 1, [staged(staging, 1, [(b"a", b"10", 12), (b"b", None, 13), (b"c", b"3", 14)])]
        )
        publisher = crashing_publisher(bootstrap, changelog)
        with pytest.raises(CrashAfterPublish):
            commit_batch(store, staging, second, publisher)
        publisher.close()
        assert content(store) == {b"a": b"1", b"b": b"2"}  # the store did not commit

        # The restarted sink: the changelog has batch 1, so the store rolls forward.
        with KafkaChangelogPublisher(bootstrap, changelog, application_id=APP) as restarted:
            assert commit_batch(store, staging, second, restarted) is CommitOutcome.ROLLED_FORWARD
            assert commit_batch(store, staging, second, restarted) is CommitOutcome.SKIPPED
        assert content(store) == {b"a": b"10", b"c": b"3"}
        leader_offsets = dict(store.metadata.changelog_offsets)
        assert store.metadata.commit_record is not None
        assert store.metadata.commit_record.batch_id == 1
        leader = content(store)
        leader_position = store.metadata.position

    # Each change is in the changelog exactly once (read_committed).
    keys = [r.key for r in settled_changelog(bootstrap, changelog)]
    assert sorted(keys) == sorted([b"a", b"b", b"a", b"b", b"c"])

    # A follower of the changelog converges to the leader, positions included.
    with Store.open(tmp_path / "follower", StoreSpec(Role.FOLLOWER, changelog, 3)) as replica:
        follower = Follower(replica, KafkaChangelogSource(bootstrap, changelog))
        while follower.state is not FollowerState.RUNNING:
            follower.step()
        follower.stop()
        assert content(replica) == leader
        assert replica.metadata.position == leader_position
        for partition, offset in leader_offsets.items():
            assert replica.metadata.changelog_offsets[partition] >= offset


def test_rows_without_a_timestamp_get_one_that_leader_and_follower_share(
    kafka_broker: Any, changelog: str, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    path = tmp_path / "leader"
    staging = StagingArea(path)

    def untimed(batch_id: int, key: bytes) -> StagedFile:
        batch = pa.RecordBatch.from_arrays(
            [pa.array([key], pa.binary()), pa.array([b"v"], pa.binary())]
            + [pa.nulls(1, t) for t in (pa.string(), pa.int32(), pa.int64(), pa.int64())],
            schema=staged_schema(),
        )
        return staging.stage("q", batch_id, 0, 0, [batch])

    with Store.open(path, StoreSpec(Role.LEADER, changelog, 3)) as store:
        with KafkaChangelogPublisher(bootstrap, changelog, application_id=APP) as publisher:
            commit_batch(store, staging, BatchToCommit("q", 0, [untimed(0, b"a")]), publisher)
        # The second batch rolls forward after a crash between the two commits.
        second = BatchToCommit("q", 1, [untimed(1, b"b")])
        crashing = crashing_publisher(bootstrap, changelog)
        with pytest.raises(CrashAfterPublish):
            commit_batch(store, staging, second, crashing)
        crashing.close()
        with KafkaChangelogPublisher(bootstrap, changelog, application_id=APP) as restarted:
            assert commit_batch(store, staging, second, restarted) is CommitOutcome.ROLLED_FORWARD
        with store.snapshot() as snapshot:
            leader = {k: snapshot.get_record(k).timestamp for k in (b"a", b"b")}  # type: ignore[union-attr]
    changelog_stamps = {r.key: r.timestamp for r in settled_changelog(bootstrap, changelog)}
    assert leader == changelog_stamps and all(t is not None and t > 0 for t in leader.values())
    with (
        caught_up_follower(tmp_path / "follower", bootstrap, changelog, 3) as replica,
        replica.snapshot() as snapshot,
    ):
        assert {k: snapshot.get_record(k).timestamp for k in (b"a", b"b")} == leader  # type: ignore[union-attr]


def test_a_rolled_forward_empty_batch_keeps_its_source_position(
    kafka_broker: Any, changelog: str, tmp_path: Path
) -> None:
    """A batch with no rows still moves the leader's position to its source offsets (from
    Spark's offset log); a roll-forward after a crash must end at the same position as a
    commit that did not crash (the changelog holds no record to carry it)."""
    bootstrap = kafka_broker.bootstrap_servers
    source = {"orders": {"0": 43, "1": 7}}
    positions = []
    for name, crash in (("plain", False), ("crashed", True)):
        path = tmp_path / name
        topic = changelog if not crash else f"{changelog}-b"
        if crash:
            kafka_broker.create_topic(topic, 3, compacted=False)
            kafka_broker.create_topic(f"{topic}-progress", 1)
        staging = StagingArea(path)
        with Store.open(path, StoreSpec(Role.LEADER, topic, 3)) as store:
            with KafkaChangelogPublisher(bootstrap, topic, application_id=APP) as publisher:
                first = BatchToCommit("q", 0, [staged(staging, 0, [(b"a", b"1", 10)])])
                commit_batch(store, staging, first, publisher)
            empty = BatchToCommit("q", 1, [], source_offsets=source)
            if crash:
                publisher = crashing_publisher(bootstrap, topic)
                with pytest.raises(CrashAfterPublish):
                    commit_batch(store, staging, empty, publisher)
                publisher.close()
                publisher = KafkaChangelogPublisher(bootstrap, topic, application_id=APP)
                assert commit_batch(store, staging, empty, publisher) is (
                    CommitOutcome.ROLLED_FORWARD
                )
            else:
                publisher = KafkaChangelogPublisher(bootstrap, topic, application_id=APP)
                assert commit_batch(store, staging, empty, publisher) is CommitOutcome.COMMITTED
            publisher.close()
            positions.append(store.metadata.position.to_map())
    assert positions[0] == positions[1]
    assert positions[0]["orders"] == {0: 42, 1: 6}
