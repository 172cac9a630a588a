"""Window and session store key layouts (WindowKeySchema, SessionKeySchema)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_statestore.changelog import (
    ChangelogFormatError,
    SessionKey,
    WindowedKey,
    decode_session_key,
    decode_window_key,
    encode_session_key,
    encode_window_key,
)

INT64_MAX = 2**63 - 1
timestamps = st.integers(0, INT64_MAX)
seqnums = st.integers(-(2**31), 2**31 - 1)


def test_window_key_exact_bytes() -> None:
    data = encode_window_key(b"user", 0x0102030405060708, 7)
    assert data == b"user" + bytes.fromhex("0102030405060708") + bytes.fromhex("00000007")
    assert decode_window_key(data) == WindowedKey(b"user", 0x0102030405060708, 7)


def test_session_key_exact_bytes_end_before_start() -> None:
    data = encode_session_key(b"k", window_start=1, window_end=2)
    assert data == b"k" + bytes.fromhex("0000000000000002") + bytes.fromhex("0000000000000001")
    assert decode_session_key(data) == SessionKey(b"k", window_start=1, window_end=2)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40), timestamps, seqnums)
def test_window_key_round_trip(key: bytes, start: int, seqnum: int) -> None:
    data = encode_window_key(key, start, seqnum)
    assert len(data) == len(key) + 12
    decoded = decode_window_key(data)
    assert decoded == WindowedKey(key, start, seqnum)
    assert decoded.encode() == data
    assert WindowedKey.decode(bytearray(data)) == decoded


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40), timestamps, timestamps)
def test_session_key_round_trip(key: bytes, a: int, b: int) -> None:
    start, end = min(a, b), max(a, b)
    data = encode_session_key(key, start, end)
    assert len(data) == len(key) + 16
    decoded = decode_session_key(data)
    assert decoded == SessionKey(key, start, end)
    assert decoded.encode() == data
    assert SessionKey.decode(bytearray(data)) == decoded


def test_empty_user_key() -> None:
    assert decode_window_key(bytes(12)) == WindowedKey(b"", 0, 0)
    assert decode_session_key(bytes(16)) == SessionKey(b"", 0, 0)


@pytest.mark.parametrize("size", range(12))
def test_truncated_window_key(size: int) -> None:
    with pytest.raises(ChangelogFormatError, match="shorter than its 12-byte suffix"):
        decode_window_key(bytes(size))


@pytest.mark.parametrize("size", range(16))
def test_truncated_session_key(size: int) -> None:
    with pytest.raises(ChangelogFormatError, match="shorter than its 16-byte suffix"):
        decode_session_key(bytes(size))


def test_negative_window_start_is_rejected_like_kafka_streams_window() -> None:
    with pytest.raises(ChangelogFormatError, match="negative window start"):
        decode_window_key(b"k" + struct.pack(">qi", -1, 0))


def test_session_with_end_before_start_is_rejected() -> None:
    # Reading the suffix in the wrong order (start first) would make this a valid session.
    with pytest.raises(ChangelogFormatError, match="start 5, end 3"):
        decode_session_key(b"k" + struct.pack(">qq", 3, 5))
    with pytest.raises(ChangelogFormatError):
        decode_session_key(b"k" + struct.pack(">qq", 3, -1))


@pytest.mark.parametrize(("start", "seqnum"), [(-1, 0), (2**63, 0), (0, 2**31), (0, -(2**31) - 1)])
def test_window_key_encode_validates_ranges(start: int, seqnum: int) -> None:
    with pytest.raises(ChangelogFormatError):
        encode_window_key(b"k", start, seqnum)


@pytest.mark.parametrize(("start", "end"), [(-1, 0), (5, 4), (0, 2**63)])
def test_session_key_encode_validates_ranges(start: int, end: int) -> None:
    with pytest.raises(ChangelogFormatError):
        encode_session_key(b"k", start, end)


def test_decode_errors_can_be_located() -> None:
    with pytest.raises(ChangelogFormatError) as info:
        decode_window_key(b"short")
    located = info.value.at("w-changelog", 1, 99)
    assert type(located) is ChangelogFormatError
    assert (located.topic, located.partition, located.offset) == ("w-changelog", 1, 99)
    assert str(located).endswith("at topic w-changelog partition 1 offset 99")
    assert located.reason == info.value.reason


def test_encode_rejects_non_bytes_key() -> None:
    with pytest.raises(TypeError):
        encode_window_key(5, 0)  # type: ignore[arg-type]
