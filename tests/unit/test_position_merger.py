"""PositionMerger (the follower's fast path) agrees with read_position_headers + merge."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_statestore.changelog.errors import ChangelogFormatError
from spark_statestore.changelog.headers import (
    HeaderStatus,
    PositionMerger,
    encode_position,
    read_position_headers,
)
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


def reference(records: list[object], on_missing: str) -> tuple[Position | None, int, int]:
    merged: Position | None = None
    skipped = without = 0
    for i, record in enumerate(records):
        decision = read_position_headers(
            record,  # type: ignore[arg-type]
            on_missing=on_missing,  # type: ignore[arg-type]
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
    merger = PositionMerger("skip")
    for i, record in enumerate(records):
        merger.add(record, "t", 0, i)  # type: ignore[arg-type]
    assert (merger.position(), merger.skipped, merger.without) == reference(records, "skip")
    # The bulk path, twice over the same records (the second pass hits the inline cache).
    bulk = PositionMerger("skip")
    rows = [(b"k", b"v", 0, i, -1) for i in range(len(records))]
    bulk.add_all(records, "t", rows)  # type: ignore[arg-type]
    bulk.add_all(records, "t", rows)  # type: ignore[arg-type]
    position, skipped, without = reference(records, "skip")
    assert (bulk.position(), bulk.skipped, bulk.without) == (position, 2 * skipped, 2 * without)


@given(st.lists(headers, max_size=8))
def test_error_mode_raises_exactly_when_the_reference_does(records: list[object]) -> None:
    try:
        expected = reference(records, "error")
    except ChangelogFormatError as exc:
        merger = PositionMerger("error")
        with pytest.raises(type(exc), match="offset"):
            for i, record in enumerate(records):
                merger.add(record, "t", 0, i)  # type: ignore[arg-type]
        rows = [(b"k", b"v", 0, i, -1) for i in range(len(records))]
        with pytest.raises(type(exc), match=f"offset {exc.offset}"):  # type: ignore[attr-defined]
            PositionMerger("error").add_all(records, "t", rows)  # type: ignore[arg-type]
        return
    merger = PositionMerger("error")
    for i, record in enumerate(records):
        merger.add(record, "t", 0, i)  # type: ignore[arg-type]
    assert (merger.position(), merger.skipped, merger.without) == expected
    bulk = PositionMerger("error")
    bulk.add_all(records, "t", [(b"k", b"v", 0, i, -1) for i in range(len(records))])  # type: ignore[arg-type]
    assert (bulk.position(), bulk.skipped, bulk.without) == expected


def test_the_single_topic_fast_path_checks_what_it_skips() -> None:
    good = encode_position(Position.from_map({"orders": {1: 7}}), pad_like_kafka_streams=True)
    merger = PositionMerger("skip")
    merger.add([("v", b"\x00"), ("c", good)], "t", 0, 0)
    # Same topic and partition bytes (cached), but another serde version / a negative offset.
    merger.add([("v", b"\x00"), ("c", b"\x01" + good[1:])], "t", 0, 1)
    negative = good[:23] + (-5).to_bytes(8, "big", signed=True) + good[31:]  # "orders": 6
    merger.add([("v", b"\x00"), ("c", negative)], "t", 0, 2)
    assert merger.skipped == 2 and merger.position() == Position.from_map({"orders": {1: 7}})
    with pytest.raises(ChangelogFormatError, match="offset 1"):
        PositionMerger("error").add([("v", b"\x00"), ("c", b"\x01" + good[1:])], "t", 0, 1)
