"""The transactional changelog writer against a real Kafka broker: one batch per transaction."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from spark_statestore.changelog.partitioner import partition_for_key
from spark_statestore.connectors.kafka.errors import (
    DataLossError,
    KafkaClientError,
    ProducerFencedError,
    ProgressRecordError,
    TransactionTimeoutError,
)
from spark_statestore.connectors.kafka.local import LocalKafkaCluster
from spark_statestore.connectors.kafka.sink import progress as kafka_progress
from spark_statestore.connectors.kafka.sink.progress import ProgressRecord, read_last_progress
from spark_statestore.connectors.kafka.sink.ranges import read_changelog_range
from spark_statestore.connectors.kafka.sink.writer import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    Change,
    ChangelogWriter,
    transactional_id_for,
)
from spark_statestore.position import Position
from tests.kafka_util import (
    fence_transactions,
    settled_changelog,
    settled_progress,
    wait_until_readable,
    wait_until_settled,
)

pytestmark = pytest.mark.integration

PARTITIONS = 4
_ids = itertools.count()


@pytest.fixture
def make_changelog(
    make_topic: Callable[..., str], kafka_broker: LocalKafkaCluster
) -> Callable[..., str]:
    """Factory: a changelog with ``partitions`` partitions and its 1-partition progress topic."""

    def factory(partitions: int = PARTITIONS, progress_partitions: int | None = 1) -> str:
        topic = make_topic(partitions=partitions, suffix="-changelog")
        if progress_partitions is not None:
            kafka_broker.create_topic(f"{topic}-progress", progress_partitions)
        return topic

    return factory


@pytest.fixture
def make_writer(kafka_broker: LocalKafkaCluster) -> Iterator[Callable[..., ChangelogWriter]]:
    """Factory: an initialized writer (closed at the end of the test)."""
    writers: list[ChangelogWriter] = []

    def factory(
        topic: str, txn_id: str | None = None, init: bool = True, **config: Any
    ) -> ChangelogWriter:
        writer = ChangelogWriter(
            kafka_broker.bootstrap_servers,
            topic,
            transactional_id=txn_id or f"{topic}-txn-{next(_ids)}",
            # Fencing tests make librdkafka log fatal errors.
            config={"log_level": 0, **config},
            timeout_s=10,
        )
        writers.append(writer)
        if init:
            writer.init()
        return writer

    yield factory
    for writer in writers:
        writer.close()


def batch_of(batch: int, count: int, *, deletes_every: int = 0) -> list[Change]:
    """``count`` changes with distinct keys; each carries a distinct input position."""
    changes: list[Change] = []
    for i in range(count):
        key = b"key-%d" % i
        value = None if deletes_every and i % deletes_every == 0 else b"b%d-v%d" % (batch, i)
        position = Position.from_map({"input": {i % 3: batch * 1000 + i}})
        changes.append((key, value, position, 1_700_000_000_000 + batch * 1000 + i))
    return changes


def read_log(
    bootstrap: str, topic: str, isolation: str = "read_committed"
) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(partition, offset, key, value) of the data records of every partition, read with a
    plain consumer (not the module under test); read_committed waits until every
    transaction is decided."""
    if isolation == "read_committed":
        wait_until_settled(bootstrap, topic)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tests-changelog-writer",
            "fetch.wait.max.ms": 10,  # empty partitions answer EOF quickly
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    partitions = kafka_partitions(consumer, topic)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, open_partitions = [], set(range(partitions))
    deadline = time.monotonic() + 10
    try:
        while open_partitions and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.1):
                error = message.error()
                if error is None:
                    out.append(
                        (message.partition(), message.offset(), message.key(), message.value())
                    )
                elif error.code() == KafkaError._PARTITION_EOF:
                    open_partitions.discard(message.partition())
                else:
                    raise KafkaException(error)
        assert not open_partitions, f"no EOF on {topic} partitions {open_partitions}"
        return sorted(out)  # type: ignore[arg-type]
    finally:
        consumer.close()


