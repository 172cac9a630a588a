"""Read a changelog topic from the beginning to its current end and decode every record.

This is the small, one-shot reader behind ``spark-statestore tail`` (a ``kafka-console-consumer``
for Kafka Streams changelogs). The continuous follower lives in the follower module.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from spark_statestore.changelog import ChangelogRecord
from spark_statestore.changelog.missing_position import OnMissingPosition
from spark_statestore.connectors.kafka import clients
from spark_statestore.connectors.kafka.errors import KafkaClientError

__all__ = ["format_record", "message_to_record", "tail_changelog"]


def message_to_record(
    msg: Message, on_missing_position: OnMissingPosition = OnMissingPosition.FAIL
) -> ChangelogRecord:
    """Decode one consumed changelog message (not an error event) into a ChangelogRecord."""
    timestamp_type, timestamp = msg.timestamp()
    raw_headers = msg.headers()
    headers: list[tuple[str, bytes | None]] | None = None
    if raw_headers:
        items = raw_headers.items() if isinstance(raw_headers, dict) else raw_headers
        headers = [(k, v.encode() if isinstance(v, str) else v) for k, v in items]
    return ChangelogRecord.from_parts(
        msg.topic() or "",
        msg.partition() or 0,
        msg.offset() or 0,
        msg.key(),
        msg.value(),
        timestamp=timestamp,
        timestamp_type=timestamp_type,
        headers=headers,
        on_missing=on_missing_position,
    )


def tail_changelog(
    bootstrap_servers: str,
    topic: str,
    *,
    timeout_s: float = 30.0,
    on_missing_position: OnMissingPosition = OnMissingPosition.FAIL,
    consumer_config: dict[str, Any] | None = None,
) -> Iterator[ChangelogRecord]:
    """Yield the committed records of ``topic``, partition by partition in offset order.

    Reads with ``isolation.level=read_committed`` from each partition's first offset up to the
    end (last stable offset) it had when the call started.

    Raises
    ------
    KafkaClientError
        The topic does not exist, or the end was not reached within ``timeout_s``.
    ChangelogFormatError
        A record's key is null or its position headers are malformed (with
        ``OnMissingPosition.FAIL``); the error names topic, partition and offset.
    """
    consumer = clients.consumer(
        bootstrap_servers,
        consumer_config,
        group="spark-statestore-tail",
        what=f"changelog {topic!r}",
    )
    try:
        count = clients.partition_count(consumer, topic, timeout_s)
        if count is None:
            raise KafkaClientError(
                f"changelog topic {topic!r} does not exist on {bootstrap_servers}; check the "
                "topic name and kafka.bootstrap.servers"
            )
        partitions = list(range(count))
        ends: dict[int, int] = {}
        starts: dict[int, int] = {}
        for partition in partitions:
            low, high = clients.watermarks(consumer, topic, partition, timeout_s)
            starts[partition], ends[partition] = low, high
        pending = {p for p in partitions if ends[p] > starts[p]}
        consumer.assign([TopicPartition(topic, p, starts[p]) for p in sorted(pending)])
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise KafkaClientError(
                    f"reading changelog {topic!r} did not reach the end offsets {ends} within "
                    f"{timeout_s}s; partitions still open: {sorted(pending)}"
                )
            for msg in consumer.consume(1000, 0.5):
                err = msg.error()
                partition = msg.partition() or 0
                offset = msg.offset() or 0
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if offset >= ends[partition]:
                            pending.discard(partition)
                        continue
                    raise KafkaClientError(
                        f"reading {topic} partition {partition}: {err.str()}", code=err.code()
                    ) from KafkaException(err)
                if partition not in pending or offset >= ends[partition]:
                    continue
                yield message_to_record(msg, on_missing_position)
                if offset + 1 >= ends[partition]:
                    pending.discard(partition)
    finally:
        consumer.close()


def _show(data: bytes | None, fmt: str) -> str:
    if data is None:
        return "null"
    if fmt == "hex":
        return data.hex()
    return data.decode("utf-8", "backslashreplace")


def format_record(
    record: ChangelogRecord,
    key_format: str = "string",
    value_format: str = "string",
    *,
    shown: Any = None,
) -> str:
    """One human-readable line: location, operation, key, value, timestamp, position.

    ``key_format`` / ``value_format`` ``avro``, ``protobuf`` or ``jsonschema`` show
    registry-framed values as JSON with ``shown``, a ``{format: RegistryJson}`` mapping
    (:class:`~spark_statestore.connectors.schema_registry.show.RegistryJson`).

    Raises
    ------
    SchemaError
        A registry-format key or value that does not decode, naming the record.
    """
    position = record.position.to_json() if record.position is not None else "-"
    where = f"topic {record.topic} partition {record.partition} offset {record.offset}"

    def show(data: bytes | None, fmt: str, column: str) -> str:
        if shown is not None and fmt in shown and data is not None:
            return str(shown[fmt].show(data, where=where, column=column))
        return _show(data, fmt)

    return (
        f"{record.topic}[{record.partition}]@{record.offset:<4d} {record.op:<6s} "
        f"key={show(record.key, key_format, 'key')} "
        f"value={show(record.value, value_format, 'value')} "
        f"ts={record.timestamp} position={position}"
    )
