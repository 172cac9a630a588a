"""IQv2-style queries, requests, results, lag info and key metadata (KIP-796, KIP-535)."""

from __future__ import annotations

import dataclasses
import json
import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import spark_statestore
from spark_statestore.errors import StateStoreError
from spark_statestore.position import Position, PositionBound
from spark_statestore.query import (
    FailureReason,
    HostInfo,
    InStore,
    KeyQuery,
    KeyQueryMetadata,
    LagInfo,
    PrefixQuery,
    QueryError,
    QueryFailedError,
    QueryResult,
    RangeQuery,
    RawKeyQuery,
    RawScanQuery,
    StateQueryRequest,
    StateQueryResult,
)

P1 = Position.from_map({"in": {0: 10}})
P2 = Position.from_map({"in": {0: 7, 1: 3}, "other": {0: 1}})


def _request() -> StateQueryRequest:
    return StateQueryRequest.in_store("orders").with_query(KeyQuery.with_key(b"k"))


# -- errors --------------------------------------------------------------------------------
def test_error_hierarchy() -> None:
    assert issubclass(QueryError, StateStoreError)
    assert issubclass(QueryError, ValueError)
    assert issubclass(QueryFailedError, StateStoreError)
    assert issubclass(QueryFailedError, RuntimeError)


def test_public_names_are_exported() -> None:
    for name in [
        "FailureReason",
        "HostInfo",
        "KeyQuery",
        "KeyQueryMetadata",
        "LagInfo",
        "PrefixQuery",
        "Query",
        "QueryError",
        "QueryFailedError",
        "QueryResult",
        "RangeQuery",
        "RawKeyQuery",
        "RawScanQuery",
        "StateQueryRequest",
        "StateQueryResult",
    ]:
        assert name in spark_statestore.__all__
        assert getattr(spark_statestore, name) is not None


# -- queries -------------------------------------------------------------------------------
def test_key_query() -> None:
    assert KeyQuery.with_key(b"k").key == b"k"
    assert KeyQuery.with_key("typed-key").key == "typed-key"
    assert KeyQuery.with_key(42).key == 42
    assert KeyQuery.with_key(b"k") == KeyQuery.with_key(b"k")
    with pytest.raises(QueryError, match="None"):
        KeyQuery.with_key(None)


def test_range_query_constructors() -> None:
    q = RangeQuery.with_range(b"a", b"m")
    assert (q.lower, q.upper, q.descending) == (b"a", b"m", False)
    assert RangeQuery.with_range(b"a", b"a").lower == b"a"  # both ends inclusive
    lower = RangeQuery.with_lower_bound(b"c")
    assert (lower.lower, lower.upper) == (b"c", None)
    upper = RangeQuery.with_upper_bound(b"x")
    assert (upper.lower, upper.upper) == (None, b"x")
    unbounded = RangeQuery.with_no_bounds()
    assert (unbounded.lower, unbounded.upper, unbounded.descending) == (None, None, False)
    open_ended = RangeQuery.with_range(None, b"z")
    assert (open_ended.lower, open_ended.upper) == (None, b"z")
    assert RangeQuery.with_range(1, 5).upper == 5


def test_range_query_order_copies() -> None:
    q = RangeQuery.with_range(b"a", b"m")
    down = q.with_descending_keys()
    assert down.descending is True
    assert q.descending is False  # the original is unchanged
    assert (down.lower, down.upper) == (b"a", b"m")
    up = down.with_ascending_keys()
    assert up.descending is False
    assert up == q
    assert down.descending is True


@pytest.mark.parametrize(
    ("lower", "upper"), [(b"b", b"a"), (b"ab", b"a"), (5, 1), ("z", "a"), ((1, 2), (1, 1))]
)
def test_range_query_rejects_inverted_bounds(lower: Any, upper: Any) -> None:
    with pytest.raises(QueryError, match="greater than"):
        RangeQuery.with_range(lower, upper)


def test_range_query_rejects_incomparable_bound_types() -> None:
    with pytest.raises(QueryError, match="incomparable"):
        RangeQuery.with_range(b"a", "z")


def test_range_query_accepts_unordered_key_types() -> None:
    # A key type without ordering is ordered by its serialized bytes in the store.
    class Key:
        pass

    a, b = Key(), Key()
    assert RangeQuery.with_range(a, b).lower is a


