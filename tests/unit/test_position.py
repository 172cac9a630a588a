"""Position and PositionBound: construction, JSON, merge algebra and bound semantics."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_statestore.errors import InvalidPositionError, StateStoreError
from spark_statestore.position import Position, PositionBound

MAX_OFFSET = 2**63 - 1

topics = st.text(min_size=1, max_size=12)
partitions = st.integers(min_value=0, max_value=1000)
offsets = st.integers(min_value=0, max_value=MAX_OFFSET)
offset_maps = st.dictionaries(
    topics, st.dictionaries(partitions, offsets, min_size=1, max_size=4), max_size=4
)
positions = offset_maps.map(Position.from_map)
# Small domains make overlapping topic-partitions (the interesting merge cases) common.
small_positions = st.dictionaries(
    st.sampled_from(["a", "b", "c"]),
    st.dictionaries(st.integers(0, 3), st.integers(0, 20), min_size=1, max_size=4),
    max_size=3,
).map(Position.from_map)
any_positions = st.one_of(small_positions, positions)


def _as_dict(position: Position) -> dict[tuple[str, int], int]:
    return {(t, p): o for t, p, o in position}


# -- construction and JSON -----------------------------------------------------------------
def test_json_shape_is_spark_offsets_json() -> None:
    assert Position.from_map({"t": {0: 42}}).to_json() == '{"t":{"0":42}}'


def test_json_is_deterministic_regardless_of_insertion_order() -> None:
    a = Position.from_map({"b": {1: 2, 0: 1}, "a": {3: 4}})
    b = Position.from_map({"a": {3: 4}, "b": {0: 1, 1: 2}})
    assert a == b
    assert a.to_json() == b.to_json() == '{"a":{"3":4},"b":{"0":1,"1":2}}'
    assert hash(a) == hash(b)


@given(offset_maps)
def test_from_map_to_map_round_trip(raw: dict[str, dict[int, int]]) -> None:
    assert Position.from_map(raw).to_map() == raw


@given(positions)
def test_json_round_trip(position: Position) -> None:
    text = position.to_json()
    assert Position.from_json(text) == position
    assert Position.from_json(text.encode("utf-8")) == position
    # The JSON itself is a plain object of objects with string partitions.
    assert json.loads(text) == {
        t: {str(p): o for p, o in parts.items()} for t, parts in position.to_map().items()
    }


@given(positions)
def test_to_map_returns_a_fresh_copy(position: Position) -> None:
    copy = position.to_map()
    copy.setdefault("mutated", {})[0] = 1
    assert "mutated" not in position.topics()


def test_empty_position() -> None:
    empty = Position.empty()
    assert empty.is_empty()
    assert len(empty.entries) == 0
    assert bool(empty)  # an empty position is still a position, not 'absent'
    assert empty.to_json() == "{}"
    assert Position.from_json("{}") == empty
    assert Position.from_map({}) == empty
    assert empty.topics() == frozenset()


def test_accessors() -> None:
    position = Position.from_map({"t": {0: 42, 3: 7}, "u": {1: 0}})
    assert position.offset("t", 0) == 42
    assert position.offset("t", 3) == 7
    assert position.offset("u", 1) == 0
    assert position.offset("t", 1) is None
    assert position.offset("missing", 0) is None
    assert position.partition_offsets("t") == {0: 42, 3: 7}
    assert position.partition_offsets("missing") == {}
    assert position.topics() == frozenset({"t", "u"})
    assert not position.is_empty()
    assert len(position.entries) == 3
    assert list(position) == [("t", 0, 42), ("t", 3, 7), ("u", 1, 0)]


def test_with_offset_replaces_rather_than_merges() -> None:
    position = Position.from_map({"t": {0: 42}})
    lowered = position.with_offset("t", 0, 5)
    assert lowered.offset("t", 0) == 5
    assert position.offset("t", 0) == 42  # the original is unchanged
    added = position.with_offset("t", 1, 9).with_offset("u", 0, 1)
    assert added.to_map() == {"t": {0: 42, 1: 9}, "u": {0: 1}}


@given(positions, topics, partitions, offsets)
def test_with_offset_sets_exactly_one_entry(
    position: Position, topic: str, partition: int, offset: int
) -> None:
    updated = position.with_offset(topic, partition, offset)
    assert updated.offset(topic, partition) == offset
    expected = _as_dict(position)
    expected[(topic, partition)] = offset
    assert _as_dict(updated) == expected


def test_with_offset_validates() -> None:
    with pytest.raises(InvalidPositionError):
        Position.empty().with_offset("t", 0, -1)
    with pytest.raises(InvalidPositionError):
        Position.empty().with_offset("", 0, 1)


def test_max_offset_is_int64() -> None:
    assert Position.from_map({"t": {0: MAX_OFFSET}}).offset("t", 0) == MAX_OFFSET
    with pytest.raises(InvalidPositionError, match="int64"):
        Position.from_map({"t": {0: MAX_OFFSET + 1}})


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "",
        "[]",
        '"t"',
        "42",
        "null",
        '{"t": [42]}',
        '{"t": 42}',
        '{"t": {"0": -1}}',
        '{"t": {"0": true}}',
        '{"t": {"0": "42"}}',
        '{"t": {"0": 4.5}}',
        '{"t": {"0": null}}',
        '{"t": {"x": 1}}',
        '{"t": {"-1": 1}}',
        '{"t": {"1.0": 1}}',
        '{"t": {"01": 1}}',
        '{"t": {"+1": 1}}',
        '{"": {"0": 1}}',
        '{"t": {"0": 9223372036854775808}}',
    ],
)
def test_from_json_rejects_bad_input(text: str) -> None:
    with pytest.raises(InvalidPositionError) as info:
        Position.from_json(text)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, StateStoreError)


def test_from_json_rejects_invalid_utf8() -> None:
    with pytest.raises(InvalidPositionError):
        Position.from_json(b'{"t": {"0": 1}}\xff')


@pytest.mark.parametrize(
    "raw",
    [
        {"t": {0: -1}},
        {"t": {0: True}},
        {"t": {0: "42"}},
        {"t": {0: 1.0}},
        {"t": {0: None}},
        {"t": {"0": 1}},
        {"t": {-1: 1}},
        {"t": {True: 1}},
        {"t": {1.0: 1}},
        {"": {0: 1}},
        {1: {0: 1}},
        {"t": [1]},
        {"t": 1},
        [("t", {0: 1})],
        "t",
    ],
)
def test_from_map_rejects_bad_input(raw: Any) -> None:
    with pytest.raises(InvalidPositionError) as info:
        Position.from_map(raw)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, StateStoreError)


def test_invalid_position_error_names_the_culprit() -> None:
    with pytest.raises(InvalidPositionError, match="orders-3"):
        Position.from_map({"orders": {3: -5}})
    with pytest.raises(InvalidPositionError, match="'x'"):
        Position.from_json('{"orders": {"x": 1}}')


def test_position_is_frozen() -> None:
    import dataclasses

    position = Position.from_map({"t": {0: 1}})
    with pytest.raises(dataclasses.FrozenInstanceError):
        position.entries = ()  # type: ignore[misc]


# -- merge algebra -------------------------------------------------------------------------
@given(any_positions, any_positions)
def test_merge_is_commutative(a: Position, b: Position) -> None:
    assert a.merge(b) == b.merge(a)


@given(any_positions, any_positions, any_positions)
def test_merge_is_associative(a: Position, b: Position, c: Position) -> None:
    assert a.merge(b).merge(c) == a.merge(b.merge(c))


@given(any_positions)
def test_merge_is_idempotent(a: Position) -> None:
    assert a.merge(a) == a


@given(any_positions)
def test_empty_is_the_merge_identity(a: Position) -> None:
    assert a.merge(Position.empty()) == a
    assert Position.empty().merge(a) == a


@given(any_positions, any_positions)
def test_merge_dominates_both_inputs(a: Position, b: Position) -> None:
    merged = a.merge(b)
    assert merged.dominates(a)
    assert merged.dominates(b)


@given(any_positions, any_positions)
def test_merge_is_the_per_partition_maximum(a: Position, b: Position) -> None:
    mine, theirs = _as_dict(a), _as_dict(b)
    expected = {key: max(mine.get(key, -1), theirs.get(key, -1)) for key in mine.keys() | theirs}
    assert _as_dict(a.merge(b)) == expected


def test_merge_example() -> None:
    a = Position.from_map({"t": {0: 5, 1: 9}})
    b = Position.from_map({"t": {0: 7}, "u": {2: 1}})
    assert a.merge(b).to_map() == {"t": {0: 7, 1: 9}, "u": {2: 1}}


@given(any_positions, any_positions)
def test_dominates_is_reflexive_and_matches_merge(a: Position, b: Position) -> None:
    assert a.dominates(a)
    # a dominates b exactly when merging b into a changes nothing.
    assert a.dominates(b) == (a.merge(b) == a)


# -- PositionBound -------------------------------------------------------------------------
@given(any_positions)
def test_unbounded_permits_everything(seen: Position) -> None:
    bound = PositionBound.unbounded()
    assert bound.is_unbounded()
    assert bound.permits(seen)
    assert bound.permits(seen, partition=0)
    assert bound.to_json() is None


def test_unbounded_permits_an_empty_store() -> None:
    assert PositionBound.unbounded().permits(Position.empty())


@given(any_positions)
def test_at_permits_its_own_position(p: Position) -> None:
    bound = PositionBound.at(p)
    assert not bound.is_unbounded()
    assert bound.permits(p)


@given(any_positions, any_positions, any_positions, any_positions)
def test_permits_is_monotonic_in_the_seen_position(
    b: Position, extra: Position, other: Position, more: Position
) -> None:
    bound = PositionBound.at(b)
    # A store that has caught up with the bound (and maybe beyond) is permitted ...
    caught_up = b.merge(extra)
    assert bound.permits(caught_up)
    # ... and stays permitted whatever it processes next.
    assert bound.permits(caught_up.merge(more))
    # Same for an arbitrary store position: progress never revokes a permit.
    if bound.permits(other):
        assert bound.permits(other.merge(more))


@given(any_positions, any_positions, any_positions, any_positions)
def test_permits_is_antitone_in_the_bound(
    b1: Position, b2: Position, extra: Position, other: Position
) -> None:
    for seen in (b1.merge(b2).merge(extra), other):
        if PositionBound.at(b1.merge(b2)).permits(seen):
            assert PositionBound.at(b1).permits(seen)
            assert PositionBound.at(b2).permits(seen)
    # A strictly larger bound rejects the position of a store that only reached the smaller.
    bigger = b1.with_offset("a", 0, (b1.offset("a", 0) or 0) + 1)
    assert not PositionBound.at(bigger).permits(b1)


@given(any_positions, any_positions)
def test_permits_equals_dominates(b: Position, seen: Position) -> None:
    assert PositionBound.at(b).permits(seen) == seen.dominates(b)


def test_permits_compares_offsets() -> None:
    bound = PositionBound.at(Position.from_map({"t": {0: 10}}))
    assert bound.permits(Position.from_map({"t": {0: 10}}))
    assert bound.permits(Position.from_map({"t": {0: 11}}))
    assert not bound.permits(Position.from_map({"t": {0: 9}}))


def test_unseen_bounded_topic_partition_is_not_permitted() -> None:
    bound = PositionBound.at(Position.from_map({"t": {0: 0}}))
    assert not bound.permits(Position.empty())
    assert not bound.permits(Position.from_map({"t": {1: 100}}))
    assert not bound.permits(Position.from_map({"u": {0: 100}}))
    assert bound.permits(Position.from_map({"t": {0: 0}}))


def test_topic_partitions_the_bound_does_not_mention_do_not_matter() -> None:
    bound = PositionBound.at(Position.from_map({"t": {0: 5}}))
    assert bound.permits(Position.from_map({"t": {0: 5, 1: 0}, "u": {0: 0}}))


def test_bound_at_empty_position_permits_everything() -> None:
    bound = PositionBound.at(Position.empty())
    assert bound.permits(Position.empty())
    assert bound.permits(Position.from_map({"t": {0: 1}}))


def test_partition_scoped_permits_ignores_other_partitions() -> None:
    bound = PositionBound.at(Position.from_map({"t": {0: 10, 1: 10}, "u": {1: 3}}))
    seen = Position.from_map({"t": {0: 10, 1: 2}})
    assert not bound.permits(seen)
    assert bound.permits(seen, partition=0)
    assert not bound.permits(seen, partition=1)
    # No bound entry for partition 2 at all: nothing to wait for.
    assert bound.permits(Position.empty(), partition=2)


@given(any_positions, any_positions, st.integers(0, 3))
def test_partition_scoped_permits_only_looks_at_that_partition(
    b: Position, seen: Position, partition: int
) -> None:
    scoped = Position.from_map(
        {t: {partition: o} for t in b.topics() if (o := b.offset(t, partition)) is not None}
    )
    bound = PositionBound.at(b)
    assert bound.permits(seen, partition=partition) == seen.dominates(scoped)
    # Adding entries for other partitions to the bound never changes the scoped answer.
    other = (partition + 1) % 4
    widened = PositionBound.at(b.with_offset("a", other, MAX_OFFSET))
    assert widened.permits(seen, partition=partition) == bound.permits(seen, partition=partition)
    # The whole-store check is at least as strict as any partition-scoped one.
    for store in (seen, seen.merge(b)):
        if bound.permits(store):
            assert bound.permits(store, partition=partition)
    assert bound.permits(seen.merge(b), partition=partition)


def test_position_bound_at_rejects_non_positions() -> None:
    with pytest.raises(InvalidPositionError):
        PositionBound.at({"t": {0: 1}})  # type: ignore[arg-type]


def test_position_bound_json() -> None:
    bound = PositionBound.from_json('{"t":{"0":42}}')
    assert bound == PositionBound.at(Position.from_map({"t": {0: 42}}))
    assert bound.to_json() == '{"t":{"0":42}}'
    assert str(bound) == 'at {"t":{"0":42}}'
    assert str(PositionBound.unbounded()) == "unbounded"
    with pytest.raises(InvalidPositionError):
        PositionBound.from_json('{"t":{"0":-1}}')


# -- regressions ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    ['{"t": {"1": 5, "1": 7}}', '{"t": {"1": 5, " 1": 7}}', '{"t": {"01": 5}}', '{"t": {"+1": 5}}'],
)
def test_from_json_rejects_duplicate_or_non_canonical_partitions(text: str) -> None:
    # json.loads alone keeps the last of two equal keys: a silent overwrite of an offset.
    with pytest.raises(InvalidPositionError):
        Position.from_json(text)


def test_from_json_rejects_a_topic_given_twice() -> None:
    with pytest.raises(InvalidPositionError, match="twice"):
        Position.from_json('{"t": {"0": 5}, "t": {"0": 1}}')


def test_partitions_must_fit_in_an_int32_like_the_c_header() -> None:
    Position.from_map({"t": {2**31 - 1: 0}})
    with pytest.raises(InvalidPositionError, match="2\\*\\*31"):
        Position.from_map({"t": {2**31: 0}})


@pytest.mark.parametrize(
    "entries",
    [
        (("t", 1, 0), ("t", 0, 0)),  # unsorted
        (("t", 0, 0), ("t", 0, 5)),  # the same topic-partition twice
        (("", 0, 0),),  # empty topic
        (("t", -1, 0),),
        (("t", 0),),
    ],
)
def test_raw_constructor_refuses_what_would_break_equality_or_the_wire(entries: Any) -> None:
    with pytest.raises(InvalidPositionError):
        Position(entries)


@pytest.mark.parametrize("raw", [{1: {}}, {"": {}}, {None: {}}])
def test_from_map_rejects_bad_topics_without_partitions(raw: Any) -> None:
    with pytest.raises(InvalidPositionError, match="topic"):
        Position.from_map(raw)


def test_from_json_rejects_deeply_nested_json() -> None:
    with pytest.raises(InvalidPositionError):
        Position.from_json("[" * 100_000)


# -- dict forms (the wire's typed form) ----------------------------------------------------
@given(any_positions)
def test_dict_round_trip(position: Position) -> None:
    data = position.to_dict()
    assert Position.from_dict(data) == position
    # The dict form is exactly what the JSON text holds, and both decoders agree.
    assert json.loads(position.to_json()) == data
    assert Position.from_dict(json.loads(json.dumps(data))) == position


def test_dict_shape() -> None:
    position = Position.from_map({"b": {10: 2, 1: 3}, "a": {0: 7}})
    assert position.to_dict() == {"a": {"0": 7}, "b": {"1": 3, "10": 2}}
    assert Position.empty().to_dict() == {}
    assert Position.from_dict({}) == Position.empty()


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        "t",
        {"t": [42]},
        {"t": 42},
        {"t": {0: 1}},  # partitions are text in the dict form, as in JSON
        {"t": {"0": -1}},
        {"t": {"0": True}},
        {"t": {"0": "42"}},
        {"t": {"0": 4.5}},
        {"t": {"0": None}},
        {"t": {"x": 1}},
        {"t": {"01": 1}},
        {"t": {"+1": 1}},
        {"t": {" 1": 1}},
        {"t": {"\u0663": 1}},
        {"t": {"1_0": 1}},
        {"t": {"9" * 5000: 1}},
        {"t": {"-1": 1}},
        {"t": {"2147483648": 1}},
        {"": {"0": 1}},
        {1: {"0": 1}},
        {"t": {"0": 2**63}},
    ],
)
def test_from_dict_rejects_bad_input(data: Any) -> None:
    with pytest.raises(InvalidPositionError) as info:
        Position.from_dict(data)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, StateStoreError)


@given(st.one_of(st.just(PositionBound.unbounded()), any_positions.map(PositionBound.at)))
def test_bound_dict_round_trip(bound: PositionBound) -> None:
    assert PositionBound.from_dict(bound.to_dict()) == bound


def test_bound_dict_forms() -> None:
    assert PositionBound.unbounded().to_dict() is None
    assert PositionBound.from_dict(None).is_unbounded()
    bound = PositionBound.from_dict({"t": {"0": 42}})
    assert bound == PositionBound.at(Position.from_map({"t": {0: 42}}))
    assert bound.to_dict() == {"t": {"0": 42}}
    with pytest.raises(InvalidPositionError):
        PositionBound.from_dict({"t": {"0": -1}})
    with pytest.raises(InvalidPositionError):
        PositionBound.from_dict("unbounded")  # type: ignore[arg-type]
