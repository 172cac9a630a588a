"""Scans of a snapshot: the rows a :class:`~spark_statestore.store.scan_spec.ScanSpec` selects,
as Arrow record batches.

:func:`scan_batches` runs a spec (:mod:`~spark_statestore.store.scan_spec`, re-exported here)
against a :class:`Snapshot` as point reads or one bounded LevelDB iteration, never a scan of
the whole store when the spec is narrower; a versioned store's as-of scans read through
:func:`~spark_statestore.store.versioned_scan.as_of_rows`.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any

from spark_statestore.store.columnar import native_key_batches, native_range_batches
from spark_statestore.store.errors import InvalidScanError, UncoveredKeySchemaError
from spark_statestore.store.layout import DATA_PREFIX
from spark_statestore.store.scan_spec import KeyRange, ScanSpec, ScanStats, in_range, prefix_end
from spark_statestore.store.snapshot import (
    DEFAULT_BATCH_ROWS,
    arrow_schema,
    envelope_batch,
    rechunk,
    to_batch,
)
from spark_statestore.store.versioned_scan import as_of_rows

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_statestore.store.snapshot import Snapshot

# ScanSpec and ScanStats live in scan_spec (the versioned scan needs them too); they stay
# importable from here, where their callers have always found them.
__all__ = ["ScanSpec", "ScanStats", "check_framed_ids", "lookup_batches", "scan_batches"]


def scan_batches(
    snapshot: Snapshot,
    spec: ScanSpec,
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    stats: ScanStats | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of ``snapshot`` that ``spec`` selects, as Arrow record batches.

    Key lookups read one point read per key; bounds and prefixes read one bounded LevelDB
    iteration; an empty spec reads nothing. Batches have at most ``batch_rows`` rows and the
    schema :func:`~spark_statestore.store.snapshot.arrow_schema`, keys ascending.

    Parameters
    ----------
    snapshot
        The snapshot to read.
    spec
        What to read.
    batch_rows
        The maximum rows per batch.
    stats
        Counters to update while the batches are produced (see :class:`ScanStats`).

    Raises
    ------
    InvalidScanError
        If ``spec`` is not a ScanSpec or ``batch_rows`` is not an int >= 1.
    StoreClosedError
        If the snapshot (or its store) is closed.
    """
    if not isinstance(spec, ScanSpec):
        raise InvalidScanError(f"scan_batches() takes a ScanSpec, got {spec!r}")
    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
        raise InvalidScanError(f"batch_rows must be an int >= 1, got {batch_rows!r}")
    return _scan(snapshot, spec, batch_rows, stats if stats is not None else ScanStats())


