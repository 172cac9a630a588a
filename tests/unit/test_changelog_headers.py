"""Position headers: PositionSerde bytes and Kafka Streams' v/c header rules."""

from __future__ import annotations

import logging
import random
import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_statestore.changelog import (
    ChangelogFormatError,
    HeaderStatus,
    MissingPositionHeaderError,
    OnMissingPosition,
    PositionHeaderError,
    decode_position,
    encode_position,
    position_from_headers,
    position_headers,
    read_position_headers,
)
from spark_statestore.changelog import headers as headers_module
from spark_statestore.changelog.position_merger import PositionMerger
from spark_statestore.errors import InvalidPositionError, OptionError, StateStoreError
from spark_statestore.position import Position

# topic "in", partition 0, offset 5, written from the layout by hand:
# version | topic count | name length | name | partition count | partition | offset
IN_0_5_HEX = "00" + "00000001" + "00000002" + "696e" + "00000001" + "00000000" + "0000000000000005"
IN_0_5 = Position.from_map({"in": {0: 5}})

positions = st.dictionaries(
    st.text(min_size=1, max_size=12),
    st.dictionaries(st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1), min_size=1, max_size=4),
    max_size=4,
).map(Position.from_map)


def padded_size(position: Position) -> int:
    """PositionSerde.serialize's buffer size: it adds Byte.SIZE/Integer.SIZE/Long.SIZE (bits)."""
    size = 8 + 32
    for topic in position.topics():
        size += 32 + len(topic.encode()) + 32 + 96 * len(position.partition_offsets(topic))
    return size


def kafka_layout(topics: list[tuple[str, list[tuple[int, int]]]]) -> bytes:
    """Encode topics in the given order (Kafka Streams writes HashMap order, not sorted)."""
    out = bytearray(b"\x00") + struct.pack(">i", len(topics))
    for name, pairs in topics:
        raw = name.encode()
        out += struct.pack(">i", len(raw)) + raw + struct.pack(">i", len(pairs))
        for partition, offset in pairs:
            out += struct.pack(">iq", partition, offset)
    return bytes(out)


# -- encoding -----------------------------------------------------------------------------


def test_exact_bytes_of_a_hand_built_example() -> None:
    assert encode_position(IN_0_5).hex() == IN_0_5_HEX
    assert decode_position(bytes.fromhex(IN_0_5_HEX)) == IN_0_5


def test_kafka_streams_padding_of_the_hand_built_example() -> None:
    padded = encode_position(IN_0_5, pad_like_kafka_streams=True)
    assert len(padded) == 8 + 32 + 32 + 2 + 32 + 96 == 202
    assert padded == bytes.fromhex(IN_0_5_HEX) + bytes(202 - 27)
    assert decode_position(padded) == IN_0_5


def test_empty_position_encodes_as_zero_topics() -> None:
    assert encode_position(Position.empty()) == b"\x00\x00\x00\x00\x00"
    assert len(encode_position(Position.empty(), pad_like_kafka_streams=True)) == 40
    assert decode_position(b"\x00\x00\x00\x00\x00") == Position.empty()


def test_multi_byte_utf8_topic_uses_byte_length() -> None:
    position = Position.from_map({"tö": {1: 2}})
    data = encode_position(position)
    assert data[5:9] == struct.pack(">i", 3)
    assert decode_position(data) == position


@settings(max_examples=400, deadline=None)
@given(positions)
def test_round_trip(position: Position) -> None:
    assert decode_position(encode_position(position)) == position


@settings(max_examples=300, deadline=None)
@given(positions)
def test_round_trip_with_kafka_streams_padding(position: Position) -> None:
    exact = encode_position(position)
    padded = encode_position(position, pad_like_kafka_streams=True)
    assert len(padded) == padded_size(position)
    assert padded[: len(exact)] == exact
    assert not any(padded[len(exact) :])
    assert decode_position(padded) == position


@settings(max_examples=200, deadline=None)
@given(positions, st.binary(max_size=300))
def test_trailing_bytes_of_any_value_are_ignored(position: Position, tail: bytes) -> None:
    assert decode_position(encode_position(position) + tail) == position


