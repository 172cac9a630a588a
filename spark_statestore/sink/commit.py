"""The sink's commit protocol: one micro-batch into a store, exactly once (KIP-844 ideas).

The driver-side commit of a micro-batch (or of a ``txnAppId``/``txnVersion`` batch write)
calls :func:`commit_batch` with the files its tasks staged. The batch becomes visible in one
atomic store commit of its data, its commit record (query id, batch id, source offsets), the
position merged from the rows' record metadata, and the changelog offsets. A batch id the
store has already committed for that query is skipped, so a replayed batch (Spark re-runs
the last batch after a crash between the store commit and its own commit log) changes
nothing. Transactions over ``uncommitted_max_bytes`` spill and commit in chunks under the
store's redo marker: no reader ever sees half a batch, and a crash mid-apply is completed on
the next open.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from spark_statestore.integer_spec import INT64_MAX, ascii_integer
from spark_statestore.position import Position
from spark_statestore.sink.changes import (
    ChangelogPublisher,
    PublishedBatch,
    StagedBatch,
    StagedPublication,
)
from spark_statestore.sink.publication import publish_staged_changes
from spark_statestore.sink.staging import StagedFile, StagingArea
from spark_statestore.sink.stats import CommitReport, SinkStats
from spark_statestore.store.crash import crash_point
from spark_statestore.store.deferred import (
    DeferredCommit,
    published_columns,
    unpublished_columns,
    write_coordinates,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_statestore.store import Store

__all__ = [
    "BatchToCommit",
    "CommitOutcome",
    "commit_batch",
    "is_committed",
    "source_position",
]

_log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1


class CommitOutcome(str, Enum):
    """What :func:`commit_batch` did."""

    COMMITTED = "committed"
    SKIPPED = "skipped"
    """The store had already committed this batch id for this query (a replay)."""
    ROLLED_FORWARD = "rolled_forward"
    """Kafka had the batch but the store did not (a crash between the two commits): the
    store was brought up to date from the changelog, nothing was published again."""


@dataclass(frozen=True, slots=True)
class BatchToCommit:
    """One batch as the driver commits it.

    Parameters
    ----------
    query_id
        The writing query's stable id (Spark's query id, or the batch writer's txnAppId).
    batch_id
        The micro-batch id (or txnVersion); committed at most once per ``query_id``.
    staged
        The files the tasks staged (one per Spark partition that had rows).
    source_offsets
        The batch's source offsets from Spark's offset log (JSON-compatible, opaque).
    complete
        Complete output mode: the batch is the whole state; keys it lacks are deleted.
    """

    query_id: str
    batch_id: int
    staged: Sequence[StagedFile] = ()
    source_offsets: Any = None
    complete: bool = False
    changelog_end_offsets: Mapping[int, int] = field(default_factory=dict)


def is_committed(store: Store, query_id: str, batch_id: int) -> bool:
    """Whether ``store`` has already committed ``batch_id`` (or a later one) of ``query_id``."""
    record = store.metadata.commit_record
    return record is not None and record.query_id == query_id and record.batch_id >= batch_id


def commit_batch(
    store: Store,
    staging: StagingArea,
    batch: BatchToCommit,
    publisher: ChangelogPublisher | None = None,
    *,
    stats: SinkStats | None = None,
    defer: bool = False,
) -> CommitOutcome:
    """Apply ``batch`` to ``store`` in one atomic commit, unless it is already committed.

    Staged files are applied in Spark partition order, each in the order its task wrote
    it; a later write of a key wins. Null values delete. With a ``publisher`` every change
    is first published to the changelog in one Kafka transaction with the batch's progress
    record; if the changelog already has this batch (the previous attempt crashed between
    the Kafka commit and the store commit), the store rolls forward from the changelog
    instead of publishing twice.

    ``stats`` (a long-lived committer's) counts the batch: its outcome, duration and the
    staged rows and bytes it applied, or its failure by error class.

    ``defer`` (not in complete mode): the batch is committed as a deferred commit of its
    staged files (:mod:`spark_statestore.store.deferred`), after the Kafka transaction with
    a publisher (with its records' changelog coordinates, written beside the files): durable
    on return, applied when the store closes (:meth:`Store.close_in_background` does that on
    its own thread) or by its next open, which then removes its files (a store that syncs);
    the batch's files Spark did not commit are removed at once.

    Raises
    ------
    StagingError
        If a staged file is missing or unreadable (the store is unchanged).
    """
    began = time.monotonic()
    try:
        outcome = _commit(store, staging, batch, publisher, defer)
    except Exception as exc:
        if stats is not None:
            stats.failed(exc)
        raise
    if stats is not None:
        applied = batch.staged if outcome is CommitOutcome.COMMITTED else ()
        stats.committed(CommitReport.of(outcome.value, time.monotonic() - began, applied))
    return outcome


def _commit(
    store: Store,
    staging: StagingArea,
    batch: BatchToCommit,
    publisher: ChangelogPublisher | None,
    defer: bool,
) -> CommitOutcome:
    """:func:`commit_batch` without its counting."""
    if is_committed(store, batch.query_id, batch.batch_id):
        _log.info(
            "store %s already has batch %d of query %s: skipped (a replay)",
            store.path,
            batch.batch_id,
            batch.query_id,
        )
        staging.remove_batch(batch.query_id, batch.batch_id)
        return CommitOutcome.SKIPPED
    ordered = sorted(batch.staged, key=lambda staged: (staged.partition_id, staged.name))
    crash_point("sink.before_publish")
    deferred = defer and not batch.complete and bool(ordered)
    after: Position | None = None  # the store's position after the batch, when published
    if publisher is None:
        if deferred:
            _defer_staged(store, staging, batch, ordered)
        else:
            _apply_staged(store, staging, batch, ordered)
        outcome = CommitOutcome.COMMITTED
    else:
        published = publisher.published_batch(store.manifest.store_id)
        if published is not None and (published.query_id, published.batch_id) == (
            batch.query_id,
            batch.batch_id,
        ):
            _roll_forward(store, batch, publisher, published)
            outcome = CommitOutcome.ROLLED_FORWARD
            deferred = False
        else:
            after = _publish_and_apply(store, staging, batch, ordered, publisher, deferred)
            outcome = CommitOutcome.COMMITTED
    crash_point("sink.after_store_commit")
    # A deferred batch's files are the store's until it is applied (it removes them); the
    # batch's other files (attempts Spark did not commit) go now, its directory next time.
    if deferred:
        staging.remove_unpromised(batch.query_id, batch.batch_id, ordered)
    staging.remove_stale(batch.query_id, batch.batch_id - 1 if deferred else batch.batch_id)
    if publisher is not None and not batch.complete:
        _expect_next(store, batch, publisher, store.metadata.position if after is None else after)
    _log.info(
        "store %s: batch %d of query %s %s (%d staged rows)",
        store.path,
        batch.batch_id,
        batch.query_id,
        outcome.value,
        sum(staged.rows for staged in ordered),
    )
    return outcome


def _expect_next(
    store: Store, batch: BatchToCommit, publisher: ChangelogPublisher, position: Position
) -> None:
    """Tell a publisher that can publish a batch while its tasks stage it (the store host)
    which batch comes next, and the position its records start from (the store's after this
    batch). Best effort: the commit is done, and a batch nobody expected is published when
    it commits."""
    expect = getattr(publisher, "expect_batch", None)
    if expect is None:
        return
    try:
        expect(
            store.manifest.store_id,
            batch.query_id,
            batch.batch_id + 1,
            position,
            store.options.uncommitted_max_bytes,
        )
    except Exception as exc:
        _log.warning(
            "store %s: the changelog will be published at the commit of batch %d (the "
            "publisher could not prepare for it: %s)",
            store.path,
            batch.batch_id + 1,
            exc,
        )


def _commit_record(batch: BatchToCommit, ends: Mapping[int, int]) -> Any:
    from spark_statestore.store import CommitRecord

    return CommitRecord(batch.query_id, batch.batch_id, batch.source_offsets, dict(ends))


def _apply_staged(
    store: Store, staging: StagingArea, batch: BatchToCommit, ordered: Sequence[StagedFile]
) -> None:
    """No changelog: the staged rows, the position and the commit record, atomically."""
    with store.begin() as txn:
        if batch.complete:
            for key in _absent_keys(store, staging, ordered):
                txn.delete(key)
        for staged in ordered:
            for records in staging.read(staged):
                txn.put_records(unpublished_columns(records))
        position = _position(ordered, batch.source_offsets)
        if position is not None:
            txn.merge_position(position)
        txn.set_commit_record(_commit_record(batch, {}))
        txn.commit()


def _defer_staged(
    store: Store, staging: StagingArea, batch: BatchToCommit, ordered: Sequence[StagedFile]
) -> None:
    """No changelog: the staged files, the position and the commit record, committed as a
    promise the store keeps (applied as :func:`_apply_staged` applies them)."""
    files = tuple(staging.store_relative(staged) for staged in ordered)
    position = _position(ordered, batch.source_offsets)
    store.commit_deferred(DeferredCommit(files, position, _commit_record(batch, {})))


def _publish_and_apply(
    store: Store,
    staging: StagingArea,
    batch: BatchToCommit,
    ordered: Sequence[StagedFile],
    publisher: ChangelogPublisher,
    defer: bool,
) -> Position:
    """Publish every change in one Kafka transaction, then commit the store with the
    changelog coordinates of each record and the changelog's end offsets (``defer``: as a
    deferred commit of the staged files and their coordinates). The store's position after
    the batch."""
    absent = _absent_keys(store, staging, ordered) if batch.complete else []
    batch_position = _position(ordered, batch.source_offsets)
    seen = store.metadata.position
    position = seen if batch_position is None else seen.merge(batch_position)
    header = None if position.is_empty() else position
    staged = StagedBatch(
        store.manifest.store_id,
        batch.query_id,
        batch.batch_id,
        ordered,
        batch.source_offsets,
        header,
        absent,
    )
    # A publisher may publish the staged files itself (the store host, which may have
    # published them while the tasks staged them), else through its publish().
    publish_staged = getattr(publisher, "publish_staged", None)
    if publish_staged is not None:
        publication: StagedPublication = publish_staged(staging, staged)
    else:
        publication = publish_staged_changes(publisher, staging, staged)
    crash_point("sink.after_publish")
    ends = publication.ends
    if defer:
        coordinates = staging.coordinates_file(batch.query_id, batch.batch_id)
        write_coordinates(os.path.join(store.path, coordinates), publication.files)
        store.commit_deferred(
            DeferredCommit(
                tuple(staging.store_relative(staged_file) for staged_file in ordered),
                None if position.is_empty() else position,
                _commit_record(batch, ends),
                coordinates,
                publication.stamp_ms,
            )
        )
        return position
    with store.begin() as txn:
        for key in absent:
            txn.delete(key)  # a delete keeps nothing locally, but it took its offset
        for staged_file, (parts, offsets) in zip(ordered, publication.files, strict=True):
            first = 0
            for records in staging.read(staged_file):
                last = first + records.num_rows
                txn.put_records(
                    published_columns(
                        records, publication.stamp_ms, parts[first:last], offsets[first:last]
                    )
                )
                first = last
        if not position.is_empty():
            txn.merge_position(position)
        for p, end in ends.items():
            txn.set_changelog_offset(p, end)
        txn.set_commit_record(_commit_record(batch, ends))
        txn.commit()
    return position


def _roll_forward(
    store: Store, batch: BatchToCommit, publisher: ChangelogPublisher, published: PublishedBatch
) -> None:
    """The changelog has the batch and the store not: apply it from the changelog."""
    applied = store.metadata.changelog_offsets
    starts = {p: applied.get(p, 0) for p in published.end_offsets}
    _log.warning(
        "store %s: batch %d of query %s is in changelog %s but not in the store (a crash "
        "between the two commits): rolling forward from %s to %s",
        store.path,
        batch.batch_id,
        batch.query_id,
        publisher.topic,
        starts,
        dict(published.end_offsets),
    )
    with store.begin() as txn:
        # The records' position headers carry the batch's position, but a batch without
        # rows publishes no record: its source offsets come from the commit itself, as in
        # the commit that crashed.
        position = _position(batch.staged, batch.source_offsets)
        for partition, offset, key, value, record_position, stamp in publisher.read(
            starts, published.end_offsets
        ):
            if value is None:
                txn.delete(key)
            else:
                txn.put(key, value, partition=partition, offset=offset, timestamp=stamp)
            if record_position is not None:
                position = record_position if position is None else position.merge(record_position)
        if position is not None:
            txn.merge_position(position)
        for p, end in published.end_offsets.items():
            txn.set_changelog_offset(p, end)
        txn.set_commit_record(_commit_record(batch, published.end_offsets))
        txn.commit()


def source_position(source_offsets: Any) -> dict[str, dict[int, int]]:
    """The input position implied by Spark's offset log entries of Kafka-shaped sources.

    Spark's Kafka source (and our follower source) log ``{"topic": {"0": next offset}}``;
    a batch that ends there has processed up to ``next offset - 1``. Entries of any other
    shape (file, rate, ... sources) say nothing about Kafka input and are ignored.
    """
    merged: dict[str, dict[int, int]] = {}
    for entry in source_offsets if isinstance(source_offsets, list) else [source_offsets]:
        if not isinstance(entry, dict):
            continue
        for topic, partitions in entry.items():
            if not isinstance(topic, str) or not isinstance(partitions, dict):
                continue
            for key, next_offset in partitions.items():
                partition = ascii_integer(key) if isinstance(key, str) else None
                if (
                    partition is not None
                    and 0 <= partition <= _INT32_MAX
                    and isinstance(next_offset, int)
                    and not isinstance(next_offset, bool)
                    and 0 < next_offset <= INT64_MAX
                ):
                    target = merged.setdefault(topic, {})
                    target[partition] = max(next_offset - 1, target.get(partition, -1))
    return merged


def _position(staged: Sequence[StagedFile], source_offsets: Any = None) -> Position | None:
    merged = source_position(source_offsets)
    for item in staged:
        for topic, partitions in item.max_offsets.items():
            target = merged.setdefault(topic, {})
            for partition, offset in partitions.items():
                target[partition] = max(offset, target.get(partition, -1))
    return Position.from_map(merged) if merged else None


def _absent_keys(store: Store, staging: StagingArea, staged: Sequence[StagedFile]) -> list[bytes]:
    """Complete mode: the committed keys the batch does not hold (to delete)."""
    wanted: set[bytes] = set()
    for item in staged:
        for records in staging.read(item):
            wanted.update(_keys_of(records))
    with store.snapshot() as snapshot:
        return [key for key, _ in snapshot.items() if key not in wanted]


def _keys_of(records: pa.RecordBatch) -> list[bytes]:
    keys: list[bytes] = records.column("key").to_pylist()
    return keys
