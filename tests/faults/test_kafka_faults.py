"""Real Kafka faults against the follower, the range reader and the sink.

Every fault here is an event on a real Apache Kafka cluster: a broker process killed and
restarted, paused (SIGSTOP) past the clients' timeouts, a partition leader moved by a
controlled shutdown, retention deleting offsets, the log cleaner leaving offset gaps, and a
transactional producer killed mid-transaction whose transaction the coordinator aborts when
it times out. After each, the follower's store must equal the committed changelog, with
its positions, and nothing aborted may ever reach it.
"""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from spark_statestore.connectors.kafka.errors import DataLossError, KafkaClientError
from spark_statestore.connectors.kafka.follower.ranges import read_range
from spark_statestore.connectors.kafka.follower.source import KafkaChangelogSource
from spark_statestore.connectors.kafka.local import LocalKafkaCluster
from spark_statestore.connectors.kafka.sink.publisher import KafkaChangelogPublisher
from spark_statestore.connectors.kafka.tail import tail_changelog
from spark_statestore.follower import Follower, FollowerState
from spark_statestore.sink.commit import BatchToCommit, CommitOutcome, commit_batch
from spark_statestore.sink.staging import StagingArea
from spark_statestore.store import Role, Store, StoreOptions, StoreSpec
from tests.integration.test_commit_changelog import staged
from tests.integration.test_follower import ChangelogWriter, random_changes, store_content
from tests.kafka_util import (
    RETENTION_CONFIG,
    poll_until,
    wait_for_retention,
    wait_until_settled,
)

pytestmark = [pytest.mark.integration, pytest.mark.beside]  # its own clusters: beside the main run

_names = iter(range(1_000_000))


def new_topic(cluster: LocalKafkaCluster, partitions: int, **kwargs: Any) -> str:
    name = f"faults-{next(_names)}-changelog"
    cluster.create_topic(name, partitions, **kwargs)
    return name


def follower_store(path: Path, topic: str, partitions: int) -> Store:
    return Store.open(
        path, StoreSpec(Role.FOLLOWER, topic, partitions), options=StoreOptions(sync=False)
    )


def applied_total(applied: Any) -> int:
    return sum(applied.values())


# -- brokers killed, paused, moved ----------------------------------------------------------


def test_broker_killed_and_restarted_during_a_follower_restore(
    lone_broker: LocalKafkaCluster, tmp_path: Path
) -> None:
    bootstrap = lone_broker.bootstrap_servers
    topic = new_topic(lone_broker, 3)
    writer = ChangelogWriter(bootstrap, topic, 3)
    rng = random.Random(11)
    for _ in range(12):
        writer.transaction(random_changes(rng, 1000))
    total = sum(lone_broker_ends(bootstrap, topic).values())
    with follower_store(tmp_path / "s", topic, 3) as store:
        # The follower's next poll after 1,500 records waits until the broker is dead, so
        # the kill lands mid-restore however fast the restore runs (a restore of these 12k
        # records could finish between seeing 1,500 applied and the kill).
        source = HeldSource(bootstrap, topic, hold_after=1500)
        follower = Follower(store, source, chunk_records=300)
        follower.start()
        try:
            assert source.held.wait(60), follower.error
            lone_broker.kill(1)  # the restore is under way: SIGKILL the only broker
            applied_at_kill = applied_total(store.metadata.changelog_offsets)
            source.release.set()  # the follower polls a dead broker, then a restarted one
            lone_broker.restart(1)
            assert follower.wait_running(120), follower.error
            assert 1500 <= applied_at_kill < total  # the kill landed mid-restore
            assert store_content(store) == writer.model
            assert store.metadata.position.to_map() == writer.expected_position()
            # The cluster and the follower carry on: a live write after the restart.
            writer.transaction([(b"after-restart", b"1")])
            assert follower.wait_until(lone_broker_ends(bootstrap, topic), 60)
            assert store_content(store) == writer.model
        finally:
            follower.stop()


