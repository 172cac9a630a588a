"""Kafka's murmur2 partitioner, checked against Kafka's own test vectors."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_statestore.changelog import (
    PartitionerError,
    murmur2,
    partition_for_key,
    partitions_for_keys,
    to_positive,
)
from spark_statestore.errors import StateStoreError
from spark_statestore.native import ENV

# Vectors from Apache Kafka,
# clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2.
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
]


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS)
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected
    assert murmur2(bytearray(data)) == expected
    assert murmur2(memoryview(data)) == expected


def _java_int(n: int) -> int:
    n &= 0xFFFFFFFF
    return n - 2**32 if n >= 2**31 else n


def reference_murmur2(data: bytes) -> int:
    """A line-by-line transliteration of Utils.murmur2 with signed Java ints."""
    length = len(data)
    m, r = _java_int(0x5BD1E995), 24
    h = _java_int(_java_int(0x9747B28C) ^ length)
    for i in range(length // 4):
        i4 = i * 4
        k = _java_int(data[i4] + (data[i4 + 1] << 8) + (data[i4 + 2] << 16) + (data[i4 + 3] << 24))
        k = _java_int(k * m)
        k ^= (k & 0xFFFFFFFF) >> r
        k = _java_int(k * m)
        h = _java_int(h * m)
        h = _java_int(h ^ k)
    rest = length % 4
    if rest >= 3:
        h = _java_int(h ^ (data[(length & ~3) + 2] << 16))
    if rest >= 2:
        h = _java_int(h ^ (data[(length & ~3) + 1] << 8))
    if rest >= 1:
        h = _java_int(h ^ data[length & ~3])
        h = _java_int(h * m)
    h = _java_int(h ^ ((h & 0xFFFFFFFF) >> 13))
    h = _java_int(h * m)
    h = _java_int(h ^ ((h & 0xFFFFFFFF) >> 15))
    return h


def test_reference_agrees_with_kafka_vectors() -> None:
    for data, expected in KAFKA_VECTORS:
        assert reference_murmur2(data) == expected


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=80))
def test_murmur2_matches_the_reference(data: bytes) -> None:
    result = murmur2(data)
    assert result == reference_murmur2(data)
    assert -(2**31) <= result < 2**31


def test_empty_input() -> None:
    assert murmur2(b"") == reference_murmur2(b"")


@pytest.mark.parametrize(
    ("number", "expected"),
    [
        (0, 0),
        (5, 5),
        (-1, 2**31 - 1),
        (-(2**31), 0),
        (2**31 - 1, 2**31 - 1),
        (-973932308, 1173551340),
    ],
)
def test_to_positive(number: int, expected: int) -> None:
    assert to_positive(number) == expected


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40), st.integers(1, 10_000))
def test_partition_for_key_in_range_and_stable(key: bytes, partitions: int) -> None:
    partition = partition_for_key(key, partitions)
    assert 0 <= partition < partitions
    assert partition == partition_for_key(bytes(key), partitions)
    assert partition == (reference_murmur2(key) & 0x7FFFFFFF) % partitions


def test_partition_for_key_known_values() -> None:
    # toPositive(-973932308) = 1173551340
    assert partition_for_key(b"21", 1) == 0
    assert partition_for_key(b"21", 7) == 1173551340 % 7
    assert partition_for_key(b"abc", 12) == 479470107 % 12


@pytest.mark.parametrize("partitions", [0, -1, True, 2.0, "4"])
def test_partition_count_must_be_a_positive_int(partitions: object) -> None:
    with pytest.raises(PartitionerError) as info:
        partition_for_key(b"k", partitions)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, StateStoreError)


# -- many keys at once (Arrow) ---------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.binary(max_size=30), max_size=60),
    st.integers(1, 2**31 - 1),
    st.integers(0, 5),
    st.integers(0, 5),
)
def test_partitions_for_keys_equals_the_per_key_partitioner(
    keys: list[bytes], partitions: int, skip: int, trim: int
) -> None:
    """Mixed lengths, one length, empty keys, and sliced Arrow arrays (non-zero offsets)."""
    expected = [partition_for_key(k, partitions) for k in keys]
    assert partitions_for_keys(keys, partitions) == expected
    padded = pa.array([b"x" * skip] * skip + keys + [b"y"] * trim, pa.binary())
    assert partitions_for_keys(padded.slice(skip, len(keys)), partitions) == expected
    large = pa.array(keys, pa.large_binary())
    assert partitions_for_keys(large, partitions) == expected


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS)
def test_partitions_for_keys_matches_kafka(data: bytes, expected: int) -> None:
    same_length = [data, data[::-1]]
    assert partitions_for_keys(same_length, 2**31 - 1) == [
        to_positive(expected) % (2**31 - 1),
        partition_for_key(data[::-1], 2**31 - 1),
    ]


def test_partitions_for_keys_refuses_nulls_and_bad_counts() -> None:
    with pytest.raises(PartitionerError, match="null"):
        partitions_for_keys(pa.array([b"a", None], pa.binary()), 3)
    with pytest.raises(PartitionerError, match=">= 1"):
        partitions_for_keys([b"a"], 0)
    assert partitions_for_keys([], 3) == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=30), max_size=60), st.integers(1, 2**31 - 1))
def test_a_list_partitions_the_same_with_the_extension_on_and_off(
    keys: list[bytes], partitions: int
) -> None:
    """The compiled partitioner takes lists of bytes; the reference path is Arrow's."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ENV, "0")
        reference = partitions_for_keys(keys, partitions)
    assert partitions_for_keys(keys, partitions) == reference


def test_a_list_with_a_null_or_non_bytes_key_takes_the_reference_path() -> None:
    with pytest.raises(PartitionerError, match="null"):
        partitions_for_keys([b"a", None], 3)  # type: ignore[list-item]
    assert (
        partitions_for_keys([b"abc", bytearray(b"abc")], 7)
        == [  # type: ignore[list-item]
            partition_for_key(b"abc", 7)
        ]
        * 2
    )
