"""Publishing a micro-batch's changelog while its tasks stage it: the store host's side.

Without this, a sink commit publishes the whole batch after every task has staged it, from
one process, and only then commits the store: staging, publishing and the store commit run
one after the other. The driver's store host receives every task's rows as a stream anyway
(:mod:`spark_statestore.connectors.spark.host`), so it publishes them into the batch's Kafka
transaction as they arrive; the driver's commit then adds the progress record, commits the
transaction and commits the store.

One :class:`StreamedChangelog` per store holds the store's changelog producer (its
transactional id, so no other process publishes the store's changelog while the host runs:
the commit protocol asks the host to publish, see :meth:`publish_staged`). Exactly once:

* The host publishes only the batch it was told comes next (:meth:`expect`, after each
  commit), and of each Spark partition only one task attempt: the first to stream rows.
  Other attempts (retries, speculative copies) only stage.
* At the commit (:meth:`publish_staged`) the transaction is committed as it is only when it
  holds exactly the attempts Spark commits, each whole: the staged file of each is the one
  the commit names, with as many rows. Anything else (an attempt Spark did not commit, one
  cut short, a producing failure, keys that outgrow the sink's memory budget, a transaction
  too old, complete mode's tombstones, keys several attempts wrote out of commit order)
  aborts it and the batch is published again from the committed attempts' staged files,
  as a commit without the host does. A batch the
  changelog or the store already has is never published again (the commit protocol asks
  :meth:`published_batch` first).
* A transaction outlives no batch: a new expected batch, Spark's abort, an open
  transaction without staging or commit for :data:`IDLE_ABORT_S`, half of
  ``transaction.timeout.ms`` while staging, or the host's exit aborts it (a killed host's is
  fenced by the next producer of the store, or aborted by Kafka at its timeout).

Rows of different tasks interleave in the changelog's partitions. The commit applies a batch
in Spark partition order (a later task's write of a key wins), so a streamed transaction is
committed only when every key several tasks wrote has its last record in the changelog from
its last write in that order (:func:`order_conflict`); then a key's value in the store is
its last record's, as in its followers. Otherwise the batch is published again in commit
order.

Why one module of over 500 lines: the state of one store's streamed batch (what was expected,
which attempt of each partition publishes, what each produced, why a batch stopped
streaming) is read and changed by the tasks' streams and the commit's calls under one lock,
and the check that decides whether its transaction may commit reads all of it.

Each record carries the position its batch had reached when it was produced: the store's
position before the batch merged with the input offsets its task had staged so far (never
ahead of its own rows; the batch's whole position, with its source offsets, is in the
progress record followers take positions from).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spark_statestore.connectors.kafka.errors import KafkaClientError
from spark_statestore.position import Position
from spark_statestore.store.crash import crash_point

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_statestore.connectors.kafka.sink.publisher import KafkaChangelogPublisher
    from spark_statestore.sink.changes import PublishedBatch, StagedBatch, StagedPublication
    from spark_statestore.sink.staging import StagedFile, StagingArea

__all__ = ["IDLE_ABORT_S", "ChangelogTarget", "StreamedAttempt", "StreamedChangelog"]

_log = logging.getLogger(__name__)

IDLE_ABORT_S = 60.0
"""An open streamed transaction with no task streaming and no commit for this long is
aborted (the query stopped between its tasks and its commit): readers of the changelog wait
for open transactions, and nobody else would end it before ``transaction.timeout.ms``."""
_BYTES_PER_ROW = 40
"""What the host keeps per row of a streamed batch besides its key (its partition and rank, and
its share of the key set), counted against the memory budget."""
AGE_LIMIT = 0.5
"""A batch stops streaming once its transaction is this share of ``transaction.timeout.ms``
old: the commit then publishes it in a transaction of its own, with the whole timeout."""


@dataclass(frozen=True, slots=True)
class ChangelogTarget:
    """The changelog a store publishes: what its producer is made from."""

    bootstrap_servers: str
    topic: str
    application_id: str
    config: tuple[tuple[str, str], ...]
    """The sink's ``kafka.*`` settings (prefix removed), sorted."""
    store_id: str

    @classmethod
    def of(
        cls,
        bootstrap_servers: str,
        topic: str,
        application_id: str,
        config: Mapping[str, Any],
        store_id: str,
    ) -> ChangelogTarget:
        pairs = tuple(sorted((str(k), str(v)) for k, v in config.items()))
        return cls(bootstrap_servers, topic, application_id, pairs, store_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "bootstrap_servers": self.bootstrap_servers,
            "topic": self.topic,
            "application_id": self.application_id,
            "config": [list(pair) for pair in self.config],
            "store_id": self.store_id,
        }

    @classmethod
    def from_json(cls, data: Any) -> ChangelogTarget:
        """The target ``data`` describes.

        Raises
        ------
        ValueError
            If ``data`` is not one.
        """
        if not isinstance(data, dict):
            raise ValueError("a changelog target is a JSON object")
        texts = [data.get(k) for k in ("bootstrap_servers", "topic", "application_id")]
        store_id, config = data.get("store_id"), data.get("config")
        if not all(isinstance(t, str) and t for t in [*texts, store_id]):
            raise ValueError("a changelog target names its servers, topic, application and store")
        if not isinstance(config, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
            for p in config
        ):
            raise ValueError("a changelog target's config is a list of [name, value] pairs")
        return cls(
            str(texts[0]),
            str(texts[1]),
            str(texts[2]),
            tuple((k, v) for k, v in config),
            str(store_id),
        )