class HeldSource(KafkaChangelogSource):
    """A changelog source whose first poll after ``hold_after`` records waits for
    :attr:`release`, saying so with :attr:`held`."""

    def __init__(self, bootstrap: str, topic: str, *, hold_after: int) -> None:
        super().__init__(bootstrap, topic)
        self.hold_after = hold_after
        self.returned = 0
        self.held = threading.Event()
        self.release = threading.Event()

    def poll(self, max_records: int, timeout_s: float, *, fill: bool = True) -> Any:
        if self.returned >= self.hold_after and not self.release.is_set():
            self.held.set()
            self.release.wait(120)
        polled = super().poll(max_records, timeout_s, fill=fill)
        self.returned += len(polled.rows)
        return polled


def lone_broker_ends(bootstrap: str, topic: str) -> dict[int, int]:
    """Every partition's end once no transaction is undecided."""
    return wait_until_settled(bootstrap, topic)


def test_broker_paused_past_the_client_timeouts(
    lone_broker: LocalKafkaCluster, tmp_path: Path
) -> None:
    bootstrap = lone_broker.bootstrap_servers
    topic = new_topic(lone_broker, 2)
    writer = ChangelogWriter(bootstrap, topic, 2)
    writer.transaction(random_changes(random.Random(3), 200))
    timeouts = {"socket.timeout.ms": 2000, "socket.connection.setup.timeout.ms": 2000}
    with follower_store(tmp_path / "s", topic, 2) as store:
        source = KafkaChangelogSource(bootstrap, topic, config=timeouts, timeout_s=3)
        follower = Follower(store, source)
        follower.start()
        try:
            assert follower.wait_running(60)
            lone_broker.pause(1)
            try:
                # A client timeout passes: asking for the lag fails, naming the changelog.
                with pytest.raises(KafkaClientError, match=topic):
                    follower.refresh_end_offsets()
                assert follower.error is None  # the follower itself waits for the broker
            finally:
                lone_broker.resume(1)
            writer.transaction(random_changes(random.Random(4), 200))
            assert follower.wait_until(follower.refresh_end_offsets(), 60), follower.error
            assert store_content(store) == writer.model
            assert store.metadata.position.to_map() == writer.expected_position()
        finally:
            follower.stop()


def test_leader_change_in_a_three_broker_cluster(
    three_brokers: LocalKafkaCluster, tmp_path: Path
) -> None:
    bootstrap = three_brokers.bootstrap_servers
    topic = new_topic(three_brokers, 3, replication_factor=3, config={"min.insync.replicas": "2"})
    writer = ChangelogWriter(bootstrap, topic, 3)
    rng = random.Random(5)
    writer.transaction(random_changes(rng, 300))
    with follower_store(tmp_path / "s", topic, 3) as store:
        follower = Follower(store, KafkaChangelogSource(bootstrap, topic))
        follower.start()
        try:
            assert follower.wait_running(60)
            leader = three_brokers.leader(topic, 0)
            assert leader == preferred_replica(three_brokers, topic, 0)
            three_brokers.stop(leader)  # controlled shutdown: its leaderships move
            moved = three_brokers.leader(topic, 0)
            assert moved not in (leader, -1)
            writer.transaction(random_changes(rng, 300))
            assert follower.wait_until(follower.refresh_end_offsets(), 60), follower.error
            assert store_content(store) == writer.model
            # Back again: the old leader returns and takes its preferred leaderships back.
            three_brokers.restart(leader)
            elect_preferred_leaders(three_brokers, topic, 3)
            wait_for_leader(three_brokers, topic, 0, leader)
            writer.transaction(random_changes(rng, 300))
            assert follower.wait_until(follower.refresh_end_offsets(), 60), follower.error
            assert store_content(store) == writer.model
            assert store.metadata.position.to_map() == writer.expected_position()
        finally:
            follower.stop()


def preferred_replica(cluster: LocalKafkaCluster, topic: str, partition: int) -> int:
    metadata = cluster.admin().list_topics(topic=topic, timeout=10)
    return int(metadata.topics[topic].partitions[partition].replicas[0])