@given(st.binary(), st.binary())
def test_range_query_validation_matches_byte_order(a: bytes, b: bytes) -> None:
    if a <= b:
        assert RangeQuery.with_range(a, b).upper == b
    else:
        with pytest.raises(QueryError):
            RangeQuery.with_range(a, b)


def test_range_query_bound_constructors_reject_none() -> None:
    with pytest.raises(QueryError):
        RangeQuery.with_lower_bound(None)
    with pytest.raises(QueryError):
        RangeQuery.with_upper_bound(None)


def test_prefix_query() -> None:
    assert PrefixQuery.with_prefix(b"user:").prefix == b"user:"
    assert PrefixQuery.with_prefix(bytearray(b"ab")).prefix == b"ab"  # type: ignore[arg-type]
    assert type(PrefixQuery.with_prefix(bytearray(b"ab")).prefix) is bytes  # type: ignore[arg-type]


def test_prefix_query_rejects_str_with_a_hint() -> None:
    with pytest.raises(QueryError, match=r"encode"):
        PrefixQuery.with_prefix("user:")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [b"", None, 1, ["a"]])
def test_prefix_query_rejects_bad_prefixes(bad: Any) -> None:
    with pytest.raises(QueryError):
        PrefixQuery.with_prefix(bad)


def test_raw_key_query() -> None:
    assert RawKeyQuery.with_key(b"\x00\x01").key == b"\x00\x01"
    assert RawKeyQuery.with_key(memoryview(b"mv")).key == b"mv"  # type: ignore[arg-type]
    with pytest.raises(QueryError, match="encode"):
        RawKeyQuery.with_key("k")  # type: ignore[arg-type]
    with pytest.raises(QueryError):
        RawKeyQuery.with_key(None)  # type: ignore[arg-type]


def test_raw_scan_query() -> None:
    scan = RawScanQuery.scan()
    assert scan.limit is None
    limited = scan.with_limit(10)
    assert limited.limit == 10
    assert scan.limit is None  # the original is unchanged


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "10", None])
def test_raw_scan_query_rejects_bad_limits(bad: Any) -> None:
    with pytest.raises(QueryError, match="limit"):
        RawScanQuery.scan().with_limit(bad)


@pytest.mark.parametrize(
    ("query", "field", "value"),
    [
        (KeyQuery.with_key(b"k"), "key", b"x"),
        (RangeQuery.with_no_bounds(), "descending", True),
        (PrefixQuery.with_prefix(b"p"), "prefix", b"q"),
        (RawKeyQuery.with_key(b"k"), "key", b"x"),
        (RawScanQuery.scan(), "limit", 3),
    ],
)
def test_queries_are_frozen_and_hashable(query: Any, field: str, value: Any) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(query, field, value)
    assert hash(query) == hash(dataclasses.replace(query))
    assert pickle.loads(pickle.dumps(query)) == query


# -- FailureReason -------------------------------------------------------------------------
def test_failure_reasons_are_exactly_kafkas() -> None:
    names = [
        "UNKNOWN_QUERY_TYPE",
        "NOT_ACTIVE",
        "NOT_UP_TO_BOUND",
        "NOT_PRESENT",
        "DOES_NOT_EXIST",
        "STORE_EXCEPTION",
    ]
    assert [r.name for r in FailureReason] == names
    assert [r.value for r in FailureReason] == names
    assert FailureReason("NOT_ACTIVE") is FailureReason.NOT_ACTIVE


# -- QueryResult ---------------------------------------------------------------------------
def test_successful_result() -> None:
    result = QueryResult.for_result(b"v", P1, ["scanned 1 key"])
    assert result.is_success
    assert not result.is_failure
    assert result.result == b"v"
    assert result.position == P1
    assert result.execution_info == ("scanned 1 key",)
    assert result.failure_reason is None
    assert result.failure_message is None


def test_successful_result_may_be_none() -> None:
    result: QueryResult[bytes | None] = QueryResult.for_result(None, P1)
    assert result.is_success
    assert result.result is None
    assert result.execution_info == ()