@dataclass(slots=True, eq=False)  # each attempt is itself: compared by identity
class StreamedAttempt:
    """One task attempt streaming its rows to the host."""

    partition_id: int
    attempt: int
    producing: bool
    """Its rows go into the batch's transaction (the first attempt of its partition)."""
    rows: int = 0
    """Rows produced."""
    chunks: list[tuple[pa.Array, pa.Array]] = field(default_factory=list)
    """Per produced chunk: each row's partition (int32) and rank (int64: its offset from the
    first of the batch's records in that partition)."""
    keys: list[pa.Array] = field(default_factory=list)
    """Per produced chunk, its keys (to check the order of keys several attempts wrote)."""
    staged: str | None = None
    """Its staged file's name, once its stream was whole."""


@dataclass(slots=True)
class _Expected:
    query_id: str
    batch_id: int
    seen: Position
    budget_bytes: int


@dataclass(slots=True)
class _Streaming:
    """The batch being streamed."""

    query_id: str
    batch_id: int
    stamp_ms: int
    counts: dict[int, int]
    attempts: list[StreamedAttempt] = field(default_factory=list)
    producer_of: dict[int, int] = field(default_factory=dict)
    key_bytes: int = 0
    active: int = 0
    last_activity: float = field(default_factory=time.monotonic)
    open: bool = False
    """Its transaction has begun."""
    failed: str | None = None
    """Why it cannot commit as streamed (its transaction was aborted then)."""


