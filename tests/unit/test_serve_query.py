"""Remote IQv2 queries: a store's Flight server answers ``StoreClient.query`` exactly as the
store's own ``Store.query`` does (a property test), waits for bounds, and refuses malformed
bodies clearly."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.flight as flight
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import spark_statestore
from spark_statestore.position import Position, PositionBound
from spark_statestore.query import (
    CustomQuery,
    FailureReason,
    KeyQuery,
    LagInfo,
    MultiVersionedKeyQuery,
    PrefixQuery,
    QueryError,
    QueryResult,
    RangeQuery,
    RawKeyQuery,
    RawScanQuery,
    StateQueryRequest,
    StateQueryResult,
    VersionedKeyQuery,
)
from spark_statestore.serve import (
    BadRequestError,
    RemoteStoreError,
    ServerConfigError,
    ServerUnavailableError,
    StoreClient,
    StoreServer,
    TooManyPinsError,
    WrongStoreError,
)
from spark_statestore.serve.protocol import encode_object
from spark_statestore.serve.query_wire import (
    decode_query_body,
    decode_result,
    encode_query_body,
    encode_result,
)
from spark_statestore.store import Role, Store, StoreSpec
from tests.misbehaving import UnboundedStore

MakeStore = Callable[..., Store]
NAME = "orders"
KEYS = [b"a", b"ab", b"b", b"c", b"user:1", b"user:2", b"z"]
TOPICS = ["in", "other"]


# -- random stores and requests -----------------------------------------------------------------
@st.composite
def stores(draw: st.DrawFn) -> dict[str, Any]:
    """What to build: role, partitions, versioned or not, and the commits."""
    versioned = draw(st.integers(0, 2)) == 0
    role = Role.FOLLOWER if versioned else draw(st.sampled_from([Role.LEADER, Role.FOLLOWER]))
    partitions = draw(st.integers(1, 3))
    write = st.tuples(
        st.sampled_from(KEYS),
        st.one_of(st.binary(max_size=4), st.binary(min_size=1, max_size=4), st.none()),
        st.integers(0, partitions - 1),
        st.integers(0, 3_000),  # a timestamp (versioned stores)
        st.one_of(
            st.none(),
            st.tuples(st.sampled_from(TOPICS), st.integers(0, 3), st.integers(0, 50)),
        ),
    )
    commits = draw(st.lists(st.lists(write, min_size=3, max_size=12), min_size=1, max_size=3))
    return {"role": role, "partitions": partitions, "versioned": versioned, "commits": commits}


def _build(path: Path, plan: dict[str, Any]) -> Store:
    spec = StoreSpec(
        plan["role"],
        "orders-changelog",
        plan["partitions"],
        NAME,
        history_retention_ms=1_000 if plan["versioned"] else None,
    )
    store = Store.open(path, spec, purpose="remote query test")
    offset = 0
    for commit in plan["commits"]:
        with store.begin() as txn:
            for key, value, partition, timestamp, source in commit:
                if plan["versioned"]:
                    txn.put_versions([(key, value, partition, offset, timestamp)])
                elif value is None:
                    txn.delete(key)
                else:
                    txn.put(key, value, partition=partition, offset=offset, timestamp=timestamp)
                if source is not None:
                    txn.record_source(*source)
                offset += 1
    return store


class Unknown(CustomQuery):
    """A query no store executes."""

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def __repr__(self) -> str:
        return f"Unknown({self.what!r})"


_keys = st.one_of(
    st.sampled_from(KEYS),
    st.binary(max_size=3),
    st.sampled_from(KEYS).map(bytearray),
    st.sampled_from(["a", 7, ("a", 1)]),  # typed keys: this store holds serialized keys
)
_times = st.one_of(st.none(), st.integers(0, 3_500))


@st.composite
def queries(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["key", "raw_key", "range", "prefix", "scan", "v", "mv", "x"]))
    if kind == "key":
        return KeyQuery.with_key(draw(_keys))
    if kind == "raw_key":
        return RawKeyQuery.with_key(draw(st.sampled_from(KEYS)))
    if kind == "range":
        bounds = sorted(draw(st.lists(st.sampled_from(KEYS), min_size=2, max_size=2)))
        lower = draw(st.sampled_from([None, bounds[0]]))
        upper = draw(st.sampled_from([None, bounds[1]]))
        if draw(st.integers(0, 9)) == 0:
            lower, upper = "a", None  # a typed bound: a STORE_EXCEPTION on either side
        query = RangeQuery.with_range(lower, upper)
        return query.with_descending_keys() if draw(st.booleans()) else query
    if kind == "prefix":
        return PrefixQuery.with_prefix(draw(st.sampled_from([b"a", b"user:", b"q"])))
    if kind == "scan":
        limit = draw(st.one_of(st.none(), st.integers(1, 4)))
        return RawScanQuery.scan() if limit is None else RawScanQuery.scan().with_limit(limit)
    if kind == "v":
        query = VersionedKeyQuery.with_key(draw(_keys))
        as_of = draw(_times)
        return query if as_of is None else query.as_of(as_of)
    if kind == "mv":
        multi = MultiVersionedKeyQuery.with_key(draw(_keys))
        times = sorted(draw(st.lists(st.integers(0, 3_500), max_size=2)))
        if times:
            multi = multi.from_time(times[0])
        if len(times) == 2:
            multi = multi.to_time(times[1])
        return multi.with_ascending_timestamps() if draw(st.booleans()) else multi
    return Unknown(draw(st.text(max_size=5)))


def _requests(position: Position) -> st.SearchStrategy[StateQueryRequest]:
    beyond = position
    for topic, partition, offset in position:
        beyond = beyond.with_offset(topic, partition, offset + 1)
    bounds = st.sampled_from(
        [
            PositionBound.unbounded(),
            PositionBound.unbounded(),
            PositionBound.at(position),
            PositionBound.at(position),
            PositionBound.at(beyond),  # not reached where it applies
            PositionBound.at(Position.from_map({"unseen": {0: 0}})),
        ]
    )

    @st.composite
    def build(draw: st.DrawFn) -> StateQueryRequest:
        name = NAME if draw(st.integers(0, 7)) else "elsewhere"
        request = StateQueryRequest.in_store(name).with_query(draw(queries()))
        partitions = draw(st.one_of(st.none(), st.sets(st.integers(0, 4), min_size=1)))
        if partitions is not None:
            request = request.with_partitions(partitions)
        request = request.with_position_bound(draw(bounds))
        if draw(st.integers(0, 3)) == 0:
            request = request.require_active()
        if draw(st.booleans()):
            request = request.enable_execution_info()
        return request

    return build()


_TIMING = re.compile(r"in \d+ us$")


def _comparable(result: StateQueryResult[Any]) -> StateQueryResult[Any]:
    """``result`` with the execution time of each info line blanked: the local and the
    remote run take different times; everything else must be equal."""

    def one(item: QueryResult[Any]) -> QueryResult[Any]:
        info = tuple(_TIMING.sub("in <t> us", line) for line in item.execution_info)
        return dataclasses.replace(item, execution_info=info)

    return StateQueryResult(
        tuple((p, one(r)) for p, r in result.partition_items),
        None if result.global_result is None else one(result.global_result),
    )


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(plan=stores(), data=st.data())
def test_remote_answers_equal_local_answers(plan: dict[str, Any], data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = _build(Path(tmp) / "store", plan)
        try:
            with (
                StoreServer(store) as server,
                spark_statestore.connect(store.path) as client,
                spark_statestore.connect(store.path) as json_client,
            ):
                assert client.location == server.location
                assert client.position == store.metadata.position
                # As a client of a server without query_key: key queries travel as JSON.
                json_client._compact_keys = False
                requests = data.draw(
                    st.lists(_requests(store.metadata.position), min_size=2, max_size=8)
                )
                for request in requests:
                    local = store.query(request)
                    remote = client.query(request)
                    assert _comparable(remote) == _comparable(local), request
                    assert _comparable(json_client.query(request)) == _comparable(local)
                    assert remote.position == local.position
                    for item in remote.partition_results.values():
                        event(f"{type(request.query).__name__}: {item._describe()}")
                        if item.is_success and isinstance(item.value, list):
                            event(f"{type(request.query).__name__}: {min(len(item.value), 2)} rows")
                    for (_, mine), (_, theirs) in zip(
                        local.partition_items, remote.partition_items, strict=True
                    ):
                        assert len(mine.execution_info) == len(theirs.execution_info)
        finally:
            store.close()


# -- examples: every query type and failure reason once, explicitly ---------------------------
@pytest.fixture
def served(make_store: MakeStore) -> Iterator[tuple[Store, StoreServer, StoreClient]]:
    store = make_store(role=Role.FOLLOWER, topic="orders-changelog", partitions=2, store_name=NAME)
    with store.begin() as txn:
        txn.put(b"a", b"A", partition=0, source=("in", 0, 5))
        txn.put(b"b", b"B", partition=1, source=("in", 1, 3))
    with StoreServer(store) as server, server.client(timeout_s=10) as client:
        yield store, server, client


def _request(query: Any) -> StateQueryRequest:
    return StateQueryRequest.in_store(NAME).with_query(query)


def test_each_failure_reason_arrives_as_the_local_one(
    served: tuple[Store, StoreServer, StoreClient],
) -> None:
    store, _, client = served
    ahead = PositionBound.at(Position.from_map({"in": {1: 9}}))
    cases = {
        FailureReason.NOT_PRESENT: _request(KeyQuery.with_key(b"a")).with_partitions([7]),
        FailureReason.NOT_UP_TO_BOUND: _request(KeyQuery.with_key(b"b")).with_position_bound(ahead),
        FailureReason.NOT_ACTIVE: _request(KeyQuery.with_key(b"a")).require_active(),
        FailureReason.DOES_NOT_EXIST: StateQueryRequest.in_store("nope").with_query(
            KeyQuery.with_key(b"a")
        ),
        FailureReason.UNKNOWN_QUERY_TYPE: _request(Unknown("x")),
        FailureReason.STORE_EXCEPTION: _request(KeyQuery.with_key("a")),
    }
    for reason, request in cases.items():
        remote = client.query(request)
        assert remote == store.query(request)
        assert reason in {r.failure_reason for r in remote.partition_results.values()}
    bounded = client.query(cases[FailureReason.NOT_UP_TO_BOUND])
    assert bounded.partition_results[0].is_success  # the bound names partition 1 only
    assert bounded.partition_results[1].failure_reason is FailureReason.NOT_UP_TO_BOUND
    assert "Unknown('x')" in (
        client.query(cases[FailureReason.UNKNOWN_QUERY_TYPE]).partition_results[0].failure_message
        or ""
    )


def test_a_query_waits_for_the_commit_that_reaches_its_bound(
    served: tuple[Store, StoreServer, StoreClient],
) -> None:
    store, server, client = served
    request = (
        _request(KeyQuery.with_key(b"b"))
        .with_partitions([1])
        .with_position_bound(PositionBound.at(Position.from_map({"in": {1: 4}})))
    )
    assert client.query(request).only_partition_result().failure_reason is (
        FailureReason.NOT_UP_TO_BOUND
    )
    answers: list[StateQueryResult[Any]] = []
    waiting = threading.Thread(target=lambda: answers.append(client.query(request, wait_s=120)))
    waiting.start()
    with server.client(timeout_s=10) as other:
        while other.stats()["waiting"] == 0:  # the query is waiting on the server
            assert waiting.is_alive(), answers
            time.sleep(0.01)  # polling another thread's state, not waiting for time
        with store.begin() as txn:
            txn.put(b"b", b"B2", partition=1, source=("in", 1, 4))
        waiting.join(30)
        assert not waiting.is_alive()
        assert other.stats()["waiting"] == 0
    answer = answers[0].only_partition_result()
    assert answer.result == b"B2"
    assert answer.position == store.metadata.position
    assert answers[0] == store.query(request)


def test_waiting_queries_are_capped_per_client(make_store: MakeStore) -> None:
    store = make_store(partitions=1, store_name=NAME)
    request = _request(KeyQuery.with_key(b"a")).with_position_bound(
        PositionBound.at(Position.from_map({"in": {0: 1}}))
    )
    with (
        StoreServer(store, max_waiting_per_client=1) as server,
        server.client(timeout_s=10) as client,
        server.client(timeout_s=10) as other,
    ):
        answers: list[StateQueryResult[Any]] = []
        waiting = threading.Thread(target=lambda: answers.append(client.query(request, wait_s=120)))
        waiting.start()
        while other.stats()["waiting"] == 0:
            assert waiting.is_alive(), answers
            time.sleep(0.01)  # polling another thread's state, not waiting for time
        with pytest.raises(TooManyPinsError, match="max_waiting_per_client=1"):
            client.query(request, wait_s=120)
        assert other.query(request).only_partition_result().failure_reason is (
            FailureReason.NOT_UP_TO_BOUND  # another client, not waiting: answered at once
        )
        with store.begin() as txn:
            txn.put(b"a", b"A", source=("in", 0, 1))
        waiting.join(30)
        assert answers[0].only_partition_result().result == b"A"


def test_lags_come_from_the_owner(make_store: MakeStore) -> None:
    store = make_store(role=Role.FOLLOWER, partitions=2, store_name=NAME)
    lags = {0: LagInfo(3, 9), 1: LagInfo(5, 5)}
    with (
        StoreServer(store, lag_provider=lambda: lags),
        spark_statestore.connect(store.path) as client,
    ):
        assert client.lags() == lags
        assert client.position == store.metadata.position


def test_a_bound_not_reached_in_time_answers_not_up_to_bound(
    served: tuple[Store, StoreServer, StoreClient],
) -> None:
    store, _, client = served
    request = _request(KeyQuery.with_key(b"a")).with_position_bound(
        PositionBound.at(Position.from_map({"in": {0: 99}}))
    )
    answer = client.query(request, wait_s=0.05)
    assert answer == store.query(request)
    assert answer.partition_results[0].failure_reason is FailureReason.NOT_UP_TO_BOUND
    assert answer.partition_results[1].result is None  # the bound does not apply there


@pytest.mark.parametrize(
    ("role", "store_wide"),
    [(Role.LEADER, True), (Role.FOLLOWER, False), (Role.FOLLOWER, True)],
    ids=["leader", "follower", "follower-of-a-sink"],
)
def test_the_client_refuses_a_success_its_bound_does_not_permit(
    tmp_path: Path, role: Role, store_wide: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A server whose store says success under a bound it has not reached: the client
    refuses exactly the answers an honest store refuses (NOT_UP_TO_BOUND), by the rule the
    server says its store applies: the bound's entries for the answer's partition on a
    follower of Kafka Streams' changelog, the whole bound on a leader and on a follower of
    a sink's changelog, whose role alone does not tell."""
    spec = StoreSpec(role, "orders-changelog", 2, NAME)
    with UnboundedStore.open(tmp_path / "liar", spec, purpose="unit test") as store:
        with store.begin() as txn:
            txn.put(b"a", b"A", partition=0, source=("in", 0, 5))
            txn.put(b"b", b"B", partition=1, source=("in", 1, 3))
            if store_wide and role is Role.FOLLOWER:
                txn.mark_store_wide()
        bound = PositionBound.at(Position.from_map({"in": {0: 9}}))  # partition 0: not reached
        refused = {0, 1} if store_wide else {0}
        with StoreServer(store) as server, spark_statestore.connect(store.path) as client:
            for query in (KeyQuery.with_key(b"b"), RangeQuery.with_no_bounds()):  # compact, JSON
                request = _request(query).with_position_bound(bound)
                lie = store.query(request)
                assert all(r.is_success for r in lie.partition_results.values())  # the lie
                honest = store.honest_query(request)
                answer = client.query(request)
                failed = {p for p, r in answer.partition_results.items() if r.is_failure}
                assert failed == refused
                assert failed == {p for p, r in honest.partition_results.items() if r.is_failure}
                for partition in refused:
                    item = answer.partition_results[partition]
                    assert item.failure_reason is FailureReason.NOT_UP_TO_BOUND
                    assert item.position == store.metadata.position
                    message = item.failure_message or ""
                    for named in (
                        server.location,
                        store.manifest.store_id,
                        store.metadata.position.to_json(),
                        bound.to_json() or "",
                    ):
                        assert named in message
                for partition in {0, 1} - refused:  # the bound has no entry for partition 1
                    assert answer.partition_results[partition] == lie.partition_results[partition]
    assert f"(store {store.manifest.store_id}) answered partition 0 as a success" in caplog.text


