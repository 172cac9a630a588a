"""The follower against a real Kafka broker: restore, live follow, restart, positions."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from spark_statestore.changelog import OnMissingPosition, partition_for_key
from spark_statestore.changelog.position_codec import encode_position
from spark_statestore.connectors.kafka.errors import DataLossError, KafkaClientError
from spark_statestore.connectors.kafka.follower.source import KafkaChangelogSource
from spark_statestore.errors import FollowerError
from spark_statestore.follower import Follower, FollowerState
from spark_statestore.position import Position
from spark_statestore.store import Role, Store, StoreMismatchError, StoreOptions, StoreSpec
from tests.kafka_util import RETENTION_CONFIG, wait_for_retention, wait_until_readable

pytestmark = pytest.mark.integration

INPUT = "orders"


class ChangelogWriter:
    """Plays a Kafka Streams app: transactional changelog writes with position headers."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.topic = topic
        self.partitions = partitions
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": f"writer-{topic}"}
        )
        self.producer.init_transactions(30)
        self.bootstrap = bootstrap
        self.model: dict[bytes, bytes] = {}
        self.position: dict[int, int] = {}
        self.input_offset = 0
        self.last_offsets: dict[int, int] = {}

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:  # an aborted transaction's records are purged
            return
        partition = message.partition()
        self.last_offsets[partition] = max(self.last_offsets.get(partition, -1), message.offset())

    def transaction(self, changes: list[tuple[bytes, bytes | None]], abort: bool = False) -> None:
        self.producer.begin_transaction()
        staged = dict(self.model)
        position = dict(self.position)
        for key, value in changes:
            partition = partition_for_key(key, self.partitions)
            self.input_offset += 1
            position[partition] = self.input_offset
            header = Position.from_map({INPUT: {partition: self.input_offset}})
            self.producer.produce(
                self.topic,
                key=key,
                value=value,
                partition=partition,
                on_delivery=self._delivered,
                headers=[
                    ("v", b"\x00"),
                    ("c", encode_position(header, pad_like_kafka_streams=True)),
                ],
            )
            if value is None:
                staged.pop(key, None)
            else:
                staged[key] = value
        if abort:
            self.producer.abort_transaction(30)
            return
        self.producer.commit_transaction(30)
        self.producer.flush(30)  # serve the delivery reports
        # Like a reader that wants to see its write: wait until read_committed can.
        wait_until_readable(self.bootstrap, self.topic, self.last_offsets)
        self.model = staged
        self.position = position

    def expected_position(self) -> dict[str, dict[int, int]]:
        return {INPUT: dict(self.position)} if self.position else {}


@pytest.fixture
def writer(kafka_broker: Any, make_topic: Callable[..., str]) -> Iterator[ChangelogWriter]:
    topic = make_topic(partitions=3, suffix="-changelog")
    w = ChangelogWriter(kafka_broker.bootstrap_servers, topic, 3)
    yield w
    w.producer.flush(10)


def open_follower_store(path: Path, topic: str) -> Store:
    return Store.open(path, StoreSpec(Role.FOLLOWER, topic, 3), options=StoreOptions(sync=False))


def store_content(store: Store) -> dict[bytes, bytes]:
    with store.snapshot() as snapshot:
        return dict(snapshot.items())


def random_changes(rng: random.Random, count: int) -> list[tuple[bytes, bytes | None]]:
    return [
        (b"k%03d" % rng.randrange(60), None if rng.random() < 0.2 else b"v%d" % rng.randrange(9))
        for _ in range(count)
    ]


