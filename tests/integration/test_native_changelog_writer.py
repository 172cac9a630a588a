"""The sink's changelog writer on the compiled extension's producer and on confluent-kafka's
publish the same records: keys, values, tombstones, position headers, timestamps,
partitions, offsets and the progress record, from batches in columns (chunks larger than one
produce call, a producer queue far smaller than the batch) and change by change; fields of
other types than the plain ones are made plain or refused as the reference path does."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from spark_statestore.changelog.errors import ChangelogFormatError
from spark_statestore.changelog.partitioner import partitions_for_keys
from spark_statestore.connectors.kafka.errors import KafkaClientError
from spark_statestore.connectors.kafka.local import LocalKafkaCluster
from spark_statestore.connectors.kafka.sink.native_producer import NativeProducer
from spark_statestore.connectors.kafka.sink.progress import ProgressRecord
from spark_statestore.connectors.kafka.sink.writer import ChangelogWriter
from spark_statestore.native import ENV
from spark_statestore.position import Position
from spark_statestore.sink.changes import ChangeChunk, ChangeChunks
from tests.kafka_util import settled_progress, wait_until_settled
from tests.native_util import native_or_skip

native_or_skip()

pytestmark = pytest.mark.integration

PARTITIONS = 4
_ids = itertools.count()


class Bytes(bytes):
    """A subclass of bytes: not the extension's plain type, taken by confluent-kafka."""


Record = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]] | None, int]


@pytest.fixture
def changelog(kafka_broker: LocalKafkaCluster) -> Callable[[], str]:
    def make() -> str:
        topic = f"paths-{next(_ids)}-{time.monotonic_ns()}-changelog"
        kafka_broker.create_topic(topic, PARTITIONS)
        kafka_broker.create_topic(f"{topic}-progress", 1)
        return topic

    return make


def writer_on(
    path: str, monkeypatch: pytest.MonkeyPatch, bootstrap: str, topic: str, **config: Any
) -> ChangelogWriter:
    monkeypatch.setenv(ENV, path)
    writer = ChangelogWriter(
        bootstrap, topic, transactional_id=f"{topic}-txn", config=config, timeout_s=10
    )
    monkeypatch.delenv(ENV)
    assert isinstance(writer._producer, NativeProducer) == (path == "1")
    writer.init()
    return writer


def records(bootstrap: str, topic: str) -> list[Record]:
    """Every committed record with its headers and timestamp, read with a plain consumer
    (not the module under test) once every transaction is decided."""
    wait_until_settled(bootstrap, topic)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tests-native-writer",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out: list[Record] = []
    open_partitions = set(range(PARTITIONS))
    deadline = time.monotonic() + 30
    try:
        while open_partitions and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.2):
                error = message.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    open_partitions.discard(message.partition())
                    continue
                if error is not None:
                    raise KafkaException(error)
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                stamp = message.timestamp()[1]
                out.append(
                    (partition, offset, message.key(), message.value(), message.headers(), stamp)
                )
        assert not open_partitions, f"no end of {topic} partitions {open_partitions}"
        return sorted(out, key=lambda r: (r[0], r[1]))
    finally:
        consumer.close()