class StreamedChangelog:
    """The store host's publisher of one store's changelog.

    Parameters
    ----------
    target
        The changelog and the store it publishes for.
    idle_abort_s
        How long an open transaction may see no staging and no commit (see
        :data:`IDLE_ABORT_S`).
    """

    def __init__(self, target: ChangelogTarget, *, idle_abort_s: float = IDLE_ABORT_S) -> None:
        self.target = target
        self._idle_abort_s = idle_abort_s
        self._lock = threading.Lock()
        self._publisher = self._new_publisher()
        self._expected: _Expected | None = None
        self._batch: _Streaming | None = None
        self.streamed_batches = 0
        self.republished_batches = 0

    def _new_publisher(self) -> KafkaChangelogPublisher:
        from spark_statestore.connectors.kafka.sink.publisher import KafkaChangelogPublisher

        return KafkaChangelogPublisher(
            self.target.bootstrap_servers,
            self.target.topic,
            application_id=self.target.application_id,
            config=dict(self.target.config),
        )

    def _renew(self) -> None:
        """A fresh producer after a fenced or failed one (as a new commit process would)."""
        if not self._publisher.healthy:
            self._publisher.close()
            self._publisher = self._new_publisher()

    # -- the commit's side ------------------------------------------------------------------
    def published_batch(self) -> PublishedBatch | None:
        """The last batch the changelog holds for the store (fencing any other producer of
        the store's transactional id first, when this one is new)."""
        with self._lock:
            self._renew()
            return self._publisher.published_batch(self.target.store_id)

    def expect(self, query_id: str, batch_id: int, seen: Position, budget_bytes: int) -> None:
        """Publish batch ``batch_id`` of ``query_id`` while its tasks stage it; its records
        start from position ``seen``; stream it while its keys take at most
        ``budget_bytes``."""
        with self._lock:
            self._drop("another batch is expected next")
            self._renew()
            self._publisher.published_batch(self.target.store_id)  # the producer, ready
            self._expected = _Expected(query_id, batch_id, seen, budget_bytes)

    def abort(self, query_id: str, batch_id: int) -> None:
        """Spark aborted the batch: abort its transaction, expect nothing."""
        with self._lock:
            batch = self._batch
            if batch is not None and (batch.query_id, batch.batch_id) == (query_id, batch_id):
                self._drop("Spark aborted the batch")
            expected = self._expected
            if expected is not None and (expected.query_id, expected.batch_id) == (
                query_id,
                batch_id,
            ):
                self._expected = None

    def publish_staged(self, staging: StagingArea, batch: StagedBatch) -> StagedPublication:
        """Commit the batch's streamed transaction if it holds exactly ``batch``'s staged
        files, else publish them again in a transaction of their own (see the module)."""
        from spark_statestore.sink.publication import publish_staged_changes

        with self._lock:
            streaming, self._batch = self._batch, None
            expected, self._expected = self._expected, None
            reason = _not_streamable(streaming, expected, batch, self._publisher)
            if reason is None:
                assert streaming is not None
                try:
                    publication = self._commit_streamed(streaming, batch)
                except BaseException:
                    self._renew()
                    raise
                self.streamed_batches += 1
                return publication
            if streaming is not None and streaming.open:
                self._abort_open(streaming, reason)
            _log.info(
                "changelog %s: batch %d of query %s is published at its commit (%s)",
                self.target.topic,
                batch.batch_id,
                batch.query_id,
                reason,
            )
            try:
                publication = publish_staged_changes(self._publisher, staging, batch)
            except BaseException:
                self._renew()
                raise
            self.republished_batches += 1
            return publication

    def _commit_streamed(self, streaming: _Streaming, batch: StagedBatch) -> StagedPublication:
        import pyarrow as pa
        import pyarrow.compute as pc

        from spark_statestore.sink.changes import StagedPublication

        if not streaming.open:  # no rows (an empty batch): its progress record alone
            self._publisher.begin(self.target.store_id, batch.batch_id)
        crash_point("sink.streamed_before_commit")
        ends = self._publisher.commit(
            store_id=batch.store_id,
            query_id=batch.query_id,
            batch_id=batch.batch_id,
            source_offsets=batch.source_offsets,
            position=batch.header,
        )
        crash_point("sink.streamed_after_commit")
        # Each partition's records of the batch hold the offsets just below its end (the
        # host's producer is the changelog's only writer), in the order of their ranks.
        partitions = len(streaming.counts)
        first = pa.array(
            [ends.get(p, 0) - streaming.counts.get(p, 0) for p in range(partitions)], pa.int64()
        )
        by_name = {a.staged: a for a in streaming.attempts if a.producing and a.staged}
        files = []
        for staged in batch.files:
            attempt = by_name.get(staged.name)
            if attempt is None:  # a file without rows
                files.append((pa.array([], pa.int32()), pa.array([], pa.int64())))
                continue
            parts, ranks = _flat(attempt, 0, pa.int32()), _flat(attempt, 1, pa.int64())
            files.append((parts, pc.add(pc.take(first, parts), ranks)))
        return StagedPublication(ends, streaming.stamp_ms, ([], []), files)

    # -- the tasks' side ------------------------------------------------------------------
    def join(
        self, query_id: str, batch_id: int, partition_id: int, attempt: int
    ) -> StreamedAttempt | None:
        """A task attempt starts streaming: its handle when its batch is the expected one
        (it publishes if it is its partition's first attempt), else None."""
        with self._lock:
            expected = self._expected
            if expected is None or (expected.query_id, expected.batch_id) != (query_id, batch_id):
                return None
            streaming = self._batch
            if streaming is None:
                partitions = self._publisher.partition_count()
                streaming = self._batch = _Streaming(
                    query_id, batch_id, int(time.time() * 1000), dict.fromkeys(range(partitions), 0)
                )
            producing = streaming.failed is None and partition_id not in streaming.producer_of
            if producing:
                streaming.producer_of[partition_id] = attempt
            handle = StreamedAttempt(partition_id, attempt, producing)
            streaming.attempts.append(handle)
            streaming.active += 1
            streaming.last_activity = time.monotonic()
            return handle

    def produce(
        self,
        handle: StreamedAttempt,
        records: pa.RecordBatch,
        max_offsets: Mapping[str, Mapping[int, int]],
    ) -> None:
        """Publish an attempt's chunk of rows (staged schema) into the batch's transaction;
        ``max_offsets``: the largest input offsets of the attempt's rows so far, this chunk's
        included. Never raises: a failure stops the batch's streaming (the commit publishes
        it)."""
        import pyarrow as pa

        from spark_statestore.changelog import partitions_for_keys
        from spark_statestore.sink.changes import ChangeChunk
        from spark_statestore.sink.publication import consecutive_offsets, publishing_columns

        with self._lock:
            streaming = self._batch
            if streaming is None or not handle.producing or streaming.failed is not None:
                return
            stamp_ms, partitions = streaming.stamp_ms, len(streaming.counts)
        # The chunk's columns and partitions are made outside the lock: the batch's other
        # attempts produce meanwhile (what must be in order, ranks and producing, is below).
        try:
            keys, values, stamps = publishing_columns(records, stamp_ms)
            parts = partitions_for_keys(keys, partitions)
            parts_array = pa.array(parts, pa.int32())
        except Exception as exc:
            with self._lock:
                if self._batch is streaming and streaming.failed is None:
                    self._fail(streaming, f"producing failed: {type(exc).__name__}: {exc}")
            return
        with self._lock:
            if self._batch is not streaming or streaming.failed is not None:
                return
            expected = self._expected
            if expected is None or handle not in streaming.attempts:
                return
            streaming.last_activity = time.monotonic()
            try:
                # The batch's keys are kept (to check their order at the commit): within
                # the sink's memory budget.
                streaming.key_bytes += records.column("key").nbytes + _BYTES_PER_ROW * len(records)
                if streaming.key_bytes > expected.budget_bytes:
                    raise _StopStreaming(
                        f"its keys are over the sink's memory budget of "
                        f"{expected.budget_bytes:,} bytes (uncommitted.max.bytes)"
                    )
                age = self._publisher.transaction_age_s()
                timeout_s = self._publisher.transaction_timeout_ms() / 1000
                if age is not None and age > timeout_s * AGE_LIMIT:
                    raise _StopStreaming(
                        f"its transaction is {age:.0f} s old, over half of transaction.timeout.ms"
                    )
                ranks, streaming.counts = consecutive_offsets(parts, streaming.counts)
                header = _header(expected.seen, max_offsets)
                if not streaming.open:
                    self._publisher.begin(self.target.store_id, streaming.batch_id)
                    streaming.open = True
                self._publisher.produce_chunk(
                    self.target.store_id, ChangeChunk(keys, values, stamps, parts, header)
                )
                handle.chunks.append((parts_array, pa.array(ranks, pa.int64())))
                handle.keys.append(records.column("key"))
                handle.rows += len(keys)
                crash_point("sink.streamed_produce")
            except _StopStreaming as stop:
                self._fail(streaming, str(stop))
            except Exception as exc:  # a producing failure: the commit publishes instead
                self._fail(streaming, f"producing failed: {type(exc).__name__}: {exc}")
                self._renew()

    def staged(self, handle: StreamedAttempt, staged: StagedFile) -> None:
        """An attempt's stream was whole and its rows are staged as ``staged``."""
        with self._lock:
            handle.staged = staged.name
            streaming = self._batch
            if streaming is not None and handle in streaming.attempts:
                streaming.active -= 1
                streaming.last_activity = time.monotonic()
                if handle.producing and handle.rows != staged.rows:
                    self._fail(
                        streaming, f"an attempt staged {staged.rows} rows, produced {handle.rows}"
                    )

    def broken(self, handle: StreamedAttempt) -> None:
        """An attempt's stream failed (nothing of it is staged)."""
        with self._lock:
            streaming = self._batch
            if streaming is None or handle not in streaming.attempts:
                return
            streaming.active -= 1
            streaming.last_activity = time.monotonic()
            if not handle.producing:
                return
            if handle.rows:
                self._fail(
                    streaming,
                    f"attempt {handle.attempt} of Spark partition {handle.partition_id} failed "
                    f"after publishing {handle.rows} rows",
                )
            else:  # nothing of it was published: the partition's next attempt may publish
                del streaming.producer_of[handle.partition_id]
                handle.producing = False

    # -- upkeep -------------------------------------------------------------------------
    def check_idle(self) -> None:
        """Abort an open transaction nobody streams to or commits (see :data:`IDLE_ABORT_S`)."""
        with self._lock:
            streaming = self._batch
            if (
                streaming is not None
                and streaming.open
                and streaming.failed is None
                and streaming.active <= 0
                and time.monotonic() - streaming.last_activity > self._idle_abort_s
            ):
                self._fail(
                    streaming, f"no task streamed and no commit came for {self._idle_abort_s:.0f} s"
                )

    def close(self) -> None:
        """Abort an open transaction and close the producer."""
        with self._lock:
            self._drop("the store host stops")
            self._publisher.close()

    def describe(self) -> dict[str, Any]:
        """Its state, for logs and tests."""
        with self._lock:
            streaming = self._batch
            return {
                "expected": None
                if self._expected is None
                else [self._expected.query_id, self._expected.batch_id],
                "streaming": None
                if streaming is None
                else {
                    "batch": streaming.batch_id,
                    "open": streaming.open,
                    "failed": streaming.failed,
                    "attempts": len(streaming.attempts),
                },
                "streamed_batches": self.streamed_batches,
                "republished_batches": self.republished_batches,
            }

    # -- internals ------------------------------------------------------------------------
    def _fail(self, streaming: _Streaming, reason: str) -> None:
        if streaming.failed is not None:
            return
        streaming.failed = reason
        if streaming.open:
            self._abort_open(streaming, reason)

    def _abort_open(self, streaming: _Streaming, reason: str) -> None:
        streaming.open = False
        _log.info(
            "changelog %s: stopped publishing batch %d of query %s while it stages (%s): its "
            "commit publishes it",
            self.target.topic,
            streaming.batch_id,
            streaming.query_id,
            reason,
        )
        try:
            self._publisher.abort(KafkaClientError(reason))
        except Exception as exc:
            _log.warning("changelog %s: aborting a transaction failed: %s", self.target.topic, exc)
        # A fresh producer for what comes next, as after any failed transaction: librdkafka
        # can refuse to produce in the transaction after one aborted with records in flight
        # ("Erroneous state"); a new one starts from a clean state (and fences the old).
        self._publisher.close()
        self._publisher = self._new_publisher()

    def _drop(self, reason: str) -> None:
        streaming, self._batch = self._batch, None
        if streaming is not None and streaming.open:
            self._abort_open(streaming, reason)