def test_failed_result_raises_on_result() -> None:
    failure: QueryResult[bytes] = QueryResult.for_failure(
        FailureReason.NOT_ACTIVE, "replica host-b is a follower", P1
    )
    assert failure.is_failure
    assert not failure.is_success
    assert failure.failure_reason is FailureReason.NOT_ACTIVE
    assert failure.failure_message == "replica host-b is a follower"
    assert failure.position == P1
    with pytest.raises(QueryFailedError, match="NOT_ACTIVE") as info:
        _ = failure.result
    assert info.value.reason is FailureReason.NOT_ACTIVE
    assert info.value.failure_message == "replica host-b is a follower"
    assert "replica host-b is a follower" in str(info.value)


def test_query_failed_error_pickles() -> None:
    error = QueryFailedError(FailureReason.STORE_EXCEPTION, "disk on fire")
    copy = pickle.loads(pickle.dumps(error))
    assert copy.reason is FailureReason.STORE_EXCEPTION
    assert copy.failure_message == "disk on fire"
    assert str(copy) == str(error)


def test_failure_position_defaults_to_empty() -> None:
    failure: QueryResult[Any] = QueryResult.for_failure(FailureReason.DOES_NOT_EXIST, "no store")
    assert failure.position == Position.empty()


def test_failure_validation() -> None:
    with pytest.raises(QueryError, match="failure reason"):
        QueryResult.for_failure("NO_SUCH_REASON", "x")  # type: ignore[arg-type]
    with pytest.raises(QueryError, match="message"):
        QueryResult.for_failure(FailureReason.NOT_PRESENT, None)  # type: ignore[arg-type]
    with pytest.raises(QueryError, match="position"):
        QueryResult.for_result(1, {"t": {0: 1}})  # type: ignore[arg-type]
    with pytest.raises(QueryError, match="cannot carry a result"):
        QueryResult(b"v", P1, (), FailureReason.NOT_PRESENT, "x")
    with pytest.raises(QueryError, match="failure message"):
        QueryResult(b"v", P1, (), None, "x")
    with pytest.raises(QueryError, match="execution info"):
        QueryResult.for_result(1, P1, "one line")


def test_failure_reason_given_by_name_is_normalised() -> None:
    failure: QueryResult[Any] = QueryResult.for_failure(
        "NOT_PRESENT",  # type: ignore[arg-type]
        "partition 3 is elsewhere",
    )
    assert failure.failure_reason is FailureReason.NOT_PRESENT


def test_unknown_query_type() -> None:
    query = PrefixQuery.with_prefix(b"p")
    failure: QueryResult[Any] = QueryResult.for_unknown_query_type(query, "windows")
    assert failure.failure_reason is FailureReason.UNKNOWN_QUERY_TYPE
    assert failure.failure_message is not None
    assert "'windows'" in failure.failure_message
    assert "PrefixQuery" in failure.failure_message


def test_not_up_to_bound_message_contains_both_positions() -> None:
    seen = Position.from_map({"in": {0: 4}})
    bound = PositionBound.at(Position.from_map({"in": {0: 9}}))
    failure: QueryResult[Any] = QueryResult.not_up_to_bound(seen, bound, 0)
    assert failure.failure_reason is FailureReason.NOT_UP_TO_BOUND
    assert failure.position == seen
    message = failure.failure_message
    assert message is not None
    assert '{"in":{"0":4}}' in message
    assert '{"in":{"0":9}}' in message
    assert "partition 0" in message
    with pytest.raises(QueryFailedError, match="NOT_UP_TO_BOUND"):
        _ = failure.result


@given(
    st.dictionaries(st.sampled_from("abc"), st.dictionaries(st.integers(0, 5), st.integers(0, 99))),
    st.dictionaries(st.sampled_from("abc"), st.dictionaries(st.integers(0, 5), st.integers(0, 99))),
)
def test_not_up_to_bound_message_round_trips_positions(
    seen_map: dict[str, dict[int, int]], bound_map: dict[str, dict[int, int]]
) -> None:
    seen, bound = Position.from_map(seen_map), Position.from_map(bound_map)
    failure: QueryResult[Any] = QueryResult.not_up_to_bound(seen, PositionBound.at(bound), None)
    message = failure.failure_message
    assert message is not None
    assert seen.to_json() in message
    assert bound.to_json() in message


