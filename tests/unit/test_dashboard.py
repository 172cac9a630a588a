"""The Grafana dashboard (docs/grafana-dashboard.json) names only metrics that exist: every
``spark_statestore_*`` name in its queries is a sample name that our collectors produce, built
here on real stores, a real follower engine, a real store server and the sink's and store
host's own counters (no JVM, no broker). That its queries are valid PromQL is checked by a real
Prometheus server (tests/integration/test_prometheus_scrape.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client.registry import CollectorRegistry

from spark_statestore.discovery.metadata import ReplicaSet
from spark_statestore.discovery.metrics import RouterMetrics
from spark_statestore.discovery.router import Router
from spark_statestore.metrics import (
    FollowerMetrics,
    HostMetrics,
    ServerMetrics,
    SinkMetrics,
    StoreMetrics,
)
from spark_statestore.serve import StoreServer
from spark_statestore.serve.calls import CallStats
from spark_statestore.sink.stats import CommitReport, PublishReport, SinkStats
from spark_statestore.store import Role
from tests.conftest import REPO_ROOT
from tests.unit.test_follower_positions import TOPIC, FakeChangelog

DASHBOARD = Path(REPO_ROOT) / "docs" / "grafana-dashboard.json"
_NAME = re.compile(r"\bspark_statestore_[a-z0-9_]+\b")


def panel_queries() -> list[str]:
    """The PromQL expressions of the dashboard's panels."""
    board = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in board["panels"] for target in panel.get("targets", [])]


def dashboard_queries() -> list[str]:
    """Every query of the dashboard: its panels' and its variables' (Grafana's
    ``label_values(...)``, not PromQL)."""
    board = json.loads(DASHBOARD.read_text())
    variables = [v["query"] for v in board["templating"]["list"] if v["type"] == "query"]
    return [*panel_queries(), *variables]


class _Refusals:
    """What :class:`RouterMetrics` reads of a replica registry."""

    def refused_counts(self) -> dict[str, int]:
        return {"unverified": 1}


class _Host:
    """What :class:`HostMetrics` reads of a store host."""

    def __init__(self) -> None:
        self.calls = CallStats(("stage", "scan", "lookup"))

    def staged_totals(self) -> tuple[int, int]:
        return 3, 300

    def published_totals(self) -> dict[str, tuple[int, int]]:
        return {TOPIC: (2, 1)}


def produced_names(make_store: Any) -> set[str]:
    """The sample names of every collector, each with a series in every labelled family."""
    registry = CollectorRegistry()
    follower_store = make_store("f", role=Role.FOLLOWER, topic=TOPIC, partitions=2)
    source = FakeChangelog()
    from spark_statestore.follower import Follower

    follower = Follower(follower_store, source)
    follower.start_restore()
    source.feed([(b"k", b"v", 0, 0, -1)])
    FollowerMetrics(follower, registry)
    follower.step()  # one commit: the commit histogram has a series
    StoreMetrics(follower_store, registry)

    sink_store = make_store("s", role=Role.LEADER, topic="out-changelog", partitions=1)
    stats = SinkStats()
    SinkMetrics(stats, str(sink_store.path), registry)
    stats.committed(CommitReport("committed", 0.01, 1, 10))
    stats.failed(TimeoutError("the transaction timed out"))
    stats.published(PublishReport(1, 0.01, 0.01))
    host = _Host()
    HostMetrics(host, registry)
    for kind in host.calls.kinds:
        host.calls.record(kind, False, 0.001)

    router = Router(lambda: ReplicaSet(TOPIC, ()), lambda replica: None)
    RouterMetrics(router, TOPIC, replicas=_Refusals(), registry=registry)
    router.stats.count("replica_failures", "unreachable")

    served = make_store("v", role=Role.LEADER, topic=None, partitions=1)
    with StoreServer(served) as server, server.client() as client:
        ServerMetrics(server, registry)
        client.describe()
        names = {sample.name for family in registry.collect() for sample in family.samples}
    return names


def test_every_metric_the_dashboard_names_exists(make_store: Any) -> None:
    queries = dashboard_queries()
    assert len(queries) >= 20
    named = {name for query in queries for name in _NAME.findall(query)}
    produced = produced_names(make_store)
    missing = sorted(named - produced)
    assert missing == [], f"the dashboard names metrics nobody produces: {missing}"
    # And it covers the subjects: lag, restore, commit and query latency, errors.
    for subject in (
        "spark_statestore_follower_records_lag",
        "spark_statestore_follower_restore_remaining_records",
        "spark_statestore_follower_commit_seconds_bucket",
        "spark_statestore_sink_commit_seconds_bucket",
        "spark_statestore_server_call_seconds_bucket",
        "spark_statestore_sink_commits_failed_total",
        "spark_statestore_server_not_up_to_bound_total",
        "spark_statestore_router_failovers_total",
        "spark_statestore_follower_last_commit_timestamp_seconds",
    ):
        assert subject in named, subject
