"""The compact binary form of single-key remote queries (``query_key``): every request and
result it carries decodes to itself, malformed bodies and replies are refused naming the
field, and a client falls back to JSON against a server that has no ``query_key``."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.flight as flight
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_statestore.position import Position, PositionBound
from spark_statestore.query import (
    FailureReason,
    KeyQuery,
    QueryError,
    QueryResult,
    RangeQuery,
    RawKeyQuery,
    StateQueryRequest,
    StateQueryResult,
)
from spark_statestore.serve import (
    BadRequestError,
    ServeError,
    StoreClient,
    StoreServer,
    UnknownActionError,
)
from spark_statestore.serve.key_wire import (
    KEY_WIRE_VERSION,
    RULE_REPLY_VERSION,
    decode_key_query,
    decode_key_reply,
    encode_key_query,
    encode_key_reply,
    travels_compact,
)
from spark_statestore.serve.protocol import ACTION_QUERY_KEY
from spark_statestore.store import Role, Store, StoreSpec
from tests.misbehaving import OlderServer, UnboundedStore

NAME = "orders"

_positions = st.dictionaries(
    st.sampled_from(["in", "other", "ü"]),
    st.dictionaries(st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1), max_size=3),
    max_size=2,
).map(Position.from_map)
_text = st.text(max_size=20)


@st.composite
def key_requests(draw: st.DrawFn) -> tuple[StateQueryRequest, int]:
    key = draw(st.binary(max_size=40))
    query = KeyQuery.with_key(key) if draw(st.booleans()) else RawKeyQuery.with_key(key)
    request = StateQueryRequest.in_store(draw(st.text(min_size=1, max_size=10))).with_query(query)
    partitions = draw(st.one_of(st.none(), st.sets(st.integers(0, 2**31 - 1), min_size=1)))
    if partitions is not None:
        request = request.with_partitions(partitions)
    if draw(st.booleans()):
        request = request.with_position_bound(PositionBound.at(draw(_positions)))
    if draw(st.booleans()):
        request = request.require_active()
    if draw(st.booleans()):
        request = request.enable_execution_info()
    return request, draw(st.integers(0, 2**63 - 1))


@st.composite
def key_results(draw: st.DrawFn) -> QueryResult[Any]:
    position = draw(_positions)
    if draw(st.integers(0, 3)) == 0:
        reason = draw(st.sampled_from(list(FailureReason)))
        return QueryResult.for_failure(reason, draw(_text), position)
    value = draw(st.one_of(st.none(), st.binary(max_size=30)))
    return QueryResult.for_result(value, position, draw(st.lists(_text, max_size=2)))


_state_results = st.one_of(
    st.dictionaries(st.integers(0, 2**31 - 1), key_results(), max_size=5).map(
        StateQueryResult.for_partitions
    ),
    key_results().map(StateQueryResult.for_global),
)


@given(key_requests(), st.booleans())
def test_every_key_request_decodes_to_itself(
    case: tuple[StateQueryRequest, int], with_rule: bool
) -> None:
    request, wait_ms = case
    assert travels_compact(request)
    body = encode_key_query(request, wait_ms, with_rule=with_rule)
    assert decode_key_query(body) == (request, wait_ms, with_rule)


@given(st.text(min_size=1, max_size=10), _state_results, st.sampled_from([None, False, True]))
def test_every_key_result_decodes_to_itself(
    store_id: str, result: StateQueryResult[Any], store_wide: bool | None
) -> None:
    reply = encode_key_reply(store_id, result, store_wide)
    assert reply[0] == (KEY_WIRE_VERSION if store_wide is None else RULE_REPLY_VERSION)
    assert decode_key_reply(reply) == (store_id, result, store_wide)


def test_only_bytes_keys_of_key_queries_travel_compact() -> None:
    request = StateQueryRequest.in_store(NAME)
    assert travels_compact(request.with_query(KeyQuery.with_key(b"k")))
    assert travels_compact(request.with_query(RawKeyQuery.with_key(bytearray(b"k"))))
    for query in (
        KeyQuery.with_key(bytearray(b"k")),  # keeps its type in JSON
        KeyQuery.with_key("k"),
        KeyQuery.with_key(memoryview(b"k")),
        RangeQuery.with_no_bounds(),
    ):
        assert not travels_compact(request.with_query(query))
    assert not travels_compact("get k")
    with pytest.raises(QueryError, match="compact form"):
        encode_key_query(request.with_query(KeyQuery.with_key("k")))
    with pytest.raises(QueryError, match="int32"):
        encode_key_query(request.with_query(KeyQuery.with_key(b"k")).with_partitions([2**31]))


def test_a_result_that_no_key_query_gives_is_not_sent() -> None:
    result = StateQueryResult.for_partitions(
        {0: QueryResult.for_result([(b"k", b"v")], Position.empty())}
    )
    with pytest.raises(BadRequestError, match="type list"):
        encode_key_reply("id", result)


def _body(
    version: int = KEY_WIRE_VERSION,
    kind: int = 0,
    flags: int = 0,
    wait_ms: int = 0,
    store: bytes = NAME.encode(),
    key: bytes = b"k",
    tail: bytes = b"",
) -> bytes:
    head = struct.pack(">BBBQH", version, kind, flags, wait_ms, len(store))
    return head + store + struct.pack(">I", len(key)) + key + tail


def test_malformed_bodies_are_refused_naming_the_field() -> None:
    assert decode_key_query(_body())[0] == StateQueryRequest.in_store(NAME).with_query(
        KeyQuery.with_key(b"k")
    )
    bound = b'{"in":{"0":4}}'
    for body, match in [
        (b"", "too short"),
        (_body(version=2), "version 2"),
        (_body(kind=2), "unknown query type"),
        (_body(flags=32), "unknown flags"),
        (_body(wait_ms=2**63), "beyond int64"),
        (_body(store=b""), "malformed request"),
        (_body(store=b"\xff"), "not UTF-8"),
        (_body()[:-1], "key needs 1 bytes"),
        (_body() + b"x", "1 bytes after the end"),
        (_body(flags=4, tail=struct.pack(">I", 0)), "must not be empty"),
        (_body(flags=4, tail=struct.pack(">III", 2, 3, 1)), "ascending"),
        (_body(flags=4, tail=struct.pack(">III", 2, 1, 1)), "ascending"),
        (_body(flags=4, tail=struct.pack(">II", 1, 2**31)), "beyond int32"),
        (_body(flags=4, tail=struct.pack(">I", 2)), "partitions needs 8 bytes"),
        (_body(flags=8, tail=struct.pack(">I", 3) + b"{x}"), "malformed position"),
        (_body(flags=8, tail=struct.pack(">I", 5) + b'{"":1'), "malformed position"),
        (_body(flags=8, tail=struct.pack(">I", len(bound)) + bound[:-1]), "bound needs"),
    ]:
        with pytest.raises(BadRequestError, match=match):
            decode_key_query(body)


def _reply(
    results: bytes,
    *,
    positions: tuple[bytes, ...] = (b"{}",),
    end: bytes = b"\x00",
    rule: bytes = b"",
) -> bytes:
    version = RULE_REPLY_VERSION if rule else KEY_WIRE_VERSION
    head = struct.pack(">BH", version, 2) + b"id" + rule + struct.pack(">H", len(positions))
    for text in positions:
        head += struct.pack(">I", len(text)) + text
    return head + results + end


def _one(partition: int, index: int, outcome: int, payload: bytes = b"") -> bytes:
    return struct.pack(">IHBIH", partition, index, outcome, len(payload), 0) + payload


def test_malformed_replies_are_refused_naming_the_field() -> None:
    good = _reply(struct.pack(">I", 1) + _one(0, 0, 1, b"v"))
    assert decode_key_reply(good)[1].partition_results[0].result == b"v"
    failure = b"\x0bNOT_PRESENT" + "gone ü".encode()
    assert decode_key_reply(_reply(struct.pack(">I", 1) + _one(3, 0, 2, failure)))[1] == (
        StateQueryResult.for_partitions(
            {3: QueryResult.for_failure(FailureReason.NOT_PRESENT, "gone ü")}
        )
    )
    assert decode_key_reply(good)[2] is None  # a reply of version 1 says no rule
    ruled = _reply(struct.pack(">I", 1) + _one(0, 0, 1, b"v"), rule=b"\x01")
    assert decode_key_reply(ruled)[1:] == (decode_key_reply(good)[1], True)
    for reply, match in [
        (b"\x03" + good[1:], "version 3"),
        (_reply(struct.pack(">I", 1) + _one(0, 0, 1, b"v"), rule=b"\x02"), "bound rule 2"),
        (good[:-1], "global flag"),
        (good + b"\x00", "after the end"),
        (good[:-1] + b"\x02", "global flag 2"),
        (_reply(struct.pack(">I", 1) + _one(0, 1, 1, b"v")), "position index 1"),
        (_reply(struct.pack(">I", 1) + _one(0, 0, 3)), "unknown outcome"),
        (_reply(struct.pack(">I", 1) + _one(0, 0, 0, b"v")), "where none belongs"),
        (_reply(struct.pack(">I", 1) + _one(0, 0, 2, b"\x04NOPEm")), "unknown failure reason"),
        (_reply(struct.pack(">I", 1) + _one(0, 0, 2, b"\x0bNOT_PRESENT\xff")), "not UTF-8"),
        (_reply(struct.pack(">I", 1) + _one(2**31, 0, 0)), "beyond int32"),
        (_reply(struct.pack(">I", 2) + _one(0, 0, 0) + _one(0, 0, 0)), "one result per"),
        (_reply(struct.pack(">I", 1) + _one(0, 0, 0), positions=(b"[]",)), "malformed position"),
        (_reply(struct.pack(">I", 2) + _one(0, 0, 0)), "result head"),
    ]:
        with pytest.raises(BadRequestError, match=match):
            decode_key_reply(reply)


# -- over Flight ------------------------------------------------------------------------------
@pytest.fixture
def served(make_store: Any) -> Iterator[tuple[Store, StoreServer]]:
    store = make_store(role=Role.LEADER, topic="orders-changelog", partitions=2, store_name=NAME)
    with store.begin() as txn:
        txn.put(b"a", b"A", partition=0, source=("in", 0, 5))
        txn.put(b"b", b"B", partition=1, source=("in", 1, 3))
    with StoreServer(store) as server:
        yield store, server


def test_a_client_falls_back_to_json_where_the_server_has_no_query_key(
    served: tuple[Store, StoreServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, server = served
    asked: list[str] = []
    handle = server._handle_action

    def older_server(name: str, body: bytes, client: str = "") -> Any:
        asked.append(name)
        if name == ACTION_QUERY_KEY:  # as a server of a version without it answers
            raise UnknownActionError(f"no action {name!r}", server.location)
        return handle(name, body, client)

    monkeypatch.setattr(server, "_handle_action", older_server)
    with server.client(timeout_s=10) as client:
        for key in (b"a", b"b", b"absent"):
            request = StateQueryRequest.in_store(NAME).with_query(KeyQuery.with_key(key))
            assert client.query(request) == store.query(request)
    assert asked == [ACTION_QUERY_KEY, "query", "query", "query"]  # asked once


def test_a_client_asks_an_older_server_again_without_the_bound_rule(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A server older than the bound rule in replies refuses the flag asking for it: the
    client asks again without it, once, and checks that server's answers by the bound's
    entries for each answer's partition (all an answer from an unknown rule is held to),
    in the compact and the JSON form."""
    spec = StoreSpec(Role.FOLLOWER, "orders-changelog", 2, NAME)
    with UnboundedStore.open(tmp_path / "old", spec, purpose="unit test") as store:
        with store.begin() as txn:
            txn.put(b"a", b"A", partition=0, source=("in", 0, 5))
            txn.put(b"b", b"B", partition=1, source=("in", 1, 3))
        bound = PositionBound.at(Position.from_map({"in": {1: 9}}))  # partition 1: not reached
        with OlderServer(store) as server, StoreClient(server.location, token=server.token) as c:
            for key in (b"a", b"b"):
                request = StateQueryRequest.in_store(NAME).with_query(KeyQuery.with_key(key))
                assert c.query(request) == store.query(request)
                answer = c.query(request.with_position_bound(bound))
                assert answer.partition_results[0].is_success
                refused = answer.partition_results[1]
                assert refused.failure_reason is FailureReason.NOT_UP_TO_BOUND
                assert "answered partition 1 as a success" in (refused.failure_message or "")
            scan = StateQueryRequest.in_store(NAME).with_query(RangeQuery.with_no_bounds())
            answer = c.query(scan.with_position_bound(bound))  # JSON: no store_wide in the reply
            assert answer.partition_results[0].result == [(b"a", b"A")]
            assert answer.partition_results[1].failure_reason is FailureReason.NOT_UP_TO_BOUND
        compact = [flagged for name, flagged in server.asked if name == ACTION_QUERY_KEY]
        assert compact == [True, False, False, False, False]  # refused once, then asked without
    assert "answered partition 1 as a success" in caplog.text


def test_query_key_over_flight_refuses_a_malformed_body(
    served: tuple[Store, StoreServer],
) -> None:
    _, server = served
    with flight.FlightClient(server.location) as raw:
        options = flight.FlightCallOptions(
            headers=[(b"authorization", f"Bearer {server.token}".encode())]
        )
        with pytest.raises(flight.FlightServerError, match="unknown query type"):
            list(raw.do_action(flight.Action(ACTION_QUERY_KEY, _body(kind=9)), options))


def test_a_malformed_reply_is_a_serve_error(
    served: tuple[Store, StoreServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, server = served
    monkeypatch.setattr(server, "_handle_action", lambda name, body, client="": b"\x01")
    with StoreClient(server.location, token=server.token) as client:
        request = StateQueryRequest.in_store(NAME).with_query(KeyQuery.with_key(b"a"))
        with pytest.raises(ServeError, match="malformed query reply"):
            client.query(request)