def test_restore_then_follow_live(
    kafka_broker: Any, writer: ChangelogWriter, tmp_path: Path
) -> None:
    rng = random.Random(7)
    for n in range(6):
        writer.transaction(random_changes(rng, 20))
        writer.transaction([(b"k000", b"ABORTED")], abort=True) if n == 2 else None
    with open_follower_store(tmp_path / "s", writer.topic) as store:
        source = KafkaChangelogSource(kafka_broker.bootstrap_servers, writer.topic)
        follower = Follower(store, source, chunk_records=17)
        follower.start()
        try:
            assert follower.wait_running(60)
            assert follower.state is FollowerState.RUNNING
            assert store_content(store) == writer.model
            assert store.metadata.position.to_map() == writer.expected_position()
            # Live: changes written after the restore become visible without a restart.
            writer.transaction([(b"k000", b"ABORTED")], abort=True)
            writer.transaction([(b"live-key", b"1"), (b"k001", None)])
            assert follower.wait_until(follower.refresh_end_offsets(), 60)
            content = store_content(store)
            assert content == writer.model
            assert b"ABORTED" not in content.values()
            lags = follower.lags()
            assert all(lag.offset_lag == 0 for lag in lags.values())
        finally:
            follower.stop()


def test_a_caught_up_follower_applies_a_change_without_waiting_to_fill_a_chunk(
    kafka_broker: Any, writer: ChangelogWriter, tmp_path: Path
) -> None:
    """While restoring, a poll waits for a whole chunk; once RUNNING, a single change is
    applied as soon as it arrives, not after the poll's timeout."""
    writer.transaction(random_changes(random.Random(1), 30))
    with open_follower_store(tmp_path / "s", writer.topic) as store:
        source = KafkaChangelogSource(kafka_broker.bootstrap_servers, writer.topic)
        # A poll that waited to fill its chunk would hold this change for 10 s.
        follower = Follower(store, source, chunk_records=50_000, poll_timeout_s=10)
        follower.start()
        try:
            assert follower.wait_running(60)
            writer.transaction([(b"one-change", b"1")])
            assert follower.wait_until({p: o + 1 for p, o in writer.last_offsets.items()}, 5)
            assert store_content(store)[b"one-change"] == b"1"
        finally:
            follower.stop(timeout_s=30)


def test_restart_resumes_from_store_offsets(
    kafka_broker: Any, writer: ChangelogWriter, tmp_path: Path
) -> None:
    rng = random.Random(11)
    for _ in range(4):
        writer.transaction(random_changes(rng, 15))
    path = tmp_path / "s"
    with open_follower_store(path, writer.topic) as store:
        follower = Follower(
            store, KafkaChangelogSource(kafka_broker.bootstrap_servers, writer.topic)
        )
        while follower.state is not FollowerState.RUNNING:
            follower.step()
        first = store.metadata
        follower.stop()
    for _ in range(3):
        writer.transaction(random_changes(rng, 15))
    with open_follower_store(path, writer.topic) as store:
        follower = Follower(
            store, KafkaChangelogSource(kafka_broker.bootstrap_servers, writer.topic)
        )
        follower.start_restore()
        applied = 0
        while follower.state is not FollowerState.RUNNING:
            applied += follower.step()
        follower.stop()
        assert applied == 45  # only the new records: nothing re-applied, nothing skipped
        assert store_content(store) == writer.model
        assert store.metadata.commit_seq > first.commit_seq
        assert store.metadata.position.dominates(first.position)


def test_bad_input_is_refused(kafka_broker: Any, writer: ChangelogWriter, tmp_path: Path) -> None:
    with pytest.raises(KafkaClientError, match="does not exist"):
        KafkaChangelogSource(kafka_broker.bootstrap_servers, "no-such-changelog").partition_count()
    spec = StoreSpec(Role.FOLLOWER, writer.topic, 4)
    with Store.open(tmp_path / "wrong", spec) as store:
        source = KafkaChangelogSource(kafka_broker.bootstrap_servers, writer.topic)
        with pytest.raises(FollowerError, match="3 partitions"):
            Follower(store, source)
        source.close()
    with Store.open(tmp_path / "leader", StoreSpec(Role.LEADER, writer.topic, 3)) as store:
        source = KafkaChangelogSource(kafka_broker.bootstrap_servers, writer.topic)
        with pytest.raises(FollowerError, match="follower"):
            Follower(store, source)
        source.close()
    with pytest.raises(KafkaClientError, match="read_committed"):
        KafkaChangelogSource(
            kafka_broker.bootstrap_servers,
            writer.topic,
            config={"isolation.level": "read_uncommitted"},
        )


