"""Kafka's default key partitioner, byte for byte (Java murmur2).

The sink partitions changelog records like Kafka's producers do, so that
``partition == partition_for_key(key, partitions)`` holds for records Kafka Streams wrote
and for records we write.
"""

from __future__ import annotations

import struct

from spark_statestore.changelog.errors import PartitionerError

__all__ = ["murmur2", "partition_for_key", "to_positive"]

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
    if isinstance(num_partitions, bool) or not isinstance(num_partitions, int):
        raise PartitionerError(
            f"num_partitions must be an int >= 1, got {type(num_partitions).__name__}"
        )
    if num_partitions < 1:
        raise PartitionerError(f"num_partitions must be >= 1, got {num_partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions
