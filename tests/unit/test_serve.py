"""The Flight store server and client, on loopback: pins, scans, expiry, errors, discovery."""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from spark_statestore.errors import StateStoreError
from spark_statestore.position import Position, PositionBound
from spark_statestore.query import FailureReason, KeyQuery, LagInfo, StateQueryRequest
from spark_statestore.serve import (
    AuthenticationError,
    BadRequestError,
    RemoteStoreError,
    ServeError,
    ServerConfigError,
    ServerUnavailableError,
    SnapshotExpiredError,
    StoreClient,
    StoreServer,
    TooManyPinsError,
    UnknownActionError,
    connect_to_owner,
)
from spark_statestore.serve.protocol import ACTIONS, decode_error_info
from spark_statestore.store import Role, ScanSpec, Store, arrow_schema, read_owner

MakeStore = Callable[..., Store]
Serve = Callable[..., tuple[StoreServer, StoreClient]]

N_KEYS = 1_000


class FakeClock:
    """A monotonic clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _key(i: int) -> bytes:
    return b"k%05d" % i


def _fill(store: Store, n: int = N_KEYS, value: bytes = b"v0") -> None:
    with store.begin() as txn:
        txn.put_all((_key(i), value, i % store.manifest.partitions, i, 1_000 + i) for i in range(n))
        txn.record_source("input", 0, n - 1)
        txn.set_changelog_offset(0, n)


@pytest.fixture
def store(make_store: MakeStore) -> Store:
    store = make_store(partitions=2)
    _fill(store)
    return store


@pytest.fixture
def serve(make_store: MakeStore) -> Iterator[Serve]:
    """Factory: ``serve(store, **server_kwargs)`` starts a server on loopback and returns it
    with a client; both are closed when the test ends (before its store is: this fixture
    depends on ``make_store``, so it is torn down first)."""
    opened: list[tuple[StoreServer, StoreClient]] = []

    def factory(store: Store, **kwargs: Any) -> tuple[StoreServer, StoreClient]:
        server = StoreServer(store, **kwargs)
        server.start()
        client = server.client(timeout_s=10)
        opened.append((server, client))
        return server, client

    yield factory
    for server, client in opened:
        client.close()
        server.close()


def _values(
    client: StoreClient, spec: ScanSpec, snapshot_id: str | None = None
) -> dict[bytes, bytes]:
    table = client.read_table(spec, snapshot_id)
    assert table.schema == arrow_schema()
    return dict(
        zip(table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True)
    )


# -- pinned and fresh snapshots --------------------------------------------------------------
def test_a_pin_keeps_its_commit_while_the_store_moves_on(store: Store, serve: Serve) -> None:
    _, client = serve(store)
    before = store.metadata
    pinned = client.pin()
    assert pinned.commit_seq == before.commit_seq
    assert pinned.position == before.position == Position.from_map({"input": {0: N_KEYS - 1}})
    assert pinned.changelog_offsets == {0: N_KEYS}
    assert pinned.metadata.store == store.name
    assert pinned.metadata.changelog_topic == "changelog"
    assert pinned.metadata.role is Role.LEADER
    assert pinned.metadata.partitions == 2
    assert pinned.metadata.commit_record is None
    assert pinned.metadata.held_partitions is None  # a whole-changelog store
    assert pinned.metadata.key_prefix is None

    with store.begin() as txn:  # commits after the pin
        txn.put(_key(1), b"changed")
        txn.delete(_key(2))
        txn.put(b"new", b"added")
        txn.record_source("input", 0, N_KEYS + 5)

    keys = ScanSpec.for_keys([_key(1), _key(2), b"new"])
    assert _values(client, keys, pinned.snapshot_id) == {_key(1): b"v0", _key(2): b"v0"}
    assert len(_values(client, ScanSpec.everything(), pinned.snapshot_id)) == N_KEYS
    assert _values(client, keys) == {_key(1): b"changed", b"new": b"added"}
    assert client.describe().description.commit_seq == before.commit_seq + 1
    assert client.pin().position == Position.from_map({"input": {0: N_KEYS + 5}})


def test_a_pin_with_a_bound_waits_for_the_commit_that_reaches_it(
    store: Store, serve: Serve
) -> None:
    server, client = serve(store)
    bound = PositionBound.at(Position.from_map({"input": {0: N_KEYS + 2}}))
    pinned = _answered_once_committed(server, store, lambda: client.pin(bound, wait_s=120))
    assert bound.permits(pinned.position)
    assert pinned.commit_seq == store.metadata.commit_seq


def _answered_once_committed(server: StoreServer, store: Store, call: Callable[[], Any]) -> Any:
    """What ``call`` (waiting for the bound offset N_KEYS + 2 of "input") returns once two
    commits, the second reaching that bound, are made while it waits."""
    answers: list[Any] = []
    waiting = threading.Thread(target=lambda: answers.append(call()))
    waiting.start()
    # The server counts the calls waiting for their bound: once it does, a commit must wake
    # this one (the predicate has seen the store below the bound).
    with server.client(timeout_s=10) as other:
        while other.stats()["waiting"] == 0:
            assert waiting.is_alive(), answers
            time.sleep(0.01)  # polling another thread's state, not waiting for time
        for offset in (N_KEYS, N_KEYS + 2):
            with store.begin() as txn:
                txn.put(b"w%d" % offset, b"x")
                txn.record_source("input", 0, offset)
        waiting.join(30)
        assert not waiting.is_alive()
        assert other.stats()["waiting"] == 0
    return answers[0]


def test_a_pin_whose_bound_is_not_reached_in_time_pins_the_latest_commit(
    store: Store, serve: Serve
) -> None:
    _, client = serve(store)
    bound = PositionBound.at(Position.from_map({"input": {0: N_KEYS + 100}}))
    pinned = client.pin(bound, wait_s=0.05)
    assert pinned.commit_seq == store.metadata.commit_seq
    assert not bound.permits(pinned.position)
    assert client.pin(PositionBound.at(store.metadata.position), wait_s=60).commit_seq == (
        store.metadata.commit_seq
    )


# -- lookups (do_exchange) ---------------------------------------------------------------
def test_a_lookup_answers_as_a_key_scan_of_one_snapshot(store: Store, serve: Serve) -> None:
    server, client = serve(store, batch_rows=7)
    wanted = [_key(5), b"absent", _key(1), _key(5), _key(N_KEYS - 1)]
    expected = client.read_table(ScanSpec.for_keys(wanted))
    before = client.stats()
    for keys in (wanted, pa.array(wanted, pa.binary()), pa.array(wanted, pa.large_binary())):
        table, reply = client.lookup(keys)
        assert table.replace_schema_metadata(None).equals(expected)
        assert table.column("key").to_pylist() == [_key(1), _key(5), _key(N_KEYS - 1)]
        assert reply.position == store.metadata.position
        assert reply.commit_seq == store.metadata.commit_seq
        assert reply.store_id == store.manifest.store_id
    after = client.stats()
    assert after["requests"] == before["requests"] + 3
    assert after["rows_returned"] == before["rows_returned"] + 9
    assert len(server._pins) == 0  # a lookup pins nothing
    empty, reply = client.lookup([])
    assert empty.num_rows == 0 and reply.commit_seq == store.metadata.commit_seq


def test_a_lookup_with_a_bound_waits_for_the_commit_that_reaches_it(
    store: Store, serve: Serve
) -> None:
    server, client = serve(store)
    bound = PositionBound.at(Position.from_map({"input": {0: N_KEYS + 2}}))
    table, reply = _answered_once_committed(
        server, store, lambda: client.lookup([b"w%d" % (N_KEYS + 2)], bound, wait_s=120)
    )
    assert bound.permits(reply.position)
    assert table.column("value").to_pylist() == [b"x"]  # the commit that reached the bound
    # Not reached in time: the latest commit answers, and the caller sees it short.
    far = PositionBound.at(Position.from_map({"input": {0: N_KEYS + 100}}))
    _, reply = client.lookup([_key(1)], far, wait_s=0.05)
    assert not far.permits(reply.position)
    assert reply.commit_seq == store.metadata.commit_seq


def test_bad_lookups_are_bad_requests(store: Store, serve: Serve) -> None:
    server, client = serve(store, max_request_bytes=4096)
    with pytest.raises(BadRequestError, match="null"):
        client.lookup(pa.array([b"a", None], pa.binary()))
    with pytest.raises(BadRequestError, match="binary array"):
        client.lookup(pa.array(["a"]))
    with pytest.raises(BadRequestError, match="bytes"):
        client.lookup(["not bytes"])  # type: ignore[list-item]
    with pytest.raises(BadRequestError, match="more than this server accepts"):
        client.lookup([b"k%05d" % i for i in range(1000)])
    raw = flight.FlightClient(server.location)
    options = flight.FlightCallOptions(headers=client._headers)
    for command, message in (
        (b'{"lookup": 2}', "is not"),
        (b'{"lookup": 1, "wait_ms": -1}', "wait_ms"),
        (b'{"lookup": 1, "position_bound": 3}', "position_bound"),
        (b"[]", "lookup command"),
    ):
        writer, reader = raw.do_exchange(flight.FlightDescriptor.for_command(command), options)
        with pytest.raises(flight.FlightServerError, match=message):
            writer.begin(pa.schema([("key", pa.binary())]))
            writer.done_writing()
            reader.read_all()
        with contextlib.suppress(flight.FlightServerError):
            writer.close()
    writer, reader = raw.do_exchange(flight.FlightDescriptor.for_command(b'{"lookup": 1}'), options)
    with pytest.raises(flight.FlightServerError, match="one column of keys"):
        two = pa.record_batch([pa.array([b"a"]), pa.array([b"b"])], names=["k", "v"])
        writer.begin(two.schema)
        writer.write_batch(two)
        writer.done_writing()
        reader.read_all()
    with contextlib.suppress(flight.FlightServerError):
        writer.close()
    raw.close()
    assert client.lookup([_key(1)])[0].num_rows == 1  # the server still answers


def test_scan_specs_travel_to_the_server(store: Store, serve: Serve) -> None:
    _, client = serve(store, batch_rows=7)
    spec = ScanSpec.with_prefix(b"k001").with_partitions([1]).with_limit(4)
    table = client.read_table(spec)
    assert table.column("key").to_pylist() == [_key(i) for i in (101, 103, 105, 107)]
    assert set(table.column("partition").to_pylist()) == {1}
    spec = ScanSpec.between(_key(10), _key(20), lower_inclusive=False, upper_inclusive=False)
    assert list(_values(client, spec)) == [_key(i) for i in range(11, 20)]
    batches = list(client.scan(ScanSpec.between(_key(0), _key(19))))
    assert [b.num_rows for b in batches] == [7, 7, 6]
    assert list(client.scan(ScanSpec.between(b"z", b"a"))) == []


def test_release_ends_a_pin(store: Store, serve: Serve) -> None:
    _, client = serve(store)
    pinned = client.pin()
    assert client.describe().pins == 1
    assert client.release(pinned.snapshot_id) is True
    assert client.release(pinned.snapshot_id) is False
    assert client.describe().pins == 0
    with pytest.raises(SnapshotExpiredError, match=r"was released.*re-run the query") as err:
        list(client.scan(ScanSpec.everything(), pinned.snapshot_id))
    assert err.value.location == client.location
    assert isinstance(err.value, StateStoreError)


def test_unknown_snapshot_ids_are_refused(store: Store, serve: Serve) -> None:
    _, client = serve(store)
    with pytest.raises(SnapshotExpiredError, match=r"'nope' is no longer pinned.*re-run"):
        list(client.scan(ScanSpec.for_keys([_key(1)]), "nope"))


def test_pins_expire_after_their_ttl_without_use(store: Store, serve: Serve) -> None:
    clock = FakeClock()
    _, client = serve(store, pin_ttl_s=10, clock=clock)
    pinned = client.pin()
    clock.advance(9)
    assert _values(client, ScanSpec.for_keys([_key(3)]), pinned.snapshot_id)  # refreshes TTL
    clock.advance(9)
    assert client.describe().pins == 1  # 9 s since last use: still alive
    clock.advance(1)
    assert client.describe().pins == 0  # 10 s: expired, lazily on this call
    with pytest.raises(SnapshotExpiredError, match=r"expired after 10 s without use.*re-run"):
        list(client.scan(ScanSpec.everything(), pinned.snapshot_id))


def test_a_pin_being_read_does_not_expire(store: Store, serve: Serve) -> None:
    clock = FakeClock()
    _, client = serve(store, pin_ttl_s=10, clock=clock, batch_rows=10)
    pinned = client.pin()
    stream = client.scan(ScanSpec.everything(), pinned.snapshot_id)
    rows = next(stream).num_rows  # the server holds the pin for this stream now
    clock.advance(60)
    assert client.describe().pins == 1
    rows += sum(batch.num_rows for batch in stream)
    assert rows == N_KEYS
    clock.advance(9)  # the end of the read counts as use
    assert client.describe().pins == 1
    clock.advance(1)
    assert client.describe().pins == 0


def test_max_pins(store: Store, serve: Serve) -> None:
    _, client = serve(store, max_pins=2)
    first = client.pin()
    client.pin()
    with pytest.raises(TooManyPinsError, match=r"2 pinned snapshots \(max_pins=2\)"):
        client.pin()
    client.release(first.snapshot_id)
    client.pin()


# -- stats ---------------------------------------------------------------------------------
def test_stats_count_rows_read_per_scan(store: Store, serve: Serve) -> None:
    _, client = serve(store)
    zero = {
        "rows_examined": 0,
        "rows_returned": 0,
        "requests": 0,
        "waiting": 0,
        "not_up_to_bound": 0,
    }
    assert client.stats() == zero
    list(client.scan(ScanSpec.for_keys([_key(5), _key(500), b"absent"])))
    assert client.stats() == {**zero, "rows_examined": 2, "rows_returned": 2, "requests": 1}
    list(client.scan(ScanSpec.everything().with_partitions([0])))
    assert client.stats() == {
        **zero,
        "rows_examined": 2 + N_KEYS,
        "rows_returned": 2 + N_KEYS // 2,
        "requests": 2,
    }


def test_stats_count_answers_short_of_their_bound(store: Store, serve: Serve) -> None:
    """NOT_UP_TO_BOUND refusals: the server counts each pin, lookup and query it answers from
    a commit that has not reached the bound (the client then refuses the answer)."""
    _, client = serve(store)
    reached = PositionBound.at(store.metadata.position)
    ahead = PositionBound.at(Position.from_map({"elsewhere": {0: 10}}))
    client.release(client.pin(reached, wait_s=0.05).snapshot_id)
    assert client.stats()["not_up_to_bound"] == 0
    pinned = client.pin(ahead, wait_s=0.05)  # a bound travels with a wait only
    assert not ahead.permits(pinned.position)
    client.release(pinned.snapshot_id)
    assert client.stats()["not_up_to_bound"] == 1
    request = (
        StateQueryRequest.in_store(store.name)
        .with_query(KeyQuery.with_key(_key(5)))
        .with_position_bound(ahead)
    )
    result = client.query(request)
    assert all(
        r.failure_reason is FailureReason.NOT_UP_TO_BOUND for r in result.partition_results.values()
    )
    assert client.stats()["not_up_to_bound"] == 2


# -- concurrency ---------------------------------------------------------------------------
def test_concurrent_scans_while_the_store_is_written(store: Store, serve: Serve) -> None:
    server, client = serve(store, batch_rows=50)
    pinned = client.pin()
    start = threading.Barrier(3)
    results: dict[str, object] = {}

    def read(name: str, snapshot_id: str | None) -> None:
        try:
            with server.client() as own:
                start.wait(timeout=10)
                results[name] = [_values(own, ScanSpec.everything(), snapshot_id) for _ in range(3)]
        except BaseException as exc:  # reported below
            results[name] = exc

    threads = [
        threading.Thread(target=read, args=("pinned", pinned.snapshot_id)),
        threading.Thread(target=read, args=("fresh", None)),
    ]
    for thread in threads:
        thread.start()
    start.wait(timeout=10)
    for round_ in range(1, 6):  # whole-store rewrites, each one commit
        with store.begin() as txn:
            txn.put_all((_key(i), b"v%d" % round_, i % 2, i, 0) for i in range(N_KEYS))
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive()
    pinned_reads = results["pinned"]
    fresh_reads = results["fresh"]
    assert isinstance(pinned_reads, list), pinned_reads
    assert isinstance(fresh_reads, list), fresh_reads
    for values in pinned_reads:
        assert set(values.values()) == {b"v0"}
    for values in fresh_reads:
        assert len(values) == N_KEYS
        assert len(set(values.values())) == 1  # every read sees one whole commit


# -- errors --------------------------------------------------------------------------------
class _Headers(flight.ClientMiddlewareFactory):  # type: ignore[misc]
    """Sends a StoreClient's headers (its token) from a raw Flight client."""

    def __init__(self, client: StoreClient) -> None:
        self._headers = {k.decode(): [v.decode()] for k, v in client._headers}

    def start_call(self, info: Any) -> Any:
        headers = self._headers

        class _Send(flight.ClientMiddleware):  # type: ignore[misc]
            def sending_headers(self) -> dict[str, list[str]]:
                return headers

        return _Send()


