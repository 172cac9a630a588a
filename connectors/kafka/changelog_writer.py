"""The Kafka side of the transactional sink: publish a batch's changes in one transaction.

A sink commit publishes every change of a micro-batch to the changelog topic and one
:class:`ProgressRecord` to ``<changelog>-progress`` inside ONE Kafka transaction, then
commits its LevelDB store. After a crash between the two commits, the restarted sink reads
the progress topic (:func:`read_last_progress`) to learn that Kafka already has the batch
and rolls the store forward from the changelog (:func:`read_changelog_range`) instead of
publishing the batch twice.

Topics are never created here. The changelog must exist with the partition count the store
was created for; the progress topic must exist with exactly one partition. Making the
progress topic compacted (``cleanup.policy=compact``) keeps it small: its records are keyed
by store id, and only each store's latest record matters.
"""

from __future__ import annotations

import datetime as _dt
import enum
import json
import logging
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any, NamedTuple

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from spark_statestore.changelog.errors import ChangelogFormatError
from spark_statestore.changelog.headers import position_headers
from spark_statestore.changelog.partitioner import partition_for_key
from spark_statestore.connectors.kafka.changelog_source import handle_out_of_range
from spark_statestore.connectors.kafka.errors import DataLossError, KafkaClientError
from spark_statestore.position import Position

__all__ = [
    "PROGRESS_SUFFIX",
    "Change",
    "ChangelogEntry",
    "ChangelogWriter",
    "ProducerFencedError",
    "ProgressRecord",
    "ProgressRecordError",
    "read_changelog_range",
    "read_last_progress",
    "transactional_id_for",
]

_log = logging.getLogger(__name__)

PROGRESS_SUFFIX = "-progress"
"""The progress topic of changelog ``c`` is ``c + PROGRESS_SUFFIX``."""

_PROGRESS_FORMAT_VERSION = 1
_PROGRESS_WINDOW = 1024  # offsets of the progress topic read by the first backward step
_FENCED_CODES = frozenset(
    {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
)
_PURGED = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})
# Settings the writer decides: exactly-once needs them, whatever kafka.* options say.
_OWNED = ("transactional.id", "enable.idempotence", "allow.auto.create.topics")

Change = tuple[bytes, bytes | None, Position | None, int | None]
"""``(key, value, position, timestamp_ms)``: a None value is a delete (tombstone), a None
position writes no position headers, a None (or 0) timestamp means "now"."""


class ProducerFencedError(KafkaClientError):
    """Another writer initialized the same transactional id, so this one may not commit.

    Attributes
    ----------
    transactional_id
        The contested transactional id.
    """

    def __init__(self, message: str, transactional_id: str, code: int | None = None) -> None:
        super().__init__(message, code)
        self.transactional_id = transactional_id