def test_not_up_to_bound_validates_partition() -> None:
    with pytest.raises(QueryError):
        QueryResult.not_up_to_bound(P1, PositionBound.at(P2), -1)


def test_with_execution_info_appends_to_a_copy() -> None:
    result = QueryResult.for_result(1, P1)
    one = result.with_execution_info("opened snapshot 7")
    two = one.with_execution_info("read 1 key in 3 us")
    assert result.execution_info == ()
    assert one.execution_info == ("opened snapshot 7",)
    assert two.execution_info == ("opened snapshot 7", "read 1 key in 3 us")
    assert two.result == 1
    with pytest.raises(QueryError):
        result.with_execution_info(42)  # type: ignore[arg-type]


def test_with_position_copies() -> None:
    result = QueryResult.for_result(1, P1)
    moved = result.with_position(P2)
    assert moved.position == P2
    assert result.position == P1


def test_query_result_is_frozen() -> None:
    result = QueryResult.for_result(1, P1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.position = P2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.failure_reason = FailureReason.NOT_ACTIVE  # type: ignore[misc]


# -- StateQueryResult ----------------------------------------------------------------------
def test_state_query_result_partition_results() -> None:
    ok = QueryResult.for_result(b"v", P1)
    failed: QueryResult[bytes] = QueryResult.for_failure(FailureReason.NOT_PRESENT, "x", P2)
    results = StateQueryResult.for_partitions({3: failed, 1: ok})
    assert dict(results.partition_results) == {1: ok, 3: failed}
    assert list(results.partition_results) == [1, 3]
    assert results.global_result is None
    with pytest.raises(TypeError):
        results.partition_results[5] = ok  # type: ignore[index]


def test_state_query_result_position_merges_successes_and_failures() -> None:
    ok = QueryResult.for_result(b"v", P1)
    failed: QueryResult[bytes] = QueryResult.for_failure(FailureReason.NOT_UP_TO_BOUND, "x", P2)
    results = StateQueryResult.for_partitions({0: ok, 1: failed})
    assert results.position == P1.merge(P2)
    assert results.position.to_map() == {"in": {0: 10, 1: 3}, "other": {0: 1}}


@given(
    st.lists(
        st.dictionaries(
            st.sampled_from("ab"), st.dictionaries(st.integers(0, 3), st.integers(0, 50))
        ),
        max_size=5,
    )
)
def test_state_query_result_position_is_the_merge_of_all(
    maps: list[dict[str, dict[int, int]]],
) -> None:
    positions = [Position.from_map(m) for m in maps]
    results = StateQueryResult.for_partitions(
        {i: QueryResult.for_result(i, p) for i, p in enumerate(positions)}
    )
    expected = Position.empty()
    for p in positions:
        expected = expected.merge(p)
    assert results.position == expected


def test_state_query_result_global() -> None:
    result = StateQueryResult.for_global(QueryResult.for_result(b"v", P2))
    assert result.global_result is not None
    assert result.global_result.result == b"v"
    assert dict(result.partition_results) == {}
    assert result.position == P2


def test_empty_state_query_result_position_is_empty() -> None:
    assert StateQueryResult.for_partitions({}).position == Position.empty()


def test_only_partition_result() -> None:
    ok = QueryResult.for_result(b"v", P1)
    assert StateQueryResult.for_partitions({4: ok}).only_partition_result() is ok
    failed: QueryResult[bytes] = QueryResult.for_failure(FailureReason.NOT_PRESENT, "x")
    only_failure = StateQueryResult.for_partitions({2: failed}).only_partition_result()
    assert only_failure.failure_reason is FailureReason.NOT_PRESENT


def test_only_partition_result_errors_name_the_partitions() -> None:
    ok = QueryResult.for_result(b"v", P1)
    failed: QueryResult[bytes] = QueryResult.for_failure(FailureReason.NOT_PRESENT, "x")
    with pytest.raises(QueryError, match=r"got 2") as info:
        StateQueryResult.for_partitions({7: ok, 9: failed}).only_partition_result()
    assert "7: ok" in str(info.value)
    assert "9: NOT_PRESENT" in str(info.value)
    with pytest.raises(QueryError, match=r"got 0"):
        StateQueryResult.for_partitions({}).only_partition_result()


def test_with_partition_result_adds_and_replaces_on_a_copy() -> None:
    first = QueryResult.for_result(1, P1)
    second = QueryResult.for_result(2, P2)
    empty: StateQueryResult[int] = StateQueryResult.for_partitions({})
    one = empty.with_partition_result(5, first)
    replaced = one.with_partition_result(5, second).with_partition_result(0, first)
    assert dict(empty.partition_results) == {}
    assert dict(one.partition_results) == {5: first}
    assert dict(replaced.partition_results) == {0: first, 5: second}


def test_state_query_result_validation() -> None:
    with pytest.raises(QueryError, match="QueryResult"):
        StateQueryResult.for_partitions({0: b"v"})  # type: ignore[arg-type]
    with pytest.raises(QueryError, match="partition"):
        StateQueryResult.for_partitions({-1: QueryResult.for_result(1, P1)})
    with pytest.raises(QueryError, match="one result per partition"):
        StateQueryResult(((0, QueryResult.for_result(1, P1)), (0, QueryResult.for_result(2, P1))))
    with pytest.raises(QueryError, match="global"):
        StateQueryResult.for_global(b"v")  # type: ignore[arg-type]


def test_an_asker_refuses_successes_whose_position_the_bound_does_not_permit() -> None:
    seen = Position.from_map({"in": {0: 5, 1: 3}})
    behind = QueryResult.for_failure(FailureReason.NOT_UP_TO_BOUND, "behind", seen)
    answer = StateQueryResult.for_partitions(
        {0: QueryResult.for_result(b"a", seen), 1: QueryResult.for_result(b"b", seen), 2: behind}
    )
    unreached = PositionBound.at(Position.from_map({"in": {1: 9}}))
    who = "server grpc+tcp://h:1 (store s)"
    assert answer.checked_against(PositionBound.unbounded(), store_wide=True, answered_by=who) is (
        answer
    )
    reached = PositionBound.at(Position.from_map({"in": {0: 5, 1: 3}}))
    assert answer.checked_against(reached, store_wide=True, answered_by=who) is answer
    # Kafka Streams' rule: partition 1's entries apply to partition 1 only.
    by_partition = answer.checked_against(unreached, store_wide=False, answered_by=who)
    assert by_partition.partition_results[0] is answer.partition_results[0]
    assert by_partition.partition_results[2] is behind  # failures pass as they are
    refused = by_partition.partition_results[1]
    assert refused.failure_reason is FailureReason.NOT_UP_TO_BOUND
    assert refused.position == seen and refused.value is None
    assert refused.failure_message == (
        f"{who} answered partition 1 as a success at position "
        '{"in":{"0":5,"1":3}}, which has not reached the bound {"in":{"1":9}} (the bound\'s '
        "entries for partition 1 apply); the answer is refused: retry later or query another "
        "replica"
    )
    # A store-wide position: every entry of the bound applies to every partition.
    whole = answer.checked_against(unreached, store_wide=True, answered_by=who)
    assert {p for p, r in whole.partition_results.items() if r.is_failure} == {0, 1, 2}
    assert "position holds store-wide" in (whole.partition_results[0].failure_message or "")
    global_answer = StateQueryResult.for_global(QueryResult.for_result(b"g", seen))
    checked = global_answer.checked_against(unreached, store_wide=False, answered_by=who)
    assert checked.global_result is not None
    assert checked.global_result.failure_reason is FailureReason.NOT_UP_TO_BOUND
    assert "answered the global store" in (checked.global_result.failure_message or "")


def test_state_query_result_is_frozen() -> None:
    result = StateQueryResult.for_partitions({0: QueryResult.for_result(1, P1)})
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.global_result = None  # type: ignore[misc]


# -- StateQueryRequest ---------------------------------------------------------------------
def test_request_defaults() -> None:
    request = _request()
    assert request.store_name == "orders"
    assert request.query == KeyQuery.with_key(b"k")
    assert request.partitions is None
    assert request.is_all_partitions
    assert request.position_bound == PositionBound.unbounded()
    assert request.active_only is False
    assert request.execution_info_enabled is False


def test_in_store_is_a_builder_without_a_query() -> None:
    builder = StateQueryRequest.in_store("orders")
    assert isinstance(builder, InStore)
    assert not isinstance(builder, StateQueryRequest)
    assert not hasattr(builder, "query")
    request = builder.with_query(RawScanQuery.scan())
    assert isinstance(request, StateQueryRequest)
    assert request.query == RawScanQuery.scan()


def test_request_always_has_a_query() -> None:
    with pytest.raises(TypeError):
        StateQueryRequest("orders")  # type: ignore[call-arg]
    with pytest.raises(QueryError, match="query must be one of"):
        StateQueryRequest.in_store("orders").with_query(None)  # type: ignore[arg-type]
    with pytest.raises(QueryError, match="query must be one of"):
        StateQueryRequest.in_store("orders").with_query(b"k")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["", None, 5, b"orders"])