@pytest.mark.parametrize("zeros", [0, 1, 7, 175, 10_000])
def test_trailing_zeros_of_any_length_are_ignored(zeros: int) -> None:
    assert decode_position(bytes.fromhex(IN_0_5_HEX) + bytes(zeros)) == IN_0_5


def test_unsorted_topics_as_kafka_streams_writes_them_decode_sorted() -> None:
    data = kafka_layout([("zeta", [(3, 30), (1, 10)]), ("alpha", [(0, 7)])])
    assert decode_position(data) == Position.from_map({"alpha": {0: 7}, "zeta": {1: 10, 3: 30}})


def test_bytearray_and_memoryview_inputs() -> None:
    data = bytes.fromhex(IN_0_5_HEX)
    assert decode_position(bytearray(data)) == IN_0_5
    assert decode_position(memoryview(data)) == IN_0_5


def test_positions_the_format_cannot_hold_cannot_be_built() -> None:
    # Position validates its entries itself (int32 partitions, offsets >= 0, non-empty
    # topics), so the encoder never sees them.
    for entries in [(("t", 2**31, 0),), (("t", 0, -1),), (("", 0, 1),)]:
        with pytest.raises(InvalidPositionError):
            Position(entries)


def test_encode_rejects_a_topic_that_is_not_utf8_encodable() -> None:
    with pytest.raises(ChangelogFormatError, match="UTF-8"):
        encode_position(Position((("\udcff", 0, 1),)))


def test_encode_groups_partitions_under_their_topic() -> None:
    position = Position.from_map({"b": {0: 1, 1: 3}, "a": {0: 2}})
    data = encode_position(position)
    assert data[1:5] == struct.pack(">i", 2)
    assert decode_position(data) == position


# -- strict decoding ----------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(positions.filter(lambda p: not p.is_empty()))
def test_every_proper_prefix_is_rejected(position: Position) -> None:
    # Counts are declared up front, so a proper prefix of the exact encoding always ends
    # inside a declared entry.
    data = encode_position(position)
    for end in range(len(data)):
        with pytest.raises(ChangelogFormatError):
            decode_position(data[:end])


def test_every_proper_prefix_of_the_example_is_rejected_as_truncated() -> None:
    data = bytes.fromhex(IN_0_5_HEX)
    for end in range(len(data)):
        with pytest.raises(PositionHeaderError) as info:
            decode_position(data[:end])
        assert "truncated" in str(info.value) or end <= 1 or "declares" in str(info.value)


@pytest.mark.parametrize("version", [1, 2, 0x7F, 0x80, 0xFF])
def test_unknown_serde_version(version: int) -> None:
    data = bytes([version]) + bytes.fromhex(IN_0_5_HEX)[1:]
    with pytest.raises(PositionHeaderError, match=f"unknown PositionSerde version {version}"):
        decode_position(data)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "empty"),
        (b"\x00" + struct.pack(">i", -1), "negative topic count"),
        (b"\x00" + struct.pack(">i", -(2**31)), "negative topic count"),
        (b"\x00" + struct.pack(">i", 2**31 - 1), "declares 2147483647 topics"),
        (b"\x00" + struct.pack(">i", 2**31 - 1) + bytes(64), "declares"),
        (b"\x00" + struct.pack(">ii", 1, -1) + bytes(20), "invalid topic name length -1"),
        (b"\x00" + struct.pack(">ii", 1, 0) + bytes(20), "never empty"),
        (b"\x00" + struct.pack(">ii", 1, 2**31 - 1) + bytes(20), "truncated"),
        (b"\x00" + struct.pack(">ii", 1, 1) + b"t" + struct.pack(">i", -1), "negative partition"),
        (b"\x00" + struct.pack(">ii", 1, 1) + b"t" + struct.pack(">i", 2**31 - 1), "truncated"),
        (b"\x00" + struct.pack(">ii", 1, 2) + b"\xff\xfe" + struct.pack(">i", 0), "UTF-8"),
        (b"\x00" + struct.pack(">ii", 1, 3) + b"\xed\xa0\x80" + struct.pack(">i", 0), "UTF-8"),
    ],
)
def test_malformed_data_is_rejected(data: bytes, match: str) -> None:
    with pytest.raises(PositionHeaderError, match=match):
        decode_position(data)