def _raw_client(client: StoreClient) -> Any:
    """A bare Flight client with ``client``'s credentials, to send malformed requests."""
    return flight.FlightClient(client.location, middleware=[_Headers(client)])


def _raw_error(client: StoreClient, call: Callable[[Any], object]) -> tuple[str, str]:
    raw = _raw_client(client)
    try:
        with pytest.raises(flight.FlightError) as err:
            call(raw)
    finally:
        raw.close()
    decoded = decode_error_info(err.value.extra_info)
    assert decoded is not None, err.value
    return decoded


def test_unknown_actions_name_the_valid_ones(store: Store, serve: Serve) -> None:
    _, client = serve(store)
    kind, message = _raw_error(
        client, lambda raw: list(raw.do_action(flight.Action("compact", b"{}")))
    )
    assert kind == UnknownActionError.kind
    assert "'compact'" in message
    assert "pin, release, describe, stats" in message
    with pytest.raises(UnknownActionError, match="no action 'compact'") as err:
        client._action("compact", {})
    assert isinstance(err.value, BadRequestError) and isinstance(err.value, ValueError)
    actions = _raw_client(client).list_actions()
    assert [action.type for action in actions] == list(ACTIONS)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda raw: raw.do_get(flight.Ticket(b"not json")).read_all(), "not valid JSON"),
        (lambda raw: raw.do_get(flight.Ticket(b'{"snapshot_id": null}')).read_all(), '"scan"'),
        (
            lambda raw: raw.do_get(flight.Ticket(b'{"scan": {"lmit": 1}}')).read_all(),
            "did you mean 'limit'",
        ),
        (
            lambda raw: list(raw.do_action(flight.Action("release", b'{"id": "x"}'))),
            '"snapshot_id"',
        ),
        (lambda raw: list(raw.do_action(flight.Action("pin", b"[1]"))), "JSON object"),
        (
            lambda raw: list(raw.do_action(flight.Action("pin", b'{"wait_ms": -1}'))),
            "wait_ms must be an int >= 0",
        ),
        (
            lambda raw: list(
                raw.do_action(flight.Action("pin", b'{"position_bound": 3, "wait_ms": 5}'))
            ),
            "position_bound must be an offsets JSON object",
        ),
        (
            lambda raw: list(
                raw.do_action(
                    flight.Action("pin", b'{"position_bound": {"t": {"x": 1}}, "wait_ms": 5}')
                )
            ),
            "bad position_bound",
        ),
    ],
)
def test_malformed_requests_are_bad_requests(
    store: Store, serve: Serve, call: Callable[[Any], object], match: str
) -> None:
    _, client = serve(store)
    kind, message = _raw_error(client, call)
    assert kind == BadRequestError.kind
    assert match in message


