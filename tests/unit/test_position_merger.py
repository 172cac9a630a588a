"""PositionMerger (the follower's fast path) agrees with read_position_headers + merge."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_statestore.changelog.errors import ChangelogFormatError, PositionHeaderError
from spark_statestore.changelog.headers import HeaderStatus, read_position_headers
from spark_statestore.changelog.missing_position import OnMissingPosition
from spark_statestore.changelog.position_codec import encode_position
from spark_statestore.changelog.position_merger import PositionMerger
from spark_statestore.errors import StateStoreError
from spark_statestore.position import Position

positions = st.dictionaries(
    st.sampled_from(["orders", "payments"]),
    st.dictionaries(st.integers(0, 3), st.integers(0, 2**40), min_size=1, max_size=3),
    min_size=1,
    max_size=2,
).map(Position.from_map)

header_value = st.one_of(
    positions.map(lambda p: encode_position(p, pad_like_kafka_streams=True)),
    st.binary(max_size=12),
    st.none(),
)
headers = st.one_of(
    st.none(),
    st.lists(
        st.tuples(
            st.sampled_from(["v", "c", "other"]),
            st.one_of(st.just(b"\x00"), st.just(b"\x01"), header_value),
        ),
        max_size=4,
    ),
)


def reference(
    records: list[object], on_missing: OnMissingPosition
) -> tuple[Position | None, int, int]:
    merged: Position | None = None
    skipped = without = 0
    for i, record in enumerate(records):
        decision = read_position_headers(
            record,  # type: ignore[arg-type]
            on_missing=on_missing,
            topic="t",
            partition=0,
            offset=i,
        )
        if decision.status is HeaderStatus.SKIPPED:
            skipped += 1
        elif decision.position is None:
            without += 1
        else:
            merged = decision.position if merged is None else merged.merge(decision.position)
    if merged is not None and merged.is_empty():
        merged = None
    return merged, skipped, without


@given(st.lists(headers, max_size=8))
def test_skip_mode_agrees_with_the_reference(records: list[object]) -> None:
    merger = PositionMerger(OnMissingPosition.SKIP)
    for i, record in enumerate(records):
        merger.add(record, "t", 0, i)  # type: ignore[arg-type]
    assert (merger.position(), merger.skipped, merger.without) == reference(
        records, OnMissingPosition.SKIP
    )
    # The bulk path, twice over the same records (the second pass hits the inline cache).
    bulk = PositionMerger(OnMissingPosition.SKIP)
    rows = [(b"k", b"v", 0, i, -1) for i in range(len(records))]
    bulk.add_all(records, "t", rows)  # type: ignore[arg-type]
    bulk.add_all(records, "t", rows)  # type: ignore[arg-type]
    position, skipped, without = reference(records, OnMissingPosition.SKIP)
    assert (bulk.position(), bulk.skipped, bulk.without) == (position, 2 * skipped, 2 * without)


@given(st.lists(headers, max_size=8))
def test_error_mode_raises_exactly_when_the_reference_does(records: list[object]) -> None:
    try:
        expected = reference(records, OnMissingPosition.FAIL)
    except ChangelogFormatError as exc:
        merger = PositionMerger(OnMissingPosition.FAIL)
        with pytest.raises(type(exc), match="offset"):
            for i, record in enumerate(records):
                merger.add(record, "t", 0, i)  # type: ignore[arg-type]
        rows = [(b"k", b"v", 0, i, -1) for i in range(len(records))]
        with pytest.raises(type(exc), match=f"offset {exc.offset}"):  # type: ignore[attr-defined]
            PositionMerger(OnMissingPosition.FAIL).add_all(records, "t", rows)  # type: ignore[arg-type]
        return
    merger = PositionMerger(OnMissingPosition.FAIL)
    for i, record in enumerate(records):
        merger.add(record, "t", 0, i)  # type: ignore[arg-type]
    assert (merger.position(), merger.skipped, merger.without) == expected
    bulk = PositionMerger(OnMissingPosition.FAIL)
    bulk.add_all(records, "t", [(b"k", b"v", 0, i, -1) for i in range(len(records))])  # type: ignore[arg-type]
    assert (bulk.position(), bulk.skipped, bulk.without) == expected


def test_the_single_topic_fast_path_checks_what_it_skips() -> None:
    good = encode_position(Position.from_map({"orders": {1: 7}}), pad_like_kafka_streams=True)
    merger = PositionMerger(OnMissingPosition.SKIP)
    merger.add([("v", b"\x00"), ("c", good)], "t", 0, 0)
    # Same topic and partition bytes (cached), but another serde version / a negative offset.
    merger.add([("v", b"\x00"), ("c", b"\x01" + good[1:])], "t", 0, 1)
    negative = good[:23] + (-5).to_bytes(8, "big", signed=True) + good[31:]  # "orders": 6
    merger.add([("v", b"\x00"), ("c", negative)], "t", 0, 2)
    assert merger.skipped == 2 and merger.position() == Position.from_map({"orders": {1: 7}})
    with pytest.raises(ChangelogFormatError, match="offset 1"):
        PositionMerger(OnMissingPosition.FAIL).add(
            [("v", b"\x00"), ("c", b"\x01" + good[1:])], "t", 0, 1
        )


# -- any header bytes: the fast paths agree with the reference decoder ---------------------

_ONE_TOPIC = encode_position(Position.from_map({"orders": {3: 41}}))


@st.composite
def c_values(draw: st.DrawFn) -> bytes | None:
    """A ``c`` value: a valid encoding (often one topic and one partition, the fast path's
    case), then truncated, overwritten, extended or left alone; sometimes raw bytes."""
    base = draw(
        st.one_of(
            st.just(_ONE_TOPIC),
            st.just(_ONE_TOPIC + bytes(180)),  # Kafka Streams' padding
            # The version, topic count and name length the fast paths read first, cut short.
            st.builds(
                lambda n, tail: _ONE_TOPIC[:n] + tail, st.integers(0, 12), st.binary(max_size=3)
            ),
            positions.map(lambda p: encode_position(p, pad_like_kafka_streams=True)),
            positions.map(encode_position),
            st.binary(max_size=40),
        )
    )
    data = bytearray(base)
    mutation = draw(st.sampled_from(["keep", "truncate", "overwrite", "extend", "int32"]))
    if mutation == "truncate":  # mostly within the fields the fast paths read
        del data[draw(st.one_of(st.integers(0, 32), st.integers(0, len(data)))) :]
    elif mutation == "overwrite" and data:
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    elif mutation == "extend":
        data += draw(st.binary(min_size=1, max_size=16))
    elif mutation == "int32" and len(data) >= 4:
        at = draw(st.integers(0, len(data) - 4))
        value = draw(st.sampled_from([-1, 0, 1, 2, 6, 250, 2**31 - 1, -(2**31)]))
        data[at : at + 4] = value.to_bytes(4, "big", signed=True)
    return draw(st.one_of(st.just(bytes(data)), st.none())) if not data else bytes(data)


record_headers = st.one_of(
    st.none(),
    st.builds(lambda c: [("v", b"\x00"), ("c", c)], c_values()),  # Kafka Streams' layout
    st.lists(
        st.tuples(
            st.sampled_from(["v", "c", "other"]),
            st.one_of(st.sampled_from([b"\x00", b"\x01", b"", b"\x00\x07", None]), c_values()),
        ),
        max_size=4,
    ),
)


Records = list[list[tuple[str, bytes | None]] | None]


def merge_outcomes(
    records: Records, on_missing: OnMissingPosition
) -> tuple[tuple[object, ...], ...]:
    """What the reference decoder, ``PositionMerger.add_all`` and ``PositionMerger.add`` make
    of ``records`` (record ``i`` at partition 2, offset ``100 + i`` of topic ``t``): each the
    merged position with the skipped and without counts, or the error's type, reason and
    location. Any error that is not ours propagates."""
    rows = [(b"k", b"v", 2, 100 + i, -1) for i in range(len(records))]

    def by_reference() -> tuple[object, ...]:
        merged: Position | None = None
        skipped = without = 0
        for i, headers in enumerate(records):
            decision = read_position_headers(
                headers, on_missing=on_missing, topic="t", partition=2, offset=100 + i
            )
            if decision.status is HeaderStatus.SKIPPED:
                skipped += 1
            elif decision.position is None:
                without += 1
            elif not decision.position.is_empty():
                merged = decision.position if merged is None else merged.merge(decision.position)
        return merged, skipped, without

    def in_bulk() -> tuple[object, ...]:
        merger = PositionMerger(on_missing)
        merger.add_all(records, "t", rows)
        return merger.position(), merger.skipped, merger.without

    def one_by_one() -> tuple[object, ...]:
        merger = PositionMerger(on_missing)
        for i, headers in enumerate(records):
            merger.add(headers, "t", 2, 100 + i)
        return merger.position(), merger.skipped, merger.without

    return tuple(_outcome(merge) for merge in (by_reference, in_bulk, one_by_one))


def _outcome(merge: Callable[[], tuple[object, ...]]) -> tuple[object, ...]:
    try:
        return merge()
    except StateStoreError as exc:
        assert isinstance(exc, ChangelogFormatError), exc
        return (type(exc), exc.reason, exc.topic, exc.partition, exc.offset)


@pytest.mark.parametrize("on_missing", list(OnMissingPosition))
@settings(max_examples=200, deadline=None)
@given(records=st.lists(record_headers, max_size=8))
def test_bulk_and_single_merges_agree_with_the_reference_on_any_header_bytes(
    on_missing: OnMissingPosition, records: Records
) -> None:
    reference, bulk, single = merge_outcomes(records, on_missing)
    assert bulk == reference and single == reference


@pytest.mark.parametrize("length", [5, 6, 7, 8])
@pytest.mark.parametrize("on_missing", list(OnMissingPosition))
def test_a_truncated_single_topic_header_is_named_or_skipped_never_a_struct_error(
    length: int, on_missing: OnMissingPosition
) -> None:
    # Serde version 0 and a topic count of 1, then fewer than the 4 bytes of a name length.
    data = bytes.fromhex("0000000001000000")[:length]
    records = [[("v", b"\x00"), ("c", data)]]
    for merge in (
        lambda m: m.add_all(records, "t", [(b"k", b"v", 4, 17, -1)]),
        lambda m: m.add(records[0], "t", 4, 17),
    ):
        merger = PositionMerger(on_missing)
        if on_missing is OnMissingPosition.SKIP:
            merge(merger)
            assert (merger.skipped, merger.position()) == (1, None)
        else:
            with pytest.raises(
                PositionHeaderError, match=r"truncated.* at topic t partition 4 offset 17"
            ):
                merge(merger)