def test_hostile_count_is_rejected_before_allocating() -> None:
    data = b"\x00" + struct.pack(">ii", 1, 1) + b"t" + struct.pack(">i", 2**31 - 1) + bytes(24)
    tracemalloc.start()
    try:
        with pytest.raises(PositionHeaderError):
            decode_position(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # A decoder that trusted the count would build ~2**31 entries; this one checks it against
    # the bytes left first. The bound is on memory, not time.
    assert peak < 256 * 1024


@pytest.mark.parametrize(("partition", "offset"), [(-1, 0), (0, -1), (-(2**31), -(2**63))])
def test_negative_partition_or_offset(partition: int, offset: int) -> None:
    with pytest.raises(PositionHeaderError, match="negative partition or offset"):
        decode_position(kafka_layout([("t", [(partition, offset)])]))
    with pytest.raises(PositionHeaderError, match="negative partition or offset"):
        decode_position(kafka_layout([("t", [(7, 1), (partition, offset)])]))


def test_duplicates_with_different_offsets_are_inconsistent() -> None:
    with pytest.raises(PositionHeaderError, match="twice with different offsets"):
        decode_position(kafka_layout([("t", [(0, 1), (0, 2)])]))
    with pytest.raises(PositionHeaderError, match="t-0 twice"):
        decode_position(kafka_layout([("t", [(0, 1)]), ("u", [(0, 1)]), ("t", [(0, 2)])]))


def test_duplicates_with_the_same_offset_are_accepted() -> None:
    data = kafka_layout([("t", [(0, 1), (0, 1)]), ("t", [(0, 1), (1, 9)])])
    assert decode_position(data) == Position.from_map({"t": {0: 1, 1: 9}})


def test_topic_without_partitions_contributes_nothing() -> None:
    data = kafka_layout([("t", []), ("u", [(2, 3)])])
    assert decode_position(data) == Position.from_map({"u": {2: 3}})


def test_none_and_non_bytes_are_rejected() -> None:
    with pytest.raises(PositionHeaderError, match="null"):
        decode_position(None)
    with pytest.raises(PositionHeaderError, match="must be bytes"):
        decode_position("00000000")  # type: ignore[arg-type]


def test_errors_carry_the_location() -> None:
    with pytest.raises(PositionHeaderError) as info:
        decode_position(b"\x07", topic="app-store-changelog", partition=3, offset=17)
    err = info.value
    assert (err.topic, err.partition, err.offset) == ("app-store-changelog", 3, 17)
    assert str(err).endswith("at topic app-store-changelog partition 3 offset 17")
    assert isinstance(err, ChangelogFormatError)
    assert isinstance(err, ValueError)
    assert isinstance(err, StateStoreError)


def test_utf8_error_keeps_its_cause() -> None:
    data = b"\x00" + struct.pack(">ii", 1, 1) + b"\xff" + struct.pack(">i", 0)
    with pytest.raises(PositionHeaderError) as info:
        decode_position(data, topic="t", partition=0, offset=1)
    assert isinstance(info.value.__cause__, UnicodeDecodeError)


# -- fuzzing ------------------------------------------------------------------------------


_INTERESTING_INT32 = [0, 1, 2, 3, 12, 255, -1, -2, 2**31 - 1, -(2**31), 2**16, 2**24]


def _fuzz_corpus() -> list[bytes]:
    samples = [
        Position.empty(),
        IN_0_5,
        Position.from_map({"a": {0: 0, 1: 2**63 - 1}, "bb": {2**31 - 1: 9}}),
        Position.from_map({"töpic": {i: i * 1000 for i in range(6)}, "x": {0: 1}}),
    ]
    corpus = [encode_position(p) for p in samples]
    corpus += [encode_position(p, pad_like_kafka_streams=True) for p in samples]
    corpus.append(kafka_layout([("t", [(0, 1), (0, 1)]), ("u", [])]))
    return corpus


def _mutate(rng: random.Random, corpus: list[bytes]) -> bytes:
    mode = rng.randrange(6)
    if mode == 0:  # random bytes, often with a valid version byte and a small topic count
        data = bytearray(rng.randbytes(rng.randrange(65)))
        if data and rng.random() < 0.7:
            data[0] = 0
        if len(data) >= 5 and rng.random() < 0.5:
            data[1:5] = struct.pack(">i", rng.randrange(-2, 4))
        return bytes(data)
    data = bytearray(rng.choice(corpus))
    if mode == 1 and data:  # bit flips
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(len(data) * 8)
            data[i >> 3] ^= 1 << (i & 7)
    elif mode == 2:  # truncation
        del data[rng.randrange(len(data) + 1) :]
    elif mode == 3:  # inserted bytes
        at = rng.randrange(len(data) + 1)
        data[at:at] = rng.randbytes(rng.randrange(1, 9))
    elif mode == 4 and len(data) >= 4:  # an interesting int32 written over any 4 bytes
        at = rng.randrange(len(data) - 3)
        data[at : at + 4] = struct.pack(">i", rng.choice(_INTERESTING_INT32))
    elif data:  # deleted bytes
        at = rng.randrange(len(data))
        del data[at : at + rng.randrange(1, 5)]
    return bytes(data)


def test_fuzz_decode_position_only_returns_or_raises_format_errors() -> None:
    rng = random.Random(0x5EED_C0DE)
    corpus = _fuzz_corpus()
    decoded = rejected = 0
    for _ in range(100_000):
        data = _mutate(rng, corpus)
        try:
            result = decode_position(data)
        except ChangelogFormatError:
            rejected += 1
        except Exception as exc:  # pragma: no cover - the failure report
            pytest.fail(f"decode_position({data.hex()}) raised {exc!r}")
        else:
            assert isinstance(result, Position)
            assert decode_position(encode_position(result)) == result
            decoded += 1
    # Both outcomes must be exercised, or the fuzzer is not reaching the decoder's depths.
    assert decoded > 1_000
    assert rejected > 10_000


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=96))
def test_arbitrary_binary_returns_a_position_or_raises_a_format_error(data: bytes) -> None:
    try:
        result = decode_position(data)
    except ChangelogFormatError:
        return
    assert isinstance(result, Position)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_binary_after_a_valid_prefix(data: bytes) -> None:
    try:
        result = decode_position(b"\x00" + data)
    except ChangelogFormatError:
        return
    assert isinstance(result, Position)


