"""Kafka's default key partitioner, byte for byte (Java murmur2).

The sink partitions changelog records like Kafka's producers do, so that
``partition == partition_for_key(key, partitions)`` holds for records Kafka Streams wrote
and for records we write.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

from spark_statestore.changelog.errors import PartitionerError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["murmur2", "partition_for_key", "partitions_for_keys", "to_positive"]

# Constants of org.apache.kafka.common.utils.Utils.murmur2.
_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_SIGN = 0x80000000


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's 32-bit murmur2 hash (``org.apache.kafka.common.utils.Utils.murmur2``).

    Java ``int`` arithmetic is emulated on unsigned 32-bit values (so ``>>`` is Java's
    ``>>>``); the result is converted back to a signed 32-bit int like Java returns it.

    Parameters
    ----------
    data
        The bytes to hash (a serialized key).

    Returns
    -------
    int
        A signed 32-bit integer, equal to what the Java client computes.
    """
    length = len(data)
    h = (_SEED ^ length) & _MASK
    blocks = length >> 2
    if blocks:
        # Java reads each 4-byte chunk little-endian; "<" pins that on every platform.
        for k in struct.unpack_from(f"<{blocks}I", data):
            k = (k * _M) & _MASK
            k ^= k >> 24
            h = ((h * _M) & _MASK) ^ ((k * _M) & _MASK)
    tail = length & 3
    if tail:
        # Java's switch (length % 4) falls through from case 3 to case 1.
        base = length - tail
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & _SIGN else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit of a 32-bit int (``n & 0x7fffffff``).

    Not ``abs``: ``to_positive(-1) == 2147483647``.
    """
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition Kafka's default partitioner assigns to a keyed record.

    ``BuiltInPartitioner.partitionForKey``: ``toPositive(murmur2(key)) % numPartitions``.

    Raises
    ------
    PartitionerError
        If ``num_partitions`` is not an int >= 1.
    """
    _check_partitions(num_partitions)
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


def _check_partitions(num_partitions: object) -> None:
    if isinstance(num_partitions, bool) or not isinstance(num_partitions, int):
        raise PartitionerError(
            f"num_partitions must be an int >= 1, got {type(num_partitions).__name__}"
        )
    if num_partitions < 1:
        raise PartitionerError(f"num_partitions must be >= 1, got {num_partitions}")


def partitions_for_keys(keys: pa.Array | Sequence[bytes], num_partitions: int) -> list[int]:
    """:func:`partition_for_key` of many keys at once: for a list of ``bytes``, in the
    compiled extension when it is on; else column-wise in Arrow.

    Keys are grouped by length; within a group every 4-byte block and tail byte is one Arrow
    column, so the hash costs a few dozen vectorized operations per distinct key length
    instead of a Python loop per key (the sink partitions every change it publishes).

    Parameters
    ----------
    keys
        A binary (or large binary) Arrow array, or a sequence of bytes; no nulls.
    num_partitions
        The topic's partition count.

    Raises
    ------
    PartitionerError
        If ``num_partitions`` is not an int >= 1 or a key is null.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from spark_statestore import native

    _check_partitions(num_partitions)
    extension = native.module()
    if extension is not None and type(keys) is list and num_partitions < 2**31:
        # The compiled partitioner; None when a key is not plain bytes (decided below).
        partitions: list[int] | None = extension.partitions_for_keys(keys, num_partitions)
        if partitions is not None:
            return partitions
    array = keys if isinstance(keys, pa.Array) else pa.array(keys, pa.binary())
    if array.null_count:
        raise PartitionerError("a changelog key is null: every record needs a key")
    if len(array) == 0:
        return []
    if pa.types.is_large_binary(array.type):
        array = array.cast(pa.binary())
    lengths = pc.binary_length(array)
    distinct = pc.unique(lengths).to_pylist()
    if len(distinct) == 1:
        single: list[int] = _partitions_of_length(array, distinct[0], num_partitions).to_pylist()
        return single
    result = [0] * len(array)
    for length in distinct:
        where = pc.indices_nonzero(pc.equal(lengths, length))
        group = _partitions_of_length(array.take(where), length, num_partitions)
        for index, partition in zip(where.to_pylist(), group.to_pylist(), strict=True):
            result[index] = partition
    return result


def _partitions_of_length(keys: pa.Array, length: int, num_partitions: int) -> pa.Array:
    """The partitions of ``keys``, all ``length`` bytes long (Arrow uint32 arithmetic wraps
    like Java's int multiplication; ``shift_right`` on unsigned values is Java's ``>>>``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    count = len(keys)
    u32 = pa.uint32()
    m = pa.scalar(_M, u32)

    def byte(i: int) -> pa.Array:
        return pc.list_element(matrix, i).cast(u32)

    def shifted(value: pa.Array, bits: int) -> pa.Array:
        return pc.shift_left(value, pa.scalar(bits, u32))

    if length:
        first = pa.Array.from_buffers(pa.int32(), 1, [None, keys.buffers()[1]], offset=keys.offset)
        start = first[0].as_py()
        data = keys.buffers()[2].slice(start, count * length)
        flat = pa.Array.from_buffers(pa.uint8(), count * length, [None, data])
        matrix = pa.FixedSizeListArray.from_arrays(flat, length)
    h = pa.repeat(pa.scalar((_SEED ^ length) & _MASK, u32), count)
    for block in range(length >> 2):
        base = block * 4
        k = pc.bit_wise_or(
            pc.bit_wise_or(byte(base), shifted(byte(base + 1), 8)),
            pc.bit_wise_or(shifted(byte(base + 2), 16), shifted(byte(base + 3), 24)),
        )
        k = pc.multiply(k, m)
        k = pc.bit_wise_xor(k, pc.shift_right(k, pa.scalar(24, u32)))
        h = pc.bit_wise_xor(pc.multiply(h, m), pc.multiply(k, m))
    tail = length & 3
    if tail:
        base = length - tail
        if tail == 3:
            h = pc.bit_wise_xor(h, shifted(byte(base + 2), 16))
        if tail >= 2:
            h = pc.bit_wise_xor(h, shifted(byte(base + 1), 8))
        h = pc.multiply(pc.bit_wise_xor(h, byte(base)), m)
    h = pc.bit_wise_xor(h, pc.shift_right(h, pa.scalar(13, u32)))
    h = pc.multiply(h, m)
    h = pc.bit_wise_xor(h, pc.shift_right(h, pa.scalar(15, u32)))
    positive = pc.bit_wise_and(h, pa.scalar(0x7FFFFFFF, u32))
    parts = pa.scalar(num_partitions, u32)
    return pc.subtract(positive, pc.multiply(pc.divide(positive, parts), parts))
