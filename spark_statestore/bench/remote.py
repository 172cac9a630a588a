"""The ``remote`` suite: IQv2 point lookups over Arrow Flight on loopback, one at a time,
against the transport's own floor in the same run, and routed against direct.

A store of ``records`` keys is served by a :class:`~spark_statestore.serve.StoreServer` in
this process. Three interleaved paths, each timed per call:

- ``direct``: ``StoreClient.query(KeyQuery)`` of a random existing key (one Flight
  ``query`` action: the request decoded, ``Store.query`` on a snapshot, the result encoded);
- ``floor``: the same client's ``stats`` action, which does no store work: the round trip
  every remote call pays (the issue's "no-op Flight action");
- ``routed``: the same lookups through a :class:`~spark_statestore.discovery.Router` over a
  leader announcement of the store (the router keeps its client to the replica).

Reported as calls/s = 1000 / p50 ms, with p50, p99 and max of each. Goal (issue 15): direct
p50 within 1.25x of the floor's and p99 <= 2 ms.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable
from typing import Any

from spark_statestore.bench.latency import distribution, percentile, shown
from spark_statestore.bench.measure import BenchOptions, Measurement

__all__ = ["SUITE", "run_remote_suite"]

SUITE = "remote"
TOPIC = "bench-remote-changelog"
PARTITIONS = 4
DEFAULT_CALLS = 2_000
QUICK_CALLS = 50
GOAL_RATIO = 1 / 1.25
GOAL_P99_MS = 2.0


def run_remote_suite(options: BenchOptions) -> list[Measurement]:
    """Measure point lookups over Flight against the Flight floor, and routed against direct."""
    import spark_statestore
    from spark_statestore.changelog.partitioner import partition_for_key
    from spark_statestore.discovery import ReplicaAnnouncement, ReplicaSet, Router
    from spark_statestore.query import KeyQuery, StateQueryRequest
    from spark_statestore.serve import StoreServer
    from spark_statestore.store import Role, Store, StoreOptions, StoreSpec

    calls = QUICK_CALLS if options.quick else DEFAULT_CALLS
    records = options.records
    rng = random.Random(options.seed)
    keys = [b"key-%012d" % rng.randrange(records) for _ in range(calls)]
    with tempfile.TemporaryDirectory(prefix="spark-statestore-bench-") as root:
        spec = StoreSpec(Role.LEADER, TOPIC, PARTITIONS, name="remote")
        with Store.open(root, spec, options=StoreOptions(sync=False)) as store:
            with store.begin() as txn:
                # murmur2 partitions, as a changelog's writers place keys (the router
                # asks the key's partition).
                txn.put_all(
                    (key, b"value-%026d" % i, partition_for_key(key, PARTITIONS), i, 0)
                    for i, key in ((i, b"key-%012d" % i) for i in range(records))
                )
            with StoreServer(store) as server:
                location = server.location
                announcement = ReplicaAnnouncement.of_store(
                    store, location=location, ttl_ms=3_600_000
                )
                announcement = announcement.with_heartbeat(
                    int(time.time() * 1000), position=store.metadata.position, lags={}
                )
                view = ReplicaSet.of(TOPIC, [announcement], now_ms=int(time.time() * 1000))
                router = Router(lambda: view, lambda _replica: spark_statestore.connect(root))
                with spark_statestore.connect(root) as client:

                    def direct(key: bytes) -> None:
                        request = StateQueryRequest.in_store("remote").with_query(
                            KeyQuery.with_key(key)
                        )
                        _check(client.query(request), key)

                    def floor(_key: bytes) -> None:
                        client.stats()

                    def routed(key: bytes) -> None:
                        request = StateQueryRequest.in_store("remote").with_query(
                            KeyQuery.with_key(key)
                        )
                        _check(router.query(request), key)

                    samples = _interleaved(
                        {"direct": direct, "floor": floor, "routed": routed}, keys
                    )
    common = {
        "records": records,
        "calls": calls,
        "partitions": PARTITIONS,
        "transport": "grpc+tcp loopback",
    }
    return [
        _measurement(
            "point_lookup_vs_floor",
            samples["direct"],
            samples["floor"],
            "StoreClient.query(KeyQuery) over Flight",
            "the same client's no-op stats action (the Flight round trip)",
            GOAL_RATIO,
            common,
        ),
        _measurement(
            "routed_vs_direct",
            samples["routed"],
            samples["direct"],
            "the same lookups through a Router (its client to the replica kept)",
            "StoreClient.query(KeyQuery) on an open client",
            None,
            common,
        ),
    ]


def _check(result: Any, key: bytes) -> None:
    values = [r.result for r in result.partition_results.values() if r.is_success and r.result]
    expected = b"value-%026d" % int(key[4:])
    if values != [expected]:
        from spark_statestore.bench.errors import BenchError

        raise BenchError(f"bench suite {SUITE}: lookup of {key!r} returned {values!r}")


def _interleaved(
    paths: dict[str, Callable[[bytes], None]], keys: list[bytes]
) -> dict[str, list[float]]:
    """Milliseconds per call of each path, the paths taking turns key by key (after 20
    untimed calls each)."""
    for call in paths.values():
        for key in keys[:20]:
            call(key)
    samples: dict[str, list[float]] = {name: [] for name in paths}
    for key in keys:
        for name, call in paths.items():
            start = time.perf_counter()
            call(key)
            samples[name].append((time.perf_counter() - start) * 1000)
    return samples


def _measurement(
    name: str,
    candidate: list[float],
    baseline: list[float],
    candidate_text: str,
    baseline_text: str,
    target: float | None,
    common: dict[str, Any],
) -> Measurement:
    ours, theirs = distribution(candidate), distribution(baseline)
    goal = "" if target is None else f" (goal: p50 within 1.25x, p99 <= {GOAL_P99_MS:g} ms)"
    return Measurement(
        suite=SUITE,
        name=name,
        unit="calls/s (1000 / p50 ms)",
        candidate=f"{candidate_text}: {shown(ours)}{goal}",
        baseline=f"{baseline_text}: {shown(theirs)}",
        candidate_rates=(1000 / percentile(candidate, 0.5),),
        baseline_rates=(1000 / percentile(baseline, 0.5),),
        target=target,
        parameters={
            **common,
            "percentiles": "nearest rank",
            **{f"candidate_{k}": v for k, v in ours.items()},
            **{f"baseline_{k}": v for k, v in theirs.items()},
            "p99_goal_met": None if target is None else ours["p99_ms"] <= GOAL_P99_MS,
        },
    )
