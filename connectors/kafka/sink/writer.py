"""The Kafka side of the transactional sink: publish a batch's changes in one transaction.

A sink commit publishes every change of a micro-batch to the changelog topic and one
:class:`ProgressRecord` to ``<changelog>-progress`` inside ONE Kafka transaction, then
commits its LevelDB store. After a crash between the two commits, the restarted sink reads
the progress topic (:func:`~spark_statestore.connectors.kafka.sink.progress.read_last_progress`)
to learn that Kafka already has the batch and rolls the store forward from the changelog
(:func:`~spark_statestore.connectors.kafka.sink.ranges.read_changelog_range`) instead of
publishing the batch twice.

This module holds the writing side: :class:`ChangelogWriter`, :func:`transactional_id_for`
and the :data:`Change` tuple it publishes. The progress record and its reader live in
:mod:`~spark_statestore.connectors.kafka.sink.progress`, the roll-forward reader in
:mod:`~spark_statestore.connectors.kafka.sink.ranges`, and its errors
(:class:`~spark_statestore.connectors.kafka.errors.ProducerFencedError`,
:class:`~spark_statestore.connectors.kafka.errors.TransactionTimeoutError`) in
:mod:`~spark_statestore.connectors.kafka.errors`.

Topics are never created here. The changelog must exist with the partition count the store
was created for; the progress topic must exist with exactly one partition.

Why one module of over 500 lines: one transactional producer's lifecycle (new, ready, in a
transaction, failed) and the classification of librdkafka's transaction errors (fenced,
timed out, abortable, fatal) that drives its transitions belong together.
"""

from __future__ import annotations

import enum
import logging
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any, NoReturn

from confluent_kafka import KafkaError, KafkaException, Message

from spark_statestore import native
from spark_statestore.changelog.errors import ChangelogFormatError
from spark_statestore.changelog.headers import position_headers
from spark_statestore.changelog.partitioner import partition_for_key
from spark_statestore.connectors.kafka import clients
from spark_statestore.connectors.kafka.errors import (
    KafkaClientError,
    ProducerFencedError,
    TransactionTimeoutError,
    client_error,
    describe_error,
    kafka_error_of,
)
from spark_statestore.connectors.kafka.follower.columns import native_settings
from spark_statestore.connectors.kafka.sink.native_producer import (
    NOT_PLAIN,
    QUEUE_FULL,
    NativeProducer,
)
from spark_statestore.connectors.kafka.sink.progress import (
    PROGRESS_SUFFIX,
    ProgressRecord,
    require_progress_topic,
)
from spark_statestore.position import Position
from spark_statestore.sink.changes import ChangeChunk, ChangeChunks
from spark_statestore.sink.stats import PublishReport, SinkStats

__all__ = [
    "DEFAULT_TRANSACTION_TIMEOUT_MS",
    "Change",
    "ChangelogWriter",
    "transactional_id_for",
]

_log = logging.getLogger(__name__)

_FENCED_CODES = frozenset(
    {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
)
_PURGED = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})
# Settings the writer decides: exactly-once needs them, whatever kafka.* options say.
_OWNED = ("transactional.id", "enable.idempotence", "allow.auto.create.topics")

DEFAULT_TRANSACTION_TIMEOUT_MS = 300_000
"""The sink's ``transaction.timeout.ms`` unless ``kafka.transaction.timeout.ms`` says
otherwise: 5 minutes of publishing per batch (librdkafka's default is 60 s, about 5.8M
changes at the sink's rate), well within a broker's default ``transaction.max.timeout.ms``
(15 minutes). It is also how long a sink that dies mid-publish and is never restarted holds
back its changelog's readers (a restart fences it at once)."""

_TIMEOUT_CHECK_EVERY = 4096  # changes between two looks at the transaction's age

Change = (
    tuple[bytes, bytes | None, Position | None, int | None]
    | tuple[bytes, bytes | None, Position | None, int | None, int]
)
"""``(key, value, position, timestamp_ms[, partition])``: a None value is a delete
(tombstone), a None position writes no position headers, a None (or 0) timestamp means
"now"; without a partition the key's murmur2 partition is used."""


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