def test_in_store_rejects_bad_names(name: Any) -> None:
    with pytest.raises(QueryError, match="store name"):
        StateQueryRequest.in_store(name)


def test_request_builder_methods() -> None:
    bound = PositionBound.at(P1)
    request = (
        _request()
        .with_partitions([2, 0, 2])
        .with_position_bound(bound)
        .require_active()
        .enable_execution_info()
    )
    assert request.partitions == frozenset({0, 2})
    assert not request.is_all_partitions
    assert request.position_bound == bound
    assert request.active_only is True
    assert request.execution_info_enabled is True
    everywhere = request.with_all_partitions()
    assert everywhere.partitions is None
    assert everywhere.is_all_partitions
    assert everywhere.position_bound == bound  # other settings are kept


def test_with_partitions_accepts_any_iterable() -> None:
    assert _request().with_partitions(range(3)).partitions == frozenset({0, 1, 2})
    assert _request().with_partitions(p for p in (5,)).partitions == frozenset({5})


def test_request_builder_is_immutable() -> None:
    original = _request()
    snapshot = dataclasses.replace(original)
    derived = [
        original.with_partitions([1]),
        original.with_position_bound(PositionBound.at(P1)),
        original.require_active(),
        original.enable_execution_info(),
        original.with_partitions([1]).with_all_partitions(),
    ]
    for other in derived:
        assert other is not original
    assert original == snapshot
    assert original.partitions is None
    assert original.position_bound.is_unbounded()
    assert not original.active_only
    assert not original.execution_info_enabled
    with pytest.raises(dataclasses.FrozenInstanceError):
        original.active_only = True  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        original.query = RawScanQuery.scan()  # type: ignore[misc]