def chunks(count: int, batch: int) -> list[ChangeChunk]:
    """``count`` changes in chunks of 6,000 (more than one produce call each), a tombstone
    every seventh, two positions."""
    out = []
    for first in range(0, count, 6000):
        rows = range(first, min(count, first + 6000))
        keys = [b"key-%06d" % i for i in rows]
        values = [None if i % 7 == 0 else b"b%d-v%d" % (batch, i) for i in rows]
        stamps = [1_700_000_000_000 + i for i in rows]
        position = Position.from_map({"input": {0: batch * 100_000 + first, 1: first // 2}})
        out.append(
            ChangeChunk(keys, values, stamps, partitions_for_keys(keys, PARTITIONS), position)
        )
    return out


def test_both_paths_publish_the_same_records(
    kafka_broker: LocalKafkaCluster,
    changelog: Callable[[], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    logs, ends, progress = {}, {}, {}
    for path in ("0", "1"):
        topic = changelog()
        # A queue of 500 records: the batch fills it dozens of times.
        writer = writer_on(
            path, monkeypatch, bootstrap, topic, **{"queue.buffering.max.messages": 500}
        )
        try:
            first = writer.publish(
                ChangeChunks(iter(chunks(13_000, 0))),
                progress=ProgressRecord.for_batch("s", "q", 0),
            )
            # Change by change, with a position of its own each and an unstamped one.
            one_by_one = [
                (b"key-%06d" % i, b"late", Position.from_map({"other": {0: i}}), 1_700_000_000)
                for i in range(5)
            ]
            one_by_one.append((b"stamped-now", None, None, None))  # type: ignore[arg-type]
            second = writer.publish(one_by_one, progress=ProgressRecord.for_batch("s", "q", 1))
        finally:
            writer.close()
        ends[path] = (first, second)
        log = records(bootstrap, topic)
        stamped = [r for r in log if r[2] == b"stamped-now"]
        assert len(stamped) == 1 and abs(stamped[0][5] - time.time() * 1000) < 120_000
        logs[path] = [r if r[2] != b"stamped-now" else r[:5] for r in log]
        last = settled_progress(bootstrap, topic, "s")
        assert last is not None
        progress[path] = (last.batch_id, dict(last.changelog_end_offsets))
    assert len(logs["1"]) == 13_006
    assert logs["1"] == logs["0"]
    assert ends["1"] == ends["0"]
    assert progress["1"] == progress["0"]
    assert sum(ends["1"][0].values()) == 13_000


def test_fields_of_other_types_are_made_plain_or_refused_as_on_the_reference_path(
    kafka_broker: LocalKafkaCluster,
    changelog: Callable[[], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    logs = {}
    for path in ("0", "1"):
        topic = changelog()
        writer = writer_on(path, monkeypatch, bootstrap, topic)
        try:
            keys: list[Any] = [b"plain", Bytes(b"subclass"), b"text"]
            chunk = ChangeChunk(keys, [b"v", b"w", "utf-8 \u00e9"], [5, 6, 7], [0, 1, 2], None)
            writer.publish(
                ChangeChunks(iter([chunk])), progress=ProgressRecord.for_batch("s", "q", 0)
            )
            assert type(keys[1]) is Bytes  # the caller's lists are left alone
            bad = ChangeChunk([b"a", bytearray(b"b")], [b"1", b"2"], [1, 2], [0, 0], None)  # type: ignore[list-item]
            with pytest.raises(ChangelogFormatError, match="change #1 of batch 1"):
                writer.publish(
                    ChangeChunks(iter([bad])), progress=ProgressRecord.for_batch("s", "q", 1)
                )
            bad_value = ChangeChunk([b"a"], [42], [1], [0], None)  # type: ignore[list-item]
            with pytest.raises(TypeError):
                writer.publish(
                    ChangeChunks(iter([bad_value])), progress=ProgressRecord.for_batch("s", "q", 1)
                )
            beyond = ChangeChunk([b"a"], [b"1"], [1], [PARTITIONS], None)
            with pytest.raises(KafkaClientError) as refused:
                writer.publish(
                    ChangeChunks(iter([beyond])), progress=ProgressRecord.for_batch("s", "q", 1)
                )
            assert "UNKNOWN_PARTITION" in str(refused.value)
            # Columns of another sequence type than lists are taken too.
            tuples = ChangeChunk((b"t1",), (b"x",), (3,), (1,), None)  # type: ignore[arg-type]
            writer.publish(
                ChangeChunks(iter([tuples])), progress=ProgressRecord.for_batch("s", "q", 1)
            )
            # The writer goes on after each refusal.
            writer.publish(
                [(b"after", b"x", None, 9)], progress=ProgressRecord.for_batch("s", "q", 1)
            )
        finally:
            writer.close()
        logs[path] = [(r[0], r[2], r[3], r[5]) for r in records(bootstrap, topic)]
    assert logs["1"] == logs["0"]
    assert sorted((key, value) for _, key, value, _ in logs["1"]) == [
        (b"after", b"x"),
        (b"plain", b"v"),
        (b"subclass", b"w"),
        (b"t1", b"x"),
        (b"text", "utf-8 \u00e9".encode()),
    ]


def test_a_refused_setting_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "1")
    with pytest.raises(KafkaClientError, match=r"no\.such\.setting"):
        ChangelogWriter("127.0.0.1:9", "t", transactional_id="x", config={"no.such.setting": 1})


def test_a_kafka_error_keeps_its_code_and_flags() -> None:
    """The extension's error tuple becomes confluent-kafka's KafkaError, flags included."""
    extension = native_or_skip()
    producer = NativeProducer(extension, {"bootstrap.servers": "127.0.0.1:9"}, "t")
    try:
        with pytest.raises(KafkaException) as failed:
            producer.begin_transaction()  # not a transactional producer
        error = failed.value.args[0]
        assert isinstance(error, KafkaError)
        assert error.code() == KafkaError._NOT_CONFIGURED
        assert not error.fatal() and not error.retriable()
    finally:
        producer.close()