def test_a_closed_server_is_unavailable(store: Store, serve: Serve) -> None:
    server, client = serve(store)
    client.pin()
    assert len(list(store._snapshots)) == 1
    server.close()
    server.close()  # idempotent
    assert list(store._snapshots) == []  # the pinned snapshot was released
    assert not store.closed  # the server never closes its store
    assert store.get(_key(1)) == b"v0"
    for call in (client.describe, lambda: list(client.scan(ScanSpec.everything()))):
        with pytest.raises(ServerUnavailableError, match="no store server at grpc") as err:
            call()
        assert client.location in str(err.value) and "re-run" in str(err.value)
        assert isinstance(err.value, ConnectionError)
    with pytest.raises(ServeError, match="closed"):
        server.start()


def test_a_store_closed_under_the_server_is_a_remote_store_error(
    store: Store, serve: Serve
) -> None:
    _, client = serve(store, advertise=False)
    pinned = client.pin()
    store.close()
    with pytest.raises(RemoteStoreError, match="closed"):
        list(client.scan(ScanSpec.everything(), pinned.snapshot_id))
    with pytest.raises(RemoteStoreError, match="closed"):
        list(client.scan(ScanSpec.everything()))
    with pytest.raises(RemoteStoreError, match="closed"):
        client.describe()