def lookup_batches(
    snapshot: Snapshot,
    keys: pa.Array,
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    stats: ScanStats | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of ``keys`` that exist in ``snapshot``: the rows of
    ``ScanSpec.for_keys(keys.to_pylist())``, keys ascending, for keys that arrive as an Arrow
    array (a lookup of a batch of Spark rows). On the fast path the keys are deduplicated
    and sorted in Arrow and read by one multi-get per ``batch_rows`` keys: no Python object
    per key.

    Parameters
    ----------
    snapshot
        The snapshot to read.
    keys
        A binary (or large binary) array without nulls; repeats are read once.
    batch_rows
        The maximum rows per batch (and keys per multi-get).
    stats
        Counters to update while the batches are produced (see :class:`ScanStats`).

    Raises
    ------
    InvalidScanError
        If ``keys`` is not a binary array, holds a null, or ``batch_rows`` is not an int >= 1.
    StoreClosedError
        If the snapshot (or its store) is closed.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
        raise InvalidScanError(f"batch_rows must be an int >= 1, got {batch_rows!r}")
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if not isinstance(keys, pa.Array) or not (
        pa.types.is_binary(keys.type) or pa.types.is_large_binary(keys.type)
    ):
        raise InvalidScanError(
            f"lookup keys must be an Arrow binary array, got {type(keys).__name__} "
            f"{getattr(keys, 'type', '')}".rstrip()
        )
    if keys.null_count:
        raise InvalidScanError(f"lookup keys hold {keys.null_count} null(s); a key is bytes")
    stats = stats if stats is not None else ScanStats()
    view = snapshot.columns_view()
    if view is None:  # the reference path: the same rows through a key spec
        return _scan(snapshot, ScanSpec.for_keys(keys.to_pylist()), batch_rows, stats)
    unique = pc.unique(keys.cast(pa.binary()))
    ordered = unique.take(pc.sort_indices(unique))  # ascending bytes, as a key spec's
    return _counted(native_key_batches(*view, snapshot.path, ordered, batch_rows), stats)


def _counted(
    batches: Generator[pa.RecordBatch, None, None], stats: ScanStats
) -> Generator[pa.RecordBatch, None, None]:
    try:
        for batch in batches:
            stats.rows_examined += batch.num_rows
            stats.rows_returned += batch.num_rows
            yield batch
    finally:
        batches.close()


_Row = tuple[bytes, bytes, int | None, int | None, int | None, Any]


def _scan(
    snapshot: Snapshot, spec: ScanSpec, batch_rows: int, stats: ScanStats
) -> Iterator[pa.RecordBatch]:
    if spec.framed_ids is not None:
        check_framed_ids(snapshot, spec.framed_ids)
    bounds = spec.key_range()
    if bounds is None or spec.is_empty():
        return
    if spec.as_of is not None:
        rows = _without_headers(as_of_rows(snapshot, spec, stats))
    elif spec.keys is None:
        yield from _range_batches(snapshot, spec, bounds, batch_rows, stats)
        return
    else:
        view = snapshot.columns_view()
        if view is not None:
            yield from _native_point_batches(snapshot, view, spec, bounds, batch_rows, stats)
            return
        rows = _point_reads(snapshot, spec.keys, bounds, stats)
    schema = arrow_schema()
    wanted = spec.partitions
    remaining = -1 if spec.limit is None else spec.limit  # -1: no limit
    columns: list[list[Any]] = [[], [], [], [], [], []]
    keys, values, parts, offsets, stamps, headers = columns
    try:
        for key, value, partition, offset, timestamp, kept in rows:
            if wanted is not None and partition not in wanted:
                continue
            keys.append(key)
            values.append(value)
            parts.append(partition)
            offsets.append(offset)
            stamps.append(timestamp)
            headers.append([{"key": k, "value": v} for k, v in kept])
            stats.rows_returned += 1
            remaining -= 1
            if remaining == 0:
                break
            if len(keys) >= batch_rows:
                yield to_batch(columns, schema)
                for column in columns:
                    column.clear()
    finally:
        rows.close()  # at the limit, or when the caller stops: end the LevelDB iteration now
    if keys:
        yield to_batch(columns, schema)


_FRAME_HEADER = 5  # a registry frame: the magic byte 0, a 4-byte big-endian schema id
_SHOWN_KEY_BYTES = 16


def check_framed_ids(snapshot: Snapshot, ids: frozenset[int]) -> None:
    """Check that every key of ``snapshot`` is a registry frame under one of ``ids``.

    A skip scan: one LevelDB seek per distinct frame header (the keys of one schema id are
    contiguous, since the id is the key's first bytes after the magic byte), so it costs a
    seek per id in the store, not a read of the store.

    Raises
    ------
    UncoveredKeySchemaError
        Naming the other ids found (and an example key of each, in hex), and the ids the
        lookup was encoded for.
    """
    others: dict[int | None, bytes] = {}
    lower: bytes | None = None
    while True:
        key = _first_key(snapshot, lower)
        if key is None:
            break
        header = key[:_FRAME_HEADER]
        if len(header) < _FRAME_HEADER or header[0] != 0:
            others.setdefault(None, key)
            header = key[:1]
        else:
            schema_id = int.from_bytes(header[1:], "big", signed=True)
            if schema_id not in ids:
                others.setdefault(schema_id, key)
        lower = prefix_end(header)
        if lower is None:
            break
    if not others:
        return
    found = "; ".join(
        ("keys that are not registry frames" if i is None else f"schema id {i}")
        + f" (e.g. key {k[:_SHOWN_KEY_BYTES].hex()}{'...' if len(k) > _SHOWN_KEY_BYTES else ''})"
        for i, k in sorted(others.items(), key=lambda item: (item[0] is not None, item[0] or 0))
    )
    encoded = ", ".join(str(i) for i in sorted(ids)) or "none"
    raise UncoveredKeySchemaError(
        f"the store at {snapshot.path} holds {found}, but the lookup's keys are encoded "
        f"under schema id(s) {encoded} only: the same key stored under another id has other "
        "bytes, so the lookup cannot tell whether it is there. Read without a key lookup "
        "and filter in Spark, or look up keys under the subject those keys were registered "
        "under",
        frozenset(others),
        snapshot.path,
    )


def _first_key(snapshot: Snapshot, lower: bytes | None) -> bytes | None:
    chunks = snapshot.envelope_chunks(lower, None, lambda: 1)
    try:
        for chunk in chunks:
            return chunk[0][0][len(DATA_PREFIX) :]
        return None
    finally:
        chunks.close()


def _without_headers(
    rows: Generator[tuple[bytes, bytes, int | None, int | None, int | None], None, None],
) -> Generator[_Row, None, None]:
    """Versioned rows as scan rows: a versioned store keeps no headers."""
    try:
        for row in rows:
            yield (*row, ())
    finally:
        rows.close()  # end the LevelDB iteration with this generator


def _point_reads(
    snapshot: Snapshot, keys: tuple[bytes, ...], bounds: KeyRange, stats: ScanStats
) -> Generator[_Row, None, None]:
    """One point read per key inside ``bounds`` (keys are sorted: output is ascending)."""
    for key in keys:
        if in_range(key, bounds):
            record = snapshot.get_record(key)
            if record is not None:
                stats.rows_examined += 1
                yield (
                    key,
                    record.value,
                    record.partition,
                    record.offset,
                    record.timestamp,
                    record.headers,
                )


def _range_batches(
    snapshot: Snapshot, spec: ScanSpec, bounds: KeyRange, batch_rows: int, stats: ScanStats
) -> Iterator[pa.RecordBatch]:
    """One bounded LevelDB iteration over ``bounds``, decoded a chunk at a time in Arrow."""
    lower, upper, upper_inclusive = bounds
    # The iteration includes ``upper``; an exclusive upper bound drops that one key, the
    # last the iteration can reach, so nothing past the bound is read.
    stop_at = None if upper is None or upper_inclusive else DATA_PREFIX + upper
    wanted = spec.partitions
    path = snapshot.path
    needed = spec.limit  # rows still to return (None: all)

    def size() -> int:
        # Never read more rows than the limit still needs: each could be returned.
        return batch_rows if needed is None else min(needed, batch_rows)

    view = snapshot.columns_view()
    raw_chunks: Generator[tuple[pa.RecordBatch, int], None, None]
    if view is not None:
        raw_chunks = native_range_batches(*view, path, lower, upper, upper_inclusive, size, wanted)
    else:
        raw = snapshot.envelope_chunks(lower, upper, size)
        raw_chunks = _decoded_chunks(raw, stop_at, path, wanted)

    def chunks() -> Iterator[pa.RecordBatch]:
        nonlocal needed
        for batch, examined in raw_chunks:
            stats.rows_examined += examined
            if needed is not None:
                batch = batch.slice(0, needed)
                needed -= batch.num_rows
            if batch.num_rows:
                yield batch
            if needed == 0:
                return

    try:
        for batch in chunks() if wanted is None else rechunk(chunks(), batch_rows):
            stats.rows_returned += batch.num_rows
            yield batch
    finally:
        raw_chunks.close()  # at the limit, or when the caller stops: end the iteration now


def _decoded_chunks(
    raw_chunks: Generator[list[tuple[bytes, bytes]], None, None],
    stop_at: bytes | None,
    path: str,
    wanted: frozenset[int] | None,
) -> Generator[tuple[pa.RecordBatch, int], None, None]:
    """``(batch, rows examined)`` of raw ``(data key, envelope)`` chunks (the reference
    path), without the key ``stop_at`` (an exclusive upper bound)."""
    try:
        for chunk in raw_chunks:
            examined = len(chunk)
            if chunk[-1][0] == stop_at:
                chunk.pop()
            yield envelope_batch(chunk, path, wanted), examined
    finally:
        raw_chunks.close()


def _native_point_batches(
    snapshot: Snapshot,
    view: tuple[Any, Any],
    spec: ScanSpec,
    bounds: KeyRange,
    batch_rows: int,
    stats: ScanStats,
) -> Iterator[pa.RecordBatch]:
    """Key lookups on the fast path: one multi-get per batch of keys, decoded in Arrow."""
    import pyarrow as pa
    import pyarrow.compute as pc

    assert spec.keys is not None
    if bounds[0] is None and bounds[1] is None:  # no key range: every key (the common case)
        keys = list(spec.keys)
    else:
        keys = [key for key in spec.keys if in_range(key, bounds)]
    remaining = spec.limit
    wanted = None if spec.partitions is None else pa.array(sorted(spec.partitions), pa.int32())
    for found in native_key_batches(*view, snapshot.path, keys, batch_rows):
        stats.rows_examined += found.num_rows
        if wanted is not None:
            found = found.filter(pc.is_in(found.column(2), wanted))
        if remaining is not None:
            found = found.slice(0, remaining)
            remaining -= found.num_rows
        if found.num_rows:
            stats.rows_returned += found.num_rows
            yield found
        if remaining == 0:
            return