def test_subset_follower_keeps_its_partitions_and_prefix(
    kafka_broker: Any, writer: ChangelogWriter, tmp_path: Path
) -> None:
    rng = random.Random(5)
    for _ in range(5):
        writer.transaction(random_changes(rng, 30))
    path = tmp_path / "subset"
    spec = StoreSpec(Role.FOLLOWER, writer.topic, 3, held_partitions=(0, 2), key_prefix=b"k00")
    with Store.open(path, spec, options=StoreOptions(sync=False)) as store:
        follower = Follower(
            store, KafkaChangelogSource(kafka_broker.bootstrap_servers, writer.topic)
        )
        assert follower.partitions == (0, 2)
        while follower.state is not FollowerState.RUNNING:
            follower.step()
        follower.stop()
        expected = {
            k: v
            for k, v in writer.model.items()
            if k.startswith(b"k00") and partition_for_key(k, 3) in (0, 2)
        }
        assert expected and store_content(store) == expected
        assert follower.records_skipped > 0
        assert set(store.metadata.changelog_offsets) == {0, 2}
        assert store.manifest.holds == (0, 2) and store.manifest.key_prefix == b"k00"
    # The subset is part of the store's identity.
    with pytest.raises(StoreMismatchError, match="partitions \\[0, 2\\]"):
        Store.open(path, StoreSpec(Role.FOLLOWER, writer.topic, 3))
    with Store.open(path, spec) as store:
        source = KafkaChangelogSource(kafka_broker.bootstrap_servers, writer.topic)
        with pytest.raises(FollowerError, match="holds partitions \\[0, 2\\]"):
            Follower(store, source, partitions=[0, 1])
        source.close()


def _fill_past_retention(bootstrap: str, topic: str) -> None:
    """Produce ~3 MB to partition 0 of a topic with :data:`RETENTION_CONFIG` and wait
    until the broker's retention has deleted its first segments."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(3_000):
        producer.produce(topic, key=b"big%05d" % i, value=b"x" * 1000, partition=0)
    producer.flush(30)
    wait_for_retention(bootstrap, topic)


def test_lost_offsets_fail_or_are_skipped_per_fail_on_data_loss(
    kafka_broker: Any, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic(partitions=1, suffix="-changelog", config=RETENTION_CONFIG)
    _fill_past_retention(kafka_broker.bootstrap_servers, topic)
    spec = StoreSpec(Role.FOLLOWER, topic, 1)
    with Store.open(tmp_path / "strict", spec, options=StoreOptions(sync=False)) as store:
        source = KafkaChangelogSource(
            kafka_broker.bootstrap_servers, topic, on_missing_position=OnMissingPosition.SKIP
        )
        low, high = source.watermarks([0])[0]
        assert low > 0  # the test needs offsets that are gone
        follower = Follower(store, source)
        with pytest.raises(DataLossError, match=f"{topic}-0: offsets 0-{low - 1} are gone"):
            while follower.state is not FollowerState.RUNNING:
                follower.step()
        follower.stop()
        assert store.metadata.changelog_offsets == {}  # nothing half-applied
    with Store.open(tmp_path / "lenient", spec, options=StoreOptions(sync=False)) as store:
        source = KafkaChangelogSource(
            kafka_broker.bootstrap_servers,
            topic,
            on_missing_position=OnMissingPosition.SKIP,
            fail_on_data_loss=False,
        )
        follower = Follower(store, source)
        while follower.state is not FollowerState.RUNNING:
            follower.step()
        follower.stop()
        assert source.lost_offsets[0] >= low
        with store.snapshot() as snapshot:
            keys = [k for k, _ in snapshot.items()]
        assert keys[0] >= b"big%05d" % low and keys[-1] == b"big02999"
        assert store.metadata.changelog_offsets == {0: high}


def test_unknown_client_settings_are_named(kafka_broker: Any) -> None:
    with pytest.raises(KafkaClientError, match=r"no\.such\.setting"):
        KafkaChangelogSource(
            kafka_broker.bootstrap_servers, "any-changelog", config={"no.such.setting": "1"}
        )
