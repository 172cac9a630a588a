"""Deferred commits: a commit made durable by a promise, its writes applied after it returns.

A writer whose records are already in durable files (the sink: its tasks' staged Arrow files)
need not wait for LevelDB to take them before its commit returns. :meth:`Store.commit_deferred
<spark_statestore.store.Store.commit_deferred>` writes, synced, the marker ``m:pending``: the
record files (Arrow IPC streams under the store's directory, with ``key``, ``value`` and
``timestamp`` columns), the position to merge and the commit record. From then on the commit
is the store's: it is applied, in one transaction with its position and commit record, by the
handle that made it when it closes (:meth:`~spark_statestore.store.Store.close_in_background`
on its own thread, while the writer goes on), by that handle's next commit, or by whoever
opens the store next, before anything else (a process killed before applying it). Readers
never see it half applied: it is one transaction, and a store's owner is its only reader
and writer (others wait for the owner to close, as for any owner).

Applied at most once: the transaction writes the marker's commit record, so a marker whose
commit record the store already has was applied (a process killed between the transaction
and the marker's removal) and is only removed. The writer keeps the files until the store
has the commit record (the sink removes a batch's staged files at its next commit).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_statestore.position import Position
from spark_statestore.store.errors import RECOVERY_HINT, StoreCorruptedError
from spark_statestore.store.manifest import CommitRecord

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_statestore.changelog.columns import RecordColumns

__all__ = ["DeferredCommit", "record_columns_of", "unpublished_columns"]


@dataclass(frozen=True, slots=True)
class DeferredCommit:
    """What ``m:pending`` promises: the records of ``files`` (paths relative to the store's
    directory, applied in this order), ``position`` merged, ``commit_record`` set."""

    files: tuple[str, ...]
    position: Position | None
    commit_record: CommitRecord

    def __post_init__(self) -> None:
        for name in self.files:
            if os.path.isabs(name) or ".." in name.split(os.sep):
                raise ValueError(f"a deferred commit's file is relative to the store: {name!r}")

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "files": list(self.files),
                "position": None if self.position is None else self.position.to_dict(),
                "commit": self.commit_record.to_dict(),
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes, store_path: str) -> DeferredCommit:
        try:
            data: Any = json.loads(raw)
            files = data["files"]
            if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
                raise TypeError("files is not a list of paths")
            position = data["position"]
            return cls(
                tuple(files),
                None if position is None else Position.from_dict(position),
                CommitRecord.from_json(json.dumps(data["commit"]).encode(), store_path),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreCorruptedError(
                f"store {store_path}: its deferred commit marker cannot be decoded ({exc}); "
                f"{RECOVERY_HINT}",
                store_path,
            ) from exc

    def applied_in(self, record: CommitRecord | None) -> bool:
        """Whether a store whose commit record is ``record`` has applied this commit."""
        return record is not None and (record.query_id, record.batch_id) == (
            self.commit_record.query_id,
            self.commit_record.batch_id,
        )


def record_columns_of(store_path: str, name: str) -> Iterator[RecordColumns]:
    """The records of one file of a deferred commit (:func:`unpublished_columns`), batch by
    batch.

    Raises
    ------
    StoreCorruptedError
        The file is missing or unreadable: the commit cannot be applied.
    """
    import pyarrow as pa

    path = os.path.join(store_path, name)
    try:
        reader = pa.ipc.open_stream(pa.memory_map(path))
        for batch in reader:
            yield unpublished_columns(batch)
    except (OSError, pa.ArrowInvalid, KeyError) as exc:
        raise StoreCorruptedError(
            f"store {store_path}: the file {path} of a committed batch not yet applied cannot "
            f"be read ({exc}), so the commit cannot be completed; {RECOVERY_HINT}",
            store_path,
        ) from exc


def unpublished_columns(batch: pa.RecordBatch) -> RecordColumns:
    """Records of ``key``, ``value`` and ``timestamp`` columns as a writer without a changelog
    stores them: no changelog coordinates (-1), the timestamp (-1 where null)."""
    import pyarrow as pa

    from spark_statestore.changelog.columns import RecordColumns

    count = batch.num_rows
    return RecordColumns(
        batch.column("key"),
        batch.column("value"),
        pa.repeat(pa.scalar(-1, pa.int32()), count),
        pa.repeat(pa.scalar(-1, pa.int64()), count),
        batch.column("timestamp").fill_null(-1),
    )
