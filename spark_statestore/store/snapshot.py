"""Snapshots: a consistent, read-only view of one committed state of a store."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from spark_statestore.position import Position
from spark_statestore.store.errors import StoreClosedError, StoreError
from spark_statestore.store.layout import (
    DATA_PREFIX,
    HEADER_SIZE,
    StoredRecord,
    data_bounds,
    decode_record,
    envelope_header,
    iterate,
)
from spark_statestore.store.manifest import CommitRecord, StoreMetadata

if TYPE_CHECKING:
    import plyvel
    import pyarrow as pa

    from spark_statestore.store.store import Store

__all__ = ["Snapshot", "arrow_schema"]

DEFAULT_BATCH_ROWS = 65536


def arrow_schema() -> pa.Schema:
    """The schema of :meth:`Snapshot.to_batches`: key, value, partition, offset, timestamp."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("key", pa.binary(), nullable=False),
            pa.field("value", pa.binary(), nullable=False),
            pa.field("partition", pa.int32()),
            pa.field("offset", pa.int64()),
            pa.field("timestamp", pa.timestamp("ms", tz="UTC")),
        ]
    )


def _to_batch(columns: list[list[Any]], schema: pa.Schema) -> pa.RecordBatch:
    import pyarrow as pa

    arrays = [pa.array(column, field.type) for column, field in zip(columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class Snapshot:
    """A consistent read view of a store, pinned at one commit.

    Everything read through one snapshot reflects exactly the commit described by
    :attr:`metadata` (its :attr:`position`, :attr:`changelog_offsets`, :attr:`commit_seq`),
    whatever is committed meanwhile. Close it (or use ``with``) to release LevelDB's
    resources; a snapshot cannot outlive its store handle.
    """

    def __init__(self, store: Store, snapshot: plyvel.Snapshot, metadata: StoreMetadata) -> None:
        self._store = store
        self._snapshot: plyvel.Snapshot | None = snapshot
        self._get = snapshot.get
        self.metadata = metadata

    # -- what this snapshot is ------------------------------------------------------------
    @property
    def position(self) -> Position:
        """The position of the input behind this state."""
        return self.metadata.position

    @property
    def changelog_offsets(self) -> Mapping[int, int]:
        """``{partition: next changelog offset}`` applied (follower) or published (leader)."""
        return self.metadata.changelog_offsets

    @property
    def commit_record(self) -> CommitRecord | None:
        """The last sink commit record in this state, if any."""
        return self.metadata.commit_record

    @property
    def commit_seq(self) -> int:
        """The commit this snapshot shows (number of commits of the store up to it)."""
        return self.metadata.commit_seq

    # -- point reads ----------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        """The value of ``key``, or None."""
        if self._snapshot is None:
            raise self._closed()
        try:
            raw: bytes | None = self._get(DATA_PREFIX + key)
        except RuntimeError:  # plyvel: the database was closed under us
            raise self._closed() from None
        return None if raw is None else raw[HEADER_SIZE:]

    def get_record(self, key: bytes) -> StoredRecord | None:
        """The record of ``key`` with its partition, offset and timestamp, or None."""
        if self._snapshot is None:
            raise self._closed()
        try:
            raw = self._get(DATA_PREFIX + key)
        except RuntimeError:
            raise self._closed() from None
        return None if raw is None else decode_record(key, raw, self._store.path)

    def multi_get(self, keys: Iterable[bytes]) -> dict[bytes, bytes]:
        """``{key: value}`` of the ``keys`` that exist."""
        if self._snapshot is None:
            raise self._closed()
        get = self._get
        found = {}
        try:
            for key in keys:
                raw = get(DATA_PREFIX + key)
                if raw is not None:
                    found[key] = raw[HEADER_SIZE:]
        except RuntimeError:
            raise self._closed() from None
        return found

    # -- scans ----------------------------------------------------------------------------
    def items(
        self,
        lower: bytes | None = None,
        upper: bytes | None = None,
        *,
        reverse: bool = False,
        prefix: bytes | None = None,
        limit: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs in key order (descending with ``reverse``).

        ``lower`` and ``upper`` are inclusive bounds (None: open); ``prefix`` selects the
        keys starting with it instead. ``limit`` stops after that many pairs.
        """
        for dkey, raw in self._raw(lower, upper, reverse, prefix, limit):
            yield dkey[1:], raw[HEADER_SIZE:]

    def records(
        self,
        lower: bytes | None = None,
        upper: bytes | None = None,
        *,
        reverse: bool = False,
        prefix: bytes | None = None,
        limit: int | None = None,
    ) -> Iterator[StoredRecord]:
        """Like :meth:`items`, yielding :class:`StoredRecord` with partition/offset/timestamp."""
        path = self._store.path
        for dkey, raw in self._raw(lower, upper, reverse, prefix, limit):
            yield decode_record(dkey[1:], raw, path)

    def range(
        self, lower: bytes | None, upper: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Keys in ``[lower, upper]``, both inclusive; None leaves that end open."""
        return self.items(lower, upper, reverse=reverse)

    def prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Keys starting with ``prefix``, ascending."""
        return self.items(prefix=prefix)

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        """Every key, ascending."""
        return self.items()

    def to_batches(
        self,
        lower: bytes | None = None,
        upper: bytes | None = None,
        *,
        reverse: bool = False,
        prefix: bytes | None = None,
        limit: int | None = None,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        partitions: Iterable[int] | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """The selected rows as Arrow record batches of at most ``batch_rows`` rows
        (schema :func:`arrow_schema`); ``partitions`` keeps only those changelog partitions."""
        if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
            raise StoreError(f"batch_rows must be an int >= 1, got {batch_rows!r}")
        schema = arrow_schema()
        wanted = None if partitions is None else frozenset(partitions)
        columns: list[list[Any]] = [[], [], [], [], []]
        keys, values, parts, offsets, stamps = columns
        for dkey, raw in self._raw(lower, upper, reverse, prefix, limit):
            partition, offset, timestamp = envelope_header(raw)
            if wanted is not None and partition not in wanted:
                continue
            keys.append(dkey[1:])
            values.append(raw[HEADER_SIZE:])
            parts.append(None if partition < 0 else partition)
            offsets.append(None if offset < 0 else offset)
            stamps.append(None if timestamp < 0 else timestamp)
            if len(keys) >= batch_rows:
                yield _to_batch(columns, schema)
                for column in columns:
                    column.clear()
        if keys:
            yield _to_batch(columns, schema)

    def count(self) -> int:
        """Number of keys (a full scan)."""
        return sum(1 for _ in self._raw(None, None, False, None, None))

    def _raw(
        self,
        lower: bytes | None,
        upper: bytes | None,
        reverse: bool,
        prefix: bytes | None,
        limit: int | None,
    ) -> Iterator[tuple[bytes, bytes]]:
        if self._snapshot is None:
            raise self._closed()
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise StoreError(f"limit must be an int or None, got {limit!r}")
        try:
            start, stop, include_stop = data_bounds(lower, upper, prefix)
        except ValueError as exc:
            raise StoreError(str(exc), self._store.path) from None
        if limit is not None and limit <= 0:
            return
        if lower is not None and upper is not None and lower > upper:
            return
        count = 0
        try:
            for item in iterate(self._snapshot, start, stop, include_stop, reverse):
                yield item
                count += 1
                if limit is not None and count >= limit:
                    return
        except RuntimeError:  # plyvel: the database was closed under us
            raise self._closed() from None

    # -- lifecycle ------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._snapshot is None or self._store.closed

    def close(self) -> None:
        """Release the snapshot (idempotent)."""
        snapshot, self._snapshot = self._snapshot, None
        if snapshot is not None:
            self._store._release_snapshot(self, snapshot)

    def _closed(self) -> StoreClosedError:
        return StoreClosedError(
            f"snapshot of store {self._store.path} at commit {self.commit_seq} is closed "
            "(or its store handle is); take a new one with store.snapshot()",
            self._store.path,
        )

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Snapshot(store={self._store.path!r}, commit_seq={self.commit_seq}, "
            f"position={self.position.to_json()})"
        )
