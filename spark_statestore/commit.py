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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from spark_statestore.errors import StateStoreError
from spark_statestore.position import Position
from spark_statestore.staging import StagedFile, StagingArea

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_statestore.store import Store

__all__ = ["BatchToCommit", "CommitError", "CommitOutcome", "commit_batch", "is_committed"]

_log = logging.getLogger(__name__)


class CommitError(StateStoreError):
    """A batch cannot be committed (its staged data or the store refuses it)."""


class CommitOutcome(str, Enum):
    """What :func:`commit_batch` did."""

    COMMITTED = "committed"
    SKIPPED = "skipped"
    """The store had already committed this batch id for this query (a replay)."""


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


def commit_batch(store: Store, staging: StagingArea, batch: BatchToCommit) -> CommitOutcome:
    """Apply ``batch`` to ``store`` in one atomic commit, unless it is already committed.

    Staged files are applied in Spark partition order, each in the order its task wrote
    it; a later write of a key wins. Null values delete.

    Raises
    ------
    CommitError
        If a staged file is missing or unreadable (the store is unchanged).
    """
    from spark_statestore.store import CommitRecord

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
    with store.begin() as txn:
        if batch.complete:
            _delete_absent(store, txn, staging, ordered)
        for staged in ordered:
            for records in staging.read(staged):
                txn.put_columns(*_columns(records))
        position = _position(ordered)
        if position is not None:
            txn.merge_position(position)
        for partition, offset in batch.changelog_end_offsets.items():
            txn.set_changelog_offset(partition, offset)
        txn.set_commit_record(
            CommitRecord(
                batch.query_id,
                batch.batch_id,
                batch.source_offsets,
                dict(batch.changelog_end_offsets),
            )
        )
        txn.commit()
    staging.remove_stale(batch.query_id, batch.batch_id)
    _log.info(
        "store %s committed batch %d of query %s (%d rows from %d files)",
        store.path,
        batch.batch_id,
        batch.query_id,
        sum(staged.rows for staged in ordered),
        len(ordered),
    )
    return CommitOutcome.COMMITTED


def _columns(records: pa.RecordBatch) -> tuple[list[Any], ...]:
    """``put_columns`` arguments from a staged record batch (-1: unknown partition/offset;
    a sink without a changelog has no changelog coordinates)."""
    keys = records.column("key").to_pylist()
    count = len(keys)
    stamps = [-1 if t is None else t for t in records.column("timestamp").to_pylist()]
    return keys, records.column("value").to_pylist(), [-1] * count, [-1] * count, stamps


def _position(staged: Sequence[StagedFile]) -> Position | None:
    merged: dict[str, dict[int, int]] = {}
    for item in staged:
        for topic, partitions in item.max_offsets.items():
            target = merged.setdefault(topic, {})
            for partition, offset in partitions.items():
                target[partition] = max(offset, target.get(partition, -1))
    return Position.from_map(merged) if merged else None


def _delete_absent(
    store: Store, txn: Any, staging: StagingArea, staged: Sequence[StagedFile]
) -> None:
    """Complete mode: delete every committed key the batch does not hold."""
    wanted: set[bytes] = set()
    for item in staged:
        for records in staging.read(item):
            wanted.update(records.column("key").to_pylist())
    with store.snapshot() as snapshot:
        for key in _keys(snapshot):
            if key not in wanted:
                txn.delete(key)


def _keys(snapshot: Any) -> Iterator[bytes]:
    for key, _ in snapshot.items():
        yield key
