"""The crash tests' fault on its own: an executor SIGKILLed in the middle of a job is
replaced by its Worker, and Spark runs the lost task again, so the job still returns every
row once. (If this fails, a failing crash test says nothing about the engine.) A soak test:
CI's crash test of the sink (an executor killed mid-batch) needs the same replacement and
fails if it does not happen."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.cluster.gate import Gate, gated
from tests.cluster.sink_input import upserts
from tests.kafka_util import poll_until

pytestmark = [pytest.mark.cluster, pytest.mark.soak]


def test_a_killed_executors_task_runs_again_on_its_replacement(
    spark: Any, spark_cluster: Any, make_input: Any
) -> None:
    source = make_input()
    source.produce(upserts(1, count=40))
    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", source.bootstrap)
        .option("subscribe", source.topic)
        .load()
        .select("key", "value", "partition", "offset")
    )
    gate = Gate(spark_cluster.address)
    outcome: dict[str, Any] = {}

    def collect() -> None:
        try:
            outcome["rows"] = gated(frame, gate.address).collect()
        except Exception as exc:  # reported below, on the test's thread
            outcome["error"] = exc

    job = threading.Thread(target=collect, name="gated-job")
    job.start()
    try:
        held = gate.wait_for_held(timeout_s=120)
        (victim,) = [
            e for e in spark_cluster.executors() if spark_cluster.worker_addresses[e.worker] == held
        ]
        spark_cluster.kill_executor(victim)
        job.join(timeout=300)
        assert not job.is_alive(), "the job did not finish after its executor was killed"
    finally:
        gate.close()
        job.join(timeout=60)
    assert "error" not in outcome, outcome.get("error")
    rows = sorted((bytes(r.key), bytes(r.value), r.partition, r.offset) for r in outcome["rows"])
    assert rows == sorted((r.key, r.value, r.partition, r.offset) for r in source.rows)

    # Its Worker has started another (the tests that need both executors wait for it to
    # register; the others go on meanwhile).
    replacement = poll_until(
        lambda: next((e for e in spark_cluster.executors() if e.worker == victim.worker), None),
        timeout_s=60,
        interval_s=0.2,
        failure=lambda: f"worker {victim.worker} started no executor after the kill",
    )
    assert replacement.pid != victim.pid