@dataclass(slots=True)
class _OpenBatch:
    """The writer's open transaction: its batch, when it began, changes produced so far."""

    batch_id: int
    began: float
    produced: int = 0


def _is_fenced(error: KafkaError | None) -> bool:
    return error is not None and error.code() in _FENCED_CODES


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
    stats
        Where each committed transaction is counted (its records, produce and commit
        seconds): a long-lived committer's, for its metrics.

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
        stats: SinkStats | None = None,
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
            **clients.CLIENT_DEFAULTS,
            "acks": "all",
            "compression.type": "lz4",
            "linger.ms": 20,
            "transaction.timeout.ms": DEFAULT_TRANSACTION_TIMEOUT_MS,
        }
        settings.update(user)
        try:
            self._txn_timeout_ms = int(settings["transaction.timeout.ms"])
        except (TypeError, ValueError):
            raise KafkaClientError(
                f"kafka.transaction.timeout.ms={settings['transaction.timeout.ms']!r} is not a "
                "number of milliseconds"
            ) from None
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
        self._stats = stats
        self._state = _State.NEW
        self._open: _OpenBatch | None = None
        self._partitions: int | None = None
        self._ends: dict[int, int] = {}
        self._delivery_error: tuple[KafkaError, str, int | None] | None = None
        # The last chunk's position and its headers (most chunks share one).
        self._headers: tuple[Position | None, list[tuple[str, bytes]] | None] = (None, None)
        extension = native.module()
        plain = (
            native_settings({k: v for k, v in settings.items() if k != "on_delivery"})
            if extension is not None
            else None
        )
        self._native: NativeProducer | None = None
        self._producer: Any
        if extension is not None and plain is not None:
            try:
                self._native = NativeProducer(extension, plain, changelog_topic)
            except KafkaException as exc:
                raise client_error(
                    exc,
                    f"the Kafka client refused the producer settings for changelog "
                    f"{changelog_topic!r}",
                    clients.settings_hint(settings),
                ) from exc
            self._producer = self._native
        else:
            self._producer = clients.producer(
                bootstrap_servers, settings, what=f"changelog {changelog_topic!r}"
            )

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

    @property
    def transaction_timeout_ms(self) -> int:
        """Its ``transaction.timeout.ms``."""
        return self._txn_timeout_ms

    @property
    def ready(self) -> bool:
        """True while it can publish (initialized, not fenced, failed or closed)."""
        return self._state is _State.READY

    def partition_count(self) -> int:
        """The changelog's partition count (asks the cluster).

        Raises
        ------
        KafkaClientError
            If the changelog does not exist.
        """
        count = clients.partition_count(self._producer, self._topic, self._timeout_s)
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
        require_progress_topic(self._producer, self.progress_topic, self._timeout_s)
        try:
            self._retrying(
                "initialize transactions", self._producer.init_transactions, in_transaction=False
            )
        except KafkaClientError as exc:
            if exc.code == KafkaError.INVALID_TRANSACTION_TIMEOUT:
                raise KafkaClientError(
                    f"changelog writer {self._transactional_id!r}: the brokers refuse "
                    f"transaction.timeout.ms={self._txn_timeout_ms}, more than their "
                    "transaction.max.timeout.ms: set kafka.transaction.timeout.ms to at most "
                    "that (or raise it on the brokers)",
                    exc.code,
                ) from exc
            raise
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
        self.begin(progress.batch_id)
        try:
            chunks = (
                changes.chunks()
                if isinstance(changes, ChangeChunks)
                else self._chunks(changes, progress.batch_id)
            )
            for chunk in chunks:
                self._produce_chunk(chunk)
        except BaseException as raised:
            self._raise_failure(raised)
        return self.commit(progress)

    # -- one transaction in steps (the store host's streamed batches) ----------------------
    def begin(self, batch_id: int) -> None:
        """Begin the transaction of batch ``batch_id``; :meth:`produce_chunk` adds changes,
        :meth:`commit` ends it (:meth:`publish` is these three in one call).

        Raises
        ------
        ProducerFencedError, KafkaClientError
            The writer is not ready, or the transaction cannot begin.
        """
        self._check_ready("publish")
        self._drain()
        self._ends = {}
        self._delivery_error = None
        if self._native is not None:
            self._native.take_deliveries()  # reports of earlier batches' records
        try:
            self._producer.begin_transaction()
        except KafkaException as exc:
            raise self._failure(exc, "begin a transaction", aborted=False) from exc
        self._open = _OpenBatch(batch_id, time.monotonic())

    @property
    def transaction_age_s(self) -> float | None:
        """Seconds since the open transaction began, or None when none is open."""
        return None if self._open is None else time.monotonic() - self._open.began

    def produce_chunk(self, chunk: ChangeChunk) -> None:
        """Produce ``chunk``'s changes into the open transaction, in order (each to its
        given partition).

        Raises
        ------
        TransactionTimeoutError, ProducerFencedError, KafkaClientError
            The transaction outlived its timeout or producing failed: it is aborted.
        """
        try:
            self._produce_chunk(chunk)
        except BaseException as raised:
            self._raise_failure(raised)

    def _produce_chunk(self, chunk: ChangeChunk) -> None:
        batch = self._open
        if batch is None:
            raise KafkaClientError(
                f"changelog writer {self._transactional_id!r}: no transaction is open"
            )
        for first in range(0, len(chunk.keys), _TIMEOUT_CHECK_EVERY):
            self._check_age(batch.began, batch.produced, batch.batch_id)
            batch.produced += self._produce(chunk, first, batch.produced, batch.batch_id)

    def commit(self, progress: ProgressRecord) -> dict[int, int]:
        """End the open transaction: wait for every change's acknowledgement, produce the
        batch's progress record (its ``changelog_end_offsets`` filled in) and commit. See
        :meth:`publish` for what it returns and raises."""
        batch = self._open
        try:
            if batch is None or batch.batch_id != progress.batch_id:
                raise KafkaClientError(
                    f"changelog writer {self._transactional_id!r}: no transaction of batch "
                    f"{progress.batch_id} is open"
                )
            self._flush()
            ends = {p: o + 1 for p, o in sorted(self._ends.items())}
            record = replace(progress, changelog_end_offsets=ends)
            self._produce_progress(record)
            self._flush()
            self._check_age(batch.began, batch.produced, batch.batch_id)
            flushed = time.monotonic()
            self._retrying("commit the transaction", self._producer.commit_transaction)
        except BaseException as raised:
            self._raise_failure(raised)
        self._open = None
        if self._stats is not None:
            done = time.monotonic()
            self._stats.published(
                PublishReport(batch.produced, flushed - batch.began, done - flushed)
            )
        _log.debug(
            "changelog writer %r committed batch %d: %s",
            self._transactional_id,
            progress.batch_id,
            ends,
        )
        return ends

    def abort_batch(self, cause: BaseException) -> None:
        """Abort the open transaction (nothing of it becomes visible); a no-op when none is
        open. A failing abort leaves the writer fenced or failed (see :meth:`publish`)."""
        if self._open is not None:
            self._open = None
            self._abort(cause)

    def _raise_failure(self, raised: BaseException) -> NoReturn:
        """Abort the open transaction after ``raised`` and raise what the caller should see
        (a transaction timeout named as such, the writer's classification of a client
        error, or the caller's own exception as it is)."""
        batch, self._open = self._open, None
        abort_error = self._abort(raised)
        if batch is None:
            raise raised
        failure = self._timed_out(raised, abort_error, batch.began, batch.produced, batch.batch_id)
        if not isinstance(failure, (KafkaClientError, KafkaException, SystemError)):
            raise raised  # the caller's own failure (reading its changes), after the abort
        if isinstance(failure, (ProducerFencedError, TransactionTimeoutError)) or (
            isinstance(failure, KafkaClientError) and self._state is not _State.FENCED
        ):
            if failure is raised:
                raise raised
            raise failure from raised
        # A fatal error can surface from flush() as a bare SystemError (confluent-kafka
        # raises it from inside its callbacks); the failed abort then names it.
        raise self._failure(failure, "publish a batch", fallback=abort_error) from failure

    # -- internals ------------------------------------------------------------------------
    def _chunks(self, changes: Iterable[Change], batch_id: int) -> Iterator[ChangeChunk]:
        """``changes`` as chunks of one change each: a change pulled from the caller's
        iterator is produced before the next is pulled (the iterator may wait on what
        the log shows). Batches in columns come as :class:`ChangeChunks` instead."""
        partitions = self._partitions
        assert partitions is not None  # set by init()
        for index, change in enumerate(changes):
            key, value, position, timestamp = change[0], change[1], change[2], change[3]
            if not isinstance(key, bytes):
                raise self._key_error(index, key, batch_id)
            # The caller may pass the partition it computed (it needs it too).
            partition = change[4] if len(change) > 4 else partition_for_key(key, partitions)
            # A None timestamp: 0, which the producer stamps "now".
            stamp = 0 if timestamp is None else timestamp
            yield ChangeChunk([key], [value], [stamp], [partition], position)

    def _key_error(self, index: int, key: object, batch_id: int) -> ChangelogFormatError:
        return ChangelogFormatError(
            f"change #{index} of batch {batch_id} has key {key!r}: a changelog record needs a "
            "bytes key",
            topic=self._topic,
        )

    def _produce(self, chunk: ChangeChunk, first: int, index: int, batch_id: int) -> int:
        """Produce rows ``first...`` of ``chunk`` (at most ``_TIMEOUT_CHECK_EVERY``), the
        first being the batch's change #``index``; returns how many were produced."""
        stop = min(len(chunk.keys), first + _TIMEOUT_CHECK_EVERY)
        if chunk.position is not self._headers[0]:
            position = chunk.position
            self._headers = (
                position,
                None if position is None else list(position_headers(position)),
            )
        headers = self._headers[1]
        if self._native is not None:
            self._produce_native(chunk, first, stop, index, batch_id, headers)
            return stop - first
        topic, produce = self._topic, self._producer.produce
        keys, values, stamps, parts = chunk.keys, chunk.values, chunk.timestamps, chunk.partitions
        for row in range(first, stop):
            key = keys[row]
            if not isinstance(key, bytes):
                raise self._key_error(index + row - first, key, batch_id)
            while True:
                try:
                    produce(
                        topic,
                        values[row],
                        key,
                        partition=parts[row],
                        timestamp=stamps[row],
                        headers=headers,
                    )
                    break
                except BufferError:
                    self._wait_for_room()  # the local queue is full
        return stop - first

    def _produce_native(
        self,
        chunk: ChangeChunk,
        first: int,
        stop: int,
        index: int,
        batch_id: int,
        headers: list[tuple[str, bytes]] | None,
    ) -> None:
        """Rows ``first...stop`` of ``chunk`` in calls of the extension's producer."""
        assert self._native is not None
        columns: list[list[Any]] = [chunk.keys, chunk.values, chunk.partitions, chunk.timestamps]
        copied = bool(first or stop < len(chunk.keys))
        if copied:
            columns = [column[first:stop] for column in columns]
        if any(type(column) is not list for column in columns):  # the extension takes lists
            columns, copied = [list(column) for column in columns], True
        row = 0
        while True:
            keys, values, partitions, stamps = columns
            row, stopped = self._native.produce_rows(
                self._topic, keys, values, partitions, stamps, headers, row
            )
            if stopped == QUEUE_FULL:
                self._wait_for_room()
            elif stopped == NOT_PLAIN:
                if not copied:  # the caller's lists are left as they are
                    columns, copied = [list(column) for column in columns], True
                self._plain_row(columns, row, index + row, batch_id)
            else:
                return

    def _plain_row(self, columns: list[list[Any]], row: int, index: int, batch_id: int) -> None:
        """Make row ``row`` of the columns the extension's plain types as confluent-kafka
        takes them (``str`` values as UTF-8, subclasses of ``bytes`` and ``int`` as those);
        raise as the reference path does for what it refuses."""
        keys, values, partitions, stamps = columns
        key, value = keys[row], values[row]
        if not isinstance(key, bytes):
            raise self._key_error(index, key, batch_id)
        keys[row] = bytes(key)
        if isinstance(value, str):
            values[row] = value.encode("utf-8")
        elif isinstance(value, bytes):
            values[row] = bytes(value)
        elif value is not None:
            raise TypeError(
                f"change #{index} of batch {batch_id}: a changelog value is bytes, str or "
                f"None, not {type(value).__name__}"
            )
        for column, what in ((partitions, "partition"), (stamps, "timestamp")):
            number = column[row]
            if not isinstance(number, int) or not -(2**63) <= number < 2**63:
                raise TypeError(
                    f"change #{index} of batch {batch_id}: its {what} {number!r} is not an int64"
                )
            column[row] = int(number)
        if not -(2**31) <= partitions[row] < 2**31:
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))

    def _produce_progress(self, record: ProgressRecord) -> None:
        key, value = record.store_id.encode("utf-8"), record.to_json().encode("utf-8")
        if self._native is None:
            self._producer.produce(
                self.progress_topic,
                value,
                key,
                partition=0,
                on_delivery=self._on_progress_delivery,
            )
            return
        while self._native.produce_rows(self.progress_topic, [key], [value], [0], [0], None, 0)[1]:
            self._wait_for_room()

    def _timeout_error(
        self, batch_id: int, changes: int, elapsed_s: float, code: int | None = None
    ) -> TransactionTimeoutError:
        return TransactionTimeoutError(
            f"batch {batch_id}: its Kafka transaction on changelog {self._topic!r} was open "
            f"{elapsed_s:.1f} s ({changes:,} changes produced), longer than the producer's "
            f"transaction.timeout.ms ({self._txn_timeout_ms} ms), so the transaction "
            "coordinator aborts it; nothing of this batch is visible. Publishing the same "
            "batch again would fail the same way: raise kafka.transaction.timeout.ms (up to "
            "the brokers' transaction.max.timeout.ms, 900000 by default) or make the batches "
            "smaller (maxOffsetsPerTrigger on a Kafka source, a shorter trigger interval)",
            batch_id=batch_id,
            changes=changes,
            elapsed_s=elapsed_s,
            timeout_ms=self._txn_timeout_ms,
            code=code,
        )

    def _check_age(self, began: float, changes: int, batch_id: int) -> None:
        """Give up on a transaction the coordinator aborts anyway (it outlived its timeout)."""
        elapsed = time.monotonic() - began
        if elapsed * 1000 >= self._txn_timeout_ms:
            raise self._timeout_error(batch_id, changes, elapsed)

    def _timed_out(
        self,
        exc: BaseException,
        abort_error: KafkaError | None,
        began: float,
        changes: int,
        batch_id: int,
    ) -> BaseException:
        """A fence that arrives after the transaction outlived ``transaction.timeout.ms`` is
        the coordinator aborting it (it bumps the producer's epoch), not another sink:
        name it so, since a restart of the same batch would meet it again.

        The fence can surface from a flush as a bare ``SystemError``; the failed abort
        (``abort_error``) then names it."""
        if isinstance(exc, TransactionTimeoutError):
            return exc
        elapsed = time.monotonic() - began
        error = kafka_error_of(exc) or abort_error
        fenced = (
            _is_fenced(error)
            or isinstance(exc, ProducerFencedError)
            or self._state is _State.FENCED
        )
        if fenced and elapsed * 1000 >= self._txn_timeout_ms:
            return self._timeout_error(
                batch_id, changes, elapsed, error.code() if error is not None else None
            )
        return exc

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
        if self._native is not None:
            ends, failed = self._native.take_deliveries()
            for acknowledged, offset in ends.items():
                if offset > self._ends.get(acknowledged, -1):
                    self._ends[acknowledged] = offset
            if failed is not None and self._delivery_error is None:
                self._delivery_error = failed
        if self._delivery_error is not None:
            error, topic, partition = self._delivery_error
            if _is_fenced(error):
                self._state = _State.FENCED
                raise self._fenced_error(error)
            raise KafkaClientError(
                f"changelog writer {self._transactional_id!r}: delivery to {topic}-{partition} "
                f"failed: {describe_error(error)}. The transaction was aborted, nothing of this "
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
                error = kafka_error_of(exc)
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
            error = kafka_error_of(exc) or kafka_error_of(cause)
            self._state = _State.FENCED if _is_fenced(error) else _State.FAILED
            _log.warning(
                "changelog writer %r: aborting the transaction failed: %s",
                self._transactional_id,
                describe_error(error, exc),
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
        error = kafka_error_of(exc) or fallback
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
            f"{describe_error(error, exc)}{outcome}",
            error.code() if error is not None else None,
        )