class _StopStreaming(Exception):
    """Why a batch stops streaming (not a failure of anything)."""


def _header(seen: Position, max_offsets: Mapping[str, Mapping[int, int]]) -> Position | None:
    merged = seen.merge(Position.from_map(max_offsets)) if max_offsets else seen
    return None if merged.is_empty() else merged


def _not_streamable(
    streaming: _Streaming | None,
    expected: _Expected | None,
    batch: StagedBatch,
    publisher: KafkaChangelogPublisher,
) -> str | None:
    """Why the streamed transaction cannot be committed as ``batch``, or None when it can."""
    if expected is None or (expected.query_id, expected.batch_id) != (
        batch.query_id,
        batch.batch_id,
    ):
        return "the batch was not expected (the query's first batch, or after a restart)"
    if batch.absent:
        return "complete mode: its tombstones are known at the commit only"
    if streaming is None:
        return "no task streamed to this host"
    if streaming.failed is not None:
        return streaming.failed
    if not publisher.healthy:
        return "the producer failed"
    age = publisher.transaction_age_s()
    if age is not None and age * 1000 > publisher.transaction_timeout_ms() * 0.8:
        return f"its transaction is {age:.0f} s old"
    producing = {a.staged: a for a in streaming.attempts if a.producing and a.rows}
    if any(name is None for name in producing):
        return "an attempt that published rows did not finish staging"
    wanted = {staged.name: staged for staged in batch.files if staged.rows}
    if set(producing) != set(wanted):
        return "Spark committed other task attempts than those published"
    for name, staged in wanted.items():
        if producing[name].rows != staged.rows:
            return f"staged file {name} has {staged.rows} rows, {producing[name].rows} published"
    return order_conflict([producing[staged.name] for staged in batch.files if staged.rows])


