"""Read one offset range ``[start, end)`` of one changelog partition (an executor's task).

Ranges end correctly across transaction markers, aborted records and compaction gaps: the
reader stops when the consumer's position (which moves past markers and gaps) or the end
of the partition reaches ``end``, never by counting records.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

from confluent_kafka import KafkaError, Message, TopicPartition

from spark_statestore.connectors.kafka import clients
from spark_statestore.connectors.kafka.errors import KafkaClientError
from spark_statestore.connectors.kafka.follower.columns import (
    FeedPoll,
    NativeReader,
    native_settings,
)
from spark_statestore.connectors.kafka.lost_offsets import handle_out_of_range

__all__ = ["read_range", "read_range_columns"]

_INVALID_OFFSET = -1001
_RANGE_DEFAULTS: dict[str, Any] = {
    "auto.offset.reset": "error",
    "queued.min.messages": 200_000,
    "fetch.max.bytes": 64 * 1024 * 1024,
    # A range read ends at the partition's end event, which comes with a fetch reply: with
    # the default (500 ms) the broker held an empty fetch that long at every range's end.
    "fetch.wait.max.ms": 10,
}


def read_range(
    bootstrap_servers: str,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    config: Mapping[str, Any] | None = None,
    fail_on_data_loss: bool = True,
    batch_size: int = 10_000,
    stall_timeout_s: float = 120.0,
) -> Iterator[list[Message]]:
    """Yield the committed records of ``topic``-``partition`` in ``[start, end)``, in batches.

    Raises
    ------
    DataLossError
        When offsets of the range are gone and ``fail_on_data_loss`` is True.
    KafkaClientError
        When the range cannot be read (the message names topic, partition and offsets).
    """
    if end <= start:
        return
    consumer = clients.consumer(
        bootstrap_servers,
        config,
        group=f"spark-statestore-range-{topic}",
        what=f"changelog {topic!r}",
        defaults=_RANGE_DEFAULTS,
    )
    tp = TopicPartition(topic, partition)
    where = f"{topic}-{partition} offsets [{start}, {end})"
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        position = start
        last_progress = time.monotonic()
        while position < end:
            # What is queued now, no more than the range still holds; when nothing is, wait
            # for the next arrival only. (consume() with a timeout waits it out for a full
            # batch, which the markers at a partition's end never complete.)
            messages = consumer.consume(max(1, min(batch_size, end - position)), timeout=0)
            if not messages:
                arrival = consumer.poll(1.0)
                messages = [] if arrival is None else [arrival]
            out = []
            for message in messages:
                error = message.error()
                if error is None:
                    offset = message.offset()
                    if offset is not None and offset >= end:
                        position = end
                        break
                    out.append(message)
                    continue
                if error.code() == KafkaError._PARTITION_EOF:
                    position = max(position, message.offset() or 0)
                    continue
                if error.code() == KafkaError._AUTO_OFFSET_RESET:
                    low = handle_out_of_range(
                        topic,
                        partition,
                        position,
                        clients.watermarks(consumer, topic, partition, 30),
                        fail_on_data_loss=fail_on_data_loss,
                    )
                    position = low
                    consumer.assign([TopicPartition(topic, partition, low)])  # seek() refuses here
                    continue
                raise KafkaClientError(f"reading changelog {where} failed: {error.str()}")
            if out:
                yield out
                position = max(position, (out[-1].offset() or 0) + 1)
            current = consumer.position([tp])[0].offset
            if current != _INVALID_OFFSET:
                position = max(position, current)
            if out or messages:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > stall_timeout_s:
                raise KafkaClientError(
                    f"reading changelog {where} made no progress for {stall_timeout_s:.0f} s "
                    f"(stuck at offset {position}); check that the brokers of "
                    f"{bootstrap_servers} are reachable from the executors"
                )
    finally:
        consumer.close()


def read_range_columns(
    extension: Any,
    bootstrap_servers: str,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    config: Mapping[str, Any] | None = None,
    on_missing: Any = None,
    fail_on_data_loss: bool = True,
    batch_size: int = 10_000,
    stall_timeout_s: float = 120.0,
) -> Iterator[FeedPoll] | None:
    """:func:`read_range` through the compiled extension's column reader: the records of
    ``[start, end)`` as :class:`FeedPoll` chunks. None when a setting is a Python callback
    (only confluent-kafka's consumer takes those: read with :func:`read_range` then).

    The range ends when a record at ``end`` or later arrives (dropped) or the partition's
    end reaches ``end``: transaction markers and gaps count, records are not counted.
    """
    settings = native_settings(
        clients.consumer_settings(
            bootstrap_servers,
            config,
            group=f"spark-statestore-range-{topic}",
            what=f"changelog {topic!r}",
            defaults=_RANGE_DEFAULTS,
        )
    )
    if settings is None or end <= start:
        return None if settings is None else iter(())
    reader = NativeReader(extension, settings, topic, on_missing)
    return _read_columns(
        reader,
        bootstrap_servers,
        topic,
        partition,
        start,
        end,
        config,
        fail_on_data_loss,
        batch_size,
        stall_timeout_s,
    )


def _read_columns(
    reader: NativeReader,
    bootstrap_servers: str,
    topic: str,
    partition: int,
    start: int,
    end: int,
    config: Mapping[str, Any] | None,
    fail_on_data_loss: bool,
    batch_size: int,
    stall_timeout_s: float,
) -> Iterator[FeedPoll]:
    where = f"{topic}-{partition} offsets [{start}, {end})"
    try:
        reader.assign({partition: start})
        position = start
        last_progress = time.monotonic()
        while position < end:
            polled = reader.poll_feed(max(1, min(batch_size, end - position)), 1.0)
            for code, _name, _p, at, text in polled.events:
                if code == KafkaError._PARTITION_EOF:
                    position = max(position, at)
                elif code == KafkaError._AUTO_OFFSET_RESET:
                    position = _lost(
                        topic, partition, position, bootstrap_servers, config, fail_on_data_loss
                    )
                    reader.assign({partition: position})
                else:
                    raise KafkaClientError(f"reading changelog {where} failed: {text}")
            rows = len(polled.records)
            if rows:
                inside = _rows_before(polled.records.offsets, end)
                if inside < rows:
                    polled = polled.head(inside)
                    position = end
                if inside:
                    yield polled
                    position = max(position, polled.records.offsets[inside - 1].as_py() + 1)
            # Past the markers and gaps after the records.
            position = max(position, polled.next_offsets.get(partition, position))
            if rows or polled.events:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > stall_timeout_s:
                raise KafkaClientError(
                    f"reading changelog {where} made no progress for {stall_timeout_s:.0f} s "
                    f"(stuck at offset {position}); check that the brokers of "
                    f"{bootstrap_servers} are reachable from the executors"
                )
    finally:
        reader.close()


def _rows_before(offsets: Any, end: int) -> int:
    """How many of the (ascending) ``offsets`` are below ``end``."""
    import pyarrow.compute as pc

    return int(pc.sum(pc.less(offsets, end)).as_py() or 0)


def _lost(
    topic: str,
    partition: int,
    position: int,
    bootstrap_servers: str,
    config: Mapping[str, Any] | None,
    fail_on_data_loss: bool,
) -> int:
    """Where to resume when ``position`` is gone (raises when that is data loss)."""
    consumer = clients.consumer(
        bootstrap_servers, config, group=f"spark-statestore-range-{topic}", what=topic
    )
    try:
        marks = clients.watermarks(consumer, topic, partition, 30)
    finally:
        consumer.close()
    return handle_out_of_range(
        topic, partition, position, marks, fail_on_data_loss=fail_on_data_loss
    )
