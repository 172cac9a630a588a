"""The router against real stores served by real Flight servers on loopback (no Kafka: the
replicas are announced to it directly). Every routed answer must equal the answer of the
leader's own store, through leader deaths, lagging and partial followers; when no replica
qualifies the result says why."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import spark_statestore
from spark_statestore.changelog.partitioner import partition_for_key
from spark_statestore.discovery import ReplicaAnnouncement, ReplicaSet, Router, merged_rows
from spark_statestore.position import Position, PositionBound
from spark_statestore.query import (
    FailureReason,
    KeyQuery,
    LagInfo,
    RangeQuery,
    StateQueryRequest,
)
from spark_statestore.serve import StoreServer
from spark_statestore.store import Role, Store, StoreSpec
from tests.misbehaving import OlderServer, UnboundedStore

TOPIC = "prices-changelog"
PARTITIONS = 3
KEYS = [b"k%03d" % i for i in range(60)]


def _fill(store: Store, upto: int, value: bytes = b"v") -> None:
    """Keys 0..upto-1 (valued ``value + key``) with their changelog partitions; position:
    input offset upto-1."""
    with store.begin() as txn:
        rows = [
            (k, value + k, partition_for_key(k, PARTITIONS), i, 0)
            for i, k in enumerate(KEYS[:upto])
        ]
        txn.put_all(rows)
        txn.merge_position(Position.from_map({"orders": dict.fromkeys(range(3), upto - 1)}))


class Cluster:
    """A leader and two followers (one of partitions 0 and 1 only), each served."""

    def __init__(self, root: Path, stack: contextlib.ExitStack) -> None:
        self.root = root
        self.stack = stack
        self.paths: dict[str, str] = {}
        self.servers: dict[str, StoreServer] = {}
        self.announced: dict[str, ReplicaAnnouncement] = {}
        self.live_lag: dict[str, int] = {}  # what each follower's server says its lag is now
        self.add("leader", Role.LEADER, upto=60)
        self.add("full", Role.FOLLOWER, upto=60)
        self.add("part", Role.FOLLOWER, held=(0, 1), upto=40, lag=9)  # behind: 20 keys, lag 9

    def add(
        self,
        name: str,
        role: Role,
        *,
        upto: int,
        held: tuple[int, ...] | None = None,
        lag: int = 0,
        value: bytes = b"v",
        store_class: type[Store] = Store,
        server_class: type[StoreServer] = StoreServer,
    ) -> None:
        """Serve and announce one more replica: keys 0..upto-1 valued ``value + key``."""
        spec = StoreSpec(role, TOPIC, PARTITIONS, held_partitions=held)
        store = self.stack.enter_context(store_class.open(self.root / name, spec, purpose=name))
        _fill(store, upto, value)
        self.live_lag[name] = lag

        def lags(name: str = name, holds: tuple[int, ...] = store.manifest.holds) -> Any:
            return {p: LagInfo(100, 100 + self.live_lag[name]) for p in holds}

        server = server_class(store, lag_provider=None if role is Role.LEADER else lags)
        location = server.start()
        self.stack.callback(server.close)
        announced_lags = (
            {}
            if role is Role.LEADER
            else {p: LagInfo(100, 100 + lag) for p in store.manifest.holds}
        )
        announcement = ReplicaAnnouncement.of_store(store, location=location, ttl_ms=60_000)
        announcement = announcement.with_heartbeat(
            int(time.time() * 1000), position=store.metadata.position, lags=announced_lags
        )
        self.paths[name] = str(self.root / name)
        self.servers[name] = server
        self.announced[name] = announcement

    def router(self, *, wrap: Callable[[Any], Any] | None = None, **options: Any) -> Router:
        """A router over the announced replicas; ``wrap`` wraps each client it makes."""
        by_id = {a.replica_id: name for name, a in self.announced.items()}

        def view() -> ReplicaSet:
            return ReplicaSet.of(TOPIC, self.announced.values(), now_ms=int(time.time() * 1000))

        def connect(replica: ReplicaAnnouncement) -> Any:
            client = spark_statestore.connect(self.paths[by_id[replica.replica_id]])
            return client if wrap is None else wrap(client)

        return Router(view, connect, **options)

    def announce_lag(self, name: str, lag: int) -> None:
        """Announce ``name`` (a follower) with this lag on every partition it holds."""
        old = self.announced[name]
        lags = {p: LagInfo(100, 100 + lag) for p in old.held_partitions}
        self.announced[name] = old.with_heartbeat(
            old.heartbeat_ms, position=old.position, lags=lags
        )

    def stop(self, name: str) -> None:
        self.servers[name].close()  # the announcement stays live: the router must fail over


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with contextlib.ExitStack() as stack:
        yield Cluster(tmp_path, stack)


def _request(query: Any) -> StateQueryRequest:
    return StateQueryRequest.in_store("leader").with_query(query)


def _value(result: Any) -> Any:
    (answer,) = result.partition_results.values()
    assert answer.is_success, answer.failure_message
    return answer.result


def test_key_queries_go_to_the_leader_then_fail_over(cluster: Cluster) -> None:
    router = cluster.router()
    for key in KEYS[:10]:
        result = router.query(_request(KeyQuery.with_key(key)))
        assert list(result.partition_results) == [partition_for_key(key, PARTITIONS)]
        assert _value(result) == b"v" + key
    cluster.stop("leader")
    for key in KEYS[:10]:
        assert _value(router.query(_request(KeyQuery.with_key(key)))) == b"v" + key


def test_scans_fan_out_and_merge_in_key_order(cluster: Cluster) -> None:
    copy = StoreSpec(Role.LEADER, None, PARTITIONS)
    with Store.open(cluster.paths["leader"] + "-copy", copy) as local:
        _fill(local, 60)
        with local.snapshot() as snapshot:
            expected = list(snapshot.items())
    router = cluster.router()
    result = router.query(_request(RangeQuery.with_no_bounds()))
    assert sorted(result.partition_results) == [0, 1, 2]
    assert list(merged_rows(result)) == expected
    cluster.stop("leader")  # partitions 0 and 1: "full" (lag 0) before "part" (lag 9)
    assert list(merged_rows(router.query(_request(RangeQuery.with_no_bounds())))) == expected
    descending = router.query(_request(RangeQuery.with_no_bounds().with_descending_keys()))
    assert list(merged_rows(descending, descending=True)) == expected[::-1]


def test_a_replica_behind_the_bound_is_passed_over(cluster: Cluster) -> None:
    cluster.stop("leader")
    # Announcements are as of their heartbeat: "full" announced a larger lag than "part",
    # which is asked first, but "part" has not reached the bound.
    cluster.announce_lag("full", 30)
    router = cluster.router()
    key = next(k for k in KEYS[:40] if partition_for_key(k, PARTITIONS) in (0, 1))
    partition = partition_for_key(key, PARTITIONS)
    bound = PositionBound.at(Position.from_map({"orders": {partition: 59}}))
    result = router.query(_request(KeyQuery.with_key(key)).with_position_bound(bound))
    assert _value(result) == b"v" + key
    assert result.partition_results[partition].position.to_map()["orders"][partition] == 59
    cluster.stop("full")
    result = router.query(_request(KeyQuery.with_key(key)).with_position_bound(bound))
    answer = result.partition_results[partition]
    assert answer.failure_reason is FailureReason.NOT_UP_TO_BOUND  # "part" is at offset 39
    assert "asked:" in answer.failure_message and "lag 9" in answer.failure_message


def test_when_no_replica_qualifies_the_result_says_why(cluster: Cluster) -> None:
    cluster.stop("leader")
    cluster.stop("full")
    # Still announced (their TTL has not passed): asked, and they do not answer.
    result = cluster.router().query(_request(RangeQuery.with_no_bounds()).with_partitions([2]))
    answer = result.partition_results[2]
    assert answer.failure_reason is FailureReason.STORE_EXCEPTION
    assert "no replica of partition 2 answered" in answer.failure_message
    assert "the last one asked did not: " in answer.failure_message  # and why it did not
    assert answer.failure_message.count("asked:") == 1
    del cluster.announced["leader"], cluster.announced["full"]  # their TTL has passed
    strict = cluster.router(max_lag=5)  # "part" lags by 9
    (answer,) = strict.query(_request(KeyQuery.with_key(KEYS[0]))).partition_results.values()
    if partition_for_key(KEYS[0], PARTITIONS) == 2:
        assert answer.failure_reason is FailureReason.NOT_PRESENT
    else:
        assert answer.failure_reason is FailureReason.NOT_UP_TO_BOUND
        assert "lags by more than max_lag=5" in answer.failure_message
        assert "lag 9" in answer.failure_message
    result = cluster.router().query(_request(RangeQuery.with_no_bounds()).with_partitions([2]))
    assert result.partition_results[2].failure_reason is FailureReason.NOT_PRESENT
    key = next(k for k in KEYS[:40] if partition_for_key(k, PARTITIONS) in (0, 1))
    active = cluster.router().query(_request(KeyQuery.with_key(key)).require_active())
    (answer,) = active.partition_results.values()
    assert answer.failure_reason is FailureReason.NOT_ACTIVE
    assert _value(cluster.router().query(_request(KeyQuery.with_key(key)))) == b"v" + key


def test_a_follower_is_asked_its_lag_before_its_answer_is_used(cluster: Cluster) -> None:
    """Announcements are as old as their heartbeat: "full" announced lag 0 but lags by 50
    now, so with max_lag 10 the router asks it, hears 50, and answers from "part" (lag 9)."""
    cluster.stop("leader")
    cluster.live_lag["full"] = 50
    key = next(k for k in KEYS[:40] if partition_for_key(k, PARTITIONS) in (0, 1))
    router = cluster.router(max_lag=10)
    result = router.query(_request(KeyQuery.with_key(key)))
    assert _value(result) == b"v" + key
    partition = partition_for_key(key, PARTITIONS)
    assert result.partition_results[partition].position.to_map()["orders"][partition] == 39
    cluster.live_lag["part"] = 11
    (answer,) = router.query(_request(KeyQuery.with_key(key))).partition_results.values()
    assert answer.failure_reason is FailureReason.NOT_UP_TO_BOUND
    assert "lags by 11" in answer.failure_message and "max_lag=10" in answer.failure_message


def _key_in(partition: int, upto: int = 40) -> bytes:
    return next(k for k in KEYS[:upto] if partition_for_key(k, PARTITIONS) == partition)


def test_a_replica_that_answers_a_bound_it_has_not_reached_is_passed_over(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The replica "liar" (lag 0, so asked before "full") says success under a bound it has
    not reached, with values of its own: the router refuses its answer and uses the honest
    replica's; with no honest replica left the result is NOT_UP_TO_BOUND, naming the liar,
    its location, its answer's position and the bound."""
    cluster.add("liar", Role.FOLLOWER, upto=40, value=b"lie", store_class=UnboundedStore)
    cluster.stop("leader")
    cluster.announce_lag("full", 5)
    key = _key_in(2)  # "part" does not hold partition 2: the liar and "full" do
    bound = PositionBound.at(Position.from_map({"orders": {2: 59}}))
    router = cluster.router()
    result = router.query(_request(KeyQuery.with_key(key)).with_position_bound(bound))
    assert _value(result) == b"v" + key  # "full"'s, at the bound
    assert result.partition_results[2].position.to_map()["orders"][2] == 59
    liar = cluster.announced["liar"]
    assert f"(store {liar.replica_id}) answered partition 2 as a success" in caplog.text
    cluster.stop("full")
    result = router.query(_request(KeyQuery.with_key(key)).with_position_bound(bound))
    answer = result.partition_results[2]
    assert answer.failure_reason is FailureReason.NOT_UP_TO_BOUND
    assert answer.value is None
    message = answer.failure_message or ""
    for named in (
        liar.replica_id,
        str(liar.location),
        '{"orders":{"0":39,"1":39,"2":39}}',
        bound.to_json() or "",
    ):
        assert named in message
    assert message.count("asked:") == 1


