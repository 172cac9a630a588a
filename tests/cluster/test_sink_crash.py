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

The driver's store host is killed by the crash seam while a batch's rows stream into its
Kafka transaction (``sink.streamed_produce``): the batch runs again through a new host, which
fences the dead one's transaction. Same checks.

Acceptance tests of DESIGN §11 (they need the sink to work on a cluster at all).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
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


def claimed_crashes(crash: Path) -> list[Path]:
    """The crash file's claims: ``<file>.fired.<pid>`` of each process that died at its point."""
    return list(crash.parent.glob(f"{crash.name}.fired.*"))


@contextlib.contextmanager
def crash_file() -> Iterator[Path]:
    """The cluster's crash file (empty: no crash armed), and its claims removed afterwards."""
    crash = crash_file_path()
    try:
        yield crash
    finally:
        crash.unlink(missing_ok=True)
        for claimed in claimed_crashes(crash):
            claimed.unlink()


def start_sink(
    frame: Any, source: Any, store: Path, checkpoint: Path, changelog: str, app: str, **more: str
) -> Any:
    """``frame`` written into ``store`` by the sink, publishing ``changelog``."""
    writer = (
        frame.writeStream.format(FORMAT)
        .option("checkpointLocation", str(checkpoint))
        .option("kafka.bootstrap.servers", source.bootstrap)
        .option("changelog", changelog)
        .option("application.id", app)
    )
    return writer.options(**more).start(str(store))


def goes_on(query: Any, source: Any) -> None:
    """The query commits one more batch, without failing."""
    source.produce(changes(3, count=40))
    query.processAllAvailable()
    assert query.exception() is None


def test_an_executor_killed_mid_batch_loses_and_doubles_nothing(
    spark: Any, spark_cluster: Any, kafka_broker: Any, make_input: Any, tmp_path: Path
) -> None:
    source = make_input()
    app, changelog = sink_changelog(kafka_broker)
    store, checkpoint = tmp_path / "store", tmp_path / "checkpoint"
    gate = Gate(spark_cluster.address)

    def start() -> Any:
        frame = gated(source.stream(spark), gate.address)
        return start_sink(frame, source, store, checkpoint, changelog, app)

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
    source = make_input()
    app, changelog = sink_changelog(kafka_broker)
    store, checkpoint = tmp_path / "store", tmp_path / "checkpoint"
    with crash_file() as crash:
        _kill_the_server(spark, source, store, checkpoint, changelog, app, crash)
    assert_exactly_once(source, store, checkpoint, changelog)


def _kill_the_server(
    spark: Any, source: Any, store: Path, checkpoint: Path, changelog: str, app: str, crash: Path
) -> None:
    from spark_statestore.connectors.spark.leader.remote import live_server

    query = start_sink(
        source.stream(spark), source, store, checkpoint, changelog, app, serve="true"
    )
    try:
        source.produce(upserts(1, count=40))
        query.processAllAvailable()
        first = live_server(str(store))
        assert first is not None
        crash.write_text("sink.after_publish")  # the next commit's Kafka transaction is in
        source.produce(changes(2, count=40))
        query.processAllAvailable()
        fired = claimed_crashes(crash)
        assert fired == [crash.with_name(f"{crash.name}.fired.{first.pid}")], fired
        second = live_server(str(store))
        assert second is not None and second.pid != first.pid  # a new server took over
        goes_on(query, source)
    finally:
        query.stop()


def test_the_store_host_killed_while_a_batch_streams_loses_and_doubles_nothing(
    spark: Any, kafka_broker: Any, make_input: Any, tmp_path: Path
) -> None:
    """The driver's store host publishes a batch's rows into its Kafka transaction while the
    executors' tasks stage them (``publishWhileStaging``): killed there, its transaction is
    never committed. The tasks' streams fail, so the batch (or the query, restarted from its
    checkpoint) runs again through a new host, which fences the dead one's transaction and
    publishes the batch at its commit. Same checks."""
    source = make_input()
    app, changelog = sink_changelog(kafka_broker)
    store, checkpoint = tmp_path / "store", tmp_path / "checkpoint"

    def start() -> Any:
        return start_sink(source.stream(spark), source, store, checkpoint, changelog, app)

    with crash_file() as crash:
        query = start()
        try:
            source.produce(upserts(1, count=40))
            query.processAllAvailable()  # published at its commit; the host expects the next
            crash.write_text("sink.streamed_produce")
            source.produce(changes(2, count=40))
            try:
                query.processAllAvailable()
            except Exception:  # the batch failed with its host: the query restarts
                with contextlib.suppress(Exception):
                    query.stop()
                query = start()
                query.processAllAvailable()
            fired = claimed_crashes(crash)
            assert len(fired) == 1, fired  # the host died there, once
            goes_on(query, source)
        finally:
            query.stop()
    assert_exactly_once(source, store, checkpoint, changelog)
