"""Paged routed scans against real stores served by real Flight servers on loopback (no
Kafka: the replicas are announced to the router directly): every row exactly once in key
order, pages from one snapshot per replica, the limit applied at the replicas, failover
in the middle of a scan only onto a snapshot at least as new."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

import spark_statestore
from spark_statestore.changelog.partitioner import partition_for_key
from spark_statestore.discovery import (
    ReplicaAnnouncement,
    ReplicaSet,
    RoutedScan,
    RoutedScanError,
    Router,
)
from spark_statestore.position import Position, PositionBound
from spark_statestore.query import (
    FailureReason,
    KeyQuery,
    LagInfo,
    PrefixQuery,
    QueryError,
    RangeQuery,
    RawScanQuery,
    StateQueryRequest,
)
from spark_statestore.serve import StoreServer
from spark_statestore.store import Role, Store, StoreSpec

TOPIC = "prices-changelog"
PARTITIONS = 3
KEYS = [b"k%04d" % i for i in range(300)]


class Replicas:
    """Served and announced stores of one changelog, each holding ``KEYS`` (its partitions'
    ones) valued ``value + key``, at position ``orders: {0, 1, 2: offset}``."""

    def __init__(self, root: Path, stack: contextlib.ExitStack) -> None:
        self.root = root
        self.stack = stack
        self.stores: dict[str, Store] = {}
        self.servers: dict[str, StoreServer] = {}
        self.announced: dict[str, ReplicaAnnouncement] = {}

    def add(
        self,
        name: str,
        role: Role,
        *,
        held: tuple[int, ...] | None = None,
        lag: int = 0,
        offset: int = 100,
        value: bytes = b"v",
        **server_options: Any,
    ) -> None:
        spec = StoreSpec(role, TOPIC, PARTITIONS, held_partitions=held)
        store = self.stack.enter_context(Store.open(self.root / name, spec, purpose=name))
        with store.begin() as txn:
            txn.put_all(
                (k, value + k, p, i, 0)
                for i, k in enumerate(KEYS)
                if (p := partition_for_key(k, PARTITIONS)) in store.manifest.holds
            )
            txn.merge_position(Position.from_map({"orders": dict.fromkeys(range(3), offset)}))
        lags = {p: LagInfo(100, 100 + lag) for p in store.manifest.holds}
        server = StoreServer(
            store, lag_provider=None if role is Role.LEADER else (lambda: lags), **server_options
        )
        location = server.start()
        self.stack.callback(server.close)
        announcement = ReplicaAnnouncement.of_store(store, location=location, ttl_ms=60_000)
        self.announced[name] = announcement.with_heartbeat(
            int(time.time() * 1000),
            position=store.metadata.position,
            lags={} if role is Role.LEADER else lags,
        )
        self.stores[name] = store
        self.servers[name] = server

    def router(self, **options: Any) -> Router:
        by_id = {a.replica_id: name for name, a in self.announced.items()}

        def view() -> ReplicaSet:
            return ReplicaSet.of(TOPIC, self.announced.values(), now_ms=int(time.time() * 1000))

        def connect(replica: ReplicaAnnouncement) -> Any:
            return spark_statestore.connect(self.stores[by_id[replica.replica_id]].path)

        return self.stack.enter_context(Router(view, connect, **options))

    def sent(self) -> dict[str, int]:
        """The rows each live server has streamed so far."""
        sent = {}
        for name, server in self.servers.items():
            if server.running:
                with server.client() as client:
                    sent[name] = client.stats()["rows_returned"]
        return sent


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[Replicas]:
    with contextlib.ExitStack() as stack:
        yield Replicas(tmp_path, stack)


def _request(query: Any = None) -> StateQueryRequest:
    return StateQueryRequest.in_store(TOPIC).with_query(query or RawScanQuery.scan())


def _rows(scan: RoutedScan) -> list[tuple[bytes, bytes]]:
    return list(scan.rows())


def _pairs(batches: Iterable[Any]) -> list[tuple[bytes, bytes]]:
    """The ``(key, value)`` rows of record batches."""
    return [
        pair
        for batch in batches
        for pair in zip(
            batch.column("key").to_pylist(), batch.column("value").to_pylist(), strict=True
        )
    ]


def test_every_row_once_in_key_order_from_pages_of_several_replicas(replicas: Replicas) -> None:
    """Partition 2's best replica holds it alone; partitions 0 and 1 go to a follower of all
    three, which sends only their rows. Pages of 7 rows, three prefixes and ranges."""
    replicas.add("all", Role.FOLLOWER, lag=1)
    replicas.add("two", Role.FOLLOWER, held=(2,))
    router = replicas.router()
    expected = [(k, b"v" + k) for k in KEYS]
    with RoutedScan.open(router, _request(), page_rows=7) as scan:
        batches = list(scan.batches())
        assert scan.position == Position.from_map({"orders": {0: 100, 1: 100, 2: 100}})
    assert all(batch.num_rows <= 7 for batch in batches)
    assert _pairs(batches) == expected
    partitions = [p for b in batches for p in b.column("partition").to_pylist()]
    assert partitions == [partition_for_key(k, PARTITIONS) for k in KEYS]
    sent = replicas.sent()
    in_two = sum(1 for k in KEYS if partition_for_key(k, PARTITIONS) == 2)
    assert sent == {"all": len(KEYS) - in_two, "two": in_two}  # each row sent once
    for query, wanted in (
        (PrefixQuery.with_prefix(b"k01"), [r for r in expected if r[0].startswith(b"k01")]),
        (RangeQuery.with_range(b"k0050", b"k0120"), expected[50:121]),
        (RangeQuery.with_lower_bound(b"k0290"), expected[290:]),
    ):
        with RoutedScan.open(router, _request(query), page_rows=4) as scan:
            assert _rows(scan) == wanted, query


def test_pages_come_from_one_snapshot_while_the_store_changes(replicas: Replicas) -> None:
    """Rows written, rewritten and deleted after the scan's first page are not seen: every
    page continues the snapshot the replica pinned when the scan opened."""
    replicas.add("leader", Role.LEADER)
    store = replicas.stores["leader"]
    with (
        RoutedScan.open(replicas.router(), _request(), page_rows=10) as scan,
        store.snapshot() as before,
    ):
        expected = list(before.items())
        batches = scan.batches()
        first = next(batches)
        with store.begin() as txn:
            for key in KEYS:
                txn.put(key, b"rewritten")
            txn.delete(KEYS[-1])
            txn.put(b"k9999", b"new")
        rest = list(batches)
    assert _pairs([first, *rest]) == expected


def test_the_limit_applies_at_each_replica(replicas: Replicas) -> None:
    """A scan of 13 rows over three replicas: no replica streams more than 13, and the merge
    stops at 13."""
    for partition in range(PARTITIONS):
        replicas.add(f"p{partition}", Role.FOLLOWER, held=(partition,))
    with RoutedScan.open(replicas.router(), _request(), limit=13, page_rows=5) as scan:
        assert _rows(scan) == [(k, b"v" + k) for k in KEYS[:13]]
    sent = replicas.sent()
    assert all(rows <= 13 for rows in sent.values()), sent
    assert sum(sent.values()) < 3 * 13, sent  # pages of 5: each stops where its rows run out


def test_a_replica_lost_mid_scan_is_replaced_at_the_same_key(replicas: Replicas) -> None:
    """The leader stops after the first pages; the follower, at the same position, continues
    after the last key read: every row once, and the scan says it resumed."""
    replicas.add("leader", Role.LEADER)
    replicas.add("follower", Role.FOLLOWER, value=b"f")
    with RoutedScan.open(replicas.router(), _request(), page_rows=50) as scan:
        batches = scan.batches()
        first = next(batches)
        replicas.servers["leader"].close()
        rest = list(batches)
        assert scan.resumed == 1
    rows = _pairs([first, *rest])
    assert [k for k, _ in rows] == KEYS
    sources = [v[:1] for _, v in rows]
    switch = sources.index(b"f")  # the leader's rows up to a page's end, then the follower's
    assert switch % 50 == 0 and set(sources[:switch]) == {b"v"} and set(sources[switch:]) == {b"f"}


def test_a_replacement_behind_the_lost_snapshot_is_refused(replicas: Replicas) -> None:
    """The only other replica's snapshot is older than the leader's: the scan fails,
    naming both, rather than mix in rows older than those already read."""
    replicas.add("leader", Role.LEADER, offset=200)
    replicas.add("follower", Role.FOLLOWER, offset=150)
    with RoutedScan.open(replicas.router(), _request(), page_rows=50) as scan:
        batches = scan.batches()
        next(batches)
        replicas.servers["leader"].close()
        with pytest.raises(RoutedScanError, match="no replica could continue") as failed:
            next(batches)
    message = str(failed.value)
    assert "failed after key b'k0" in message and "NOT_UP_TO_BOUND" in message
    reasons = {a.failure_reason for a in failed.value.failures.values()}
    assert reasons == {FailureReason.NOT_UP_TO_BOUND}


def test_an_expired_pin_is_pinned_again_on_the_same_replica(replicas: Replicas) -> None:
    now = [0.0]
    replicas.add("leader", Role.LEADER, pin_ttl_s=10, clock=lambda: now[0])
    with RoutedScan.open(replicas.router(), _request(), page_rows=100) as scan:
        batches = scan.batches()
        first = next(batches)
        now[0] += 60  # the pin is unused for longer than its TTL
        rest = list(batches)
        assert scan.resumed == 1
    assert [k for k, _ in _pairs([first, *rest])] == KEYS


def test_no_qualifying_replica_fails_at_open_within_one_deadline(replicas: Replicas) -> None:
    replicas.add("a", Role.FOLLOWER)
    replicas.add("b", Role.FOLLOWER, lag=1)
    bound = PositionBound.at(Position.from_map({"orders": {0: 1_000}}))
    started = time.monotonic()
    with pytest.raises(RoutedScanError, match="partition 0: NOT_UP_TO_BOUND") as failed:
        RoutedScan.open(replicas.router(), _request().with_position_bound(bound), wait_s=0.5)
    assert time.monotonic() - started < 1.2  # both replicas asked, 0.5 s in all
    assert set(failed.value.failures) == {0}  # the bound names partition 0 only
    assert all(server.client().describe().pins == 0 for server in replicas.servers.values())


def test_only_pageable_scans(replicas: Replicas) -> None:
    replicas.add("leader", Role.LEADER)
    router = replicas.router()
    for query, message in (
        (RangeQuery.with_no_bounds().with_descending_keys(), "ascending order"),
        (RawScanQuery.scan().with_limit(5), "counts per partition"),
        (KeyQuery.with_key(b"k0001"), "not KeyQuery"),
    ):
        with pytest.raises(QueryError, match=message):
            RoutedScan.open(router, _request(query))
    with pytest.raises(QueryError, match="page_rows"):
        RoutedScan.open(router, _request(), page_rows=0)
    with RoutedScan.open(router, _request(), limit=0) as scan:
        assert _rows(scan) == []