def order_conflict(attempts: Sequence[StreamedAttempt]) -> str | None:
    """Why the changelog's order of the attempts' records differs from the commit's, or None.

    The commit applies the staged files in Spark partition order, each in its rows' order,
    and a later write of a key wins. Streamed, the records of different attempts interleave
    as they arrive; for every key several attempts wrote, its last record in the changelog
    (the one followers keep) must then be its last write in commit order, else the batch is
    published again in commit order. ``attempts`` are in commit order.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    # Each attempt's distinct keys; those of one attempt found in an earlier one are shared.
    distinct = [pc.unique(_keys(attempt)) for attempt in attempts]
    found = [
        distinct[number].filter(pc.is_in(distinct[number], value_set=_concat(distinct[:number])))
        for number in range(1, len(attempts))
    ]
    if not any(len(keys) for keys in found):
        return None
    wanted = pc.unique(_concat(found))
    last: dict[bytes, tuple[int, int]] = {}  # key -> (rank of its last record, attempt)
    writers: dict[bytes, int] = {}  # key -> the last attempt (in commit order) that wrote it
    for number, attempt in enumerate(attempts):
        keys = _keys(attempt)
        ranks = _flat(attempt, 1, pa.int64())
        mask = pc.is_in(keys, value_set=wanted)
        for key, rank in zip(
            keys.filter(mask).to_pylist(), ranks.filter(mask).to_pylist(), strict=True
        ):
            # Ranks count a partition's records, and a key's records are all in its partition.
            if rank > last.get(key, (-1, -1))[0]:
                last[key] = (rank, number)
            writers[key] = number
    wrong = sum(1 for key, (_, number) in last.items() if writers[key] != number)
    if not wrong:
        return None
    return (
        f"{wrong:,} keys written by several tasks reached the changelog in another order "
        "than the commit applies (Spark partition order)"
    )


def _flat(attempt: StreamedAttempt, column: int, kind: pa.DataType) -> pa.Array:
    """An attempt's partitions (``column`` 0, int32) or ranks (1, int64) of all its chunks."""
    return _concat([chunk[column] for chunk in attempt.chunks], kind)


def _keys(attempt: StreamedAttempt) -> pa.Array:
    """An attempt's keys of all its chunks."""
    import pyarrow as pa

    return _concat(attempt.keys, pa.binary())


def _concat(arrays: Sequence[pa.Array], kind: pa.DataType | None = None) -> pa.Array:
    """``arrays`` as one array (of ``kind`` when there are none; the first's type else)."""
    import pyarrow as pa

    if not arrays:
        return pa.array([], kind if kind is not None else pa.binary())
    return pa.concat_arrays(list(arrays))
