"""Changelog records in columns: keys, values, partitions, offsets and timestamps as Arrow
arrays, the form records travel in between a Kafka fetch and a store's ``WriteBatch`` on the
fast path (no Python object per record).

pyarrow is imported when a :class:`RecordColumns` is made, not with this module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["RecordColumns", "arrow_array"]

RowTuple = tuple[bytes, "bytes | None", int, int, int]


def arrow_array(kind: pa.DataType, rows: int, *buffers: Any) -> pa.Array:
    """An Arrow array of ``rows`` values over the compiled extension's buffers, without
    copying them: ``buffers`` as Arrow lays them out for ``kind`` (validity or None first,
    then offsets and data for binary and string, the values for fixed-width types)."""
    import pyarrow as pa

    return pa.Array.from_buffers(
        kind, rows, [None if b is None else pa.py_buffer(b) for b in buffers]
    )


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """Changelog records as five Arrow arrays of one length, in changelog order per
    partition: ``keys`` (binary), ``values`` (binary; null deletes the key), ``partitions``
    (int32), ``offsets`` (int64) and ``timestamps`` (int64, epoch ms; -1 unknown).

    The row form of the same records is the follower's ``Row`` tuple
    ``(key, value, partition, offset, timestamp)`` (:meth:`to_rows`, :meth:`from_rows`).
    """

    keys: pa.Array
    values: pa.Array
    partitions: pa.Array
    offsets: pa.Array
    timestamps: pa.Array

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def from_buffers(
        cls,
        rows: int,
        keys: tuple[Any, Any, Any],
        values: tuple[Any, Any, Any],
        partitions: Any,
        offsets: Any,
        timestamps: Any,
    ) -> RecordColumns:
        """Wrap buffers the compiled reader filled (keys and values as ``(validity or None,
        int32 offsets, data)``; the others as little-endian int32/int64 bytes) without
        copying them."""
        import pyarrow as pa

        return cls(
            arrow_array(pa.binary(), rows, *keys),
            arrow_array(pa.binary(), rows, *values),
            arrow_array(pa.int32(), rows, None, partitions),
            arrow_array(pa.int64(), rows, None, offsets),
            arrow_array(pa.int64(), rows, None, timestamps),
        )

    @classmethod
    def from_rows(cls, rows: Sequence[RowTuple]) -> RecordColumns:
        """The columns of ``Row`` tuples."""
        import pyarrow as pa

        keys, values, partitions, offsets, stamps = zip(*rows, strict=True) if rows else ((),) * 5
        return cls(
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(partitions, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array(stamps, pa.int64()),
        )

    def to_lists(self) -> tuple[list[Any], list[Any], list[Any], list[Any], list[Any]]:
        """The five columns as Python lists (the reference path's form)."""
        return (
            self.keys.to_pylist(),
            self.values.to_pylist(),
            self.partitions.to_pylist(),
            self.offsets.to_pylist(),
            self.timestamps.to_pylist(),
        )

    def to_rows(self) -> list[RowTuple]:
        """The records as ``Row`` tuples."""
        return list(zip(*self.to_lists(), strict=True))

    def with_key_prefix(self, prefix: bytes) -> tuple[RecordColumns, list[int]]:
        """The records whose key starts with ``prefix``, and their indexes here."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if not prefix:
            return self, list(range(len(self)))
        size = len(prefix)
        heads = pc.binary_slice(self.keys, 0, size)
        mask = pc.equal(heads, pa.scalar(prefix, pa.binary()))
        selected = pc.indices_nonzero(mask).to_pylist()
        return self.take(selected), selected

    def take(self, indexes: Sequence[int]) -> RecordColumns:
        """The records at ``indexes``, in that order."""
        import pyarrow as pa

        chosen = pa.array(indexes, pa.int64())
        return self._each(lambda column: column.take(chosen))

    def _each(self, change: Callable[[pa.Array], pa.Array]) -> RecordColumns:
        columns = (self.keys, self.values, self.partitions, self.offsets, self.timestamps)
        return RecordColumns(*(change(column) for column in columns))
