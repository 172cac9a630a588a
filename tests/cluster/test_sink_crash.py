"""SIGKILL of an executor JVM in the middle of a sink query's micro-batch, and of the sink's
store server in the middle of a commit, on a cluster.

A gate in the input stream (``mapInArrow``, on the executors) holds the first task that
reaches it: the task has read its Kafka range and has not handed a row to the sink yet, while
the batch's other task runs on the other Worker. The test then SIGKILLs the held task's
executor (``CoarseGrainedExecutorBackend``, found on that Worker's host); its Worker starts
another, Spark runs the lost task again (the gate lets every later task through), and the
query goes on, or, if the batch failed, is restarted from its checkpoint. Nothing may be lost
or doubled: the store is the fold of the committed input, the changelog holds every input row
once, and one progress record per committed batch.

The sink's store server (option ``serve``) is killed by the crash seam
(``spark_statestore.store.crash``) right after the batch's Kafka transaction committed and
before its store commit: the commit process sees it die, starts another, and sends the batch
again; the new server rolls the store forward from the changelog. Same checks.

Acceptance tests of DESIGN §11 (they need the sink to work on a cluster at all).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import crash_file_path
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


def test_the_sink_store_server_killed_mid_commit_loses_and_doubles_nothing(
    spark: Any, kafka_broker: Any, make_input: Any, tmp_path: Path
) -> None:
    from spark_statestore.connectors.spark.leader.remote import live_server

    source = make_input()
    app, changelog = sink_changelog(kafka_broker)
    store, checkpoint = tmp_path / "store", tmp_path / "checkpoint"
    crash = crash_file_path()
    query = (
        source.stream(spark)
        .writeStream.format(FORMAT)
        .option("checkpointLocation", str(checkpoint))
        .option("kafka.bootstrap.servers", source.bootstrap)
        .option("changelog", changelog)
        .option("application.id", app)
        .option("serve", "true")
        .start(str(store))
    )
    try:
        source.produce(upserts(1, count=40))
        query.processAllAvailable()
        first = live_server(str(store))
        assert first is not None
        crash.write_text("sink.after_publish")  # the next commit's Kafka transaction is in
        source.produce(changes(2, count=40))
        query.processAllAvailable()
        fired = list(crash.parent.glob(f"{crash.name}.fired.*"))
        assert fired == [crash.with_name(f"{crash.name}.fired.{first.pid}")], fired
        second = live_server(str(store))
        assert second is not None and second.pid != first.pid  # a new server took over
        source.produce(changes(3, count=40))
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()
        crash.unlink(missing_ok=True)
        for claimed in crash.parent.glob(f"{crash.name}.fired.*"):
            claimed.unlink()
    assert_exactly_once(source, store, checkpoint, changelog)
