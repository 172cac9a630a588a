"""A real Prometheus server scrapes our metrics endpoints and answers PromQL about them: the
values it stored are the values we set or the ground truth of a ``follow`` run on a real
broker, over HTTP and over TLS with a bearer token, and a killed endpoint is down and its
series stale (issue 38, item 6)."""

from __future__ import annotations

import random
import secrets
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge

from spark_statestore.metrics import MetricsServer
from tests.conftest import REPO_ROOT
from tests.integration import prometheus_fixtures, test_follow_cli
from tests.integration.test_follow_cli import PARTITIONS, FollowProcess, follow_command
from tests.integration.test_follower import ChangelogWriter, random_changes
from tests.prometheus_server import PrometheusServer, Sample, ScrapeJob

pytestmark = [pytest.mark.integration, pytest.mark.beside]  # self-contained: beside the main run

# Fixtures of other modules, bound here so that pytest finds them for this module's tests.
prometheus_binary = prometheus_fixtures.prometheus_binary
make_prometheus = prometheus_fixtures.make_prometheus
following = test_follow_cli.following
writer = test_follow_cli.writer

MakePrometheus = Callable[..., PrometheusServer]


def by_label(samples: list[Sample], *names: str) -> dict[tuple[str, ...], float]:
    """``{(label values of names): value}`` of an answer."""
    return {tuple(s.labels.get(name, "") for name in names): s.value for s in samples}


def one_value(expected: float) -> Callable[[list[Sample]], bool]:
    """Predicate: the answer is one series (or a scalar) of value ``expected``."""
    return lambda samples: len(samples) == 1 and samples[0].value == expected


def test_prometheus_stores_what_an_endpoint_serves_over_http_and_over_tls_with_a_token(
    make_prometheus: MakePrometheus, pki: Any
) -> None:
    registry = CollectorRegistry()
    events = Counter("spark_statestore_check_events", "Events.", ["kind"], registry=registry)
    events.labels("put").inc(41)
    events.labels("delete").inc(2.5)
    level = Gauge("spark_statestore_check_level", "A level.", registry=registry)
    level.set(-1234.0625)
    token = secrets.token_urlsafe(32)
    with (
        MetricsServer(registry) as plain,
        MetricsServer(
            registry,
            tls_cert_file=pki.file("server"),
            tls_key_file=pki.file("server_key"),
            token=token,
        ) as secured,
    ):
        assert secured.url.startswith("https://")
        prometheus = make_prometheus(
            ScrapeJob.of("plain", plain.url),
            ScrapeJob.of("secured", secured.url, ca_file=pki.file("ca"), token=token),
            ScrapeJob.of(
                "wrong-token", secured.url, ca_file=pki.file("ca"), token=secrets.token_hex(16)
            ),
        )
        up = prometheus.wait_for("up", lambda samples: len(samples) == 3)
        assert by_label(up, "job") == {("plain",): 1, ("secured",): 1, ("wrong-token",): 0}
        stored = prometheus.query("spark_statestore_check_events_total")
        assert by_label(stored, "job", "kind") == {
            ("plain", "put"): 41,
            ("plain", "delete"): 2.5,
            ("secured", "put"): 41,
            ("secured", "delete"): 2.5,
        }
        assert by_label(prometheus.query("spark_statestore_check_level"), "job") == {
            ("plain",): -1234.0625,
            ("secured",): -1234.0625,
        }
        refused = {t.job: t for t in prometheus.targets()}["wrong-token"]
        assert refused.health == "down" and "401" in refused.last_error, refused

        # It goes on scraping: a later value is the one stored next.
        events.labels("put").inc()
        prometheus.wait_for(
            'sum(spark_statestore_check_events_total{kind="put"})', one_value(2 * 42)
        )


