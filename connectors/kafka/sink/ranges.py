"""Reading committed ranges of the sink's topics: the roll-forward path of the sink.

:func:`read_changelog_range` yields the committed changelog records (as
:class:`ChangelogEntry`) between a store's applied offsets and the end offsets a
:class:`~spark_statestore.connectors.kafka.sink.progress.ProgressRecord` names, so a restarted
sink can roll its store forward instead of publishing a batch twice.

The range read (:func:`read_ranges`: several partitions with one consumer) also serves
:mod:`~spark_statestore.connectors.kafka.sink.progress`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from spark_statestore.connectors.kafka import clients
from spark_statestore.connectors.kafka.errors import DataLossError, KafkaClientError, describe_error
from spark_statestore.connectors.kafka.lost_offsets import handle_out_of_range

__all__ = ["ChangelogEntry", "read_changelog_range", "read_ranges"]


# -- readers --------------------------------------------------------------------------------


class ChangelogEntry(NamedTuple):
    """One committed changelog record, as :func:`read_changelog_range` yields it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None
    timestamp: int | None


_CONSUME_BATCH = 10_000
_CONSUME_TIMEOUT_S = 0.02


def read_ranges(
    consumer: Consumer,
    topic: str,
    ranges: Mapping[int, tuple[int, int]],
    *,
    fail_on_data_loss: bool,
    timeout_s: float,
) -> Iterator[Message]:
    """The records of ``topic`` in ``[start, end)`` per partition, with one consumer.

    Unlike :func:`~spark_statestore.connectors.kafka.follower.ranges.read_range` (one partition,
    one consumer, and a final ``consume()`` that waits out its whole timeout), this reads all
    partitions at once and ends as soon as each consumer position (which moves past
    transaction markers and aborted records) reaches its end.
    """
    positions = {p: start for p, (start, end) in ranges.items() if end > start}
    ends = {p: ranges[p][1] for p in positions}
    if not positions:
        return
    consumer.assign([TopicPartition(topic, p, o) for p, o in positions.items()])
    last_progress = time.monotonic()
    while positions:
        # consume() returns after this many messages or the timeout: never ask for more than
        # the ranges hold, and keep the timeout short, since transaction markers take offsets
        # but are not delivered (the consumer position shows them passed).
        wanted = min(_CONSUME_BATCH, sum(ends[p] - o for p, o in positions.items()))
        messages = consumer.consume(wanted, timeout=_CONSUME_TIMEOUT_S)
        reassign = False
        for message in messages:
            error = message.error()
            partition: int = message.partition()  # type: ignore[assignment]
            offset: int = message.offset()  # type: ignore[assignment]
            if partition not in positions:
                continue
            if error is None:
                if offset < ends[partition]:
                    yield message
                positions[partition] = max(positions[partition], offset + 1)
            elif error.code() == KafkaError._PARTITION_EOF:
                positions[partition] = max(positions[partition], offset)
            elif error.code() == KafkaError._AUTO_OFFSET_RESET:
                positions[partition] = handle_out_of_range(
                    topic,
                    partition,
                    positions[partition],
                    clients.watermarks(consumer, topic, partition, timeout_s),
                    fail_on_data_loss=fail_on_data_loss,
                )
                reassign = True  # seek() refuses a partition in this state
            else:
                raise KafkaClientError(
                    f"reading {topic}-{partition} at offset {positions[partition]} failed: "
                    f"{describe_error(error)}",
                    error.code(),
                )
        for tp in consumer.position([TopicPartition(topic, p) for p in positions]):
            if tp.offset >= 0:
                positions[tp.partition] = max(positions[tp.partition], tp.offset)
        done = [p for p, o in positions.items() if o >= ends[p]]
        for partition in done:
            del positions[partition]
        if reassign and positions:
            consumer.assign([TopicPartition(topic, p, o) for p, o in positions.items()])
        elif done and positions:
            consumer.incremental_unassign([TopicPartition(topic, p) for p in done])
        if messages or reassign or done:
            last_progress = time.monotonic()
        elif positions and time.monotonic() - last_progress > timeout_s:
            stuck = {p: f"{o}/{ends[p]}" for p, o in positions.items()}
            raise KafkaClientError(
                f"reading {topic} made no progress for {timeout_s:.0f} s (partition: "
                f"offset/end {stuck}); check that the brokers are reachable"
            )