def test_a_leader_is_held_to_the_whole_bound_by_the_router(cluster: Cluster) -> None:
    """A leader's position holds for its whole store (any partition may hold any input
    partition's write), and its announcement says it is the leader: the router checks its
    answers against every entry of the bound even when its server, of an older version,
    does not say by which rule its store answered (its client then checks the answer's
    partition's entries only)."""
    cluster.stop("leader")
    del cluster.announced["leader"]
    cluster.add(
        "old",
        Role.LEADER,
        upto=40,
        value=b"lie",
        store_class=UnboundedStore,
        server_class=OlderServer,
    )
    key = _key_in(0)
    bound = PositionBound.at(Position.from_map({"orders": {1: 59}}))  # another partition's
    result = cluster.router().query(_request(KeyQuery.with_key(key)).with_position_bound(bound))
    assert _value(result) == b"v" + key  # "full"'s: a follower checks its own partition's
    cluster.stop("full")
    cluster.stop("part")
    result = cluster.router().query(_request(KeyQuery.with_key(key)).with_position_bound(bound))
    answer = result.partition_results[0]
    assert answer.failure_reason is FailureReason.NOT_UP_TO_BOUND
    old = cluster.announced["old"]
    message = answer.failure_message or ""
    assert f"leader {old.replica_id} of {TOPIC} at {old.location} answered partition 0" in message
    assert '{"orders":{"0":39,"1":39,"2":39}}' in message and (bound.to_json() or "") in message


