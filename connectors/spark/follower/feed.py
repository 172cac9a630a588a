"""The change feed: the follower source's columns, and Kafka messages turned into Arrow.

Columns (docs/spark.md, "Follower source"): ``key``, ``value`` (binary unless ``keyFormat``
/ ``valueFormat`` say otherwise; ``value`` is null for deletes), ``topic``, ``partition``,
``offset``, ``timestamp``, ``timestampType``, ``op`` (``upsert`` / ``delete``), ``position``
(``map<string,map<int,bigint>>`` from the record's ``c`` header, null when absent), the
window columns of window and session stores (``window_start`` and, with ``windowSizeMs``,
``window_end``; ``session_start``, ``session_end``: :mod:`..windows`), and ``headers`` with
``includeHeaders``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_statestore.changelog.headers import HeaderStatus
from spark_statestore.connectors.spark.format_options import codecs_for
from spark_statestore.connectors.spark.options import (
    DecodeMode,
    SourceOptions,
)
from spark_statestore.connectors.spark.reader.columns import HEADERS_DDL
from spark_statestore.connectors.spark.windows import (
    WINDOWED,
    split_keys,
    window_columns,
    window_ddl,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from confluent_kafka import Message
    from pyspark.sql.types import StructType

    from spark_statestore.connectors.kafka.follower.columns import FeedPoll

__all__ = [
    "FeedStats",
    "column_feed_batches",
    "columns_to_batch",
    "feed_batches",
    "feed_ddl",
    "messages_to_batch",
]

POSITION_TYPE = "MAP<STRING, MAP<INT, BIGINT>>"


def feed_ddl(options: SourceOptions) -> str:
    """The change feed's schema as a DDL string (Spark parses it)."""
    key_codec, value_codec = codecs_for(options.formats)
    columns = [
        f"key {key_codec.ddl_type()}",
        f"value {value_codec.ddl_type()}",
        "topic STRING",
        "partition INT",
        "offset BIGINT",
        "timestamp TIMESTAMP",
        "timestampType INT",
        "op STRING",
        f"position {POSITION_TYPE}",
    ]
    columns += window_ddl(options.store_type, options.window_size_ms)
    if options.include_headers:
        columns.append(HEADERS_DDL)
    return ", ".join(columns)


@dataclass
class FeedStats:
    """Counts of one task's conversion (for logs; permissive decoding nulls are here)."""

    rows: int = 0
    undecodable_keys: int = 0
    undecodable_values: int = 0
    missing_positions: int = 0


def messages_to_batch(
    messages: Sequence[Message],
    options: SourceOptions,
    schema: StructType,
    codecs: tuple[Any, Any],
    stats: FeedStats,
) -> pa.RecordBatch:
    """One Arrow record batch of the change feed from consumed changelog messages.

    Raises
    ------
    ChangelogFormatError
        A record with a null key or unreadable position headers (unless
        ``onMissingPosition`` is ``skip``); the message names topic, partition and offset.
    DecodeError
        An undecodable key or value, or a window or session key that does not split, in
        FAILFAST mode.
    """
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    from spark_statestore.connectors.kafka.tail import message_to_record

    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    topics, partitions, offsets, stamps, stamp_types, ops = [], [], [], [], [], []
    positions: list[Any] = []
    headers: list[Any] = []
    for message in messages:
        record = message_to_record(message, options.on_missing_position)
        keys.append(record.key)
        values.append(record.value)
        topics.append(record.topic)
        partitions.append(record.partition)
        offsets.append(record.offset)
        stamps.append(record.timestamp if record.timestamp >= 0 else None)
        stamp_types.append(int(record.timestamp_type))
        ops.append(record.op)
        if record.position is None:
            positions.append(None)
            if record.position_status is HeaderStatus.SKIPPED:
                stats.missing_positions += 1
        else:
            positions.append([(t, list(p.items())) for t, p in record.position.to_map().items()])
        if options.include_headers:
            headers.append([{"key": k, "value": v} for k, v in record.headers])

    def locate(i: int) -> str:
        return f"changelog topic {topics[i]} partition {partitions[i]} offset {offsets[i]}"

    permissive = options.formats.mode is DecodeMode.PERMISSIVE
    windows: dict[str, Any] = {}
    if options.store_type in WINDOWED:
        split = split_keys(
            keys, options.store_type, options.window_size_ms, locate=locate, permissive=permissive
        )
        keys = split.keys
        stats.undecodable_keys += split.undecodable
        windows = window_columns(split, options.store_type, options.window_size_ms)
    key_codec, value_codec = codecs
    key_array, bad_keys = key_codec.decode(keys, locate=locate, permissive=permissive)
    value_array, bad_values = value_codec.decode(values, locate=locate, permissive=permissive)
    stats.undecodable_keys += bad_keys
    stats.undecodable_values += bad_values
    stats.rows += len(keys)
    arrow = to_arrow_schema(schema, timezone="UTC")
    millis = pa.timestamp("ms", tz="UTC")
    columns: dict[str, Any] = {
        "key": key_array,
        "value": value_array,
        "topic": pa.array(topics, pa.string()),
        "partition": pa.array(partitions, pa.int32()),
        "offset": pa.array(offsets, pa.int64()),
        "timestamp": pa.array(stamps, millis),
        "timestampType": pa.array(stamp_types, pa.int32()),
        "op": pa.array(ops, pa.string()),
        "position": pa.array(positions, arrow.field("position").type),
        **windows,
    }
    if options.include_headers:
        columns["headers"] = pa.array(headers, arrow.field("headers").type)
    arrays = [columns[f.name].cast(f.type) for f in arrow]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow)


