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

A commit whose records were published to the store's changelog first (the sink with a
changelog, after its Kafka transaction committed) also names its ``coordinates``: an Arrow IPC
stream beside the files, one record batch per file (``partition``, ``offset`` of each row, in
row order), and ``stamp_ms``, the timestamp its records carry where a row has none (or 0).
Its records are then stored with those coordinates and timestamps and the commit record's
changelog end offsets are set, as a direct commit of the publication stores them.

Applied at most once: the transaction writes the marker's commit record, so a marker whose
commit record the store already has was applied (a process killed between the transaction
and the marker's removal) and is only removed. The writer keeps the files until the store
has the commit record; a store that syncs its commits (the default) removes them once it has
applied them (the sink's next commit removes whatever else its batch staged).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_statestore.position import Position
from spark_statestore.store.errors import RECOVERY_HINT, StoreCorruptedError
from spark_statestore.store.manifest import CommitRecord

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_statestore.changelog.columns import RecordColumns

__all__ = [
    "DeferredCommit",
    "published_columns",
    "published_stamps",
    "record_columns_of",
    "unpublished_columns",
    "write_coordinates",
]

COORDINATE_FIELDS = ("partition", "offset")


@dataclass(frozen=True, slots=True)
class DeferredCommit:
    """What ``m:pending`` promises: the records of ``files`` (paths relative to the store's
    directory, applied in this order), ``position`` merged, ``commit_record`` set; published
    records also their ``coordinates`` file (relative too) and ``stamp_ms``."""

    files: tuple[str, ...]
    position: Position | None
    commit_record: CommitRecord
    coordinates: str | None = None
    stamp_ms: int = -1

    @property
    def paths(self) -> tuple[str, ...]:
        """Every file the commit names: its record files, then its coordinates if any."""
        return self.files if self.coordinates is None else (*self.files, self.coordinates)

    def __post_init__(self) -> None:
        for name in self.paths:
            if os.path.isabs(name) or ".." in name.split(os.sep):
                raise ValueError(f"a deferred commit's file is relative to the store: {name!r}")
        if isinstance(self.stamp_ms, bool) or not isinstance(self.stamp_ms, int):
            raise TypeError(f"a deferred commit's stamp_ms is an int, got {self.stamp_ms!r}")

    def to_json(self) -> bytes:
        data: dict[str, Any] = {
            "files": list(self.files),
            "position": None if self.position is None else self.position.to_dict(),
            "commit": self.commit_record.to_dict(),
        }
        if self.coordinates is not None:
            data["coordinates"] = self.coordinates
            data["stamp_ms"] = self.stamp_ms
        return json.dumps(data, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes, store_path: str) -> DeferredCommit:
        try:
            data: Any = json.loads(raw)
            files = data["files"]
            if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
                raise TypeError("files is not a list of paths")
            position = data["position"]
            coordinates = data.get("coordinates")
            if coordinates is not None and not isinstance(coordinates, str):
                raise TypeError("coordinates is not a path")
            return cls(
                tuple(files),
                None if position is None else Position.from_dict(position),
                CommitRecord.from_json(json.dumps(data["commit"]).encode(), store_path),
                coordinates,
                data.get("stamp_ms", -1),
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


def record_columns_of(store_path: str, commit: DeferredCommit) -> Iterator[RecordColumns]:
    """The records of a deferred commit's files, in order, batch by batch: as
    :func:`published_columns` with its coordinates, else :func:`unpublished_columns`.

    Raises
    ------
    StoreCorruptedError
        A file is missing or unreadable, or the coordinates do not match the files' rows:
        the commit cannot be applied.
    """

    coordinates: list[pa.RecordBatch] | None = None
    if commit.coordinates is not None:
        coordinates = list(_read(store_path, commit.coordinates))
        if len(coordinates) != len(commit.files) or any(
            batch.schema.names != list(COORDINATE_FIELDS) for batch in coordinates
        ):
            raise _unreadable(
                store_path,
                commit.coordinates,
                f"{len(coordinates)} coordinate batches for {len(commit.files)} files",
            )
    for index, name in enumerate(commit.files):
        first = 0
        for batch in _read(store_path, name):
            if coordinates is None:
                yield unpublished_columns(batch)
                continue
            here = coordinates[index]
            last = first + batch.num_rows
            if last > here.num_rows:
                raise _unreadable(store_path, commit.coordinates or "", f"too few rows for {name}")
            yield published_columns(
                batch,
                commit.stamp_ms,
                here.column(0).slice(first, batch.num_rows),
                here.column(1).slice(first, batch.num_rows),
            )
            first = last
        if coordinates is not None and first != coordinates[index].num_rows:
            raise _unreadable(store_path, commit.coordinates or "", f"too many rows for {name}")


def _read(store_path: str, name: str) -> Iterator[pa.RecordBatch]:
    import pyarrow as pa

    try:
        reader = pa.ipc.open_stream(pa.memory_map(os.path.join(store_path, name)))
        yield from reader
    except (OSError, pa.ArrowInvalid, KeyError) as exc:
        raise _unreadable(store_path, name, str(exc)) from exc


def _unreadable(store_path: str, name: str, why: str) -> StoreCorruptedError:
    path = os.path.join(store_path, name)
    return StoreCorruptedError(
        f"store {store_path}: the file {path} of a committed batch not yet applied cannot "
        f"be read ({why}), so the commit cannot be completed; {RECOVERY_HINT}",
        store_path,
    )


def write_coordinates(path: str, files: Sequence[tuple[Any, Any]]) -> None:
    """Write, synced, each file's row coordinates (``(partitions, offsets)`` per file, as
    Arrow arrays or sequences of int) to ``path``: the ``coordinates`` of a deferred commit."""
    import pyarrow as pa

    schema = pa.schema([pa.field("partition", pa.int32()), pa.field("offset", pa.int64())])
    temporary = f"{path}.tmp"
    with pa.OSFile(temporary, "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        for partitions, offsets in files:
            writer.write_batch(
                pa.record_batch(
                    [_ints(partitions, pa.int32()), _ints(offsets, pa.int64())], schema=schema
                )
            )
    with open(temporary, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def _ints(values: Any, kind: pa.DataType) -> pa.Array:
    import pyarrow as pa

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        return values.cast(kind)
    return pa.array(values, kind)


def published_stamps(batch: pa.RecordBatch, stamp_ms: int) -> pa.Array:
    """The timestamps a staged batch's records are published with: ``stamp_ms`` where a row
    has none, or 0 (a changelog record cannot carry 0)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    stamps = batch.column("timestamp")
    stamps = pc.if_else(pc.equal(stamps, 0), pa.scalar(None, pa.int64()), stamps)
    filled: pa.Array = stamps.fill_null(stamp_ms)
    return filled


def published_columns(
    batch: pa.RecordBatch, stamp_ms: int, partitions: Any, offsets: Any
) -> RecordColumns:
    """A published staged record batch as the store writes it, in Arrow columns (no Python
    object per row): its changelog ``partitions`` and ``offsets`` (Arrow arrays or sequences
    of int), and its timestamps as published (:func:`published_stamps`)."""
    import pyarrow as pa

    from spark_statestore.changelog.columns import RecordColumns

    return RecordColumns(
        batch.column("key"),
        batch.column("value"),
        _ints(partitions, pa.int32()),
        _ints(offsets, pa.int64()),
        published_stamps(batch, stamp_ms),
    )


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
