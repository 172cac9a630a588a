"""Progress records: what each committed batch of a sink left in Kafka.

A sink commit publishes one :class:`ProgressRecord` to ``<changelog>-progress`` in the same
Kafka transaction as the batch's changelog records. This module holds the record, its
versioned JSON codec (:meth:`ProgressRecord.to_json` / :meth:`ProgressRecord.from_json`,
failing with :class:`ProgressRecordError`), and :func:`read_last_progress`, which a
restarted sink uses to learn the last batch Kafka already has.

The progress topic is never created here: it must exist with exactly one partition. Making
it compacted (``cleanup.policy=compact``) keeps it small: its records are keyed by store id,
and only each store's latest record matters.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, Message, Producer

from spark_statestore.connectors.kafka import clients
from spark_statestore.connectors.kafka.errors import KafkaClientError, ProgressRecordError
from spark_statestore.connectors.kafka.sink.ranges import read_ranges
from spark_statestore.errors import InvalidPositionError
from spark_statestore.position import Position

__all__ = [
    "PROGRESS_SUFFIX",
    "ProgressRecord",
    "parse_progress_message",
    "read_last_progress",
    "read_progress",
    "require_progress_topic",
]

PROGRESS_SUFFIX = "-progress"
"""The progress topic of changelog ``c`` is ``c + PROGRESS_SUFFIX``."""

_PROGRESS_FORMAT_VERSION = 1
_PROGRESS_WINDOW = 1024  # offsets of the progress topic read by the first backward step


# -- progress records -----------------------------------------------------------------------


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class ProgressRecord:
    """What one committed batch of a sink left in Kafka (one record per batch).

    Parameters
    ----------
    store_id
        The store the batch was committed to; the record's Kafka key (UTF-8), so one
        progress topic can serve several stores.
    query_id
        Spark's streaming query id.
    batch_id
        Spark's micro-batch id.
    source_offsets
        The batch's source offsets (from Spark's offset log), any JSON-compatible value;
        opaque to the writer.
    changelog_end_offsets
        ``{partition: offset}``: for each changelog partition the batch wrote to, the offset
        after its last record (an exclusive range end). Partitions the batch did not write to
        are absent. :meth:`ChangelogWriter.publish` fills this in.
    written_at
        ISO-8601 time the record was built.
    position
        The position the batch's changelog records carry in their ``c`` headers (the
        store's position with the batch merged), or None (none, or an older writer). A
        follower takes it once it has applied the batch up to ``changelog_end_offsets``
        (:class:`~spark_statestore.connectors.kafka.follower.batches.KafkaBatchProgress`).
    """

    store_id: str
    query_id: str
    batch_id: int
    source_offsets: Any = None
    changelog_end_offsets: Mapping[int, int] = field(default_factory=dict)
    written_at: str = field(default_factory=_utc_now)
    position: Position | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.store_id, str) or not self.store_id:
            raise ProgressRecordError(
                f"progress record: store_id must be a non-empty string, got {self.store_id!r}"
            )
        if not isinstance(self.query_id, str):
            raise ProgressRecordError(
                f"progress record: query_id must be a string, got {self.query_id!r}"
            )
        if not _is_int(self.batch_id) or self.batch_id < 0:
            raise ProgressRecordError(
                f"progress record: batch_id must be an int >= 0, got {self.batch_id!r}"
            )
        ends = self.changelog_end_offsets
        if not isinstance(ends, Mapping) or not all(
            _is_int(p) and p >= 0 and _is_int(o) and o >= 0 for p, o in ends.items()
        ):
            raise ProgressRecordError(
                "progress record: changelog_end_offsets must map partitions (int >= 0) to "
                f"offsets (int >= 0), got {ends!r}"
            )
        object.__setattr__(self, "changelog_end_offsets", dict(sorted(ends.items())))
        try:
            _dt.datetime.fromisoformat(self.written_at)
        except (TypeError, ValueError):
            raise ProgressRecordError(
                f"progress record: written_at must be an ISO-8601 time, got {self.written_at!r}"
            ) from None

    @classmethod
    def for_batch(
        cls,
        store_id: str,
        query_id: str,
        batch_id: int,
        source_offsets: Any = None,
        position: Position | None = None,
    ) -> ProgressRecord:
        """The record of a batch about to be published (end offsets empty, time now)."""
        return cls(store_id, query_id, batch_id, source_offsets, position=position)

    def to_json(self) -> str:
        """Compact JSON, with a format version (partitions as string keys, like Spark's
        offsets JSON).

        Raises
        ------
        ProgressRecordError
            If ``source_offsets`` is not JSON-compatible.
        """
        body = {
            "version": _PROGRESS_FORMAT_VERSION,
            "store_id": self.store_id,
            "query_id": self.query_id,
            "batch_id": self.batch_id,
            "source_offsets": self.source_offsets,
            "changelog_end_offsets": {str(p): o for p, o in self.changelog_end_offsets.items()},
            "written_at": self.written_at,
        }
        if self.position is not None:
            body["position"] = self.position.to_dict()
        try:
            return json.dumps(body, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ProgressRecordError(
                f"progress record of store {self.store_id!r} batch {self.batch_id}: "
                f"source_offsets is not JSON-compatible: {exc}"
            ) from exc

    @classmethod
    def from_json(cls, text: str | bytes) -> ProgressRecord:
        """Parse :meth:`to_json` output. Unknown fields are ignored (forward compatible).

        Raises
        ------
        ProgressRecordError
            On invalid JSON, a newer format version, a missing field or a wrong type.
        """
        try:
            body = json.loads(text)
        except (UnicodeDecodeError, ValueError) as exc:
            raise ProgressRecordError(f"progress record is not valid JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise ProgressRecordError(
                f"progress record must be a JSON object, got {type(body).__name__}"
            )
        version = body.get("version")
        if version != _PROGRESS_FORMAT_VERSION:
            raise ProgressRecordError(
                f"progress record has format version {version!r}; this reader understands "
                f"version {_PROGRESS_FORMAT_VERSION} (a newer spark-statestore wrote it: "
                "upgrade)"
            )
        missing = [
            name
            for name in ("store_id", "query_id", "batch_id", "changelog_end_offsets", "written_at")
            if name not in body
        ]
        if missing:
            raise ProgressRecordError(f"progress record misses field(s) {', '.join(missing)}")
        raw_ends = body["changelog_end_offsets"]
        if not isinstance(raw_ends, dict):
            raise ProgressRecordError(
                f"progress record: changelog_end_offsets must be an object, got {raw_ends!r}"
            )
        ends: dict[int, int] = {}
        for key, offset in raw_ends.items():
            if not (isinstance(key, str) and key.isascii() and key.isdigit()):
                raise ProgressRecordError(
                    f"progress record: changelog_end_offsets has a partition {key!r} that is "
                    "not an int >= 0"
                )
            ends[int(key)] = offset
        position = None
        if body.get("position") is not None:
            try:
                position = Position.from_json(json.dumps(body["position"]))
            except (InvalidPositionError, TypeError, ValueError) as exc:
                raise ProgressRecordError(f"progress record: bad position: {exc}") from exc
        return cls(
            body["store_id"],
            body["query_id"],
            body["batch_id"],
            body.get("source_offsets"),
            ends,
            body["written_at"],
            position,
        )


# -- the progress topic ---------------------------------------------------------------------


def require_progress_topic(client: Producer | Consumer, topic: str, timeout_s: float) -> None:
    """Refuse a progress topic that is missing or has more than one partition.

    Raises
    ------
    KafkaClientError
        Naming the topic and how to create it.
    """
    count = clients.partition_count(client, topic, timeout_s)
    if count != 1:
        what = "does not exist" if count is None else f"has {count} partitions"
        raise KafkaClientError(
            f"progress topic {topic!r} {what}: it must exist with exactly 1 partition "
            f"(kafka-topics --create --topic {topic} --partitions 1 "
            "--config cleanup.policy=compact); the sink never creates it"
        )


def read_last_progress(
    bootstrap_servers: str,
    changelog_topic: str,
    store_id: str,
    *,
    config: Mapping[str, Any] | None = None,
    timeout_s: float = 30.0,
) -> ProgressRecord | None:
    """The latest committed progress record of ``store_id``, None if it has none.

    Reads ``<changelog>-progress`` with read_committed, from its end (last stable offset)
    backwards in growing windows (1024, 4096, ... offsets) until a window holds a record
    keyed ``store_id``. With one store per topic that is one small read however long the
    topic is; a store without a record costs a full scan, which a compacted progress topic
    (one record per store id) keeps short.

    Kafka answers ``commitTransaction`` before it writes the commit markers, so a batch whose
    commit just returned may not be read yet: a caller that must see it (a restarted sink)
    initializes the writer's transactional id first, which Kafka answers only once the
    last transaction's markers are written.

    Raises
    ------
    KafkaClientError
        The progress topic is missing or has more than one partition, or cannot be read.
    ProgressRecordError
        The store's latest record is malformed (the error names its offset).
    """
    wanted = store_id.encode("utf-8")
    with _progress_reader(bootstrap_servers, changelog_topic, config, timeout_s) as found:
        consumer, topic, low, end = found
        window = _PROGRESS_WINDOW
        while end > low:
            start = max(low, end - window)
            latest: Message | None = None
            for message in read_ranges(
                consumer,
                topic,
                {0: (start, end)},
                fail_on_data_loss=False,  # older progress records are not needed
                timeout_s=timeout_s,
            ):
                if message.key() == wanted:
                    latest = message
            if latest is not None:
                return _parse_progress(latest, topic, store_id)
            end, window = start, window * 4
        return None


def read_progress(
    bootstrap_servers: str,
    changelog_topic: str,
    *,
    config: Mapping[str, Any] | None = None,
    timeout_s: float = 30.0,
) -> list[ProgressRecord]:
    """Every committed progress record of ``<changelog>-progress`` still in the topic, in
    order (read_committed, up to its last stable offset when called).

    Raises
    ------
    KafkaClientError
        The progress topic is missing or has more than one partition, or cannot be read.
    ProgressRecordError
        A record is malformed (the error names its offset).
    """
    with _progress_reader(bootstrap_servers, changelog_topic, config, timeout_s) as found:
        consumer, topic, low, end = found
        return [
            parse_progress_message(message, topic)
            for message in read_ranges(
                consumer,
                topic,
                {0: (low, end)},
                fail_on_data_loss=False,  # a compacted topic keeps the last of each store
                timeout_s=timeout_s,
            )
        ]


@contextlib.contextmanager
def _progress_reader(
    bootstrap_servers: str, changelog_topic: str, config: Mapping[str, Any] | None, timeout_s: float
) -> Iterator[tuple[Consumer, str, int, int]]:
    """A consumer of ``<changelog>-progress`` (checked to exist with one partition), the
    topic, and its first and last stable offsets."""
    topic = changelog_topic + PROGRESS_SUFFIX
    consumer = clients.consumer(
        bootstrap_servers,
        config,
        group="spark-statestore-progress",
        what=f"progress topic {topic!r}",
    )
    try:
        require_progress_topic(consumer, topic, timeout_s)
        low, end = clients.watermarks(consumer, topic, 0, timeout_s)
        yield consumer, topic, low, end
    finally:
        consumer.close()


def parse_progress_message(message: Message, topic: str) -> ProgressRecord:
    """The progress record in ``message`` of ``topic``.

    Raises
    ------
    ProgressRecordError
        Naming the message's offset, when it holds no valid progress record.
    """
    value = message.value()
    try:
        if value is None:
            raise ProgressRecordError("progress record has a null value")
        return ProgressRecord.from_json(value)
    except ProgressRecordError as exc:
        raise exc.at(topic, 0, message.offset()) from exc


def _parse_progress(message: Message, topic: str, store_id: str) -> ProgressRecord:
    record = parse_progress_message(message, topic)
    if record.store_id != store_id:
        raise ProgressRecordError(
            f"progress record keyed {store_id!r} names store {record.store_id!r}",
            topic=topic,
            partition=0,
            offset=message.offset(),
        )
    return record
