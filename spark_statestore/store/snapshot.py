"""Snapshots: a consistent, read-only view of one committed state of a store."""

from __future__ import annotations

import array
import sys
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from types import TracebackType
from typing import TYPE_CHECKING, Any

from spark_statestore.position import Position
from spark_statestore.store.errors import StoreClosedError, StoreError
from spark_statestore.store.layout import (
    DATA_PREFIX,
    ENVELOPE_VERSION,
    HEADER_SIZE,
    META_STREAM_TIME,
    StoredRecord,
    data_bounds,
    decode_record,
    envelope_value,
    iterate,
)
from spark_statestore.store.manifest import CommitRecord, StoreMetadata
from spark_statestore.store.point import point_reads, raise_read_error
from spark_statestore.store.versions import (
    RawGet,
    RawRange,
    Version,
    decode_stream_times,
    gated_reads,
    key_versions,
)

if TYPE_CHECKING:
    import plyvel
    import pyarrow as pa

    from spark_statestore.store.gate import Gate
    from spark_statestore.store.protocols import SnapshotOwner

__all__ = ["Snapshot", "arrow_schema", "envelope_batch", "headers_type", "no_headers"]

DEFAULT_BATCH_ROWS = 65536


def headers_type() -> pa.DataType:
    """The Arrow type of a record's headers: ``list<struct<key: string, value: binary>>``."""
    import pyarrow as pa

    return pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


def arrow_schema() -> pa.Schema:
    """The schema of :meth:`Snapshot.to_batches`: key, value, partition, offset, timestamp,
    headers (those kept with the record; empty when it had none)."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("key", pa.binary(), nullable=False),
            pa.field("value", pa.binary(), nullable=False),
            pa.field("partition", pa.int32()),
            pa.field("offset", pa.int64()),
            pa.field("timestamp", pa.timestamp("ms", tz="UTC")),
            pa.field("headers", headers_type()),
        ]
    )


def no_headers(count: int) -> pa.Array:
    """``count`` empty header lists (no Python object per row)."""
    import pyarrow as pa

    kind = headers_type()
    zeros = pa.py_buffer(bytes(4 * (count + 1)))  # every list starts and ends at 0
    offsets = pa.Array.from_buffers(pa.int32(), count + 1, [None, zeros])
    return pa.ListArray.from_arrays(offsets, pa.array([], kind.value_type), type=kind)


_TO_END = 2**31 - 1  # binary_slice's stop: pyarrow 26 fails on stop=None ("Negative buffer resize")


def envelope_batch(
    items: Sequence[tuple[bytes, bytes]],
    path: str,
    partitions: frozenset[int] | None = None,
) -> pa.RecordBatch:
    """Decode stored ``(data key, envelope)`` pairs into one batch of :func:`arrow_schema`.

    Vectorized: Arrow slices keys and values, one ``struct.iter_unpack`` over the envelope
    headers (contiguous after slicing) reads partition, offset and timestamp; no Python
    work per row beyond that. ``partitions`` keeps only rows of those changelog partitions.

    Raises
    ------
    StoreCorruptedError
        If an envelope is too short or has an unknown version (naming the key).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    dkeys, raws = zip(*items, strict=True) if items else ((), ())
    raw = pa.array(raws, pa.binary())
    count = len(raw)
    if count and pc.min(pc.binary_length(raw)).as_py() < HEADER_SIZE:
        _first_bad_envelope(dkeys, raws, path)
    headers = pc.binary_slice(raw, 0, HEADER_SIZE)
    versions = _big_endian(headers, 0, "B", pa.uint8(), count)
    if count and pc.max(versions).as_py() != ENVELOPE_VERSION:
        # Some envelope keeps headers (or is not an envelope): decode row by row.
        return _records_batch(dkeys, raws, path, partitions)
    part_array = _big_endian(headers, 1, "i", pa.int32(), count)
    offset_array = _big_endian(headers, 5, "q", pa.int64(), count)
    stamp_array = _big_endian(headers, 13, "q", pa.int64(), count)
    batch = pa.RecordBatch.from_arrays(
        [
            pc.binary_slice(pa.array(dkeys, pa.binary()), 1, _TO_END),
            pc.binary_slice(raw, HEADER_SIZE, _TO_END),
            _unknown_as_null(part_array),
            _unknown_as_null(offset_array),
            _unknown_as_null(stamp_array).cast(pa.timestamp("ms", tz="UTC")),
            no_headers(count),
        ],
        schema=arrow_schema(),
    )
    if partitions is not None:
        batch = batch.filter(pc.is_in(part_array, pa.array(sorted(partitions), pa.int32())))
    return batch