def _wait_until_stable(
    bootstrap_servers: str,
    config: Mapping[str, Any] | None,
    consumer: Consumer,
    topic: str,
    partition: int,
    end: int,
    deadline: float,
) -> None:
    """Return once a read_committed reader can read ``topic-partition`` up to ``end``.

    A committed transaction's records become readable only when its markers land, after
    ``commit_transaction()`` has returned, and an open transaction of another producer holds
    the last stable offset (LSO) back until it ends; both are waited for, up to
    ``deadline``. Only a range past the end of the log itself is data loss.
    """
    low, stable = clients.watermarks(
        consumer, topic, partition, max(0.1, deadline - time.monotonic())
    )
    if end <= stable:
        return
    log_end = _log_end(bootstrap_servers, config, topic, partition, deadline)
    if end > log_end:
        raise DataLossError(
            f"changelog {topic}-{partition} ends at offset {log_end} but offset {end - 1} was "
            "committed there before: the topic was deleted and re-created or truncated; "
            "delete the store and restore it from the changelog",
            topic,
            partition,
            end - 1,
            (low, log_end),
        )
    pause = 0.005
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise KafkaClientError(
                f"changelog {topic}-{partition} holds offsets up to {end - 1}, but a "
                f"read_committed reader can read only up to {stable - 1}: a transaction on "
                f"that partition is still open after the read's timeout; wait for its "
                "producer to commit or abort (the broker aborts it after its "
                "transaction.timeout.ms), then retry"
            )
        time.sleep(min(pause, remaining))  # the broker is asked again: no state to wait on
        pause = min(pause * 2, 0.2)
        stable = clients.watermarks(
            consumer, topic, partition, max(0.1, deadline - time.monotonic())
        )[1]
        if end <= stable:
            return


def _log_end(
    bootstrap_servers: str,
    config: Mapping[str, Any] | None,
    topic: str,
    partition: int,
    deadline: float,
) -> int:
    """The end of ``topic-partition``'s log, open transactions included (read_uncommitted)."""
    uncommitted = clients.consumer(
        bootstrap_servers,
        config,
        group="spark-statestore-log-end",
        what=f"changelog {topic!r}",
        read_committed=False,
    )
    try:
        return clients.watermarks(
            uncommitted, topic, partition, max(0.1, deadline - time.monotonic())
        )[1]
    finally:
        uncommitted.close()


def read_changelog_range(
    bootstrap_servers: str,
    topic: str,
    starts: Mapping[int, int],
    ends: Mapping[int, int],
    *,
    config: Mapping[str, Any] | None = None,
    timeout_s: float = 30.0,
) -> Iterator[ChangelogEntry]:
    """The committed records of ``topic`` in ``[starts[p], ends[p])`` for each ``p`` of ``ends``.

    The roll-forward path of the sink: ``starts`` are the store's applied offsets, ``ends``
    a :class:`ProgressRecord`'s ``changelog_end_offsets``. A partition missing from
    ``starts`` is read from offset 0; partitions only in ``starts`` are not read. Records
    come in offset order within each partition (partitions interleave), read with
    read_committed: aborted records and transaction markers are skipped.

    Raises
    ------
    KafkaClientError
        The topic does not exist or has fewer partitions than ``ends`` names, or a
        transaction on a range's partition stays open for ``timeout_s`` (records a
        transaction committed are waited for: they become readable only when its markers
        land, after ``commit_transaction()`` returned).
    DataLossError
        Offsets of a range are gone from the topic (retention), or a range ends past the
        end of the partition's log (the topic was re-created): the store cannot be rolled
        forward from it.
    """
    consumer = clients.consumer(
        bootstrap_servers, config, group="spark-statestore-rollforward", what=f"changelog {topic!r}"
    )
    try:
        count = clients.partition_count(consumer, topic, timeout_s)
        if count is None:
            raise KafkaClientError(
                f"changelog topic {topic!r} does not exist; check the topic name and "
                "kafka.bootstrap.servers"
            )
        unknown = sorted(p for p in ends if not 0 <= p < count)
        if unknown:
            raise KafkaClientError(
                f"changelog topic {topic!r} has {count} partitions but partitions {unknown} "
                "were asked for: was the topic re-created with fewer partitions?"
            )
        ranges = {p: (starts.get(p, 0), end) for p, end in ends.items()}
        deadline = time.monotonic() + timeout_s
        for partition, (start, end) in sorted(ranges.items()):
            if end > start:
                _wait_until_stable(
                    bootstrap_servers, config, consumer, topic, partition, end, deadline
                )
        for message in read_ranges(
            consumer, topic, ranges, fail_on_data_loss=True, timeout_s=timeout_s
        ):
            kind, timestamp = message.timestamp()
            yield ChangelogEntry(
                message.partition(),  # type: ignore[arg-type]
                message.offset(),  # type: ignore[arg-type]
                message.key(),
                message.value(),
                message.headers(),  # type: ignore[arg-type]  # a consumer gives a list
                timestamp if kind else None,
            )
    finally:
        consumer.close()
