"""Who may read a store through its server, and how much one client may hold (no JVM)."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from spark_statestore.position import Position, PositionBound
from spark_statestore.serve import (
    AuthenticationError,
    BadRequestError,
    ServerConfigError,
    ServerUnavailableError,
    StoreClient,
    StoreServer,
    TooManyPinsError,
    WrongStoreError,
    connect_to_owner,
)
from spark_statestore.serve.auth import CREDENTIALS_FILE, is_loopback, read_credentials
from spark_statestore.store import ScanSpec, Store

MakeStore = Callable[..., Store]


def _fill(store: Store, n: int = 100) -> None:
    with store.begin() as txn:
        txn.put_all((b"k%05d" % i, b"v", 0, i, 1_000 + i) for i in range(n))
        txn.record_source("input", 0, n - 1)
        txn.set_changelog_offset(0, n)


@pytest.fixture
def served(make_store: MakeStore) -> Iterator[Callable[..., StoreServer]]:
    """Factory: ``served(name="store", **server_kwargs)``: a filled store, served."""
    servers: list[StoreServer] = []

    def factory(name: str = "store", **kwargs: Any) -> StoreServer:
        store = make_store(name)
        _fill(store)
        server = StoreServer(store, **kwargs)
        server.start()
        servers.append(server)
        return server

    yield factory
    for server in servers:
        server.close()


# -- authentication --------------------------------------------------------------------------
def test_every_call_needs_the_token(served: Callable[..., StoreServer]) -> None:
    server = served()
    for token in (None, "x" * 43):
        with StoreClient(server.location, token=token) as client:
            with pytest.raises(AuthenticationError, match="refused this client's"):
                client.describe()
            with pytest.raises(AuthenticationError):
                client.read_table(ScanSpec.everything())
            with pytest.raises(AuthenticationError):
                client.lookup([b"k00001"])
    raw = flight.FlightClient(server.location)
    for call in (
        lambda: raw.list_actions(),
        lambda: list(raw.do_action(flight.Action("describe", b"{}"))),
        lambda: raw.do_get(flight.Ticket(b'{"snapshot_id": null, "scan": {}}')).read_all(),
        lambda: _raw_lookup(raw),
    ):
        with pytest.raises(flight.FlightUnauthenticatedError):
            call()
    raw.close()
    with server.client() as client:
        assert client.read_table(ScanSpec.everything()).num_rows == 100


def test_the_owner_writes_its_credentials_owner_only(served: Callable[..., StoreServer]) -> None:
    server = served()
    path = os.path.join(server.store.path, CREDENTIALS_FILE)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    credentials = read_credentials(server.store.path)
    assert credentials is not None
    assert credentials.token == server.token
    assert credentials.store_id == server.store.manifest.store_id
    with connect_to_owner(server.store.path) as client:  # type: ignore[union-attr]
        assert client.read_table(ScanSpec.everything()).num_rows == 100
    server.close()
    assert not os.path.exists(path)


def test_a_user_supplied_token(served: Callable[..., StoreServer]) -> None:
    server = served(token="my-own-token-0123456789")
    with StoreClient(server.location, token="my-own-token-0123456789") as client:
        assert client.describe().description.store_id == server.store.manifest.store_id
    for bad in ("short", "has spaces in the token!", "é" * 20):
        with pytest.raises(ServerConfigError, match="printable ASCII"):
            StoreServer(server.store, token=bad)


def test_an_edited_owner_file_never_reads_another_store(
    served: Callable[..., StoreServer],
) -> None:
    a, b = served("a"), served("b")
    # Store a's owner file is edited to point at store b's server.
    a.store.update_owner(flight_location=b.location)
    client = connect_to_owner(a.store.path)
    assert client is not None
    with client, pytest.raises(AuthenticationError):  # a's token is not b's
        client.pin()
    # Even with one token shared by both servers, the store id gives it away.
    shared = "shared-token-0123456789"
    a2, b2 = served("a2", token=shared), served("b2", token=shared)
    a2.store.update_owner(flight_location=b2.location)
    with connect_to_owner(a2.store.path) as client:  # type: ignore[union-attr]
        with pytest.raises(WrongStoreError, match="serves store"):
            client.pin()
        with pytest.raises(WrongStoreError):
            client.describe()
    assert b2.client().stats()["requests"] == 0
    assert len(b2._pins) == 0  # the wrong pin was released
    client = connect_to_owner(a2.store.path)
    assert client is not None
    with client, pytest.raises(WrongStoreError, match="serves store"):
        client.lookup([b"k00001"])


def _raw_lookup(raw: flight.FlightClient) -> None:
    writer, reader = raw.do_exchange(flight.FlightDescriptor.for_command(b'{"lookup": 1}'))
    schema = pa.schema([("key", pa.binary())])
    writer.begin(schema)
    writer.write_batch(pa.record_batch([pa.array([b"k00001"])], schema=schema))
    writer.done_writing()
    reader.read_all()


# -- TLS -----------------------------------------------------------------------------------
def test_loopback_hosts() -> None:
    for host in ("127.0.0.1", "127.8.9.1", "localhost", "::1", "[::1]"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "10.1.2.3", "example.com", ""):
        assert not is_loopback(host), host


def test_beyond_loopback_needs_tls(make_store: MakeStore) -> None:
    store = make_store()
    with pytest.raises(ServerConfigError, match="serveTlsCert and serveTlsKey"):
        StoreServer(store, host="0.0.0.0")


def test_tls_beyond_loopback(
    served: Callable[..., StoreServer], certificate: tuple[bytes, bytes]
) -> None:
    server = served(host="0.0.0.0", tls_certificates=certificate)
    assert server.location.startswith("grpc+tls://")
    with connect_to_owner(server.store.path) as client:  # type: ignore[union-attr]
        assert client.read_table(ScanSpec.everything()).num_rows == 100
    # A plain-text client gets nothing.
    plain = server.location.replace("grpc+tls", "grpc+tcp")
    with (
        StoreClient(plain, token=server.token, timeout_s=5) as client,
        pytest.raises(ServerUnavailableError),
    ):
        client.describe()


# -- caps ------------------------------------------------------------------------------------
def test_pins_are_capped_per_client(served: Callable[..., StoreServer]) -> None:
    server = served(max_pins=6, max_pins_per_client=2)
    greedy, other = server.client(), server.client()
    pins = [greedy.pin(), greedy.pin()]
    with pytest.raises(TooManyPinsError, match="max_pins_per_client=2"):
        greedy.pin()
    assert other.pin().snapshot_id  # another client is not starved
    greedy.release(pins[0].snapshot_id)
    assert greedy.pin().snapshot_id


def test_waiting_pins_are_capped(served: Callable[..., StoreServer]) -> None:
    server = served(max_waiting=3, max_waiting_per_client=1)
    bound = PositionBound.at(Position.from_map({"input": {0: 10_000}}))
    waiting: list[threading.Thread] = []
    results: list[object] = []
    waiters = [server.client(timeout_s=10) for _ in range(3)]

    def wait_with(client: StoreClient) -> None:
        try:
            results.append(client.pin(bound, wait_s=60))
        except Exception as exc:  # reported below
            results.append(exc)

    observer = server.client()
    for count, client in enumerate(waiters, start=1):
        thread = threading.Thread(target=wait_with, args=(client,))
        thread.start()
        waiting.append(thread)
        while observer.stats()["waiting"] < count:
            assert thread.is_alive(), results
            time.sleep(0.01)  # polling the server's state, not waiting for time
    with pytest.raises(TooManyPinsError, match="max_waiting_per_client=1"):
        waiters[0].pin(bound, wait_s=60)
    with pytest.raises(TooManyPinsError, match="max_waiting=3"):
        server.client().pin(bound, wait_s=60)
    # A bound already reached never waits, so it is never refused.
    assert server.client().pin(PositionBound.unbounded(), wait_s=60).snapshot_id
    with server.store.begin() as txn:
        txn.put(b"late", b"x")
        txn.record_source("input", 0, 10_000)
    for thread in waiting:
        thread.join(30)
    assert len(results) == 3 and all(not isinstance(r, Exception) for r in results), results


def test_oversized_requests_and_values_are_refused(served: Callable[..., StoreServer]) -> None:
    server = served(max_request_bytes=4096)
    with server.client() as client:
        with pytest.raises(BadRequestError, match="more than this server accepts"):
            client.read_table(ScanSpec.for_keys([b"k%05d" % i for i in range(500)]))
        assert client.read_table(ScanSpec.for_keys([b"k00001"])).num_rows == 1
        ticket = json.dumps({"snapshot_id": None, "scan": {"limit": 2**70}}).encode()
        with pytest.raises(BadRequestError, match=r"limit must be in \[0, 2\*\*63-1\]"):
            list(client._stream(ticket))


# -- deadlines -------------------------------------------------------------------------------
def test_a_wedged_scan_fails_after_the_idle_timeout(
    served: Callable[..., StoreServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    import spark_statestore.serve.server as server_module

    release = threading.Event()
    real = server_module.scan_batches

    def wedged(*args: Any, **kwargs: Any) -> Iterator[Any]:
        batches = real(*args, **kwargs)
        yield next(batches)
        release.wait(60)  # the owner is stuck after its first batch
        yield from batches

    monkeypatch.setattr(server_module, "scan_batches", wedged)
    server = served(batch_rows=10)
    try:
        with server.client(idle_timeout_s=0.5) as client:
            batches = client.scan(ScanSpec.everything())
            assert next(batches).num_rows == 10
            with pytest.raises(ServerUnavailableError, match=r"sent nothing for 0\.5 s"):
                next(batches)
    finally:
        release.set()


def test_time_spent_by_the_caller_does_not_count(served: Callable[..., StoreServer]) -> None:
    server = served(batch_rows=10)
    with server.client(idle_timeout_s=0.2) as client:
        rows = 0
        for batch in client.scan(ScanSpec.everything()):
            rows += batch.num_rows
            time.sleep(0.05)  # a slow consumer: 10 batches take longer than the timeout
        assert rows == 100