def test_an_abandoned_scan_does_not_hold_up_close(
    store: Store, serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    server, client = serve(store, batch_rows=10)
    stream = client.scan(ScanSpec.everything())
    next(stream)
    stream.close()  # cancels the call
    with caplog.at_level(logging.WARNING):
        server.close(timeout_s=10)
    assert "still open" not in caplog.text


def test_client_and_server_arguments_are_checked(store: Store) -> None:
    with pytest.raises(ServerConfigError, match="grpc\\+tcp://host:port"):
        StoreClient("localhost:1234")
    with pytest.raises(ServerConfigError, match="timeout_s"):
        StoreClient("grpc+tcp://127.0.0.1:1", timeout_s=0)
    for kwargs, name in (
        ({"pin_ttl_s": 0}, "pin_ttl_s"),
        ({"max_pins": 0}, "max_pins"),
        ({"port": 70000}, "port"),
        ({"host": ""}, "host"),
    ):
        with pytest.raises(ServerConfigError, match=name):
            StoreServer(store, **kwargs)
    server = StoreServer(store)
    with pytest.raises(ServeError, match="not started"):
        _ = server.location
    client = StoreClient("grpc+tcp://127.0.0.1:1")
    client.close()
    with pytest.raises(ServeError, match=r"client .* is closed"):
        client.describe()


# -- describe, lags ------------------------------------------------------------------------
def test_describe_reports_lags_and_owner(store: Store, serve: Serve) -> None:
    lags = {0: LagInfo(N_KEYS, N_KEYS + 3), 1: LagInfo(0, 0)}
    server, client = serve(store, lag_provider=lambda: lags)
    described = client.describe()
    assert described.lags == lags
    assert client.lags() == lags
    assert described.owner == store.owner
    assert described.owner.flight_location == server.location
    assert described.description.position == Position.from_map({"input": {0: N_KEYS - 1}})
    assert described.description.changelog_offsets == {0: N_KEYS}
    assert described.location == server.location
    # On the wire: plain JSON, lags with their offset lag.
    wire = json.loads(json.dumps(described.to_dict()))
    assert wire["lags"] == {
        "0": {"current": N_KEYS, "end": N_KEYS + 3, "lag": 3},
        "1": {"current": 0, "end": 0, "lag": 0},
    }
    assert wire["position"] == {"input": {"0": N_KEYS - 1}}
    assert wire["changelog_offsets"] == {"0": N_KEYS}


def test_describe_without_a_lag_provider(store: Store, serve: Serve) -> None:
    _, client = serve(store)
    assert client.describe().lags is None
    assert client.lags() is None


# -- discovery -----------------------------------------------------------------------------
def test_connect_to_owner(make_store: MakeStore, serve: Serve, tmp_path: Path) -> None:
    assert connect_to_owner(tmp_path / "nothing-here") is None
    store = make_store("owned")
    _fill(store, 10)
    assert connect_to_owner(store.path) is None  # owned, but not served
    server, _ = serve(store, advertise=False)
    assert connect_to_owner(store.path) is None
    store.update_owner(flight_location=server.location)
    # Served, but the server wrote no credentials (advertise=False): refused clearly.
    with pytest.raises(AuthenticationError, match=r"_serve\.json is missing or unreadable"):
        connect_to_owner(store.path)
    server.close()
    server, _ = serve(store)
    with connect_to_owner(store.path) as client:  # type: ignore[union-attr]
        assert client.location == server.location
        assert len(_values(client, ScanSpec.everything())) == 10


def test_a_server_advertises_itself_in_the_owner_file(make_store: MakeStore) -> None:
    store = make_store("advertised")
    _fill(store, 10)
    server = StoreServer(store)
    location = server.start()
    assert server.start() == location  # idempotent
    owner = read_owner(store.path)
    assert owner is not None and owner.flight_location == location
    client = connect_to_owner(store.path)
    assert client is not None
    with client:
        assert client.describe().description.commit_seq == store.metadata.commit_seq
    server.close()
    owner = read_owner(store.path)
    assert owner is not None and owner.flight_location is None
    assert connect_to_owner(store.path) is None
    store.close()
    assert connect_to_owner(store.path) is None  # no live owner at all


def test_importing_serve_loads_no_arrow_or_leveldb() -> None:
    code = (
        "import sys, json, threading\n"
        "import spark_statestore.serve, spark_statestore.store.scan\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('pyarrow', 'plyvel', 'pyspark')]\n"
        "print(json.dumps({'heavy': heavy, 'threads': threading.active_count()}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {"heavy": [], "threads": 1}


def test_batches_are_arrow_record_batches(store: Store, serve: Serve) -> None:
    _, client = serve(store)
    batch = next(client.scan(ScanSpec.for_keys([_key(7)])))
    assert isinstance(batch, pa.RecordBatch)
    assert batch.to_pylist()[0]["partition"] == 1