def test_lags_position_and_wrong_store(
    served: tuple[Store, StoreServer, StoreClient], make_store: MakeStore
) -> None:
    store, server, client = served
    assert client.position == store.metadata.position
    assert client.lags() is None  # this server has no lag provider
    with (
        StoreClient(server.location, token=server.token, store_id="another") as wrong,
        pytest.raises(WrongStoreError, match="not store 'another'"),
    ):
        wrong.query(_request(KeyQuery.with_key(b"a")))


def test_a_closed_store_raises_as_locally(
    served: tuple[Store, StoreServer, StoreClient],
) -> None:
    store, _, client = served
    store.close()
    with pytest.raises(RemoteStoreError, match="closed"):
        client.query(_request(KeyQuery.with_key(b"a")))


# -- connect ------------------------------------------------------------------------------------
def test_connect_by_location_needs_the_token(
    served: tuple[Store, StoreServer, StoreClient],
) -> None:
    store, server, _ = served
    with pytest.raises(ServerConfigError, match="token"):
        spark_statestore.connect(server.location)
    with spark_statestore.connect(server.location, token=server.token) as client:
        assert client.query(_request(KeyQuery.with_key(b"a"))) == store.query(
            _request(KeyQuery.with_key(b"a"))
        )
    with pytest.raises(ServerConfigError, match="own credentials"):
        spark_statestore.connect(store.path, token=server.token)


