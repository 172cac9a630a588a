"""SIGKILL of an executor JVM in the middle of a sink query's micro-batch, on a cluster.

A gate in the input stream (``mapInArrow``, on the executors) holds the first task that
reaches it: the task has read its Kafka range and has not handed a row to the sink yet, while
the batch's other task runs on the other Worker. The test then SIGKILLs the held task's
executor (``CoarseGrainedExecutorBackend``, found on that Worker's host); its Worker starts
another, Spark runs the lost task again (the gate lets every later task through), and the
query goes on, or, if the batch failed, is restarted from its checkpoint. Nothing may be lost
or doubled: the store is the fold of the committed input, the changelog holds every input row
once, and one progress record per committed batch.

An acceptance test of DESIGN §11 (it needs the sink to work on a cluster at all).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.gate import Gate, gated
from tests.cluster.sink_input import (
    FORMAT,
    assert_exactly_once,
    changes,
    sink_changelog,
    upserts,
)

pytestmark = [pytest.mark.cluster, pytest.mark.cluster_engine]


def test_an_executor_killed_mid_batch_loses_and_doubles_nothing(
    spark: Any, spark_cluster: Any, kafka_broker: Any, make_input: Any, tmp_path: Path
) -> None:
    source = make_input()
    app, changelog = sink_changelog(kafka_broker)
    store, checkpoint = tmp_path / "store", tmp_path / "checkpoint"
    gate = Gate(spark_cluster.address)

    def start() -> Any:
        return (
            gated(source.stream(spark), gate.address)
            .writeStream.format(FORMAT)
            .option("checkpointLocation", str(checkpoint))
            .option("kafka.bootstrap.servers", source.bootstrap)
            .option("changelog", changelog)
            .option("application.id", app)
            .start(str(store))
        )

    source.produce(upserts(1, count=40))
    query = start()
    try:
        held = gate.wait_for_held(timeout_s=120)
        (victim,) = [
            e for e in spark_cluster.executors() if spark_cluster.worker_addresses[e.worker] == held
        ]
        spark_cluster.kill_executor(victim)
        try:
            query.processAllAvailable()
        except Exception:  # the batch failed: the query restarts from its checkpoint
            with contextlib.suppress(Exception):
                query.stop()
            query = start()
            query.processAllAvailable()
        source.produce(changes(2, count=40))
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()
        gate.close()
    assert_exactly_once(source, store, checkpoint, changelog)
