"""Timestamped key-value stores: ValueAndTimestamp bytes and changelog records."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_statestore.changelog import (
    ChangelogFormatError,
    ChangelogRecord,
    decode_value_and_timestamp,
    encode_value_and_timestamp,
    timestamped_from_changelog,
)


def test_exact_bytes() -> None:
    data = encode_value_and_timestamp(b"v", 0x0102030405060708)
    assert data == bytes.fromhex("0102030405060708") + b"v"
    assert encode_value_and_timestamp(b"", -1) == b"\xff" * 8


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64), st.integers(-(2**63), 2**63 - 1))
def test_round_trip(value: bytes, timestamp: int) -> None:
    data = encode_value_and_timestamp(value, timestamp)
    assert data is not None
    assert decode_value_and_timestamp(data) == (value, timestamp)
    assert decode_value_and_timestamp(bytearray(data)) == (value, timestamp)


def test_null_stays_null() -> None:
    assert encode_value_and_timestamp(None, 123) is None
    assert decode_value_and_timestamp(None) == (None, None)


@pytest.mark.parametrize("size", range(8))
def test_short_data(size: int) -> None:
    with pytest.raises(ChangelogFormatError, match="shorter than its 8-byte timestamp"):
        decode_value_and_timestamp(bytes(size))


@pytest.mark.parametrize("timestamp", [2**63, -(2**63) - 1])
def test_timestamp_must_fit_int64(timestamp: int) -> None:
    with pytest.raises(ChangelogFormatError):
        encode_value_and_timestamp(b"v", timestamp)


def test_from_changelog_uses_the_record_timestamp() -> None:
    record = ChangelogRecord.from_parts("c", 0, 4, b"k", b"plain", timestamp=1_700_000_000_000)
    value, timestamp = timestamped_from_changelog(record)
    assert (value, timestamp) == (b"plain", 1_700_000_000_000)
    # The store value Kafka Streams would hold for it.
    stored = encode_value_and_timestamp(value, 1_700_000_000_000)
    assert decode_value_and_timestamp(stored) == (b"plain", 1_700_000_000_000)


def test_from_changelog_tombstone() -> None:
    record = ChangelogRecord.from_parts("c", 0, 5, b"k", None, timestamp=10)
    assert timestamped_from_changelog(record) == (None, None)