class ProgressRecordError(ChangelogFormatError):
    """A progress record is malformed (bad JSON, a missing field, a field of the wrong type)."""


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
    """

    store_id: str
    query_id: str
    batch_id: int
    source_offsets: Any = None
    changelog_end_offsets: Mapping[int, int] = field(default_factory=dict)
    written_at: str = field(default_factory=_utc_now)

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
        cls, store_id: str, query_id: str, batch_id: int, source_offsets: Any = None
    ) -> ProgressRecord:
        """The record of a batch about to be published (end offsets empty, time now)."""
        return cls(store_id, query_id, batch_id, source_offsets)

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
        return cls(
            body["store_id"],
            body["query_id"],
            body["batch_id"],
            body.get("source_offsets"),
            ends,
            body["written_at"],
        )


def transactional_id_for(store_id: str, application_id: str) -> str:
    """The transactional id of a store's sink: ``<application_id>-spark-statestore-<store_id>``.

    Deterministic, so a restarted (or duplicate) sink of the same store fences the old one.

    Raises
    ------
    KafkaClientError
        If either part is empty.
    """
    if not store_id or not application_id:
        raise KafkaClientError(
            "a transactional id needs a non-empty store id and application.id, got "
            f"store_id={store_id!r}, application_id={application_id!r}"
        )
    return f"{application_id}-spark-statestore-{store_id}"


# -- Kafka error helpers --------------------------------------------------------------------


def _kafka_error(exc: BaseException | None) -> KafkaError | None:
    """The KafkaError of ``exc`` or of an exception it was raised from.

    confluent-kafka raises a fatal error (a fenced producer) out of ``poll()``/``flush()``
    while it serves delivery reports, which then surfaces as a ``SystemError`` whose cause is
    the ``KafkaException``; looking down the chain finds it.
    """
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
            return exc.args[0]
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def _describe(error: KafkaError | None, exc: BaseException | None = None) -> str:
    if error is not None:
        return f"{error.str()} ({error.name()})"
    return str(exc) if exc is not None else "unknown error"


def _is_fenced(error: KafkaError | None) -> bool:
    return error is not None and error.code() in _FENCED_CODES


def _topic_partitions(client: Producer | Consumer, topic: str, timeout_s: float) -> int | None:
    """The partition count of ``topic``, None when it does not exist."""
    try:
        metadata = client.list_topics(topic, timeout=timeout_s)
    except KafkaException as exc:
        error = _kafka_error(exc)
        raise KafkaClientError(
            f"cannot read the metadata of topic {topic!r}: {_describe(error, exc)}; check "
            "kafka.bootstrap.servers",
            error.code() if error is not None else None,
        ) from exc
    info = metadata.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        return None
    return len(info.partitions)


def _require_progress_topic(client: Producer | Consumer, topic: str, timeout_s: float) -> None:
    count = _topic_partitions(client, topic, timeout_s)
    if count != 1:
        what = "does not exist" if count is None else f"has {count} partitions"
        raise KafkaClientError(
            f"progress topic {topic!r} {what}: it must exist with exactly 1 partition "
            f"(kafka-topics --create --topic {topic} --partitions 1 "
            "--config cleanup.policy=compact); the sink never creates it"
        )


def _consumer(bootstrap_servers: str, config: Mapping[str, Any] | None, purpose: str) -> Consumer:
    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        "group.id": f"spark-statestore-{purpose}",  # required; offsets are never committed
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
    }
    settings.update(config or {})
    if settings.get("isolation.level", "read_committed") != "read_committed":
        raise KafkaClientError(
            f"the sink's topics must be read with isolation.level=read_committed (aborted "
            f"batches must never count), got {settings['isolation.level']!r}; remove that "
            "setting"
        )
    settings["isolation.level"] = "read_committed"
    try:
        return Consumer(settings)
    except KafkaException as exc:
        raise KafkaClientError(
            f"the Kafka client refused the consumer settings: {_describe(_kafka_error(exc), exc)}"
            "; check the kafka.* options"
        ) from exc


# -- the writer -----------------------------------------------------------------------------


class _State(enum.Enum):
    NEW = "new"  # init() not called yet
    READY = "ready"  # between transactions
    FENCED = "fenced"  # another writer took the transactional id
    FAILED = "failed"  # a fatal client error: build a new writer
    CLOSED = "closed"


class ChangelogWriter:
    """A transactional producer that publishes one batch per Kafka transaction.

    Parameters
    ----------
    bootstrap_servers
        Kafka bootstrap servers.
    changelog_topic
        The changelog topic; it must exist (the sink never creates it).
    transactional_id
        See :func:`transactional_id_for`. A second writer with the same id fences this one.
    config
        The user's ``kafka.*`` settings (prefix removed). They override the defaults here
        (``acks=all``, lz4 compression, ``linger.ms=20``), except ``transactional.id``,
        ``enable.idempotence`` and ``allow.auto.create.topics``, which the writer owns;
        setting them to another value is an error.
    timeout_s
        Timeout of each client call (init, metadata, commit, abort); a flush fails only when
        it makes no progress for this long.

    Examples
    --------
    >>> with ChangelogWriter(servers, changelog, transactional_id=tid) as w:  # doctest: +SKIP
    ...     w.init()
    ...     ends = w.publish(changes, progress=ProgressRecord.for_batch("s", qid, 7, offsets))
    """

    def __init__(
        self,
        bootstrap_servers: str,
        changelog_topic: str,
        *,
        transactional_id: str,
        config: Mapping[str, Any] | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        if not changelog_topic:
            raise KafkaClientError("the changelog topic name must not be empty")
        if not transactional_id:
            raise KafkaClientError("the transactional id must not be empty")
        user = dict(config or {})
        expected = {
            "transactional.id": transactional_id,
            "enable.idempotence": "true",
            "allow.auto.create.topics": "false",
        }
        for name in _OWNED:
            if name in user and str(user[name]).lower() != expected[name].lower():
                raise KafkaClientError(
                    f"kafka.{name}={user[name]!r} conflicts with the sink: it sets {name} to "
                    f"{expected[name]!r} itself (exactly-once needs it); remove that option"
                )
        settings: dict[str, Any] = {
            "acks": "all",
            "compression.type": "lz4",
            "linger.ms": 20,
        }
        settings.update(user)
        settings.update(
            {
                "bootstrap.servers": bootstrap_servers,
                "transactional.id": transactional_id,
                "enable.idempotence": True,
                "allow.auto.create.topics": False,
                "on_delivery": self._on_delivery,
            }
        )
        self._topic = changelog_topic
        self._transactional_id = transactional_id
        self._timeout_s = timeout_s
        self._state = _State.NEW
        self._partitions: int | None = None
        self._ends: dict[int, int] = {}
        self._delivery_error: tuple[KafkaError, str, int | None] | None = None
        try:
            self._producer = Producer(settings)
        except KafkaException as exc:
            error = _kafka_error(exc)
            raise KafkaClientError(
                f"the Kafka client refused the producer settings for changelog "
                f"{changelog_topic!r}: {_describe(error, exc)}; check the kafka.* options",
                error.code() if error is not None else None,
            ) from exc

    # -- facts ----------------------------------------------------------------------------
    @property
    def changelog_topic(self) -> str:
        return self._topic

    @property
    def progress_topic(self) -> str:
        """``<changelog>-progress``: must exist with exactly one partition."""
        return self._topic + PROGRESS_SUFFIX

    @property
    def transactional_id(self) -> str:
        return self._transactional_id

    def partition_count(self) -> int:
        """The changelog's partition count (asks the cluster).

        Raises
        ------
        KafkaClientError
            If the changelog does not exist.
        """
        count = _topic_partitions(self._producer, self._topic, self._timeout_s)
        if count is None:
            raise KafkaClientError(
                f"changelog topic {self._topic!r} does not exist: the sink never creates it; "
                "create it with as many partitions as the store should have (e.g. "
                f"kafka-topics --create --topic {self._topic} --partitions N)"
            )
        return count

    # -- lifecycle ------------------------------------------------------------------------
    def init(self) -> None:
        """Check both topics and initialize transactions.

        Fences any earlier writer with the same transactional id: its open transaction is
        aborted and its next request fails with :class:`ProducerFencedError`.

        Raises
        ------
        KafkaClientError
            A topic is missing or has the wrong partition count, or initialization failed.
        """
        if self._state is not _State.NEW:
            raise KafkaClientError(
                f"changelog writer {self._transactional_id!r} is {self._state.value}; init() "
                "is called once, on a new writer"
            )
        self._partitions = self.partition_count()
        _require_progress_topic(self._producer, self.progress_topic, self._timeout_s)
        self._retrying(
            "initialize transactions", self._producer.init_transactions, in_transaction=False
        )
        self._state = _State.READY
        _log.info(
            "changelog writer %r ready: %s (%d partitions)",
            self._transactional_id,
            self._topic,
            self._partitions,
        )

    def close(self) -> None:
        """Release the producer (aborting a transaction a failure left open). Idempotent."""
        if self._state is _State.CLOSED:
            return
        state, self._state = self._state, _State.CLOSED
        with warnings.catch_warnings():
            if state in (_State.FENCED, _State.FAILED):
                # close() tries to abort the transaction a fenced producer cannot end, and
                # warns about it; the failure was already reported.
                warnings.simplefilter("ignore", RuntimeWarning)
            try:
                self._producer.close()
            except (KafkaException, RuntimeError) as exc:
                _log.debug("closing changelog writer %r: %s", self._transactional_id, exc)

    def __enter__(self) -> ChangelogWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- publishing -----------------------------------------------------------------------
    def publish(self, changes: Iterable[Change], *, progress: ProgressRecord) -> dict[int, int]:
        """Publish a batch's changes and its progress record in one transaction.

        Each change goes to partition ``partition_for_key(key, partitions)`` (Kafka's Java
        murmur2 partitioner), with the ``v``/``c`` position headers when it has a position.
        After every change is acknowledged, the progress record (with its
        ``changelog_end_offsets`` filled in) is produced to the progress topic, and the
        transaction commits. An empty batch still commits its progress record.

        Parameters
        ----------
        changes
            ``(key, value, position, timestamp_ms)`` tuples, see :data:`Change`.
        progress
            The batch's record; its ``changelog_end_offsets`` are replaced.

        Returns
        -------
        dict[int, int]
            ``{partition: offset after the batch's last record}`` for the partitions the
            batch wrote to; partitions it did not write to are absent (their end is unknown
            without a query, and a roll-forward has nothing to read there). In a committed
            transaction the commit marker takes the next offset, so the partition's high
            watermark is one more: use these as exclusive range ends, not as watermarks.

        Raises
        ------
        ProducerFencedError
            Another writer with the same transactional id was initialized; nothing of this
            batch becomes visible. The writer is unusable afterwards.
        KafkaClientError
            Producing or committing failed; the transaction was aborted (nothing of the batch
            is visible) and the writer can publish again unless the error was fatal.
        ChangelogFormatError
            A change has no key, or a position that cannot be encoded (transaction aborted).
            Any exception raised by ``changes`` itself aborts the transaction and propagates.
        """
        self._check_ready("publish")
        partitions = self._partitions
        assert partitions is not None  # set by init()
        producer, topic = self._producer, self._topic
        self._drain()
        self._ends = {}
        self._delivery_error = None
        try:
            producer.begin_transaction()
        except KafkaException as exc:
            raise self._failure(exc, "begin a transaction", aborted=False) from exc
        try:
            last_position: Position | None = None
            headers: list[tuple[str, str | bytes | None]] | None = None
            produce = producer.produce
            for index, (key, value, position, timestamp) in enumerate(changes):
                if not isinstance(key, (bytes, bytearray)):
                    raise ChangelogFormatError(
                        f"change #{index} of batch {progress.batch_id} has key {key!r}: a "
                        "changelog record needs a bytes key",
                        topic=topic,
                    )
                if position is not last_position:
                    last_position = position
                    headers = None if position is None else list(position_headers(position))
                partition = partition_for_key(key, partitions)
                while True:
                    try:
                        produce(
                            topic,
                            value,
                            key,
                            partition=partition,
                            timestamp=timestamp or 0,
                            headers=headers,
                        )
                        break
                    except BufferError:
                        self._wait_for_room()  # the local queue is full
            self._flush()
            ends = {p: o + 1 for p, o in sorted(self._ends.items())}
            record = replace(progress, changelog_end_offsets=ends)
            produce(
                self.progress_topic,
                record.to_json().encode("utf-8"),
                record.store_id.encode("utf-8"),
                partition=0,
                on_delivery=self._on_progress_delivery,
            )
            self._flush()
            self._retrying("commit the transaction", producer.commit_transaction)
        except BaseException as exc:
            abort_error = self._abort(exc)
            if not isinstance(exc, (KafkaClientError, KafkaException, SystemError)):
                raise  # the caller's own failure (reading its changes), after the abort
            if isinstance(exc, ProducerFencedError) or (
                isinstance(exc, KafkaClientError) and self._state is not _State.FENCED
            ):
                raise
            # A fatal error can surface from flush() as a bare SystemError (confluent-kafka
            # raises it from inside its callbacks); the failed abort then names it.
            raise self._failure(exc, "publish a batch", fallback=abort_error) from exc
        _log.debug(
            "changelog writer %r committed batch %d: %s",
            self._transactional_id,
            progress.batch_id,
            ends,
        )
        return ends

    # -- internals ------------------------------------------------------------------------
    def _check_ready(self, action: str) -> None:
        if self._state is _State.READY:
            return
        if self._state is _State.FENCED:
            raise self._fenced_error(None)
        hint = {
            _State.NEW: "call init() first",
            _State.FAILED: "a fatal error happened before; create a new writer",
            _State.CLOSED: "it is closed",
        }[self._state]
        raise KafkaClientError(
            f"changelog writer {self._transactional_id!r} cannot {action}: {hint}"
        )

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        # Hot path: one call per changelog record.
        if error is None:
            partition: int = message.partition()  # type: ignore[assignment]
            offset: int = message.offset()  # type: ignore[assignment]
            if offset > self._ends.get(partition, -1):
                self._ends[partition] = offset
        else:
            self._on_progress_delivery(error, message)

    def _on_progress_delivery(self, error: KafkaError | None, message: Message) -> None:
        # Purged records are reported when a transaction is aborted: a consequence of a
        # failure already being handled (or a late report of an earlier batch), not a new one.
        if error is not None and self._delivery_error is None and error.code() not in _PURGED:
            self._delivery_error = (error, message.topic() or "?", message.partition())

    def _flush(self) -> None:
        """Wait until every produced record is acknowledged; raise on a failed delivery."""
        remaining = len(self._producer)
        while remaining:
            before = remaining
            remaining = self._producer.flush(self._timeout_s)
            if remaining and remaining >= before:
                raise KafkaClientError(
                    f"{remaining} records for {self._topic!r} were not acknowledged within "
                    f"{self._timeout_s:.0f} s; check that the brokers of the changelog are "
                    "reachable. The transaction was aborted, nothing of this batch is visible"
                )
        if self._delivery_error is not None:
            error, topic, partition = self._delivery_error
            if _is_fenced(error):
                self._state = _State.FENCED
                raise self._fenced_error(error)
            raise KafkaClientError(
                f"changelog writer {self._transactional_id!r}: delivery to {topic}-{partition} "
                f"failed: {_describe(error)}. The transaction was aborted, nothing of this "
                "batch is visible",
                error.code(),
            )

    def _wait_for_room(self) -> None:
        """Serve delivery reports until the local queue shrinks (at most ``timeout_s``)."""
        before = len(self._producer)
        deadline = time.monotonic() + self._timeout_s
        while time.monotonic() < deadline:
            self._producer.poll(0.05)
            if len(self._producer) < before:
                return
        raise KafkaClientError(
            f"the producer queue of {self._topic!r} stayed full for {self._timeout_s:.0f} s "
            "(no record was acknowledged); check that the brokers are reachable"
        )

    def _retrying(self, what: str, call: Any, *, in_transaction: bool = True) -> None:
        """Run a transactional call, retrying it while librdkafka calls the error retriable."""
        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                call(max(0.1, deadline - time.monotonic()))
                return
            except KafkaException as exc:
                error = _kafka_error(exc)
                if error is not None and error.retriable() and time.monotonic() < deadline:
                    _log.info("retrying to %s for %r: %s", what, self._transactional_id, error)
                    continue
                raise self._failure(exc, what, aborted=in_transaction) from exc

    def _abort(self, cause: BaseException) -> KafkaError | None:
        """Abort the open transaction after ``cause``.

        A failing abort marks the writer fenced or failed and returns its error (the
        producer's fatal error, when there is one).
        """
        try:
            self._producer.abort_transaction(self._timeout_s)
        except (KafkaException, SystemError) as exc:
            error = _kafka_error(exc) or _kafka_error(cause)
            self._state = _State.FENCED if _is_fenced(error) else _State.FAILED
            _log.warning(
                "changelog writer %r: aborting the transaction failed: %s",
                self._transactional_id,
                _describe(error, exc),
            )
            return error
        finally:
            self._drain()
        _log.info("changelog writer %r aborted a transaction: %s", self._transactional_id, cause)
        return None

    def _drain(self) -> None:
        """Serve pending delivery reports (of purged records after an abort)."""
        try:
            self._producer.poll(0)
        except (KafkaException, SystemError) as exc:
            _log.debug("changelog writer %r: %s", self._transactional_id, exc)

    def _fenced_error(self, error: KafkaError | None) -> ProducerFencedError:
        return ProducerFencedError(
            f"changelog writer {self._transactional_id!r} was fenced: another sink instance "
            f"with the same store / transactional id is running (it initialized "
            f"{self._transactional_id!r} after this one), so this instance's transaction on "
            f"{self._topic!r} was aborted. Stop the duplicate query; this instance must stop.",
            self._transactional_id,
            error.code() if error is not None else None,
        )

    def _failure(
        self,
        exc: BaseException,
        what: str,
        *,
        aborted: bool = True,
        fallback: KafkaError | None = None,
    ) -> KafkaClientError:
        """Classify a client error (once, here) and update the writer's state.

        ``fallback``: the error to classify when ``exc`` carries no KafkaError.
        """
        error = _kafka_error(exc) or fallback
        if _is_fenced(error) or self._state is _State.FENCED:
            self._state = _State.FENCED
            return self._fenced_error(error)
        if error is not None and error.fatal():
            self._state = _State.FAILED
        outcome = (
            "; the transaction was aborted, nothing of this batch is visible" if aborted else ""
        )
        return KafkaClientError(
            f"changelog writer {self._transactional_id!r} could not {what} (changelog "
            f"{self._topic!r}, progress topic {self.progress_topic!r}): "
            f"{_describe(error, exc)}{outcome}",
            error.code() if error is not None else None,
        )


# -- readers --------------------------------------------------------------------------------


class ChangelogEntry(NamedTuple):
    """One committed changelog record, as :func:`read_changelog_range` yields it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None
    timestamp: int | None


def _watermarks(
    consumer: Consumer, topic: str, partition: int, timeout_s: float
) -> tuple[int, int]:
    """``(earliest, end)`` of a partition; ``end`` is the last stable offset (read_committed)."""
    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=timeout_s
        )
    except KafkaException as exc:
        raise KafkaClientError(
            f"cannot read the offsets of {topic}-{partition}: {_describe(_kafka_error(exc), exc)}"
        ) from exc
    return int(low), int(high)


def _read_ranges(
    consumer: Consumer,
    topic: str,
    ranges: Mapping[int, tuple[int, int]],
    *,
    fail_on_data_loss: bool,
    timeout_s: float,
) -> Iterator[Message]:
    """The records of ``topic`` in ``[start, end)`` per partition, with one consumer.

    Unlike :func:`~spark_statestore.connectors.kafka.range_reader.read_range` (one partition,
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
        messages = consumer.consume(10_000, timeout=0.1)
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
                    _watermarks(consumer, topic, partition, timeout_s),
                    fail_on_data_loss=fail_on_data_loss,
                )
                reassign = True  # seek() refuses a partition in this state
            else:
                raise KafkaClientError(
                    f"reading {topic}-{partition} at offset {positions[partition]} failed: "
                    f"{_describe(error)}",
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

    Raises
    ------
    KafkaClientError
        The progress topic is missing or has more than one partition, or cannot be read.
    ProgressRecordError
        The store's latest record is malformed (the error names its offset).
    """
    topic = changelog_topic + PROGRESS_SUFFIX
    wanted = store_id.encode("utf-8")
    consumer = _consumer(bootstrap_servers, config, "progress")
    try:
        _require_progress_topic(consumer, topic, timeout_s)
        low, end = _watermarks(consumer, topic, 0, timeout_s)
        window = _PROGRESS_WINDOW
        while end > low:
            start = max(low, end - window)
            latest: Message | None = None
            for message in _read_ranges(
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
    finally:
        consumer.close()


def _parse_progress(message: Message, topic: str, store_id: str) -> ProgressRecord:
    value = message.value()
    try:
        if value is None:
            raise ProgressRecordError("progress record has a null value")
        record = ProgressRecord.from_json(value)
    except ProgressRecordError as exc:
        raise exc.at(topic, 0, message.offset()) from exc
    if record.store_id != store_id:
        raise ProgressRecordError(
            f"progress record keyed {store_id!r} names store {record.store_id!r}",
            topic=topic,
            partition=0,
            offset=message.offset(),
        )
    return record


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
        The topic does not exist or has fewer partitions than ``ends`` names.
    DataLossError
        Offsets of a range are gone from the topic (retention), or a range ends past the
        partition's committed end (the topic was re-created): the store cannot be rolled
        forward from it.
    """
    consumer = _consumer(bootstrap_servers, config, "rollforward")
    try:
        count = _topic_partitions(consumer, topic, timeout_s)
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
        for partition, (start, end) in sorted(ranges.items()):
            if end <= start:
                continue
            # A range past the committed end would wait forever: its records are gone.
            marks = _watermarks(consumer, topic, partition, timeout_s)
            if end > marks[1]:
                raise DataLossError(
                    f"changelog {topic}-{partition} ends at offset {marks[1]} (committed) "
                    f"but offset {end - 1} was committed there before: the topic was deleted "
                    "and re-created or truncated; delete the store and restore it from the "
                    "changelog",
                    topic,
                    partition,
                    end - 1,
                    marks,
                )
        for message in _read_ranges(
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