def wait_for_leader(cluster: LocalKafkaCluster, topic: str, partition: int, node: int) -> None:
    """Wait until the cluster's metadata names ``node`` as the partition's leader."""
    poll_until(
        lambda: True if cluster.leader(topic, partition) == node else None,
        timeout_s=60,
        interval_s=0.1,  # metadata reaches every broker a moment later
        failure=lambda: f"{topic}-{partition} is not led by node {node}",
    )


def elect_preferred_leaders(cluster: LocalKafkaCluster, topic: str, partitions: int) -> None:
    """Move leadership back to each partition's preferred replica (once it is in sync)."""
    from confluent_kafka import ElectionType

    admin: AdminClient = cluster.admin()
    wanted = [TopicPartition(topic, p) for p in range(partitions)]
    pending: list[TopicPartition] = []

    def elected() -> bool | None:
        result = admin.elect_leaders(ElectionType.PREFERRED, wanted).result(timeout=30)
        pending[:] = [
            tp
            for tp, error in result.items()
            if error is not None and error.code() != KafkaError.ELECTION_NOT_NEEDED
        ]
        return True if not pending else None

    poll_until(
        elected,
        timeout_s=60,
        interval_s=0.2,  # the returning broker is not back in sync yet
        failure=lambda: f"preferred leaders not elected: {pending}",
    )


# -- offsets that go away -------------------------------------------------------------------


def test_retention_deletes_offsets_the_follower_still_needs(
    lone_broker: LocalKafkaCluster, tmp_path: Path
) -> None:
    bootstrap = lone_broker.bootstrap_servers
    topic = new_topic(lone_broker, 1, compacted=False, config=RETENTION_CONFIG)
    writer = ChangelogWriter(bootstrap, topic, 1)
    writer.transaction([(b"early-%03d" % i, b"e") for i in range(100)])
    spec = StoreSpec(Role.FOLLOWER, topic, 1)
    path = tmp_path / "s"
    with Store.open(path, spec, options=StoreOptions(sync=False)) as store:
        follower = Follower(store, KafkaChangelogSource(bootstrap, topic))
        while follower.state is not FollowerState.RUNNING:
            follower.step()
        follower.stop()
        applied = store.metadata.changelog_offsets[0]
    # While the follower is away, 3 MB more arrive and retention deletes the oldest.
    for round_ in range(3):
        writer.transaction([(b"late-%d-%04d" % (round_, i), b"x" * 1000) for i in range(1000)])
    low, high = wait_for_retention(bootstrap, topic)
    assert low > applied  # offsets the store still needs are gone
    # (Retention may go on deleting segments meanwhile: bounds come from the errors.)
    with Store.open(path, spec, options=StoreOptions(sync=False)) as store:
        follower = Follower(store, KafkaChangelogSource(bootstrap, topic))
        with pytest.raises(DataLossError) as lost:
            while follower.state is not FollowerState.RUNNING:
                follower.step()
        follower.stop()
        gone_up_to = lost.value.available[0]
        assert gone_up_to >= low and lost.value.wanted == applied
        assert f"{topic}-0: offsets {applied}-{gone_up_to - 1} are gone" in str(lost.value)
        assert store.metadata.changelog_offsets == {0: applied}  # nothing half-applied
        lenient = KafkaChangelogSource(bootstrap, topic, fail_on_data_loss=False)
        follower = Follower(store, lenient)
        while follower.state is not FollowerState.RUNNING:
            follower.step()
        follower.stop()
        assert lenient.lost_offsets[0] >= gone_up_to - applied
        assert store.metadata.changelog_offsets == {0: high}
        content = store_content(store)
    assert all(k in content for k in writer.model if k.startswith(b"early-"))
    assert b"late-2-0999" in content


COMPACTION_CONFIG = {
    "cleanup.policy": "compact",
    # The smallest segments Kafka allows, cleaned as soon as anything in them is dirty.
    "segment.bytes": "1048576",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "0",
}