@pytest.mark.parametrize("partitions", [[-1], [True], [1.0], ["0"], [None], 3, "012", []])
def test_with_partitions_validates(partitions: Any) -> None:
    with pytest.raises(QueryError, match="partition"):
        _request().with_partitions(partitions)


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(QueryError, match="partition"):
        StateQueryRequest("orders", RawScanQuery.scan(), partitions=frozenset({-2}))
    with pytest.raises(QueryError, match="store name"):
        StateQueryRequest("", RawScanQuery.scan())
    coerced = StateQueryRequest("orders", RawScanQuery.scan(), partitions=[1, 2])  # type: ignore[arg-type]
    assert coerced.partitions == frozenset({1, 2})


def test_with_position_bound_validates() -> None:
    with pytest.raises(QueryError, match=r"PositionBound\.at"):
        _request().with_position_bound(P1)  # type: ignore[arg-type]
    with pytest.raises(QueryError, match="PositionBound"):
        _request().with_position_bound(None)  # type: ignore[arg-type]


def test_request_is_hashable_and_picklable() -> None:
    request = _request().with_partitions([1, 2]).with_position_bound(PositionBound.at(P1))
    assert hash(request) == hash(dataclasses.replace(request))
    assert pickle.loads(pickle.dumps(request)) == request


# -- LagInfo -------------------------------------------------------------------------------
def test_lag_info() -> None:
    lag = LagInfo(current_offset_position=90, end_offset_position=100)
    assert lag.offset_lag == 10
    assert LagInfo(100, 100).offset_lag == 0


def test_lag_is_never_negative() -> None:
    assert LagInfo(120, 100).offset_lag == 0