# A metrics endpoint in a process of its own, so that the test can kill it as an operator's
# machine would lose it.
ENDPOINT = """
import signal
from prometheus_client import CollectorRegistry, Counter
from spark_statestore.metrics import MetricsServer

registry = CollectorRegistry()
Counter("spark_statestore_check_alive", "Alive.", registry=registry).inc(7)
server = MetricsServer(registry)
print(server.url, flush=True)
signal.pause()
"""


def test_a_killed_endpoint_is_down_and_its_series_go_stale(
    make_prometheus: MakePrometheus,
) -> None:
    endpoint = subprocess.Popen(
        [sys.executable, "-c", ENDPOINT], stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT
    )
    try:
        assert endpoint.stdout is not None
        url = endpoint.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        prometheus = make_prometheus(ScrapeJob.of("endpoint", url))
        prometheus.wait_for('up{job="endpoint"}', one_value(1))
        assert prometheus.value("spark_statestore_check_alive_total") == 7

        endpoint.send_signal(signal.SIGKILL)
        endpoint.wait(timeout=30)
        prometheus.wait_for('up{job="endpoint"}', one_value(0))
        # The failed scrape marks the target's series stale: they answer nothing from now on.
        assert prometheus.query("spark_statestore_check_alive_total") == []
        (target,) = prometheus.targets()
        assert target.health == "down" and "connection refused" in target.last_error, target
    finally:
        endpoint.kill()
        endpoint.wait()
        assert endpoint.stdout is not None
        endpoint.stdout.close()


def test_prometheus_scraping_follow_stores_every_record_applied_and_no_lag(
    kafka_broker: Any,
    writer: ChangelogWriter,
    tmp_path: Path,
    following: Callable[[list[str]], FollowProcess],
    make_prometheus: MakePrometheus,
) -> None:
    """Ground truth: applied = records produced (the writer's count), lag 0 in each
    partition once caught up, and a killed ``follow`` is down with its series stale."""
    rng = random.Random(38)
    for _ in range(4):
        writer.transaction(random_changes(rng, 25))
    produced = writer.input_offset
    assert produced == 100
    process = following(
        follow_command(
            kafka_broker.bootstrap_servers, writer.topic, tmp_path / "store", "--no-progress",
            "--chunk-records", "10", "--metrics-port", "0",
        )
    )  # fmt: skip
    url = process.wait_for("metrics at ").split("metrics at ")[1].strip()
    process.wait_for("caught up")
    prometheus = make_prometheus(ScrapeJob.of("follow", url))

    applied = 'sum(spark_statestore_follower_records_applied_total{job="follow"})'
    prometheus.wait_for(applied, one_value(produced))
    lags = prometheus.wait_for(
        'spark_statestore_follower_records_lag{job="follow"}',
        lambda samples: len(samples) == PARTITIONS and not any(s.value for s in samples),
    )
    assert sorted(s.labels["partition"] for s in lags) == [str(p) for p in range(PARTITIONS)]
    assert prometheus.value('max(spark_statestore_follower_records_lag{job="follow"})') == 0
    # One state at a time, and it is RUNNING.
    assert prometheus.value('spark_statestore_follower_state{job="follow",state="running"}') == 1
    assert prometheus.value('sum(spark_statestore_follower_state{job="follow"})') == 1

    writer.transaction(random_changes(rng, 20))
    prometheus.wait_for(applied, one_value(produced + 20))

    # Every query of the Grafana dashboard is PromQL Prometheus evaluates (an invalid one
    # raises with Prometheus' message), and those over the follower's metrics have data.
    from tests.unit.test_dashboard import panel_queries

    answered = {}
    for query in panel_queries():
        promql = query.replace("$store", ".*").replace("$job", ".*")
        answered[query] = prometheus.query(promql)
    lag = next(q for q in answered if "follower_records_lag" in q)
    assert len(answered[lag]) == PARTITIONS

    process.proc.send_signal(signal.SIGKILL)
    process.proc.wait(timeout=30)
    prometheus.wait_for('up{job="follow"}', one_value(0))
    assert prometheus.query(applied) == []