def test_enrichment_lookups_never_use_a_refused_answer(cluster: Cluster) -> None:
    """``enrich(changelog=...)`` looks keys up through a router (its routed lookup, as each
    executor task runs it): a liar's values are never used; the honest replica's are, and
    with no honest replica left the lookup fails NOT_UP_TO_BOUND, naming the liar."""
    from spark_statestore.connectors.spark.errors import NotUpToBoundError
    from spark_statestore.connectors.spark.reader import routed
    from spark_statestore.serve.auth import ServeCredentials

    cluster.add("liar", Role.FOLLOWER, upto=40, value=b"lie", store_class=UnboundedStore)
    cluster.stop("leader")
    cluster.announce_lag("full", 5)
    keys = [k for k in KEYS[:40] if partition_for_key(k, PARTITIONS) == 2]
    bound = PositionBound.at(Position.from_map({"orders": {2: 59}}))
    route = routed.ReplicaRoute(TOPIC, "unused:9092", ServeCredentials("unused-token-0123"))
    liar = cluster.announced["liar"]
    with cluster.router() as router:
        found, position = routed._lookup(router, route, keys, bound, 0.0)
        assert found == {k: b"v" + k for k in keys}  # "full"'s values, none of the liar's
        assert position.to_map()["orders"][2] == 59
        cluster.stop("full")
        with pytest.raises(NotUpToBoundError, match=f"NOT_UP_TO_BOUND: .*{liar.replica_id}"):
            routed._lookup(router, route, keys, bound, 0.0)


