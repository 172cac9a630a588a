"""``spark-statestore serve --metrics-port`` and ``status`` against a real broker: the served
store's metrics and health, its announcement live in ``status --changelog``, and, once the
server is killed (SIGKILL: no withdrawal), the announcement shown expired after its TTL."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spark_statestore.connectors.kafka.local import LocalKafkaCluster
from spark_statestore.connectors.local.processes import free_ports
from spark_statestore.store import Role, Store, StoreSpec
from tests.integration.test_cli import cli
from tests.integration.test_follow_cli import scrape
from tests.integration.test_metrics import _health
from tests.kafka_util import poll_until

pytestmark = pytest.mark.integration  # self-contained; in the main run: it balances CI


def test_serve_reports_metrics_and_health_and_a_killed_server_goes_stale(
    tmp_path: Path,
    kafka_broker: LocalKafkaCluster,
    make_topic: Callable[..., str],
    serve: Callable[..., tuple[subprocess.Popen[str], str]],
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    changelog = make_topic(2, suffix="-changelog")
    path = tmp_path / "inventory"
    spec = StoreSpec(Role.LEADER, changelog, 2, "inventory")
    with Store.open(path, spec, purpose="test") as store, store.begin() as txn:
        for n in range(3):
            txn.put(b"k%d" % n, b"v", source=("orders", 0, n))
    port = free_ports("127.0.0.1", 1)[0]
    proc, _ = serve(path, "--bootstrap-servers", bootstrap, "--metrics-port", str(port))
    url = f"http://127.0.0.1:{port}/metrics"
    store = (("store", str(path)),)

    samples = scrape(url)
    assert samples["spark_statestore_store_commit_seq"][store] == 1
    assert samples["spark_statestore_store_size_bytes"][store] > 0
    assert samples["spark_statestore_server_rows_returned_total"][store] == 0
    code, report = _health(url.replace("/metrics", "/health"))
    assert code == 200 and report["stores"][str(path)]["state"] == "RUNNING"
    assert report["stores"][str(path)]["reason"] == "served by spark-statestore serve"

    assert cli("query", str(path), "--all").returncode == 0
    assert scrape(url)["spark_statestore_server_rows_returned_total"][store] == 3
    status = cli("status", str(path))
    assert status.returncode == 0, status.stderr
    assert "RUNNING since" in status.stdout and "served by spark-statestore serve" in status.stdout

    def replicas(expect: str) -> Any:
        result = cli("status", "--changelog", changelog, "--bootstrap-servers", bootstrap, "--json")
        rows = [json.loads(line) for line in result.stdout.splitlines()]
        if len(rows) == 1 and rows[0]["announced"].startswith(expect):
            return result, rows[0]
        return None

    result, row = poll_until(
        lambda: replicas("live"), timeout_s=60, interval_s=0.5, failure=lambda: "never live"
    )
    assert result.returncode == 0 and row["role"] == "leader" and row["pid"] == proc.pid

    proc.send_signal(signal.SIGKILL)  # no withdrawal: readers must see it go stale
    proc.wait(30)
    result, row = poll_until(
        lambda: replicas("expired"),
        timeout_s=90,
        interval_s=1.0,
        failure=lambda: "the killed server's announcement never expired",
    )
    assert result.returncode == 3 and "no live replica" in result.stderr
    assert row["location"] is not None and row["heartbeat_age"] >= 15.0  # its TTL
