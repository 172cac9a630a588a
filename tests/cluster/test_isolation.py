"""The cluster's isolation is real: executors run on other hosts, with their own disks and
their own loopback, and both Workers get work. If one of these fails, a green cluster test
proves nothing about running on a cluster."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.cluster

TASKS = 4


def _on_every_task(spark: Any, cluster: Any, probe: Any) -> list[Any]:
    """``probe()`` run in ``TASKS`` tasks, once an executor of every Worker is registered
    (one a crash test killed may still be starting again); with one core per executor, a
    job of more tasks than executors keeps every executor busy at once."""
    cluster.wait_for_executors()

    def run(_: Iterator[int]) -> Iterator[Any]:
        yield probe()

    return spark.sparkContext.parallelize(range(TASKS), TASKS).mapPartitions(run).collect()


def test_an_executor_cannot_see_the_drivers_directories(
    spark: Any, spark_cluster: Any, tmp_path: Path
) -> None:
    secret = tmp_path / "store" / "secret"
    secret.parent.mkdir()
    secret.write_text("the driver's")
    planted = tmp_path / "store" / "from-a-task"
    repository = REPO_ROOT / "pyproject.toml"
    own_dirs = [str(w.directory) for w in spark_cluster.workers]

    def probe() -> tuple[bool, bool, bool, list[bool]]:
        os.makedirs(planted.parent, exist_ok=True)
        planted.write_text("an executor's")  # lands on the executor's own disk
        return (
            secret.exists(),
            planted.exists(),
            repository.exists(),
            [os.path.isdir(d) for d in own_dirs],
        )

    seen = _on_every_task(spark, spark_cluster, probe)
    assert {s for s, _, _, _ in seen} == {False}, "an executor saw the driver's file"
    assert {p for _, p, _, _ in seen} == {True}
    assert {r for _, _, r, _ in seen} == {True}, "the repository must stay visible"
    # Each Worker sees its own directory (its executors' work and scratch), not the other's.
    assert {tuple(d) for _, _, _, d in seen} == {(True, False), (False, True)}
    assert not planted.exists(), "a task's write reached the driver's disk"


def _own_address(driver: str) -> str:
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect((driver, 9))  # a UDP "connect" sends nothing; it picks the route
        return str(probe.getsockname()[0])
    finally:
        probe.close()


def test_tasks_on_the_two_workers_have_addresses_of_their_own(
    spark: Any, spark_cluster: Any
) -> None:
    driver = spark_cluster.address
    seen = _on_every_task(
        spark, spark_cluster, lambda: (_own_address(driver), socket.gethostname())
    )
    addresses = {address for address, _ in seen}
    assert addresses == set(spark_cluster.worker_addresses)
    assert driver not in addresses and _own_address(driver) == driver
    assert socket.gethostname() not in {name for _, name in seen}
    assert len({name for _, name in seen}) == 2


def test_both_workers_get_tasks(spark: Any, spark_cluster: Any) -> None:
    driver = spark_cluster.address
    for _ in range(2):  # not a lucky first job: every job spreads
        addresses = _on_every_task(spark, spark_cluster, lambda: _own_address(driver))
        assert set(addresses) == set(spark_cluster.worker_addresses)
    executors = spark_cluster.executors()
    assert sorted(e.worker for e in executors) == [0, 1]


def test_a_task_cannot_reach_a_port_the_driver_bound_on_loopback(
    spark: Any, spark_cluster: Any
) -> None:
    loopback = socket.create_server(("127.0.0.1", 0))
    bridge = socket.create_server((spark_cluster.address, 0))
    try:
        port = loopback.getsockname()[1]
        target = (spark_cluster.address, bridge.getsockname()[1])
        socket.create_connection(("127.0.0.1", port), timeout=5).close()  # the driver can

        def probe() -> tuple[str, bool]:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=5).close()
                on_loopback = "connected"
            except OSError as exc:
                on_loopback = type(exc).__name__
            socket.create_connection(target, timeout=5).close()  # the driver's address is
            return on_loopback, True

        seen = _on_every_task(spark, spark_cluster, probe)
        assert {loopback_result for loopback_result, _ in seen} == {"ConnectionRefusedError"}
    finally:
        loopback.close()
        bridge.close()