class _RecordingClient:
    """A replica's real client whose queries record the ``wait_s`` they were given."""

    def __init__(self, client: Any, waits: list[float]) -> None:
        self._client = client
        self._waits = waits

    def query(self, request: StateQueryRequest, *, wait_s: float) -> Any:
        self._waits.append(wait_s)
        return self._client.query(request, wait_s=wait_s)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_one_deadline_bounds_the_wait_across_candidates(cluster: Cluster) -> None:
    """Every replica of partition 0 is behind the bound: the router asks all three in turn,
    and together they wait at most ``wait_s`` (each is given what is left of one deadline),
    not ``wait_s`` each."""
    waits: list[float] = []
    router = cluster.router(wrap=lambda client: _RecordingClient(client, waits))
    bound = PositionBound.at(Position.from_map({"orders": {0: 1000}}))
    started = time.monotonic()
    result = router.query(
        _request(KeyQuery.with_key(_key_in(0))).with_position_bound(bound), wait_s=0.5
    )
    elapsed = time.monotonic() - started
    answer = result.partition_results[0]
    assert answer.failure_reason is FailureReason.NOT_UP_TO_BOUND
    assert len(waits) == 3 and waits[0] > 0.3, waits
    assert sum(waits) <= 0.5, waits  # before the fix: 0.5 each, 1.5 in all
    assert elapsed < 1.2, elapsed