def _records_batch(
    dkeys: Sequence[bytes],
    raws: Sequence[bytes],
    path: str,
    partitions: frozenset[int] | None,
) -> pa.RecordBatch:
    """:func:`envelope_batch` one record at a time (envelopes with headers among them)."""
    columns: list[list[Any]] = [[], [], [], [], [], []]
    keys, values, parts, offsets, stamps, headers = columns
    for dkey, raw in zip(dkeys, raws, strict=True):
        record = decode_record(dkey[1:], raw, path)  # raises StoreCorruptedError
        if partitions is not None and record.partition not in partitions:
            continue
        keys.append(record.key)
        values.append(record.value)
        parts.append(record.partition)
        offsets.append(record.offset)
        stamps.append(record.timestamp)
        headers.append([{"key": k, "value": v} for k, v in record.headers])
    return to_batch(columns, arrow_schema())


def rechunk(batches: Iterable[pa.RecordBatch], batch_rows: int) -> Iterator[pa.RecordBatch]:
    """Re-cut filtered batches into batches of exactly ``batch_rows`` rows (the last: fewer)."""
    import pyarrow as pa

    pending: list[pa.RecordBatch] = []
    held = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        pending.append(batch)
        held += batch.num_rows
        if held < batch_rows:
            continue
        merged = pa.concat_batches(pending)
        start = 0
        while held - start >= batch_rows:
            yield merged.slice(start, batch_rows)
            start += batch_rows
        pending = [merged.slice(start)] if start < held else []
        held -= start
    if held:
        yield pa.concat_batches(pending)