@given(st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1))
def test_lag_is_end_minus_current_floored_at_zero(current: int, end: int) -> None:
    lag = LagInfo(current, end)
    assert lag.offset_lag >= 0
    assert lag.offset_lag == max(0, end - current)


@pytest.mark.parametrize(
    ("current", "end"), [(-1, 0), (0, -1), (True, 5), (0, False), (1.0, 2), ("1", 2), (None, 2)]
)
def test_lag_info_validates(current: Any, end: Any) -> None:
    with pytest.raises(QueryError, match="offset_position"):
        LagInfo(current, end)


def test_lag_info_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        LagInfo(1, 2).end_offset_position = 3  # type: ignore[misc]


# -- HostInfo and KeyQueryMetadata ---------------------------------------------------------
def test_host_info() -> None:
    host = HostInfo("replica-1", 8815)
    assert (host.host, host.port) == ("replica-1", 8815)
    assert str(host) == "replica-1:8815"
    assert str(HostInfo("::1", 1)) == "[::1]:1"
    assert HostInfo("h", 65535).port == 65535
    assert len({HostInfo("h", 1), HostInfo("h", 1)}) == 1


@pytest.mark.parametrize(
    ("host", "port"),
    [
        ("h", 0),
        ("h", -1),
        ("h", 65536),
        ("h", True),
        ("h", "80"),
        ("h", 80.0),
        ("", 80),
        (None, 80),
    ],
)
def test_host_info_validates(host: Any, port: Any) -> None:
    with pytest.raises(QueryError):
        HostInfo(host, port)


def test_key_query_metadata() -> None:
    active, standby = HostInfo("a", 1), HostInfo("b", 2)
    metadata = KeyQueryMetadata(active, frozenset({standby}), 3)
    assert metadata.active == active
    assert metadata.standbys == frozenset({standby})
    assert metadata.partition == 3
    assert metadata.is_available
    leaderless = KeyQueryMetadata(None, [standby], 0)  # type: ignore[arg-type]
    assert leaderless.standbys == frozenset({standby})  # any iterable becomes a frozenset
    assert leaderless.is_available
    with pytest.raises(dataclasses.FrozenInstanceError):
        metadata.partition = 4  # type: ignore[misc]


def test_key_query_metadata_not_available() -> None:
    metadata = KeyQueryMetadata.not_available()
    assert metadata.partition == -1
    assert metadata.active is None
    assert metadata.standbys == frozenset()
    assert not metadata.is_available
    assert metadata == KeyQueryMetadata(None, frozenset(), -1)


@pytest.mark.parametrize(
    ("active", "standbys", "partition"),
    [
        (HostInfo("a", 1), frozenset(), -1),
        (None, frozenset({HostInfo("b", 2)}), -1),
        (None, frozenset(), -2),
        (None, frozenset(), True),
        (None, frozenset(), "0"),
        ("a:1", frozenset(), 0),
        (None, frozenset({"b:2"}), 0),
        (None, "b:2", 0),
        (None, None, 0),
    ],
)
def test_key_query_metadata_validates(active: Any, standbys: Any, partition: Any) -> None:
    with pytest.raises(QueryError):
        KeyQueryMetadata(active, standbys, partition)


def test_results_serialise_positions_as_json() -> None:
    # Results cross process boundaries (Flight); their positions keep the offsets-JSON shape.
    result = QueryResult.for_result(b"v", P2)
    assert json.loads(result.position.to_json()) == {"in": {"0": 7, "1": 3}, "other": {"0": 1}}


# -- structure -------------------------------------------------------------------------------
def test_the_query_modules_import_each_other_in_one_direction() -> None:
    # A sibling imported only under TYPE_CHECKING hides an import circle; the shared types
    # live in the module every other one depends on (_errors) instead.
    import ast
    from pathlib import Path

    import spark_statestore.query as package

    for path in sorted(Path(package.__file__).parent.glob("_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        guarded = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
        ]
        siblings = [
            alias.name
            for block in guarded
            for node in ast.walk(block)
            if isinstance(node, ast.ImportFrom)
            and (node.module or "").startswith("spark_statestore.query")
            for alias in node.names
        ]
        assert not siblings, f"{path.name} imports {siblings} only for type checking"
