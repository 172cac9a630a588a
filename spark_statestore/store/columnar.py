"""Scans and multi-gets decoded into Arrow by the compiled extension (the fast path of
:mod:`~spark_statestore.store.scan` and of lookups): LevelDB's rows become the columns of
:func:`~spark_statestore.store.snapshot.arrow_schema` without a Python object per row.

The extension hands back the few rows it does not decode itself: an envelope that keeps its
record's headers (decoded here by :func:`~spark_statestore.store.layout.decode_record`, as on
the reference path) and a malformed envelope (the same function raises the same
:class:`~spark_statestore.store.errors.StoreCorruptedError`, naming the key).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from typing import TYPE_CHECKING, Any

from spark_statestore.changelog.columns import arrow_array
from spark_statestore.store.errors import StoreCorruptedError
from spark_statestore.store.gate import Gate
from spark_statestore.store.layout import DATA_PREFIX, DATA_START, DATA_STOP, decode_record
from spark_statestore.store.snapshot import arrow_schema, headers_type, no_headers

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["MAX_BATCH_BYTES", "decoded_batch", "native_key_batches", "native_range_batches"]

MAX_BATCH_BYTES = 64 * 1024 * 1024
"""Keys and values of one decoded batch stop growing past this (a batch of large values)."""


def decoded_batch(decoded: tuple[Any, ...], path: str) -> pa.RecordBatch:
    """The record batch of the extension's decoded tuple (see ``envelopes.rs``)."""
    import pyarrow as pa

    rows, keys, values, partitions, offsets, timestamps, header_rows, bad = decoded
    if bad is not None:
        key, envelope = bad
        decode_record(key, envelope, path)  # raises StoreCorruptedError naming the key
        raise StoreCorruptedError(
            f"store {path}: the envelope of key {key!r} does not decode", path
        )  # not reached: the decoder refuses what the extension refused

    key_array = arrow_array(pa.binary(), rows, *keys)
    headers = no_headers(rows) if not header_rows else _headers(rows, header_rows, key_array, path)
    return pa.RecordBatch.from_arrays(
        [
            key_array,
            arrow_array(pa.binary(), rows, *values),
            arrow_array(pa.int32(), rows, *partitions),
            arrow_array(pa.int64(), rows, *offsets),
            arrow_array(pa.timestamp("ms", tz="UTC"), rows, *timestamps),
            headers,
        ],
        schema=arrow_schema(),
    )


def _headers(
    rows: int, header_rows: list[tuple[int, bytes]], keys: pa.Array, path: str
) -> pa.Array:
    """The headers column: empty lists but at ``header_rows``, decoded as the reference
    path decodes them."""
    import pyarrow as pa

    kind = headers_type()
    lengths = [0] * rows
    entries: list[dict[str, Any]] = []
    for row, envelope in header_rows:
        record = decode_record(keys[row].as_py(), envelope, path)
        lengths[row] = len(record.headers)
        entries += [{"key": k, "value": v} for k, v in record.headers]
    offsets = [0]
    for length in lengths:
        offsets.append(offsets[-1] + length)
    return pa.ListArray.from_arrays(
        pa.array(offsets, pa.int32()), pa.array(entries, kind.value_type), type=kind
    )


def native_range_batches(
    leveldb_snapshot: Any,
    gate: Gate,
    path: str,
    lower: bytes | None,
    upper: bytes | None,
    upper_inclusive: bool,
    size: Callable[[], int],
    partitions: Iterable[int] | None,
) -> Generator[tuple[pa.RecordBatch, int], None, None]:
    """``(batch, rows examined)`` of a forward scan of user keys ``[lower, upper]`` (upper
    exclusive unless ``upper_inclusive``), ``size()`` rows a batch at most, only rows of
    changelog ``partitions`` (None: all); each batch read and decoded in one call."""
    start = DATA_START if lower is None else DATA_PREFIX + lower
    if upper is None:
        stop, include_stop = DATA_STOP, False
    else:
        stop, include_stop = DATA_PREFIX + upper, upper_inclusive
    wanted = None if partitions is None else sorted(partitions)
    with gate:
        it = leveldb_snapshot.iterator(start=start, stop=stop, include_stop=include_stop)
    try:
        while True:
            with gate:
                decoded, examined, done = it.next_records(
                    max(1, size()), MAX_BATCH_BYTES, len(DATA_PREFIX), wanted
                )
            yield decoded_batch(decoded, path), examined
            if done:
                return
    finally:
        gate.unless_closed(it.close)


def native_key_batches(
    leveldb_snapshot: Any,
    gate: Gate,
    path: str,
    keys: list[bytes] | pa.Array,
    batch_rows: int,
) -> Generator[pa.RecordBatch, None, None]:
    """The records of ``keys`` (bytes, or an Arrow binary array) that exist, in the order
    given, read ``batch_rows`` keys a call (one multi-get each, decoded into one batch)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for start in range(0, len(keys), batch_rows):
        if isinstance(keys, pa.Array):
            wanted = keys.slice(start, batch_rows)
        else:
            wanted = pa.array(keys[start : start + batch_rows], pa.binary())
        with gate:
            decoded = leveldb_snapshot.get_records(wanted, DATA_PREFIX)
        batch = decoded_batch(decoded, path)
        found = batch.filter(pc.is_valid(batch.column(1)))
        if found.num_rows:
            yield found