def test_another_process_connects_by_path(
    served: tuple[Store, StoreServer, StoreClient],
) -> None:
    """The real use: a process that does not own the store finds its owner and token."""
    store, _, _ = served
    request = _request(RangeQuery.with_no_bounds()).with_position_bound(
        PositionBound.at(store.metadata.position)
    )
    code = (
        "import json, sys, spark_statestore\n"
        "from spark_statestore.serve.query_wire import decode_query_body, encode_result\n"
        "request, _ = decode_query_body(json.loads(sys.argv[2]))\n"
        "with spark_statestore.connect(sys.argv[1]) as client:\n"
        "    print(json.dumps(encode_result(client.query(request))))\n"
    )
    body = json.dumps(encode_query_body(request))
    out = subprocess.run(
        [sys.executable, "-c", code, store.path, body], capture_output=True, text=True, check=True
    )
    remote = decode_result(json.loads(out.stdout))
    assert remote == store.query(request)
    assert remote.partition_results[0].result == [(b"a", b"A")]


def test_connect_to_a_store_nobody_serves(make_store: MakeStore) -> None:
    store = make_store("quiet")
    with pytest.raises(ServerUnavailableError, match="no live process serves store"):
        spark_statestore.connect(store.path)


# -- the wire --------------------------------------------------------------------------------------
def test_malformed_query_bodies_are_bad_requests(
    served: tuple[Store, StoreServer, StoreClient],
) -> None:
    _, server, _ = served
    good = {
        "request": {
            "store": NAME,
            "query": {"type": "key", "key": {"bytes": "YQ=="}},
            "partitions": None,
            "position_bound": None,
            "active_only": False,
            "execution_info": False,
        },
        "wait_ms": 0,
    }
    assert decode_query_body(good)[0] == _request(KeyQuery.with_key(b"a"))

    def body(**changes: Any) -> dict[str, Any]:
        request = {**good["request"], **changes}  # type: ignore[dict-item]
        return {"request": {k: v for k, v in request.items() if v is not ...}, "wait_ms": 0}

    bad = [
        ({"wait_ms": -1}, "wait_ms"),
        ({**good, "extra": 1}, "unknown fields"),
        (body(store=""), "store name"),
        (body(store=...), "no 'store'"),
        (body(query={"type": "teleport"}), "unknown query type"),
        (body(query={"type": "key", "key": {"bytes": "%%%"}}), "base64"),
        (body(query={"type": "key", "key": {"hex": "61"}}), "malformed key"),
        (body(query={"type": "key", "key": {"opaque": "no such", "repr": "x"}}), "identifier"),
        (body(query={"type": "key", "key": {"opaque": "T", "repr": "x" * 5000}}), "repr has"),
        (body(query={"type": "raw_scan", "limit": 0}), "limit"),
        (body(query={"type": "versioned_key", "key": {"bytes": ""}, "as_of": 2**64}), "int64"),
        (body(partitions=[]), "must not be empty"),
        (body(partitions=[-1]), "partition"),
        (body(partitions=[2**40]), "int32"),
        (body(partitions=[[1]]), "malformed request"),
        (body(position_bound={"in": {"x": 1}}), "malformed request"),
        (body(active_only="yes"), "active_only"),
    ]
    with flight.FlightClient(server.location) as raw:
        options = flight.FlightCallOptions(
            headers=[(b"authorization", f"Bearer {server.token}".encode())]
        )
        for data, match in bad:
            with pytest.raises(BadRequestError, match=match):
                decode_query_body(data)
            with pytest.raises(flight.FlightServerError, match=match):
                list(raw.do_action(flight.Action("query", encode_object(data)), options))
        with pytest.raises(flight.FlightServerError, match="not valid JSON"):
            list(raw.do_action(flight.Action("query", b"{"), options))


