"""The column reader's ``c`` header decoder against the Python codec: it accepts exactly the
values the codec accepts, with the same entries (every other value goes to the Python rules,
which name what is wrong with it)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from spark_statestore.changelog.errors import PositionHeaderError
from spark_statestore.changelog.position_codec import decode_entries, encode_position
from spark_statestore.position import Position
from tests.native_util import native_or_skip

native = native_or_skip()

positions = st.dictionaries(
    st.text(min_size=1, max_size=5),
    st.dictionaries(st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1), max_size=3),
    max_size=3,
).map(Position.from_map)


def python_entries(data: bytes) -> list[tuple[str, int, int]] | None:
    try:
        return decode_entries(data)
    except PositionHeaderError:
        return None


def check(data: bytes) -> None:
    assert native.decode_position_entries(data) == python_entries(data), data


@settings(max_examples=400, deadline=None)
@given(position=positions, pad=st.booleans(), cut=st.integers(0, 200), flip=st.integers(0, 300))
def test_well_formed_truncated_and_flipped_values(
    position: Position, pad: bool, cut: int, flip: int
) -> None:
    data = encode_position(position, pad_like_kafka_streams=pad)
    check(data)
    check(data[: max(0, len(data) - cut)])
    if data:
        changed = bytearray(data)
        changed[flip % len(data)] ^= 0xFF
        check(bytes(changed))


@settings(max_examples=400, deadline=None)
@given(data=st.binary(max_size=64))
def test_arbitrary_bytes(data: bytes) -> None:
    check(data)
    check(b"\x00\x00\x00\x00\x01" + data)


def test_edge_values() -> None:
    duplicate = (
        b"\x00\x00\x00\x00\x02"
        + b"\x00\x00\x00\x01t\x00\x00\x00\x01\x00\x00\x00\x00"
        + (5).to_bytes(8, "big")
        + b"\x00\x00\x00\x01t\x00\x00\x00\x01\x00\x00\x00\x00"
    )
    for data in (
        b"",
        b"\x01\x00\x00\x00\x00",  # an unknown serde version
        b"\x00\x00\x00\x00\x00",  # no topics
        b"\x00\xff\xff\xff\xff",  # a negative topic count
        b"\x00\x00\x00\x00\x01\x00\x00\x00\x02\xed\xa0\x00\x00\x00\x00",  # a surrogate
        duplicate + (5).to_bytes(8, "big"),  # the same entry twice: fine
        duplicate + (6).to_bytes(8, "big"),  # different offsets: refused
    ):
        check(data)