def wait_for_compaction_gaps(bootstrap: str, topic: str, timeout_s: float = 90) -> int:
    """Wait until the log cleaner has removed records from ``topic``-0 (its offsets have
    gaps); returns how many offsets below the end hold no record any more."""
    seen = {"records": 0, "offsets": 0}

    def compacted() -> int | None:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "tests-compaction",
                "isolation.level": "read_uncommitted",
                "enable.partition.eof": True,
            }
        )
        try:
            tp = TopicPartition(topic, 0)
            _low, seen["offsets"] = consumer.get_watermark_offsets(tp, timeout=10)
            consumer.assign([TopicPartition(topic, 0, 0)])
            seen["records"] = 0
            while True:
                batch = consumer.consume(10_000, 5)
                if not batch:
                    break
                seen["records"] += sum(1 for m in batch if m.error() is None)
                if any(m.error() is not None for m in batch):
                    break
        finally:
            consumer.close()
        # Transaction markers take offsets too; far fewer records than offsets means the
        # cleaner has run over the closed segments.
        high, records = seen["offsets"], seen["records"]
        return high - records if records < high // 2 else None

    return poll_until(
        compacted,
        timeout_s=timeout_s,
        interval_s=0.5,
        failure=lambda: f"no compaction of {topic} ({seen['records']} of {seen['offsets']})",
    )


def test_a_compacted_changelog_with_offset_gaps(
    lone_broker: LocalKafkaCluster, tmp_path: Path
) -> None:
    bootstrap = lone_broker.bootstrap_servers
    topic = new_topic(lone_broker, 1, config=COMPACTION_CONFIG)
    writer = ChangelogWriter(bootstrap, topic, 1)
    rng = random.Random(9)
    for _ in range(6):  # ~3 MB of overwrites of 50 keys, some deleted on the way
        writer.transaction(
            [
                (b"k%02d" % rng.randrange(50), None if rng.random() < 0.1 else b"v" * 1000)
                for _ in range(500)
            ]
        )
    writer.transaction([(b"k%02d" % i, b"final-%d" % i) for i in range(0, 50, 3)])
    gaps = wait_for_compaction_gaps(bootstrap, topic)
    assert gaps > 1000
    ends = wait_until_settled(bootstrap, topic)
    with follower_store(tmp_path / "s", topic, 1) as store:
        follower = Follower(store, KafkaChangelogSource(bootstrap, topic), chunk_records=97)
        while follower.state is not FollowerState.RUNNING:
            follower.step()
        follower.stop()
        assert store_content(store) == writer.model
        assert store.metadata.changelog_offsets == ends
        assert store.metadata.position.to_map() == writer.expected_position()
    # An executor's range read crosses the gaps and ends at the range's end.
    records = [m for batch in read_range(bootstrap, topic, 0, 0, ends[0]) for m in batch]
    assert len(records) < ends[0] - 1000
    latest = {}
    for message in records:
        latest[message.key()] = message.value()
    assert {k: v for k, v in latest.items() if v is not None} == writer.model


# -- a transaction the coordinator aborts ---------------------------------------------------

ZOMBIE = """
import sys
from confluent_kafka import Producer
producer = Producer({
    "bootstrap.servers": sys.argv[1],
    "transactional.id": "zombie-" + sys.argv[2],
    "transaction.timeout.ms": 3000,
})
producer.init_transactions(30)
producer.begin_transaction()
for i in range(50):
    producer.produce(sys.argv[2], key=b"zombie-%d" % i, value=b"ZOMBIE", partition=i % 2)
producer.flush(30)
print("open", flush=True)
sys.stdin.read()  # never returns: the test kills this process mid-transaction
"""