def columns_to_batch(
    polled: FeedPoll,
    topic: str,
    options: SourceOptions,
    schema: StructType,
    codecs: tuple[Any, Any],
    stats: FeedStats,
) -> pa.RecordBatch:
    """:func:`messages_to_batch` of records the compiled extension read into columns (no
    Python object per record where the key and value formats are binary or string): the
    same batch, the same errors. Not for window stores or ``includeHeaders`` (those read
    messages)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql.pandas.types import to_arrow_schema

    from spark_statestore.changelog.headers import read_position_headers

    records = polled.records
    rows = len(records)
    positions = polled.positions
    if polled.slow:
        # Records whose position headers need the full rules (malformed, other versions):
        # decided as the reference path decides them.
        patched = positions.to_pylist()
        for row, headers in polled.slow:
            decision = read_position_headers(
                headers,
                on_missing=options.on_missing_position,
                topic=topic,
                partition=records.partitions[row].as_py(),
                offset=records.offsets[row].as_py(),
            )
            if decision.position is None:
                patched[row] = None
                if decision.status is HeaderStatus.SKIPPED:
                    stats.missing_positions += 1
            else:
                patched[row] = [(t, list(p.items())) for t, p in decision.position.to_map().items()]
        positions = pa.array(patched, positions.type)
    partitions, offsets = records.partitions, records.offsets

    def locate(i: int) -> str:
        return f"changelog topic {topic} partition {partitions[i]} offset {offsets[i]}"

    permissive = options.formats.mode is DecodeMode.PERMISSIVE
    key_codec, value_codec = codecs
    key_array, bad_keys = key_codec.decode_array(records.keys, locate=locate, permissive=permissive)
    value_array, bad_values = value_codec.decode_array(
        records.values, locate=locate, permissive=permissive
    )
    stats.undecodable_keys += bad_keys
    stats.undecodable_values += bad_values
    stats.rows += rows
    arrow = to_arrow_schema(schema, timezone="UTC")
    stamps = records.timestamps
    millis = pa.timestamp("ms", tz="UTC")
    columns: dict[str, Any] = {
        "key": key_array,
        "value": value_array,
        "topic": pa.repeat(pa.scalar(topic, pa.string()), rows),
        "partition": partitions,
        "offset": offsets,
        "timestamp": pc.if_else(pc.less(stamps, 0), None, stamps).cast(millis),
        "timestampType": polled.timestamp_types,
        "op": pc.if_else(pc.is_null(records.values), "delete", "upsert"),
        "position": positions,
    }
    arrays = [columns[f.name].cast(f.type) for f in arrow]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow)


def feed_batches(
    batches: Iterator[Sequence[Message]],
    options: SourceOptions,
    schema: StructType,
    stats: FeedStats,
) -> Iterator[pa.RecordBatch]:
    """Convert batches of messages lazily (one Arrow batch per consumed batch)."""
    codecs = codecs_for(options.formats)
    for messages in batches:
        if messages:
            yield messages_to_batch(messages, options, schema, codecs, stats)


def column_feed_batches(
    chunks: Iterator[FeedPoll],
    topic: str,
    options: SourceOptions,
    schema: StructType,
    stats: FeedStats,
) -> Iterator[pa.RecordBatch]:
    """:func:`feed_batches` of column chunks (the fast path)."""
    codecs = codecs_for(options.formats)
    for polled in chunks:
        if len(polled.records):
            yield columns_to_batch(polled, topic, options, schema, codecs, stats)