def test_a_replica_reached_at_another_stores_server_is_refused(tmp_path: Path) -> None:
    """Finding 1: the router's connect passed no store id, so a location that led to another
    store's server (a restarted owner's port taken by another store, an announcement made
    with the wrong location) was answered from that store. connect_replica checks the
    server's store id against the announced replica id."""
    from dataclasses import replace

    from spark_statestore.discovery import connect_replica
    from spark_statestore.serve.auth import ServeCredentials, new_token

    token = new_token()
    with contextlib.ExitStack() as stack:
        stores, locations = {}, {}
        for name, value in (("a", b"from-a"), ("b", b"from-b")):
            spec = StoreSpec(Role.LEADER, TOPIC, PARTITIONS)
            store = stack.enter_context(Store.open(tmp_path / name, spec, purpose=name))
            _fill(store, 60, value)
            server = StoreServer(store, token=token)
            locations[name] = server.start()
            stack.callback(server.close)
            stores[name] = store
        announced = ReplicaAnnouncement.of_store(
            stores["a"], location=locations["b"], ttl_ms=60_000
        )
        announced = replace(announced, heartbeat_ms=int(time.time() * 1000))
        credentials = ServeCredentials(token)

        def view() -> ReplicaSet:
            return ReplicaSet.of(TOPIC, [announced], now_ms=int(time.time() * 1000))

        with Router(view, lambda r: connect_replica(r, credentials)) as router:
            result = router.query(_request(KeyQuery.with_key(KEYS[0])))
        (answer,) = result.partition_results.values()
        assert not answer.is_success
        assert "serves store" in (answer.failure_message or "")
        # Announced at its own server, the same replica answers.
        announced = replace(announced, location=locations["a"])
        with Router(view, lambda r: connect_replica(r, credentials)) as router:
            assert _value(router.query(_request(KeyQuery.with_key(KEYS[0])))) == b"from-a" + KEYS[0]


def test_the_router_counts_failovers_and_failures_by_reason(cluster: Cluster) -> None:
    """RouterMetrics over real servers: a stopped leader is an ``unreachable`` failure and a
    failover per partition asked; a follower short of the bound a ``NOT_UP_TO_BOUND`` one;
    a partition nobody can answer is ``unanswered``."""
    from prometheus_client.registry import CollectorRegistry

    from spark_statestore.discovery.metrics import RouterMetrics

    router = cluster.router()
    registry = CollectorRegistry()

    class Refusals:
        def refused_counts(self) -> dict[str, int]:
            return {"unverified": 2}

    RouterMetrics(router, TOPIC, replicas=Refusals(), registry=registry)

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(f"spark_statestore_router_{name}", labels)

    key = next(k for k in KEYS[:40] if partition_for_key(k, PARTITIONS) in (0, 1))
    partition = partition_for_key(key, PARTITIONS)
    assert _value(router.query(_request(KeyQuery.with_key(key)))) == b"v" + key
    assert sample("requests_total", changelog=TOPIC) == 1
    assert sample("failovers_total", changelog=TOPIC) == 0
    cluster.stop("leader")
    assert _value(router.query(_request(KeyQuery.with_key(key)))) == b"v" + key
    assert sample("failovers_total", changelog=TOPIC) == 1
    assert sample("replica_failures_total", changelog=TOPIC, reason="unreachable") == 1
    cluster.stop("full")
    bound = PositionBound.at(Position.from_map({"orders": {partition: 59}}))
    result = router.query(_request(KeyQuery.with_key(key)).with_position_bound(bound))
    assert result.partition_results[partition].failure_reason is FailureReason.NOT_UP_TO_BOUND
    assert sample("replica_failures_total", changelog=TOPIC, reason="NOT_UP_TO_BOUND") == 1
    assert sample("unanswered_partitions_total", changelog=TOPIC) == 1
    assert sample("requests_total", changelog=TOPIC) == 3
    assert sample("refused_announcements_total", changelog=TOPIC, reason="unverified") == 2