# -- header rules -------------------------------------------------------------------------

V0 = ("v", b"\x00")


def c(position: Position, *, pad: bool = False) -> tuple[str, bytes]:
    return ("c", encode_position(position, pad_like_kafka_streams=pad))


P1 = Position.from_map({"in": {0: 1}})
P2 = Position.from_map({"in": {0: 2}, "other": {1: 5}})


@pytest.fixture
def fresh_warnings() -> None:
    headers_module._forget_warned_versions()


@pytest.mark.parametrize("headers", [None, [], [("c", encode_position(P1))], [("x", b"1")]])
def test_no_version_header_means_no_position(
    headers: list[tuple[str, bytes | None]] | None,
) -> None:
    decision = read_position_headers(headers)
    assert decision.status is HeaderStatus.NO_POSITION
    assert decision.position is None
    assert not decision.skipped
    assert position_from_headers(headers) is None


def test_version_zero_decodes_the_position() -> None:
    decision = read_position_headers([V0, c(P1, pad=True)])
    assert decision.status is HeaderStatus.POSITION
    assert decision.position == P1
    assert decision.version == 0
    assert position_from_headers([c(P2), V0]) == P2


def test_last_version_header_wins(caplog: pytest.LogCaptureFixture, fresh_warnings: None) -> None:
    assert position_from_headers([("v", b"\x01"), V0, c(P1)]) == P1
    with caplog.at_level(logging.WARNING):
        decision = read_position_headers([V0, c(P1), ("v", b"\x03")])
    assert decision.status is HeaderStatus.UNKNOWN_VERSION
    assert decision.position is None


def test_last_position_header_wins() -> None:
    assert position_from_headers([V0, c(P1), c(P2)]) == P2
    # An earlier malformed c does not matter; a malformed last one does.
    assert position_from_headers([("c", b"garbage"), V0, c(P1)]) == P1
    with pytest.raises(PositionHeaderError):
        position_from_headers([V0, c(P1), ("c", b"\x01")])