def test_a_producer_that_dies_mid_transaction_is_aborted_by_the_coordinator(
    lone_broker: LocalKafkaCluster, tmp_path: Path
) -> None:
    bootstrap = lone_broker.bootstrap_servers
    topic = new_topic(lone_broker, 2)
    writer = ChangelogWriter(bootstrap, topic, 2)
    writer.transaction(random_changes(random.Random(1), 100))
    with follower_store(tmp_path / "s", topic, 2) as store:
        follower = Follower(store, KafkaChangelogSource(bootstrap, topic))
        follower.start()
        try:
            assert follower.wait_running(60)
            zombie = subprocess.Popen(
                [sys.executable, "-c", textwrap.dedent(ZOMBIE), bootstrap, topic],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert zombie.stdout is not None and zombie.stdout.readline().strip() == "open"
            zombie.kill()  # SIGKILL with its transaction open: only the timeout ends it
            zombie.wait()
            started = time.monotonic()
            # Committed writes after the zombie's records become readable only once the
            # coordinator has aborted the zombie's transaction (3 s timeout).
            writer.transaction(random_changes(random.Random(2), 100))
            assert time.monotonic() - started >= 2.5  # blocked by the open transaction
            ends = wait_until_settled(bootstrap, topic)
            assert follower.wait_until(ends, 60), follower.error
            content = store_content(store)
            assert content == writer.model
            assert b"ZOMBIE" not in content.values()
        finally:
            follower.stop()
    # The range readers of executors move past the aborted records as well.
    for partition, end in ends.items():
        read = [m for batch in read_range(bootstrap, topic, partition, 0, end) for m in batch]
        assert read and all(m.value() != b"ZOMBIE" for m in read)
        assert all(not (m.key() or b"").startswith(b"zombie-") for m in read)


# -- the sink ------------------------------------------------------------------------------


def test_broker_killed_and_restarted_during_a_sink_commit(
    lone_broker: LocalKafkaCluster, tmp_path: Path
) -> None:
    """Exactly once across a broker crash: the commit either rides it out or fails
    clearly with nothing visible, and the retry publishes the batch exactly once."""
    bootstrap = lone_broker.bootstrap_servers
    topic = "shop-" + new_topic(lone_broker, 3)
    lone_broker.create_topic(topic, 3)
    lone_broker.create_topic(f"{topic}-progress", 1)
    path = tmp_path / "leader"
    staging = StagingArea(path)
    rows = [(b"key-%06d" % i, b"value-%d" % i, i) for i in range(60_000)]
    batch = BatchToCommit("q", 0, [staged(staging, 0, rows)])
    spec = StoreSpec(Role.LEADER, topic, 3)
    outcome: list[object] = []
    with Store.open(path, spec, options=StoreOptions(sync=False)) as store:

        def commit() -> None:
            try:
                with KafkaChangelogPublisher(bootstrap, topic, application_id="shop") as pub:
                    outcome.append(commit_batch(store, staging, batch, pub))
            except BaseException as exc:  # reported to the test thread below
                outcome.append(exc)

        worker = threading.Thread(target=commit)
        worker.start()
        wait_for_uncommitted_records(bootstrap, topic)  # the publish is under way
        lone_broker.kill(1)
        lone_broker.restart(1)
        worker.join(120)
        assert not worker.is_alive()
        first = outcome[0]
        if isinstance(first, BaseException):
            assert isinstance(first, KafkaClientError), first
            assert store_content(store) == {}  # the store did not commit
            with KafkaChangelogPublisher(bootstrap, topic, application_id="shop") as publisher:
                again = commit_batch(store, staging, batch, publisher)
            assert again in (CommitOutcome.COMMITTED, CommitOutcome.ROLLED_FORWARD)
        else:
            assert first is CommitOutcome.COMMITTED
        assert store_content(store) == {k: v for k, v, _ in rows}
    wait_until_settled(bootstrap, topic)
    keys = sorted(r.key for r in tail_changelog(bootstrap, topic))
    assert keys == [k for k, _, _ in rows]  # each change exactly once


def wait_for_uncommitted_records(bootstrap: str, topic: str, timeout_s: float = 60) -> None:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "tests", "isolation.level": "read_uncommitted"}
    )
    try:
        poll_until(
            lambda: (
                True
                if any(
                    consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] > 0
                    for p in range(3)
                )
                else None
            ),
            timeout_s=timeout_s,
            interval_s=0.01,
            failure=lambda: f"nothing was produced to {topic}",
        )
    finally:
        consumer.close()
