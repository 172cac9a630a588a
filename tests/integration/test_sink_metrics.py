"""Metrics of the sink's store server (``serve=true``, ``metricsPort``) and of the store host,
scraped while a real Spark sink query runs against a real broker, against ground truth:
Spark's commit log, the changelog as a read_committed consumer reads it, the rows written, the
store's own metadata. Parsed with the Prometheus client's own parser (issue 38)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spark_statestore.connectors.spark.driver import Deployment, ProcessId
from spark_statestore.connectors.spark.host.launch import METRICS_PORT_VARIABLE, start_store_host
from spark_statestore.connectors.spark.host.record import read_record
from spark_statestore.connectors.spark.leader.remote import live_server, stop_sink_server
from spark_statestore.store import Store
from spark_statestore.store.ownership import wait_for_exit
from tests.integration.test_follow_cli import scrape
from tests.integration.test_sink import changelog_writer, row, start_sink, write_input
from tests.integration.test_sink_server import sink_changelog
from tests.kafka_util import poll_until, settled_changelog

pytestmark = pytest.mark.integration  # self-contained; in the main run: it balances CI

FORMAT = "spark_statestore"
Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def spark_committed(checkpoint: Path) -> list[int]:
    """The batch ids in Spark's commit log."""
    return sorted(int(name) for name in os.listdir(checkpoint / "commits") if name.isdigit())


