"""The store host's metrics without Spark or Kafka: its calls by kind and status and the rows
it staged, scraped from its endpoint after real calls; and the host process serving them when
its driver's environment asks (``SPARK_STATESTORE_HOST_METRICS_PORT``). Spark's tasks calling
it are in tests/integration/test_sink_metrics.py."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from spark_statestore.connectors.spark.driver import Deployment, ProcessId
from spark_statestore.connectors.spark.errors import SparkSourceError
from spark_statestore.connectors.spark.host import HostRef, StoreHostClient
from spark_statestore.connectors.spark.host.launch import METRICS_PORT_VARIABLE, start_store_host
from spark_statestore.connectors.spark.host.record import record_path
from spark_statestore.connectors.spark.host.server import StoreHostServer
from spark_statestore.position import PositionBound
from spark_statestore.serve.errors import BadRequestError
from spark_statestore.store import Role, Store, StoreSpec
from spark_statestore.store.ownership import wait_for_exit
from spark_statestore.store.scan import ScanSpec
from tests.integration.test_follow_cli import scrape
from tests.unit.test_store_metrics import staged_rows

TOKEN = "host-token-" + "m" * 32
UNBOUNDED = PositionBound.unbounded()


def calls(samples: dict[str, dict[tuple[tuple[str, str], ...], float]]) -> dict[str, float]:
    """``{"kind/status": calls}`` of a scrape."""
    return {
        f"{dict(labels)['kind']}/{dict(labels)['status']}": value
        for labels, value in samples["spark_statestore_host_calls_total"].items()
    }


def test_the_host_counts_its_calls_and_the_rows_it_staged(tmp_path: Path) -> None:
    server = StoreHostServer("127.0.0.1", 0, TOKEN, None, metrics_port=0)
    try:
        assert server.metrics_url is not None
        url = server.metrics_url
        first = scrape(url)
        assert set(calls(first).values()) == {0}  # every kind and status, from the start
        # No sink published a changelog through it yet (tests/integration/test_sink_metrics.py).
        assert first.get("spark_statestore_host_changelog_batches_total", {}) == {}
        path = tmp_path / "store"
        host = HostRef(server.location, TOKEN)
        with StoreHostClient(host) as client:
            staged = client.stage(
                str(path), "q", 0, 0, 0, [staged_rows([b"a", b"b"], [b"1", b"2"])]
            )
            staged_too = client.stage(str(path), "q", 0, 1, 0, [staged_rows([b"c"], [None])])
            with pytest.raises(BadRequestError, match="absolute path"):
                client.stage("relative", "q", 0, 2, 0, [staged_rows([b"d"], [b"4"])])
            with Store.open(path, StoreSpec(Role.LEADER, None, 1)) as store, store.begin() as txn:
                txn.put(b"a", b"1", partition=0)
                txn.commit()
            with client.scan(str(path), ScanSpec.everything(), UNBOUNDED) as (_, batches):
                assert pa.Table.from_batches(list(batches)).num_rows == 1
            client.lookup(str(path), [b"a", b"zz"], UNBOUNDED)
            with pytest.raises(BadRequestError, match="not normalized"):
                client.lookup(str(path / ".." / "x"), [b"a"], UNBOUNDED)
        samples = scrape(url)
        assert calls(samples) == {
            "stage/ok": 2,
            "stage/error": 1,
            "scan/ok": 1,
            "scan/error": 0,
            "lookup/ok": 1,
            "lookup/error": 1,
        }
        assert samples["spark_statestore_host_staged_rows_total"][()] == 3
        assert samples["spark_statestore_host_staged_bytes_total"][()] == (
            staged.size + staged_too.size
        )
        latency = samples["spark_statestore_host_call_seconds_count"]
        assert latency == {
            (("kind", "stage"),): 3,
            (("kind", "scan"),): 1,
            (("kind", "lookup"),): 2,
        }
    finally:
        server.close()
    with pytest.raises(OSError):
        scrape(url)


def test_the_host_process_serves_its_metrics_when_its_driver_s_environment_asks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with subprocess.Popen(["sleep", "600"]) as sleeper:  # the driver the host watches
        try:
            driver = ProcessId.of(sleeper.pid)
            assert driver is not None
            _check_the_host_of(driver, monkeypatch)
        finally:
            sleeper.kill()  # the host exits with its driver


def _check_the_host_of(driver: ProcessId, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(METRICS_PORT_VARIABLE, "junk")
    with pytest.raises(SparkSourceError, match=f"{METRICS_PORT_VARIABLE}='junk' is not a port"):
        start_store_host(driver, Deployment.local())
    monkeypatch.setenv(METRICS_PORT_VARIABLE, "0")
    record = start_store_host(driver, Deployment.local())
    assert record.metrics_url is not None
    samples = scrape(record.metrics_url)
    assert samples["spark_statestore_host_staged_rows_total"][()] == 0
    log = Path(record_path(driver).replace(".json", ".log")).read_text()
    assert f"store host metrics at {record.metrics_url}" in log
    # Restarted without the variable (its driver's environment), the host has no endpoint.
    os.kill(record.process.pid, signal.SIGKILL)
    assert wait_for_exit(record.process.pid, 15)
    monkeypatch.delenv(METRICS_PORT_VARIABLE)
    assert start_store_host(driver, Deployment.local()).metrics_url is None
