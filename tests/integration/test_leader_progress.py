"""An exactly-once leader's progress through a repartition topic, on a real broker.

The test plays a two-sub-topology app with real Kafka transactions, one step at a time:
sub-topology 0 writes the repartition topic and commits the input offset in one transaction;
sub-topology 1 writes the changelog and commits the repartition offset in a later one (as
Kafka Streams commits: the offset after the record, short of the transaction's marker).
:meth:`KafkaLeaderProgress.run_round` is called directly, so nothing depends on timing.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from spark_statestore.connectors.kafka.follower.leader import KafkaLeaderProgress
from spark_statestore.connectors.kafka.local import LocalKafkaCluster
from spark_statestore.position import Position

pytestmark = pytest.mark.integration

_apps = itertools.count()


class TwoStepApp:
    """Sub-topology 0 (input -> repartition) and 1 (repartition -> changelog), by hand."""

    def __init__(self, cluster: LocalKafkaCluster) -> None:
        self.bootstrap = cluster.bootstrap_servers
        self.app = f"leader-{next(_apps)}-{uuid.uuid4().hex[:6]}"
        self.input = f"{self.app}-orders-in"
        self.repartition = f"{self.app}-KSTREAM-AGGREGATE-0000000003-repartition"
        self.changelog = f"{self.app}-store-changelog"
        for topic in (self.input, self.repartition, self.changelog):
            cluster.create_topic(topic, 1, compacted=False)
        self.producer = Producer(
            {"bootstrap.servers": self.bootstrap, "transactional.id": self.app + "-tx"}
        )
        self.producer.init_transactions(30)
        # The group's metadata for send_offsets_to_transaction (it never joins).
        self.group = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.app})

    def close(self) -> None:
        self.group.close()

    def _transaction(self, topic: str, commit: tuple[str, int]) -> None:
        self.producer.begin_transaction()
        self.producer.produce(topic, key=b"k", value=b"v")
        self.producer.flush(30)
        offsets = [TopicPartition(commit[0], 0, commit[1])]
        self.producer.send_offsets_to_transaction(offsets, self.group.consumer_group_metadata(), 30)
        self.producer.commit_transaction(30)

    def subtopology_0(self, input_next: int) -> None:
        """Process the input up to ``input_next``: a repartition record, the input offset."""
        self._transaction(self.repartition, (self.input, input_next))

    def subtopology_1(self, repartition_next: int) -> None:
        """Process the repartition topic up to ``repartition_next``: a changelog record."""
        self._transaction(self.changelog, (self.repartition, repartition_next))


@pytest.fixture
def app(kafka_broker: LocalKafkaCluster) -> Iterator[TwoStepApp]:
    made = TwoStepApp(kafka_broker)
    yield made
    made.close()


def rounds(progress: KafkaLeaderProgress, n: int) -> list[tuple[Position, dict[int, int]]]:
    done = []
    for _ in range(n):
        sample = progress.run_round()
        if sample is not None:
            done.append(sample)
    return done


def test_an_input_offset_waits_for_the_repartition_topic_to_be_processed(
    app: TwoStepApp,
) -> None:
    progress = KafkaLeaderProgress(app.bootstrap, app.app, app.changelog, 1, probe_after_s=0)
    try:
        rounds(progress, 2)  # nothing committed yet: samples of nothing
        app.subtopology_0(input_next=1)  # the input record 0 is committed, its effect is not
        early = rounds(progress, 6)
        assert all(sample[0] == Position.empty() for sample in early)
        assert progress._chain.waiting_on is not None
        assert progress._chain.waiting_on[0] == (app.repartition, 0)

        # Sub-topology 1 processes the repartition record (offset 0) and commits offset 1:
        # the transaction's marker at offset 1 stays past it. The probe finds only the
        # marker.
        app.subtopology_1(repartition_next=1)
        granted = rounds(progress, 8)
        assert granted, "the input offset was never granted"
        position, ends = granted[-1]
        assert position == Position.from_map({app.input: {0: 0}})
        assert ends == {0: 2}  # the changelog record and its marker
    finally:
        progress.close()


def test_a_committed_offset_short_of_a_real_record_is_not_reached(app: TwoStepApp) -> None:
    progress = KafkaLeaderProgress(app.bootstrap, app.app, app.changelog, 1, probe_after_s=0)
    try:
        app.subtopology_0(input_next=1)
        app.subtopology_1(repartition_next=1)
        granted = rounds(progress, 8)
        assert granted and granted[-1][0] == Position.from_map({app.input: {0: 0}})

        app.subtopology_0(input_next=2)  # repartition record at offset 2, not processed
        later = rounds(progress, 10)
        assert all(p.merge(Position.from_map({app.input: {0: 0}})) == p for p, _ in later)
        assert all(p.to_dict().get(app.input, {}).get("0", -1) < 1 for p, _ in later)
    finally:
        progress.close()


def test_the_topology_narrows_the_wait_to_the_stores_upstream(app: TwoStepApp) -> None:
    """A store fed by the input topic directly (per its description) does not wait for an
    unrelated repartition topic the app also has."""
    described = f"""Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [{app.input}])
      --> KSTREAM-AGGREGATE-0000000001
    Processor: KSTREAM-AGGREGATE-0000000001 (stores: [store])
      --> none
      <-- KSTREAM-SOURCE-0000000000
"""
    progress = KafkaLeaderProgress(app.bootstrap, app.app, app.changelog, 1, topology=described)
    try:
        app.subtopology_0(input_next=1)
        granted = rounds(progress, 2)
        assert granted and granted[-1][0] == Position.from_map({app.input: {0: 0}})
    finally:
        progress.close()


@pytest.mark.parametrize("timeout_s", [0.5, 0.001])
def test_a_leader_that_cannot_be_read_grants_nothing_and_says_why(timeout_s: float) -> None:
    """No broker answers: the rounds go on failing, the follower thread is not killed, and
    the note that NOT_UP_TO_BOUND answers carry names what could not be read. A request not
    answered within the timeout (a future's TimeoutError, which a loaded machine gave at
    0.5 s) names the leader too."""
    progress = KafkaLeaderProgress(
        "127.0.0.1:9", "nobody", "nobody-store-changelog", 1, timeout_s=timeout_s
    )
    try:
        assert progress.sample() is None  # starts the rounds
        deadline = threading.Event()
        note = None
        for _ in range(100):
            note = progress.note()
            if note is not None:
                break
            deadline.wait(0.1)
        assert note is not None and "leader 'nobody'" in note, note
        assert progress.sample() is None
    finally:
        progress.close()