def kafka_partitions(consumer: Consumer, topic: str) -> int:
    return len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)


def committed(bootstrap: str, topic: str) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return read_log(bootstrap, topic)


def uncommitted_count(bootstrap: str, topic: str) -> int:
    """Data records physically in the log, aborted ones included (read_uncommitted)."""
    return len(read_log(bootstrap, topic, "read_uncommitted"))


def wait_until(condition: Callable[[], bool], timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


# -- publishing -----------------------------------------------------------------------------


def test_published_batch_reads_back_with_read_committed(
    kafka_broker: LocalKafkaCluster,
    make_changelog: Callable[..., str],
    make_writer: Callable[..., ChangelogWriter],
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = make_changelog()
    # Leave partition 3 untouched: it must be absent from the end offsets.
    changes = [c for c in batch_of(0, 60, deletes_every=7) if partition_for_key(c[0], 4) != 3]
    changes.append((b"no-position", b"x", None, None))
    writer = make_writer(topic)
    assert writer.partition_count() == PARTITIONS
    assert writer.progress_topic == f"{topic}-progress"

    ends = writer.publish(
        changes,
        progress=ProgressRecord.for_batch("store-a", "query-1", 0, {"input": {"0": 42}}),
    )

    records = settled_changelog(bootstrap, topic, timeout_s=10)
    assert len(records) == len(changes)
    by_key = {r.key: r for r in records}
    for key, value, position, timestamp in changes:
        record = by_key[key]
        assert record.partition == partition_for_key(key, PARTITIONS)  # murmur2
        assert record.value == value  # None: a tombstone
        assert record.position == position  # the v/c headers decode to the given position
        if timestamp is not None:
            assert record.timestamp == timestamp
    tombstones = sum(1 for c in changes if c[1] is None)
    assert tombstones > 0
    assert sum(1 for r in records if r.value is None) == tombstones
    last: dict[int, int] = {}
    for r in records:
        last[r.partition] = max(last.get(r.partition, -1), r.offset)
    assert 3 not in ends
    assert ends == {p: o + 1 for p, o in last.items()}

    progress = settled_progress(bootstrap, topic, "store-a")
    assert progress is not None
    assert (progress.store_id, progress.query_id, progress.batch_id) == ("store-a", "query-1", 0)
    assert progress.source_offsets == {"input": {"0": 42}}
    assert progress.changelog_end_offsets == ends

    # The roll-forward reader returns exactly the batch (with its headers), each partition
    # in offset order.
    entries = list(read_changelog_range(bootstrap, topic, {}, ends))
    assert sorted((e.partition, e.offset, e.key, e.value) for e in entries) == sorted(
        (r.partition, r.offset, r.key, r.value) for r in records
    )
    for partition in ends:
        offsets = [e.offset for e in entries if e.partition == partition]
        assert offsets == sorted(offsets)
    assert all(e.timestamp == by_key[e.key or b""].timestamp for e in entries)
    assert all(dict(e.headers or [])["v"] == b"\x00" for e in entries if e.key != b"no-position")
    assert next(e for e in entries if e.key == b"no-position").headers is None


def test_next_batch_range_starts_after_the_commit_marker(
    kafka_broker: LocalKafkaCluster,
    make_changelog: Callable[..., str],
    make_writer: Callable[..., ChangelogWriter],
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = make_changelog()
    writer = make_writer(topic)
    first = writer.publish(batch_of(0, 20), progress=ProgressRecord.for_batch("s", "q", 0))
    second = writer.publish(batch_of(1, 20), progress=ProgressRecord.for_batch("s", "q", 1))
    # Same keys, same partitions; each partition's commit marker takes one offset between
    # the two batches.
    assert set(first) == set(second)
    assert {p: second[p] - first[p] for p in first} == {
        p: sum(1 for c in batch_of(1, 20) if partition_for_key(c[0], PARTITIONS) == p) + 1
        for p in first
    }
    entries = list(read_changelog_range(bootstrap, topic, first, second))
    assert sorted(e.value or b"" for e in entries) == sorted(c[1] or b"" for c in batch_of(1, 20))
    progress = settled_progress(bootstrap, topic, "s")
    assert progress is not None and progress.batch_id == 1
    assert progress.changelog_end_offsets == second


def test_batch_larger_than_the_producer_queue(
    kafka_broker: LocalKafkaCluster, make_changelog: Callable[..., str]
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = make_changelog()
    with ChangelogWriter(
        bootstrap,
        topic,
        transactional_id=f"{topic}-txn",
        config={"queue.buffering.max.messages": 500},  # the batch overflows it ten times
        timeout_s=10,
    ) as writer:
        writer.init()
        ends = writer.publish(batch_of(0, 5000), progress=ProgressRecord.for_batch("s", "q", 0))
    assert sum(ends.values()) == 5000
    # Partition 0's range is short and ends long before the others (it leaves the reader's
    # assignment on its own).
    short = {p: 0 for p in ends} | {0: ends[0] - 3}
    entries = list(read_changelog_range(bootstrap, topic, short, ends))
    assert len(entries) == 5000 - ends[0] + 3
    assert [e.offset for e in entries if e.partition == 0] == list(range(ends[0] - 3, ends[0]))


def test_a_range_not_yet_stable_is_waited_for_not_data_loss(
    kafka_broker: LocalKafkaCluster,
    make_changelog: Callable[..., str],
    make_writer: Callable[..., ChangelogWriter],
) -> None:
    """Records in the log that read_committed cannot read yet (an open transaction holds the
    last stable offset, as a committed transaction's pending markers do for a moment) are
    waited for; only a range past the log's end is data loss. It was a DataLossError telling
    the user to delete the store (seen in CI-like runs right after a commit)."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = make_changelog(partitions=1)
    blocker = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-blocker", "log_level": 0}
    )
    blocker.init_transactions(10)
    blocker.begin_transaction()
    blocker.produce(topic, key=b"open", value=b"undecided", partition=0)
    blocker.flush(10)
    ends = make_writer(topic).publish(
        batch_of(0, 20), progress=ProgressRecord.for_batch("s", "q", 0)
    )
    assert ends == {0: 21}  # the blocker's record, then the batch
    with pytest.raises(KafkaClientError, match="still open") as failed:
        list(read_changelog_range(bootstrap, topic, {}, ends, timeout_s=1.0))
    assert not isinstance(failed.value, DataLossError)
    with pytest.raises(DataLossError, match="ends at offset 22"):
        list(read_changelog_range(bootstrap, topic, {}, {0: 30}, timeout_s=1.0))
    blocker.abort_transaction(10)
    entries = list(read_changelog_range(bootstrap, topic, {}, ends))
    assert [e.key for e in entries] == [c[0] for c in batch_of(0, 20)]


def test_empty_batch_still_commits_its_progress(
    kafka_broker: LocalKafkaCluster,
    make_changelog: Callable[..., str],
    make_writer: Callable[..., ChangelogWriter],
) -> None:
    topic = make_changelog()
    writer = make_writer(topic)
    assert writer.publish([], progress=ProgressRecord.for_batch("s", "q", 5)) == {}
    progress = settled_progress(kafka_broker.bootstrap_servers, topic, "s")
    assert progress is not None and progress.batch_id == 5
    assert progress.changelog_end_offsets == {}


def test_a_check_right_after_a_writer_stops_sees_its_last_commit_once_fenced(
    kafka_broker: LocalKafkaCluster,
    make_changelog: Callable[..., str],
    make_writer: Callable[..., ChangelogWriter],
) -> None:
    """Issue 38: the sink crash test read (Spark, store, Kafka) = (1, 1, 0): the store had
    committed a batch whose progress record a read_committed read did not see yet. Kafka
    answers commitTransaction before it writes the commit markers (without the fence, this
    read missed the batch just committed in about one round in three); a check that
    settles the writer's transactional id first, as a restarted sink does, sees it."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = make_changelog(partitions=1)
    txn_id = f"{topic}-restarted"
    progress_partition = TopicPartition(f"{topic}-progress", 0)
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tests-fenced",
            "isolation.level": "read_committed",
        }
    )
    try:
        for batch in range(_RESTARTS):
            # A sink run: init, one batch, killed (nothing closes the producer).
            writer = make_writer(topic, txn_id=txn_id)
            writer.publish(batch_of(batch, 3), progress=ProgressRecord.for_batch("s", "q", batch))
            fence_transactions(bootstrap, txn_id)
            # The batch's progress record and its commit marker: offsets 2 * batch, + 1.
            stable = reader.get_watermark_offsets(progress_partition, timeout=10, cached=False)[1]
            assert stable == 2 * batch + 2, f"round {batch}: last stable offset {stable}"
    finally:
        reader.close()
    progress = settled_progress(bootstrap, topic, "s")
    assert progress is not None and progress.batch_id == _RESTARTS - 1


_RESTARTS = 30


# -- failures -------------------------------------------------------------------------------


class StagingReadError(Exception):
    """Stands for any failure of the caller while the batch is being produced."""


def test_failure_mid_batch_aborts_everything_and_the_writer_goes_on(
    kafka_broker: LocalKafkaCluster,
    make_changelog: Callable[..., str],
    make_writer: Callable[..., ChangelogWriter],
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = make_changelog()
    writer = make_writer(topic)

    def failing() -> Iterator[Change]:
        yield from batch_of(0, 500)
        raise StagingReadError("staged file truncated")

    with pytest.raises(StagingReadError):
        writer.publish(failing(), progress=ProgressRecord.for_batch("s", "q", 0))
    assert committed(bootstrap, topic) == []
    assert read_last_progress(bootstrap, topic, "s") is None

    ends = writer.publish(batch_of(1, 30), progress=ProgressRecord.for_batch("s", "q", 0))
    assert sorted(v or b"" for _, _, _, v in committed(bootstrap, topic)) == sorted(
        c[1] or b"" for c in batch_of(1, 30)
    )
    progress = settled_progress(bootstrap, topic, "s")
    assert progress is not None and progress.changelog_end_offsets == ends


def test_a_record_refused_after_the_first_fails_the_whole_batch(
    kafka_broker: LocalKafkaCluster,
    make_changelog: Callable[..., str],
    make_writer: Callable[..., ChangelogWriter],
) -> None:
    """A record the broker refuses (over the topic's max.message.bytes) after the batch's
    first record was acknowledged fails the batch with the broker's reason, nothing of it
    visible, and the writer goes on."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = f"refusing-{next(_ids)}-changelog"
    kafka_broker.create_topic(topic, 1, config={"max.message.bytes": "2000"})
    kafka_broker.create_topic(f"{topic}-progress", 1)
    writer = make_writer(topic)

    def refused_later() -> Iterator[Change]:
        first = batch_of(0, 1)
        yield from first
        # The first record is in the log (acknowledged): the next batch holds only the
        # refused one, incompressible and five times the topic's limit.
        wait_until(lambda: uncommitted_count(bootstrap, topic) == 1)
        yield b"big", os.urandom(10_000), first[0][2], first[0][3]

    with pytest.raises(KafkaClientError) as failed:
        writer.publish(refused_later(), progress=ProgressRecord.for_batch("s", "q", 0))
    assert "too large" in str(failed.value).lower() or "MSG_SIZE_TOO_LARGE" in str(failed.value)
    assert committed(bootstrap, topic) == []
    assert read_last_progress(bootstrap, topic, "s") is None

    ends = make_writer(topic, txn_id=writer.transactional_id).publish(
        batch_of(1, 5), progress=ProgressRecord.for_batch("s", "q", 0)
    )
    assert len(committed(bootstrap, topic)) == 5
    # The aborted first record (offset 0), its abort marker (1), then the five (2 to 6).
    assert ends == {0: 7}


def test_a_batch_that_outlives_its_transaction_timeout_fails_clearly(
    kafka_broker: LocalKafkaCluster,
    make_changelog: Callable[..., str],
    make_writer: Callable[..., ChangelogWriter],
) -> None:
    """The coordinator aborts a transaction older than transaction.timeout.ms (a real broker
    event); the writer names the batch, its size and the setting instead of blaming a
    duplicate sink, and a retry of the same batch would meet the same end."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = make_changelog(partitions=1)
    writer = make_writer(topic, **{"transaction.timeout.ms": 1000})

    def slow_batch() -> Iterator[Change]:
        yield from batch_of(0, 40)
        # The 40 records reach the broker (linger 20 ms); then this batch takes longer than
        # its transaction may: wait for the coordinator's abort marker, which moves the last
        # stable offset past them.
        wait_until_readable(bootstrap, topic, {0: 39}, timeout_s=60)
        yield from batch_of(1, 10)

    with pytest.raises(TransactionTimeoutError) as failed:
        writer.publish(slow_batch(), progress=ProgressRecord.for_batch("s", "q", 7))
    error = failed.value
    assert error.batch_id == 7 and error.timeout_ms == 1000 and error.elapsed_s >= 1.0
    assert 40 <= error.changes <= 50
    for part in ("batch 7", topic, "transaction.timeout.ms (1000 ms)", "kafka.transaction"):
        assert part in str(error)
    assert not isinstance(error, ProducerFencedError)
    assert uncommitted_count(bootstrap, topic) >= 40  # written, then aborted
    assert committed(bootstrap, topic) == []
    assert read_last_progress(bootstrap, topic, "s") is None

    # A batch that fits in the timeout goes through (a new writer: the abort bumped the
    # producer's epoch, which fences the old one).
    make_writer(topic, txn_id=writer.transactional_id).publish(
        batch_of(2, 10), progress=ProgressRecord.for_batch("s", "q", 7)
    )
    assert len(committed(bootstrap, topic)) == 10


def test_the_default_transaction_timeout_is_raised_within_the_brokers_limit(
    make_changelog: Callable[..., str], make_writer: Callable[..., ChangelogWriter]
) -> None:
    topic = make_changelog(partitions=1)
    writer = make_writer(topic, init=False)
    assert writer._txn_timeout_ms == DEFAULT_TRANSACTION_TIMEOUT_MS == 300_000
    writer.init()  # the broker accepts it (its transaction.max.timeout.ms is 15 min)
    too_long = make_writer(topic, init=False, **{"transaction.timeout.ms": 3_600_000})
    with pytest.raises(KafkaClientError, match=r"kafka\.transaction\.timeout\.ms to at most"):
        too_long.init()


def test_second_writer_fences_the_first(
    kafka_broker: LocalKafkaCluster,
    make_changelog: Callable[..., str],
    make_writer: Callable[..., ChangelogWriter],
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = make_changelog()
    txn_id = transactional_id_for("store-a", topic)
    zombie = make_writer(topic, txn_id)
    successor = make_writer(topic, txn_id)

    with pytest.raises(ProducerFencedError, match="another sink instance") as fenced:
        zombie.publish(batch_of(0, 30), progress=ProgressRecord.for_batch("store-a", "q", 0))
    assert fenced.value.transactional_id == txn_id
    with pytest.raises(ProducerFencedError):  # and it stays fenced
        zombie.publish(batch_of(0, 1), progress=ProgressRecord.for_batch("store-a", "q", 0))
    assert committed(bootstrap, topic) == []
    assert read_last_progress(bootstrap, topic, "store-a") is None

    successor.publish(batch_of(1, 30), progress=ProgressRecord.for_batch("store-a", "q", 0))
    assert len(committed(bootstrap, topic)) == 30


def test_writer_fenced_in_the_middle_of_a_transaction(
    kafka_broker: LocalKafkaCluster,
    make_changelog: Callable[..., str],
    make_writer: Callable[..., ChangelogWriter],
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = make_changelog()
    txn_id = transactional_id_for("store-a", topic)
    zombie = make_writer(topic, txn_id)
    successors: list[ChangelogWriter] = []

    def taken_over() -> Iterator[Change]:
        yield from batch_of(0, 300)
        # Once the zombie's records are in the log, a restarted sink for the same store
        # starts: it aborts the zombie's transaction and fences it.
        wait_until(lambda: uncommitted_count(bootstrap, topic) == 300)
        successors.append(make_writer(topic, txn_id))

    with pytest.raises(ProducerFencedError, match="another sink instance"):
        zombie.publish(taken_over(), progress=ProgressRecord.for_batch("store-a", "q", 0))
    assert committed(bootstrap, topic) == []
    assert read_last_progress(bootstrap, topic, "store-a") is None

    successors[0].publish(batch_of(2, 5), progress=ProgressRecord.for_batch("store-a", "q", 0))
    assert len(committed(bootstrap, topic)) == 5


def test_records_in_flight_when_fenced_never_become_visible(
    kafka_broker: LocalKafkaCluster,
    make_changelog: Callable[..., str],
    make_writer: Callable[..., ChangelogWriter],
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = make_changelog()
    txn_id = transactional_id_for("store-a", topic)
    zombie = make_writer(topic, txn_id)
    successors: list[ChangelogWriter] = []

    def taken_over() -> Iterator[Change]:
        yield from batch_of(0, 300)
        successors.append(make_writer(topic, txn_id))
        yield from batch_of(1, 300)  # produced by the zombie after it was fenced

    # A real broker answers the zombie's next produce with PRODUCER_FENCED (so
    # ProducerFencedError); the mock answers OUT_OF_ORDER_SEQUENCE_NUMBER when the zombie
    # already had records in flight, which is a fatal KafkaClientError.
    with pytest.raises(KafkaClientError):
        zombie.publish(taken_over(), progress=ProgressRecord.for_batch("store-a", "q", 0))
    assert committed(bootstrap, topic) == []
    assert read_last_progress(bootstrap, topic, "store-a") is None
    with pytest.raises(KafkaClientError):  # the zombie stays unusable
        zombie.publish([], progress=ProgressRecord.for_batch("store-a", "q", 0))

    successors[0].publish(batch_of(2, 5), progress=ProgressRecord.for_batch("store-a", "q", 0))
    assert len(committed(bootstrap, topic)) == 5


# -- progress topic -------------------------------------------------------------------------


@pytest.mark.parametrize("window", [1024, 2], ids=["one-window", "backward-steps"])
def test_last_progress_per_store_on_a_shared_progress_topic(
    kafka_broker: LocalKafkaCluster,
    make_changelog: Callable[..., str],
    make_writer: Callable[..., ChangelogWriter],
    monkeypatch: pytest.MonkeyPatch,
    window: int,
) -> None:
    # A tiny window makes the reader step backwards several times before finding store a.
    monkeypatch.setattr(kafka_progress, "_PROGRESS_WINDOW", window)
    bootstrap = kafka_broker.bootstrap_servers
    topic = make_changelog()
    a, b = make_writer(topic), make_writer(topic)
    a.publish(batch_of(0, 3), progress=ProgressRecord.for_batch("a", "qa", 0, {"a": 0}))
    a_ends = a.publish(batch_of(1, 3), progress=ProgressRecord.for_batch("a", "qa", 1, {"a": 1}))
    for batch in range(4):
        b.publish(batch_of(batch, 2), progress=ProgressRecord.for_batch("b", "qb", batch))

    last_a = settled_progress(bootstrap, topic, "a")
    last_b = settled_progress(bootstrap, topic, "b")
    assert last_a is not None and last_b is not None
    assert (last_a.batch_id, last_a.source_offsets, last_a.changelog_end_offsets) == (
        1,
        {"a": 1},
        a_ends,
    )
    assert (last_b.store_id, last_b.query_id, last_b.batch_id) == ("b", "qb", 3)
    assert read_last_progress(bootstrap, topic, "c") is None


def test_malformed_progress_record_in_the_topic_names_its_offset(
    kafka_broker: LocalKafkaCluster,
    make_changelog: Callable[..., str],
    make_writer: Callable[..., ChangelogWriter],
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = make_changelog()
    make_writer(topic).publish([], progress=ProgressRecord.for_batch("s", "q", 0))
    # Kafka writes a transaction's markers after commit_transaction() returns: wait for the
    # commit marker (offset 1), or the records below could take its offset.
    assert wait_until_settled(bootstrap, f"{topic}-progress") == {0: 2}
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(f"{topic}-progress", b"{truncated", b"s", partition=0)
    producer.produce(f"{topic}-progress", b"garbage of another store", b"other", partition=0)
    producer.flush(10)
    with pytest.raises(ProgressRecordError, match=rf"not valid JSON.*{topic}-progress.*offset 2"):
        read_last_progress(bootstrap, topic, "s")


# -- topics and configuration ---------------------------------------------------------------


def test_missing_changelog_is_a_clear_error_and_never_created(
    kafka_broker: LocalKafkaCluster, make_writer: Callable[..., ChangelogWriter]
) -> None:
    topic = f"absent-changelog-{next(_ids)}"
    writer = make_writer(topic, init=False)
    with pytest.raises(KafkaClientError, match=rf"{topic}' does not exist.*create it"):
        writer.init()
    with pytest.raises(KafkaClientError, match="does not exist"):
        writer.partition_count()  # still missing: the writer did not auto-create it
    with pytest.raises(KafkaClientError, match="does not exist"):
        list(read_changelog_range(kafka_broker.bootstrap_servers, topic, {}, {0: 1}))


@pytest.mark.parametrize("progress_partitions", [None, 2], ids=["missing", "two-partitions"])
def test_progress_topic_must_exist_with_one_partition(
    kafka_broker: LocalKafkaCluster,
    make_changelog: Callable[..., str],
    make_writer: Callable[..., ChangelogWriter],
    progress_partitions: int | None,
) -> None:
    topic = make_changelog(progress_partitions=progress_partitions)
    what = "does not exist" if progress_partitions is None else "has 2 partitions"
    writer = make_writer(topic, init=False)
    with pytest.raises(KafkaClientError, match=f"{topic}-progress' {what}.*exactly 1 partition"):
        writer.init()
    with pytest.raises(KafkaClientError, match=f"{topic}-progress' {what}"):
        read_last_progress(kafka_broker.bootstrap_servers, topic, "s", timeout_s=10)


def test_range_past_the_committed_end_is_data_loss(
    kafka_broker: LocalKafkaCluster,
    make_changelog: Callable[..., str],
    make_writer: Callable[..., ChangelogWriter],
) -> None:
    topic = make_changelog()
    ends = make_writer(topic).publish(
        batch_of(0, 8), progress=ProgressRecord.for_batch("s", "q", 0)
    )
    partition = min(ends)
    with pytest.raises(DataLossError, match="re-created") as lost:
        list(
            read_changelog_range(
                kafka_broker.bootstrap_servers, topic, {}, {partition: ends[partition] + 5}
            )
        )
    assert lost.value.partition == partition


def test_writer_owns_its_transactional_settings(kafka_broker: LocalKafkaCluster) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    for name, value in [
        ("transactional.id", "someone-else"),
        ("enable.idempotence", "false"),
        ("allow.auto.create.topics", "true"),
    ]:
        with pytest.raises(KafkaClientError, match=f"kafka.{name}=.*remove that option"):
            ChangelogWriter(bootstrap, "t", transactional_id="mine", config={name: value})
    with pytest.raises(KafkaClientError, match="refused the producer settings"):
        ChangelogWriter(bootstrap, "t", transactional_id="mine", config={"acks": "sometimes"})
    # Repeating the writer's own values is fine.
    ChangelogWriter(
        bootstrap, "t", transactional_id="mine", config={"enable.idempotence": "true"}
    ).close()


def test_publish_needs_init(
    make_changelog: Callable[..., str], make_writer: Callable[..., ChangelogWriter]
) -> None:
    writer = make_writer(make_changelog(), init=False)
    with pytest.raises(KafkaClientError, match="call init"):
        writer.publish([], progress=ProgressRecord.for_batch("s", "q", 0))
    writer.init()
    writer.close()
    with pytest.raises(KafkaClientError, match="closed"):
        writer.publish([], progress=ProgressRecord.for_batch("s", "q", 0))


def test_transactional_id_is_deterministic_per_store() -> None:
    assert transactional_id_for("orders", "app") == "app-spark-statestore-orders"
    assert transactional_id_for("orders", "app") == transactional_id_for("orders", "app")
    assert transactional_id_for("orders", "app") != transactional_id_for("users", "app")
    with pytest.raises(KafkaClientError, match="non-empty"):
        transactional_id_for("", "app")


# -- progress record codec ------------------------------------------------------------------


def test_progress_record_json_round_trip() -> None:
    record = ProgressRecord(
        "s", "q", 7, {"topic": {"0": 12}}, {2: 10, 0: 5}, "2026-01-02T03:04:05+00:00"
    )
    text = record.to_json()
    assert '"changelog_end_offsets":{"0":5,"2":10}' in text
    assert ProgressRecord.from_json(text) == record
    assert ProgressRecord.from_json(text.encode()) == record
    assert '"position"' not in text  # an older writer's record: no position
    with_position = replace(record, position=Position.from_map({"in": {0: 41, 3: 7}}))
    text = with_position.to_json()
    assert '"position":{"in":{"0":41,"3":7}}' in text
    assert ProgressRecord.from_json(text) == with_position


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1]", "must be a JSON object"),
        ('{"version": 2}', "format version 2"),
        ('{"version": 1, "store_id": "s"}', "misses field"),
        (
            '{"version":1,"store_id":"s","query_id":"q","batch_id":-1,'
            '"changelog_end_offsets":{},"written_at":"2026-01-01T00:00:00"}',
            "batch_id must be an int >= 0",
        ),
        (
            '{"version":1,"store_id":"s","query_id":"q","batch_id":1,'
            '"changelog_end_offsets":{"x":1},"written_at":"2026-01-01T00:00:00"}',
            "partition 'x'",
        ),
        (
            '{"version":1,"store_id":"s","query_id":"q","batch_id":1,'
            '"changelog_end_offsets":{"0":"1"},"written_at":"2026-01-01T00:00:00"}',
            "changelog_end_offsets must map",
        ),
        (
            '{"version":1,"store_id":"","query_id":"q","batch_id":1,'
            '"changelog_end_offsets":{},"written_at":"2026-01-01T00:00:00"}',
            "store_id must be a non-empty string",
        ),
        (
            '{"version":1,"store_id":"s","query_id":"q","batch_id":1,'
            '"changelog_end_offsets":{},"written_at":"yesterday"}',
            "ISO-8601",
        ),
        (
            '{"version":1,"store_id":"s","query_id":"q","batch_id":1,'
            '"changelog_end_offsets":{},"written_at":"2026-01-01T00:00:00",'
            '"position":{"in":{"0":-1}}}',
            "bad position",
        ),
    ],
)
def test_malformed_progress_records_are_clear_errors(text: str, message: str) -> None:
    with pytest.raises(ProgressRecordError, match=message):
        ProgressRecord.from_json(text)


def test_progress_record_refuses_non_json_source_offsets() -> None:
    with pytest.raises(ProgressRecordError, match="not JSON-compatible"):
        ProgressRecord.for_batch("s", "q", 0, {"when": object()}).to_json()