def test_other_headers_are_ignored() -> None:
    headers = [
        ("trace-id", b"abc"),
        ("V", b"\x05"),
        ("C", None),
        ("version", b"\x01"),
        V0,
        ("user", None),
        c(P1),
        ("vc", b""),
    ]
    assert position_from_headers(headers) == P1


def test_only_the_first_byte_of_v_counts_like_kafka_streams() -> None:
    assert position_from_headers([("v", b"\x00\xff"), c(P1)]) == P1


def test_version_zero_without_position_header_is_an_error() -> None:
    with pytest.raises(MissingPositionHeaderError) as info:
        read_position_headers([V0], topic="s-changelog", partition=2, offset=40)
    err = info.value
    assert (err.topic, err.partition, err.offset) == ("s-changelog", 2, 40)
    assert "consistency information" in str(err)
    assert str(err).endswith("at topic s-changelog partition 2 offset 40")


def test_version_zero_without_position_header_can_be_skipped() -> None:
    decision = read_position_headers([V0, ("x", b"")], on_missing=OnMissingPosition.SKIP, offset=9)
    assert decision.status is HeaderStatus.SKIPPED
    assert decision.skipped
    assert decision.position is None
    assert isinstance(decision.error, MissingPositionHeaderError)
    assert decision.error.offset == 9


@pytest.mark.parametrize("value", [None, b"", b"\x00\x00\x00", b"\x00\x00\x00\x00\xff"])
def test_undecodable_position_header(value: bytes | None) -> None:
    headers = [V0, ("c", value)]
    with pytest.raises(PositionHeaderError) as info:
        read_position_headers(headers, topic="t", partition=0, offset=1)
    assert info.value.offset == 1
    assert "at topic t partition 0 offset 1" in str(info.value)
    decision = read_position_headers(headers, on_missing=OnMissingPosition.SKIP, topic="t")
    assert decision.status is HeaderStatus.SKIPPED
    assert isinstance(decision.error, PositionHeaderError)
    assert decision.error.topic == "t"


@pytest.mark.parametrize("value", [None, b""])
def test_version_header_without_value(value: bytes | None) -> None:
    with pytest.raises(PositionHeaderError, match="'v' must be one byte"):
        read_position_headers([("v", value), c(P1)])
    decision = read_position_headers([("v", value), c(P1)], on_missing=OnMissingPosition.SKIP)
    assert decision.status is HeaderStatus.SKIPPED
    assert decision.version is None


def test_unknown_version_warns_once_per_version_and_ignores_the_position(
    caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    with caplog.at_level(logging.WARNING, logger=headers_module.__name__):
        for _ in range(5):
            decision = read_position_headers([("v", b"\x01"), c(P1)])
            assert decision.status is HeaderStatus.UNKNOWN_VERSION
            assert decision.position is None
            assert decision.version == 1
        # Unknown versions need no c header and are not errors.
        assert position_from_headers([("v", b"\x01")]) is None
        assert position_from_headers([("v", b"\x02"), ("c", b"junk")]) is None
        assert position_from_headers([("v", b"\x02")]) is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "v=1" in warnings[0].getMessage()
    assert "v=2" in warnings[1].getMessage()
    assert "larger than this reader understands" in warnings[0].getMessage()


@pytest.mark.parametrize("policy", ["ignore", "skip", "error", True])
def test_on_missing_is_an_enum_member_or_an_option_error(policy: object) -> None:
    # Before, the strings "error" and "skip" were the policy (and the Spark option a bool).
    with pytest.raises(OptionError, match=r"on_missing must be OnMissingPosition\.FAIL or"):
        read_position_headers([V0], on_missing=policy)  # type: ignore[arg-type]
    with pytest.raises(OptionError, match=r"on_missing must be OnMissingPosition\.FAIL or"):
        PositionMerger(policy)  # type: ignore[arg-type]


def test_position_headers_for_writers() -> None:
    headers = position_headers(IN_0_5)
    assert headers == [("v", b"\x00"), ("c", bytes.fromhex(IN_0_5_HEX))]
    assert position_from_headers(headers) == IN_0_5
    assert position_from_headers(position_headers(Position.empty())) == Position.empty()


@settings(max_examples=100, deadline=None)
@given(positions)
def test_position_headers_round_trip(position: Position) -> None:
    assert position_from_headers(position_headers(position)) == position