def test_a_served_sink_reports_its_commits_as_spark_and_kafka_have_them(
    spark: Any, kafka_broker: Any, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    changelog = sink_changelog(kafka_broker, make_topic, "metrics-app")
    source, store, checkpoint = tmp_path / "in", tmp_path / "store", tmp_path / "cp"
    labels = (("store", str(store)),)
    write_input(source, "1.json", [row(f"k{i}", str(i), i) for i in range(20)])
    writer = (
        changelog_writer(spark, source, checkpoint, bootstrap, changelog, "metrics-app")
        .option("serve", "true")
        .option("metricsPort", "0")
    )
    query = writer.start(str(store))
    try:
        query.processAllAvailable()
        server = live_server(str(store))
        assert server is not None and server.metrics_url is not None
        url = server.metrics_url
        first = scrape(url)
        size_before = first["spark_statestore_store_size_bytes"][labels]
        assert size_before > 0
        updates = [row(f"k{i}", str(10 * i), 20 + i) for i in range(0, 20, 2)]
        write_input(source, "2.json", [*updates, row("k1", None, 40)])
        query.processAllAvailable()
        write_input(source, "3.json", [row(f"n{i}", "x" * 500, 41 + i) for i in range(50)])
        query.processAllAvailable()

        committed = spark_committed(checkpoint)
        assert committed == [0, 1, 2]
        samples = scrape(url)
        batches = samples["spark_statestore_sink_batches_committed_total"]
        assert batches[(("outcome", "committed"), *labels)] == len(committed)
        assert sum(batches.values()) == len(committed)
        assert samples["spark_statestore_sink_commit_seconds_count"][labels] == len(committed)
        # Each committed batch was one Kafka transaction.
        for name in ("changelog_produce_seconds", "txn_commit_seconds"):
            assert samples[f"spark_statestore_sink_{name}_count"][labels] == len(committed)
        published = settled_changelog(bootstrap, changelog)  # read_committed
        assert len(published) == 20 + 11 + 50
        assert samples["spark_statestore_sink_records_published_total"][labels] == len(published)
        assert samples["spark_statestore_sink_staged_rows_total"][labels] == 20 + 11 + 50
        assert samples["spark_statestore_sink_staged_bytes_total"][labels] > 50 * 500
        assert samples.get("spark_statestore_sink_commits_failed_total", {}) == {}

        def grown() -> float | None:
            size = scrape(url)["spark_statestore_store_size_bytes"][labels]
            return size if size > size_before else None

        poll_until(grown, timeout_s=30, interval_s=0.5, failure=lambda: "the size did not grow")

        # A snapshot read of the live store goes through the server's Flight server.
        served = samples["spark_statestore_server_rows_returned_total"][labels]
        requests = samples["spark_statestore_server_requests_total"][labels]
        rows = spark.read.format(FORMAT).load(str(store)).count()
        assert rows == 19 + 50
        after = scrape(url)
        assert after["spark_statestore_server_rows_returned_total"][labels] == served + rows
        assert after["spark_statestore_server_requests_total"][labels] > requests
        assert after["spark_statestore_server_pins"][labels] == 0
        commit_seq = after["spark_statestore_store_commit_seq"][labels]
    finally:
        query.stop()
    assert stop_sink_server(str(store))
    with Store.open(store) as opened:
        assert opened.metadata.commit_seq == commit_seq
    with pytest.raises(OSError):
        scrape(url)  # gone with the server


def test_metrics_port_without_serve_is_refused_naming_both_options(
    spark: Any, tmp_path: Path
) -> None:
    write_input(tmp_path / "in", "1.json", [row("a", "1", 0)])
    stream = spark.readStream.schema("key STRING, value STRING").json(str(tmp_path / "in"))
    with pytest.raises(
        Exception,
        match=r"option 'metricsPort' configures the sink's store server: set option 'serve' "
        r"to 'true' too, or drop it: without 'serve' no process outlives a micro-batch's "
        r"commit",
    ):
        query = (
            stream.writeStream.format(FORMAT)
            .option("checkpointLocation", str(tmp_path / "cp"))
            .option("metricsPort", "0")
            .start(str(tmp_path / "store"))
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()


def _session_driver(spark: Any) -> ProcessId:
    """This session's driver JVM (PySpark's gateway process, a ``java`` after its exec)."""
    pid = spark.sparkContext._gateway.proc.pid
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "java"
    driver = ProcessId.of(pid)
    assert driver is not None
    return driver


def _two_batches(query: Any, source: Path, second: list[dict[str, Any]]) -> None:
    """Run ``query`` over what ``source`` holds, then over ``second`` written there; stop it."""
    try:
        query.processAllAvailable()
        write_input(source, "2.json", second)
        query.processAllAvailable()
    finally:
        query.stop()


def calls(samples: Samples) -> dict[str, float]:
    return {
        f"{dict(labels)['kind']}/{dict(labels)['status']}": value
        for labels, value in samples["spark_statestore_host_calls_total"].items()
    }


def test_the_store_host_reports_what_spark_tasks_staged_and_read_through_it(
    spark: Any,
    kafka_broker: Any,
    make_topic: Callable[..., str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The session's driver JVM was started without the variable: restart its store host with
    # it (the host is this test session's own process; a restarted host listens where the
    # plans made before expect it).
    driver = _session_driver(spark)
    running = read_record(driver)
    if running is not None and running.process.alive():
        os.kill(running.process.pid, signal.SIGTERM)
        assert wait_for_exit(running.process.pid, 30)
    monkeypatch.setenv(METRICS_PORT_VARIABLE, "0")
    host = start_store_host(driver, Deployment.local())
    assert host.metrics_url is not None
    url = host.metrics_url
    assert set(calls(scrape(url)).values()) == {0}

    source, store, checkpoint = tmp_path / "in", tmp_path / "store", tmp_path / "cp"
    write_input(source, "1.json", [row(f"k{i}", str(i), i) for i in range(30)])
    query = start_sink(spark, source, store, checkpoint)
    _two_batches(query, source, [row(f"m{i}", str(i), 30 + i) for i in range(10)])
    samples = scrape(url)
    assert samples["spark_statestore_host_staged_rows_total"][()] == 40
    assert samples["spark_statestore_host_staged_bytes_total"][()] > 0
    staged = calls(samples)
    # Every task of the two micro-batches staged through the host (one call each).
    assert staged["stage/ok"] >= len(spark_committed(checkpoint)) == 2
    assert staged["stage/error"] == 0
    latency = samples["spark_statestore_host_call_seconds_count"]
    assert latency[(("kind", "stage"),)] == staged["stage/ok"]

    # A read of the store (no live owner now) goes through the host too.
    assert spark.read.format(FORMAT).load(str(store)).count() == 40
    read = calls(scrape(url))
    assert read["scan/ok"] >= 1 and read["scan/error"] == 0
    assert (
        scrape(url)["spark_statestore_host_call_seconds_count"][(("kind", "scan"),)]
        == (read["scan/ok"])
    )
    assert samples.get("spark_statestore_host_changelog_batches_total", {}) == {}

    # A sink publishing a changelog through the host: the first batch of its run at the
    # commit, the next while its task staged it.
    changelog = sink_changelog(kafka_broker, make_topic, "host-metrics-app")
    source, checkpoint = tmp_path / "in-changelog", tmp_path / "cp-changelog"
    write_input(source, "1.json", [row(f"p{i}", str(i), i) for i in range(10)])
    bootstrap = kafka_broker.bootstrap_servers
    writer = changelog_writer(spark, source, checkpoint, bootstrap, changelog, "host-metrics-app")
    query = writer.start(str(tmp_path / "store-changelog"))
    _two_batches(query, source, [row(f"q{i}", str(i), 10 + i) for i in range(10)])
    assert spark_committed(checkpoint) == [0, 1]
    assert scrape(url)["spark_statestore_host_changelog_batches_total"] == {
        (("changelog", changelog), ("published", "at_commit")): 1,
        (("changelog", changelog), ("published", "while_staging")): 1,
    }
