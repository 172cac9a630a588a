"""IQv2 queries against a local store: per-partition results, bounds, failures as results."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from spark_statestore.changelog.partitioner import partition_for_key
from spark_statestore.position import Position, PositionBound
from spark_statestore.query import (
    CustomQuery,
    FailureReason,
    KeyQuery,
    PrefixQuery,
    QueryResult,
    RangeQuery,
    RawKeyQuery,
    RawScanQuery,
    StateQueryRequest,
    StateQueryResult,
)
from spark_statestore.store import Role, Store

MakeStore = Callable[..., Store]
NAME = "orders"
POSITION = Position.from_map({"in": {0: 10, 1: 4}})

# key -> (value, changelog partition)
ROWS: dict[bytes, tuple[bytes, int]] = {
    b"a": (b"A", 0),
    b"b": (b"B", 1),
    b"c": (b"C", 2),
    b"d": (b"D", 0),
    b"e": (b"E", 1),
    b"user:1": (b"U1", 2),
    b"user:2": (b"U2", 0),
    b"user:3": (b"U3", 2),
    b"z": (b"Z", 0),
}


def _rows(partition: int, keys: object = None) -> list[tuple[bytes, bytes]]:
    """The rows of ``partition`` in key order, optionally only ``keys`` (a predicate)."""
    return [
        (k, v)
        for k, (v, p) in sorted(ROWS.items())
        if p == partition and (keys is None or keys(k))  # type: ignore[operator]
    ]


@pytest.fixture
def leader(make_store: MakeStore) -> Store:
    store = make_store(role=Role.LEADER, topic="orders-changelog", partitions=3, store_name=NAME)
    with store.begin() as txn:
        for key, (value, partition) in ROWS.items():
            txn.put(key, value, partition=partition)
        txn.merge_position(POSITION)
    return store


@pytest.fixture
def follower(make_store: MakeStore) -> Store:
    store = make_store(
        "follower", role=Role.FOLLOWER, topic="orders-changelog", partitions=3, store_name=NAME
    )
    with store.begin() as txn:
        txn.put(b"a", b"A", partition=0)
        txn.merge_position(POSITION)
    return store


def _request(query: Any) -> StateQueryRequest:
    return StateQueryRequest.in_store(NAME).with_query(query)


def _values(result: StateQueryResult[Any]) -> dict[int, Any]:
    for partition, item in result.partition_results.items():
        assert item.is_success, (partition, item.failure_reason, item.failure_message)
    return {p: r.result for p, r in result.partition_results.items()}


def _reasons(result: StateQueryResult[Any]) -> dict[int, FailureReason | None]:
    return {p: r.failure_reason for p, r in result.partition_results.items()}


def _assert_positions(result: StateQueryResult[Any], position: Position) -> None:
    for item in result.partition_results.values():
        assert item.position == position
    assert result.position == position


# -- key queries ---------------------------------------------------------------------------
@pytest.mark.parametrize("make", [KeyQuery.with_key, RawKeyQuery.with_key])
def test_key_query_answers_on_the_holding_partition(leader: Store, make: Any) -> None:
    result = leader.query(_request(make(b"b")))
    assert _values(result) == {0: None, 1: b"B", 2: None}
    _assert_positions(result, POSITION)
    result = leader.query(_request(make(b"user:3")))
    assert _values(result) == {0: None, 1: None, 2: b"U3"}


@pytest.mark.parametrize("make", [KeyQuery.with_key, RawKeyQuery.with_key])
def test_key_query_for_a_missing_key(leader: Store, make: Any) -> None:
    result = leader.query(_request(make(b"nope")))
    assert _values(result) == {0: None, 1: None, 2: None}
    _assert_positions(result, POSITION)


def test_key_query_with_partitions(leader: Store) -> None:
    request = _request(KeyQuery.with_key(b"e"))
    assert leader.query(request.with_partitions([1])).only_partition_result().result == b"E"
    assert leader.query(request.with_partitions([0])).only_partition_result().result is None
    assert _values(leader.query(request.with_partitions([0, 1]))) == {0: None, 1: b"E"}


def test_key_query_sees_the_latest_commit(leader: Store) -> None:
    request = _request(KeyQuery.with_key(b"a")).with_partitions([0])
    with leader.begin() as txn:
        txn.put(b"a", b"A2", partition=0)
        assert leader.query(request).only_partition_result().result == b"A"  # uncommitted
    assert leader.query(request).only_partition_result().result == b"A2"
    with leader.begin() as txn:
        txn.delete(b"a")
    assert leader.query(request).only_partition_result().result is None


def test_rows_without_a_partition_go_to_their_keys_partition(make_store: MakeStore) -> None:
    store = make_store(partitions=3, store_name=NAME)
    keys = [b"key-%d" % i for i in range(30)]
    with store.begin() as txn:
        for key in keys:
            txn.put(key, key.upper())  # default partition: murmur2 of the key
    result = _values(store.query(_request(RawScanQuery.scan())))
    expected = {p: [(k, k.upper()) for k in keys if partition_for_key(k, 3) == p] for p in range(3)}
    expected = {p: sorted(rows) for p, rows in expected.items()}
    assert result == expected
    assert all(expected.values())  # every partition got some keys
    key = keys[0]
    held = partition_for_key(key, 3)
    point = _values(store.query(_request(KeyQuery.with_key(key))))
    assert point == {p: (key.upper() if p == held else None) for p in range(3)}


# -- scans ---------------------------------------------------------------------------------
def test_range_query(leader: Store) -> None:
    result = leader.query(_request(RangeQuery.with_range(b"b", b"e")))
    inside = lambda k: b"b" <= k <= b"e"  # noqa: E731
    assert _values(result) == {p: _rows(p, inside) for p in range(3)}
    assert _values(result)[1] == [(b"b", b"B"), (b"e", b"E")]  # both bounds included
    _assert_positions(result, POSITION)


def test_range_query_descending(leader: Store) -> None:
    query = RangeQuery.with_range(b"b", b"user:2").with_descending_keys()
    inside = lambda k: b"b" <= k <= b"user:2"  # noqa: E731
    expected = {p: _rows(p, inside)[::-1] for p in range(3)}
    assert _values(leader.query(_request(query))) == expected
    assert expected[0] == [(b"user:2", b"U2"), (b"d", b"D")]


@pytest.mark.parametrize(
    ("query", "inside"),
    [
        (RangeQuery.with_lower_bound(b"d"), lambda k: k >= b"d"),
        (RangeQuery.with_upper_bound(b"c"), lambda k: k <= b"c"),
        (RangeQuery.with_no_bounds(), lambda k: True),
        (RangeQuery.with_range(b"f", b"g"), lambda k: False),
        (RangeQuery.with_range(b"d", b"d"), lambda k: k == b"d"),
        (RangeQuery.with_lower_bound(b"z"), lambda k: k >= b"z"),
        (RangeQuery.with_range(b"user:3", b"user:9"), lambda k: b"user:3" <= k <= b"user:9"),
    ],
    ids=["from-d", "to-c", "all", "empty", "d-d", "from-z", "from-user3"],
)
def test_range_query_open_bounds(leader: Store, query: Any, inside: Any) -> None:
    assert _values(leader.query(_request(query))) == {p: _rows(p, inside) for p in range(3)}
    down = query.with_descending_keys()
    assert _values(leader.query(_request(down))) == {p: _rows(p, inside)[::-1] for p in range(3)}


def test_prefix_query(leader: Store) -> None:
    result = leader.query(_request(PrefixQuery.with_prefix(b"user:")))
    assert _values(result) == {
        0: [(b"user:2", b"U2")],
        1: [],
        2: [(b"user:1", b"U1"), (b"user:3", b"U3")],
    }
    none = leader.query(_request(PrefixQuery.with_prefix(b"nothing")))
    assert _values(none) == {0: [], 1: [], 2: []}


def test_raw_scan_query(leader: Store) -> None:
    result = leader.query(_request(RawScanQuery.scan()))
    assert _values(result) == {p: _rows(p) for p in range(3)}
    _assert_positions(result, POSITION)


@pytest.mark.parametrize("limit", [1, 2, 10])
def test_raw_scan_query_limit_per_partition(leader: Store, limit: int) -> None:
    result = leader.query(_request(RawScanQuery.scan().with_limit(limit)))
    assert _values(result) == {p: _rows(p)[:limit] for p in range(3)}
    one = leader.query(_request(RawScanQuery.scan().with_limit(limit)).with_partitions([2]))
    assert one.only_partition_result().result == _rows(2)[:limit]


def test_scans_with_partitions(leader: Store) -> None:
    request = _request(RangeQuery.with_no_bounds()).with_partitions([0, 2])
    assert _values(leader.query(request)) == {0: _rows(0), 2: _rows(2)}


# -- failures are results ------------------------------------------------------------------
def test_partition_not_held(leader: Store) -> None:
    result = leader.query(_request(RawScanQuery.scan()).with_partitions([1, 3, 7]))
    assert _reasons(result) == {
        1: None,
        3: FailureReason.NOT_PRESENT,
        7: FailureReason.NOT_PRESENT,
    }
    assert result.partition_results[1].result == _rows(1)
    message = result.partition_results[3].failure_message
    assert message is not None
    assert "partition 3" in message
    assert "0-2" in message
    _assert_positions(result, POSITION)


def test_position_bound_not_reached(leader: Store) -> None:
    bound = PositionBound.at(Position.from_map({"in": {0: 11}}))
    request = _request(KeyQuery.with_key(b"a")).with_position_bound(bound).with_partitions([0])
    item = leader.query(request).only_partition_result()
    assert item.failure_reason is FailureReason.NOT_UP_TO_BOUND
    assert item.failure_message is not None
    assert POSITION.to_json() in item.failure_message
    assert '{"in":{"0":11}}' in item.failure_message
    assert item.position == POSITION


def test_position_bound_of_an_unseen_topic(leader: Store) -> None:
    bound = PositionBound.at(Position.from_map({"elsewhere": {0: 0}}))
    request = _request(RawScanQuery.scan()).with_position_bound(bound)
    assert leader.query(request).partition_results[0].failure_reason is (
        FailureReason.NOT_UP_TO_BOUND
    )


@pytest.mark.parametrize("offset", [0, 9, 10])
def test_position_bound_reached(leader: Store, offset: int) -> None:
    bound = PositionBound.at(Position.from_map({"in": {0: offset}}))
    request = _request(KeyQuery.with_key(b"a")).with_position_bound(bound).with_partitions([0])
    item = leader.query(request).only_partition_result()
    assert item.is_success
    assert item.result == b"A"
    assert item.position == POSITION


def test_position_bound_becomes_reachable_after_a_commit(leader: Store) -> None:
    bound = PositionBound.at(Position.from_map({"in": {0: 12}}))
    request = _request(KeyQuery.with_key(b"a")).with_position_bound(bound).with_partitions([0])
    assert leader.query(request).only_partition_result().is_failure
    with leader.begin() as txn:
        txn.put(b"a", b"A3", partition=0)
        txn.record_source("in", 0, 12)
    item = leader.query(request).only_partition_result()
    assert item.result == b"A3"
    assert item.position == Position.from_map({"in": {0: 12, 1: 4}})


def test_require_active_on_a_follower(follower: Store) -> None:
    result = follower.query(_request(KeyQuery.with_key(b"a")).require_active())
    assert _reasons(result) == {p: FailureReason.NOT_ACTIVE for p in range(3)}
    message = result.partition_results[0].failure_message
    assert message is not None
    assert "follower" in message
    _assert_positions(result, POSITION)
    # without require_active the follower answers
    assert _values(follower.query(_request(KeyQuery.with_key(b"a"))))[0] == b"A"


def test_require_active_on_a_leader(leader: Store) -> None:
    result = leader.query(_request(KeyQuery.with_key(b"a")).require_active())
    assert _values(result) == {0: b"A", 1: None, 2: None}


def test_wrong_store_name(leader: Store) -> None:
    request = StateQueryRequest.in_store("payments").with_query(KeyQuery.with_key(b"a"))
    result = leader.query(request)
    assert _reasons(result) == {p: FailureReason.DOES_NOT_EXIST for p in range(3)}
    message = result.partition_results[0].failure_message
    assert message is not None
    assert "'payments'" in message
    assert "'orders'" in message
    limited = leader.query(request.with_partitions([1]))
    assert _reasons(limited) == {1: FailureReason.DOES_NOT_EXIST}


class _CountQuery(CustomQuery):
    __slots__ = ()


def test_custom_query_is_an_unknown_query_type(leader: Store) -> None:
    result = leader.query(_request(_CountQuery()))
    assert _reasons(result) == {p: FailureReason.UNKNOWN_QUERY_TYPE for p in range(3)}
    message = result.partition_results[0].failure_message
    assert message is not None
    assert "_CountQuery" in message
    _assert_positions(result, POSITION)


@pytest.mark.parametrize(
    "query",
    [
        KeyQuery.with_key("a"),
        KeyQuery.with_key(42),
        RangeQuery.with_range("a", "z"),
        RangeQuery.with_lower_bound(3),
    ],
)
def test_non_bytes_keys_are_a_store_exception(leader: Store, query: Any) -> None:
    result = leader.query(_request(query))
    assert _reasons(result) == {p: FailureReason.STORE_EXCEPTION for p in range(3)}
    message = result.partition_results[0].failure_message
    assert message is not None
    assert "bytes" in message
    assert type(query).__name__ in message
    _assert_positions(result, POSITION)


# -- execution info ------------------------------------------------------------------------
def test_execution_info_of_a_point_query(leader: Store) -> None:
    request = _request(KeyQuery.with_key(b"b")).enable_execution_info()
    result = leader.query(request)
    info = {p: r.execution_info for p, r in result.partition_results.items()}
    assert all(len(lines) == 1 for lines in info.values())
    assert "KeyQuery" in info[1][0]
    assert "examined 1 rows" in info[1][0]
    assert "returned 1" in info[1][0]
    assert "returned 0" in info[0][0]
    assert "partition 1" in info[1][0]
    assert leader.query(_request(KeyQuery.with_key(b"b"))).partition_results[1].execution_info == ()


def test_execution_info_of_a_scan(leader: Store) -> None:
    request = _request(RangeQuery.with_range(b"a", b"d")).enable_execution_info()
    result = leader.query(request)
    line = result.partition_results[0].execution_info[0]
    assert "RangeQuery" in line
    assert "examined 4 rows" in line
    assert f"returned {len(_rows(0, lambda k: b'a' <= k <= b'd'))}" in line
    scan = leader.query(_request(RawScanQuery.scan()).enable_execution_info())
    assert "RawScanQuery" in scan.partition_results[2].execution_info[0]
    assert f"returned {len(_rows(2))}" in scan.partition_results[2].execution_info[0]


def test_results_are_query_results(leader: Store) -> None:
    result = leader.query(_request(RawScanQuery.scan()))
    assert isinstance(result, StateQueryResult)
    assert sorted(result.partition_results) == [0, 1, 2]
    assert all(isinstance(r, QueryResult) for r in result.partition_results.values())
    assert all(isinstance(row, tuple) for row in result.partition_results[0].result)


# -- which entries of a bound apply to a partition --------------------------------------------
# POSITION is {"in": {0: 10, 1: 4}}; the bound asks input partition 1 for offset 5, which no
# store below has reached.
_AHEAD_ON_INPUT_1 = PositionBound.at(Position.from_map({"in": {1: 5}}))


def _answer_on_partition_0(store: Store) -> Any:
    request = _request(KeyQuery.with_key(b"a")).with_position_bound(_AHEAD_ON_INPUT_1)
    return store.query(request.with_partitions([0])).only_partition_result()


def test_a_leader_applies_the_whole_bound_to_every_partition(leader: Store) -> None:
    # Our sink writes an input record's change to its key's partition, any partition: a
    # write of input partition 1 may be in store partition 0, so partition 0 must wait too.
    # (It answered, by Kafka Streams' per-partition rule, before the leader was exempted.)
    item = _answer_on_partition_0(leader)
    assert item.failure_reason is FailureReason.NOT_UP_TO_BOUND
    assert "the store is at position" in (item.failure_message or "")


def test_a_follower_of_kafka_streams_applies_the_bound_per_partition(follower: Store) -> None:
    # Kafka Streams' rule: store partition n holds input partition n, so only the bound's
    # entries for partition n apply to it; partition 0 answers.
    item = _answer_on_partition_0(follower)
    assert item.is_success and item.result == b"A"


def test_a_follower_of_a_sink_applies_the_whole_bound(follower: Store) -> None:
    # A follower of a sink's changelog takes positions from whole batches and marks its
    # store so: the bound applies to every partition, as on the leader, for good.
    with follower.begin() as txn:
        txn.mark_store_wide()
    assert follower.metadata.store_wide
    assert _answer_on_partition_0(follower).failure_reason is FailureReason.NOT_UP_TO_BOUND
    with follower.begin() as txn:
        txn.put(b"b", b"B", partition=1)
    assert follower.metadata.store_wide  # kept by later commits