def _big_endian(
    headers: pa.Array, start: int, typecode: str, kind: pa.DataType, count: int
) -> pa.Array:
    """One fixed-width big-endian field of every envelope header, as an Arrow array.

    Arrow slices the field out of each header (the result's data is contiguous); the
    ``array`` module swaps its byte order in C; no Python object per row.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    values = array.array(typecode)
    width = values.itemsize
    field = pc.binary_slice(headers, start, start + width)
    values.frombytes(memoryview(field.buffers()[2])[: count * width])
    if sys.byteorder == "little" and width > 1:
        values.byteswap()
    return pa.Array.from_buffers(kind, count, [None, pa.py_buffer(values)])


def _unknown_as_null(values: pa.Array) -> pa.Array:
    import pyarrow.compute as pc

    return pc.if_else(pc.less(values, 0), None, values)


def _first_bad_envelope(dkeys: Sequence[bytes], raws: Sequence[bytes], path: str) -> None:
    for dkey, raw in zip(dkeys, raws, strict=True):
        decode_record(dkey[1:], raw, path)  # raises StoreCorruptedError for the bad one


def to_batch(columns: list[list[Any]], schema: pa.Schema) -> pa.RecordBatch:
    """One batch of ``schema`` from Python lists, one per field (the row-by-row paths)."""
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

    def __init__(
        self, owner: SnapshotOwner[Snapshot], snapshot: plyvel.Snapshot, metadata: StoreMetadata
    ) -> None:
        self._owner = owner
        self._snapshot: plyvel.Snapshot | None = snapshot
        self._get = snapshot.get
        self._gate = owner.gate
        self._value, self._record = point_reads(snapshot, owner.gate, owner.path)
        self.path = owner.path
        """The store's directory."""
        self.manifest = owner.manifest
        """What the store is (:class:`~spark_statestore.store.manifest.StoreManifest`)."""
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
        """The value of ``key``, or None.

        Raises
        ------
        StoreClosedError
            The snapshot or its store handle is closed (or closes during the read).
        StoreCorruptedError
            The stored value is not a valid envelope (the message names the key).
        """
        if self._snapshot is None:
            raise self._closed()
        try:
            return self._value(key, DATA_PREFIX)
        except Exception as exc:  # closed meanwhile, or LevelDB's or the envelope's error
            raise_read_error(key, exc, self.path, self._closed() if self.closed else None)

    def get_record(self, key: bytes) -> StoredRecord | None:
        """The record of ``key`` with its partition, offset and timestamp, or None (raises
        as :meth:`get` does)."""
        if self._snapshot is None:
            raise self._closed()
        try:
            return self._record(key, DATA_PREFIX)
        except Exception as exc:
            raise_read_error(key, exc, self.path, self._closed() if self.closed else None)

    def versions(self, key: bytes) -> list[Version]:
        """Every retained version of ``key`` in a versioned store, oldest first (empty for
        a key-value store's keys: they have no history)."""
        get, scan = self.raw_reads()
        return key_versions(get, scan, key, self.path)

    def raw_reads(self) -> tuple[RawGet, RawRange]:
        """``(get, scan)`` of raw keys in this snapshot, each call inside the store's gate:
        what the version helpers (:mod:`~spark_statestore.store.versions`) read through."""
        if self._snapshot is None:
            raise self._closed()
        return gated_reads(self._snapshot, self._gate)

    def columns_view(self) -> tuple[Any, Gate] | None:
        """``(LevelDB snapshot, gate)`` when the binding decodes rows into Arrow columns
        itself (the compiled extension: :mod:`~spark_statestore.store.columnar` reads
        through it), else None (plyvel, the reference path)."""
        if self._snapshot is None:
            raise self._closed()
        if not hasattr(self._snapshot, "get_records"):
            return None
        return self._snapshot, self._gate

    def stream_times(self) -> dict[int, int]:
        """A versioned store's ``{partition: observed stream time}`` (the largest record
        timestamp applied; empty before any record or for a key-value store)."""
        if self._snapshot is None:
            raise self._closed()
        with self._gate:
            raw = self._get(META_STREAM_TIME)
        return decode_stream_times(raw, self.path)

    def multi_get(self, keys: Iterable[bytes]) -> dict[bytes, bytes]:
        """``{key: value}`` of the ``keys`` that exist (raises as :meth:`get` does)."""
        found = {}
        for key in keys:
            value = self.get(key)
            if value is not None:
                found[key] = value
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
        for dkey, raw in self.envelopes(lower, upper, reverse, prefix, limit):
            yield dkey[1:], envelope_value(raw)

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
        path = self.path
        for dkey, raw in self.envelopes(lower, upper, reverse, prefix, limit):
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
        wanted = None if partitions is None else frozenset(partitions)
        rows = self.envelopes(lower, upper, reverse, prefix, limit)
        batches = (
            envelope_batch(chunk, self.path, wanted)
            for chunk in iter(lambda: list(islice(rows, batch_rows)), [])
        )
        yield from rechunk(batches, batch_rows) if wanted is not None else batches

    def count(self) -> int:
        """Number of keys (a full scan)."""
        return sum(1 for _ in self.envelopes(None, None, False, None, None))

    def envelopes(
        self,
        lower: bytes | None,
        upper: bytes | None,
        reverse: bool,
        prefix: bytes | None,
        limit: int | None,
    ) -> Generator[tuple[bytes, bytes], None, None]:
        """``(data key, envelope)`` pairs as stored, selected as :meth:`items` selects them:
        the raw rows the store's queries and scans decode in bulk."""
        if self._snapshot is None:
            raise self._closed()
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise StoreError(f"limit must be an int or None, got {limit!r}")
        try:
            start, stop, include_stop = data_bounds(lower, upper, prefix)
        except ValueError as exc:
            raise StoreError(str(exc), self.path) from None
        if limit is not None and limit <= 0:
            return
        if lower is not None and upper is not None and lower > upper:
            return
        items = iterate(self._snapshot, start, stop, include_stop, reverse, self._gate)
        yield from items if limit is None else islice(items, limit)

    def envelope_chunks(
        self, lower: bytes | None, upper: bytes | None, size: Callable[[], int]
    ) -> Generator[list[tuple[bytes, bytes]], None, None]:
        """Forward ``[lower, upper]`` scans as lists of ``size()`` raw items (a bulk path:
        :meth:`envelopes` a chunk at a time).

        Reads plyvel's iterator with ``islice`` (no Python frame per row); forward scans are
        not affected by the plyvel reverse-scan bug that :func:`iterate` works around.
        """
        if self._snapshot is None:
            raise self._closed()
        start, stop, include_stop = data_bounds(lower, upper, None)
        if lower is not None and upper is not None and lower > upper:
            return
        snapshot, gate = self._snapshot, self._gate
        with gate:
            it = snapshot.iterator(start=start, stop=stop, include_stop=include_stop)
        try:
            while True:
                with gate:
                    chunk = list(islice(it, size()))
                if not chunk:
                    return
                yield chunk
        finally:
            gate.unless_closed(it.close)

    # -- lifecycle ------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._snapshot is None or self._owner.closed

    def close(self) -> None:
        """Release the snapshot (idempotent)."""
        snapshot, self._snapshot = self._snapshot, None
        if snapshot is not None:
            self._owner.release_snapshot(self, snapshot)

    def detach(self) -> None:
        """Its store handle is closing: every later read fails with
        :class:`StoreClosedError`. Nothing is released: the database goes with the handle."""
        self._snapshot = None

    def _closed(self) -> StoreClosedError:
        return StoreClosedError(
            f"snapshot of store {self.path} at commit {self.commit_seq} is closed "
            "(or its store handle is); take a new one with store.snapshot()",
            self.path,
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
            f"Snapshot(store={self.path!r}, commit_seq={self.commit_seq}, "
            f"position={self.position.to_json()})"
        )