def test_malformed_replies_are_refused() -> None:
    good = encode_result(
        StateQueryResult.for_partitions(
            {0: QueryResult.for_result([(b"k", b"v")], Position.empty())}
        )
    )
    assert decode_result(good).partition_results[0].result == [(b"k", b"v")]
    for reply, match in [
        ({**good, "more": 1}, "unknown fields"),
        ({"partitions": [[0]], "global": None}, "malformed partition result"),
        ({"partitions": [[True, {}]], "global": None}, "partition number"),
        (
            {"partitions": [[0, {**good["partitions"][0][1], "value": {"x": []}}]], "global": None},
            "unknown kind",
        ),
        (
            {
                "partitions": [
                    [0, {**good["partitions"][0][1], "failure": {"reason": "NOPE", "message": "m"}}]
                ],
                "global": None,
            },
            "unknown failure reason",
        ),
        (
            {
                "partitions": [
                    [
                        0,
                        {
                            **good["partitions"][0][1],
                            "failure": {"reason": "NOT_PRESENT", "message": "m"},
                        },
                    ]
                ],
                "global": None,
            },
            "cannot carry",
        ),
    ]:
        with pytest.raises(BadRequestError, match=match):
            decode_result(reply)


def test_requests_that_cannot_travel_are_refused_before_sending(
    served: tuple[Store, StoreServer, StoreClient],
) -> None:
    _, _, client = served
    with pytest.raises(QueryError, match="StateQueryRequest"):
        client.query("get a")  # type: ignore[arg-type]
    with pytest.raises(QueryError, match="int32"):
        client.query(_request(KeyQuery.with_key(b"a")).with_partitions([2**40]))
    with pytest.raises(QueryError, match="wait_s"):
        client.query(_request(KeyQuery.with_key(b"a")), wait_s=-1)
