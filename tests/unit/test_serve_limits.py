"""Bounded replies and caps: a server refuses an IQv2 scan answer larger than its cap while
it reads it (never building it whole), a client refuses any message larger than its own, and
a client's pins and waiting calls count against its peer, whatever id it declares."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from spark_statestore.position import Position, PositionBound
from spark_statestore.query import (
    FailureReason,
    PrefixQuery,
    RangeQuery,
    RawScanQuery,
    StateQueryRequest,
)
from spark_statestore.serve import (
    ReplyTooLargeError,
    ServerConfigError,
    StoreClient,
    StoreServer,
    TooManyPinsError,
)
from spark_statestore.serve.callers import caller_key, peer_of
from spark_statestore.store import ScanSpec, Store
from spark_statestore.store.queries import ROW_BYTES

MakeStore = Callable[..., Store]
ROWS = 1_000
VALUE = b"v" * 100
ROW = len(b"k00000") + len(VALUE) + ROW_BYTES  # what one row counts towards the cap


@pytest.fixture
def served(make_store: MakeStore) -> Iterator[Callable[..., StoreServer]]:
    """Factory: ``served(**server_kwargs)``: a store of 1,000 rows of 100 bytes, served."""
    servers: list[StoreServer] = []

    def factory(**kwargs: Any) -> StoreServer:
        store = make_store(f"store{len(servers)}", store_name="store")
        with store.begin() as txn:
            txn.put_all((b"k%05d" % i, VALUE, 0, i, 0) for i in range(ROWS))
        server = StoreServer(store, **kwargs)
        server.start()
        servers.append(server)
        return server

    yield factory
    for server in servers:
        server.close()


def _request(query: Any) -> StateQueryRequest:
    return StateQueryRequest.in_store("store").with_query(query)


def test_a_scan_answer_over_the_cap_is_refused_as_it_is_read(
    served: Callable[..., StoreServer],
) -> None:
    """The whole store is ~138 KB of rows; the cap is 10,000 bytes: the answer stops at the
    row that passes it (the 73rd) and says to read in pages; a narrower range passes."""
    server = served(max_result_bytes=10_000)
    first_over = 10_000 // ROW + 1
    with server.client() as client:
        for query in (
            RangeQuery.with_no_bounds(),
            PrefixQuery.with_prefix(b"k0"),
            RawScanQuery.scan(),
        ):
            answer = client.query(_request(query)).only_partition_result()
            assert answer.failure_reason is FailureReason.STORE_EXCEPTION, query
            message = answer.failure_message or ""
            assert "more than max_result_bytes=10,000 bytes" in message
            assert f"at row {first_over}" in message  # stopped there, not built whole
            assert "Read it in pages" in message and "RoutedScan" in message
        narrow = client.query(_request(RangeQuery.with_range(b"k00000", b"k00009")))
        assert len(narrow.only_partition_result().result) == 10
        limited = client.query(_request(RawScanQuery.scan().with_limit(first_over - 1)))
        assert len(limited.only_partition_result().result) == first_over - 1


def test_a_local_query_has_no_cap_unless_asked(make_store: MakeStore) -> None:
    store = make_store(store_name="store")
    with store.begin() as txn:
        txn.put_all((b"k%05d" % i, VALUE, 0, i, 0) for i in range(ROWS))
    whole = store.query(_request(RangeQuery.with_no_bounds())).only_partition_result()
    assert len(whole.result) == ROWS
    capped = store.query(_request(RangeQuery.with_no_bounds()), max_result_bytes=ROW * 5)
    assert "at row 6" in (capped.only_partition_result().failure_message or "")


def test_a_client_refuses_a_message_over_its_cap(served: Callable[..., StoreServer]) -> None:
    """gRPC refuses a reply, or a streamed batch, larger than ``max_reply_bytes`` before
    buffering it whole; smaller ones pass."""
    server = served(batch_rows=100)  # batches of ~10 KB
    with server.client(max_reply_bytes=64 * 1024) as client:
        with pytest.raises(ReplyTooLargeError, match=r"max_reply_bytes=65,536"):
            client.query(_request(RangeQuery.with_no_bounds()))  # ~180 KB of JSON
        assert client.read_table(ScanSpec.everything()).num_rows == ROWS
        narrow = client.query(_request(RangeQuery.with_range(b"k00000", b"k00099")))
        assert len(narrow.only_partition_result().result) == 100
    with server.client(max_reply_bytes=4 * 1024) as client:
        batches = client.scan(ScanSpec.everything())
        with pytest.raises(ReplyTooLargeError, match="read large answers in pages"):
            next(batches)


@pytest.mark.parametrize("value", [0, -1, True, 1.5, 2**31])
def test_caps_must_be_positive_ints(make_store: MakeStore, value: Any) -> None:
    with pytest.raises(ServerConfigError, match="max_reply_bytes"):
        StoreClient("grpc+tcp://127.0.0.1:1", max_reply_bytes=value)
    if value != 2**31:
        with pytest.raises(ServerConfigError, match="max_result_bytes"):
            StoreServer(make_store(), max_result_bytes=value)


# -- caps a client cannot dodge by changing its declared id ------------------------------------
def test_pins_are_capped_per_peer_whatever_id_a_client_declares(
    served: Callable[..., StoreServer],
) -> None:
    """Every client here comes from 127.0.0.1, one peer: fresh ids (a new client each) get
    no more than the peer's cap, short of the server's."""
    server = served(max_pins=10, max_pins_per_client=2, max_pins_per_peer=4)
    clients = [server.client() for _ in range(3)]
    pins = [client.pin() for client in clients[:2] for _ in range(2)]
    with pytest.raises(TooManyPinsError, match="max_pins_per_client=2"):
        clients[0].pin()
    with pytest.raises(
        TooManyPinsError, match=r"peer 'ipv4:127\.0\.0\.1' hold 4 \(max_pins_per_peer=4"
    ):
        clients[2].pin()
    clients[0].release(pins[0].snapshot_id)
    assert clients[2].pin().snapshot_id


def test_waiting_calls_are_capped_per_peer(served: Callable[..., StoreServer]) -> None:
    server = served(max_waiting=6, max_waiting_per_client=2, max_waiting_per_peer=3)
    bound = PositionBound.at(Position.from_map({"input": {0: 10_000}}))
    waiters = [server.client(timeout_s=30) for _ in range(2)]
    results: list[object] = []

    def wait_with(client: StoreClient) -> None:
        try:
            results.append(client.pin(bound, wait_s=60))
        except Exception as exc:  # reported below
            results.append(exc)

    threads = []
    observer = server.client()
    for count, client in enumerate([*waiters, waiters[0]], start=1):
        threads.append(threading.Thread(target=wait_with, args=(client,)))
        threads[-1].start()
        while observer.stats()["waiting"] < count:
            assert threads[-1].is_alive(), results
            time.sleep(0.01)  # polling the server's state, not waiting for time
    with pytest.raises(TooManyPinsError, match="max_waiting_per_peer=3"):
        server.client().pin(bound, wait_s=60)
    with server.store.begin() as txn:
        txn.record_source("input", 0, 10_000)
    for thread in threads:
        thread.join(30)
    assert len(results) == 3 and not any(isinstance(r, Exception) for r in results), results


def test_caller_keys_name_the_peer_not_its_port() -> None:
    same = caller_key("id-1", "ipv4:10.0.0.7:5001"), caller_key("id-1", "ipv4:10.0.0.7:6002")
    assert same[0] == same[1] and peer_of(same[0]) == "ipv4:10.0.0.7"
    assert caller_key("id-1", "ipv4:10.0.0.8:5001") != same[0]  # an id counts within its peer
    assert peer_of(caller_key("x", "ipv6:[::1]:7000")) == "ipv6:[::1]"
    assert peer_of(caller_key("x", "unix:/tmp/s.sock")) == "unix:/tmp/s.sock"
    # Under mutual TLS the certificate's identity is the peer, wherever the call comes from.
    tls = (
        caller_key("x", "ipv4:10.0.0.7:5001", b"CN=reader"),
        caller_key("y", "ipv4:10.9.9.9:1", b"CN=reader"),
    )
    assert {peer_of(key) for key in tls} == {"tls:CN=reader"}
