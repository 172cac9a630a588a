"""The ``cluster`` suite: the sink and the snapshot scan on a Spark standalone cluster whose
executors run on other hosts, against Spark's own Parquet sink and Parquet reader there.

Setup (not timed): a Master and two Workers
(:class:`~spark_statestore.connectors.spark.local.LocalSparkCluster`, one 1-core executor
each), each Worker on a host of its own (network, hostname and mount namespace; root only).
This process is the driver. The Parquet input, the Parquet sink's output and the Parquet copy
of the store are in a directory every host sees (under ``/var/tmp``: what a shared
filesystem is to a real cluster, which Spark's file sources and sinks need); the stores and
the checkpoints are the driver's alone (under ``/tmp``, private on every Worker's host). The
sink's tasks reach the store through the driver's store host; scans through the store's
owner (a Flight server in this process on the bridge address, TLS with a self-signed
certificate the plan carries) or, without one, through the store host.

``cluster_sink``
    Rows/s of ``writeStream.format("spark_statestore")`` (no changelog) against
    ``writeStream.format("parquet")`` on the same stream, as the ``sink`` suite's ``sink``.
``cluster_scan_owner`` / ``cluster_scan_host``
    Rows/s of a full snapshot scan (``selectExpr(...).collect()``) through the live owner /
    with no owner (the store host reads a private checkpoint), against ``read.parquet`` of
    the same rows, as the ``spark`` suite's ``scan_owner`` / ``scan_local``.

Each measurement interleaves its two sides for ``rounds`` rounds after an untimed warm-up
run of each. Size: the ``sink`` and ``spark`` suites' rules (``--records``, ``--quick``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
import time
from functools import partial
from typing import Any

from spark_statestore.bench.errors import BenchError
from spark_statestore.bench.measure import BenchOptions, Measurement, interleave
from spark_statestore.bench.sink import (
    APPLICATION_ID,
    BATCHES,
    CHANGELOG_PARTITIONS,
    FILES_PER_BATCH,
    QUICK_BATCHES,
    Changelogs,
    sink_records,
    sink_run,
    write_stream,
)
from spark_statestore.bench.spark import (
    ScanOwner,
    build_dataset,
    interleave_warm,
    open_store,
    scan_run,
    spark_records,
)

__all__ = ["SHARED_ROOT", "SUITE", "WORKERS", "run_cluster_suite"]

_log = logging.getLogger(__name__)

SUITE = "cluster"
WORKERS = 2
SHARED_ROOT = "/var/tmp"
"""Where the data every host must see goes (each Worker's ``/tmp`` is its own)."""


def run_cluster_suite(options: BenchOptions) -> list[Measurement]:
    """Measure the sink and the snapshot scans on a 2-Worker cluster against Parquet.

    Returns
    -------
    list of Measurement
        ``cluster_sink``, ``cluster_scan_owner`` and ``cluster_scan_host`` (no targets).

    Raises
    ------
    BenchError
        If this machine cannot make the Workers' hosts (not root, no ``ip``/``unshare``), or
        a run did not write or read what it should.
    """
    from spark_statestore.connectors.local.errors import HostsUnavailableError
    from spark_statestore.connectors.spark.local import LocalSparkCluster

    rounds = options.rounds
    driver_root = tempfile.mkdtemp(prefix="spark-statestore-bench-cluster-")
    shared_root = tempfile.mkdtemp(prefix="spark-statestore-bench-shared-", dir=SHARED_ROOT)
    try:
        start = time.perf_counter()
        records = sink_records(options)
        batches = QUICK_BATCHES if options.quick else BATCHES
        stream = write_stream(os.path.join(shared_root, "input"), records, batches)
        warmup = write_stream(os.path.join(shared_root, "warmup"), min(200, records), 2)
        data = build_dataset(shared_root, spark_records(options))
        # The store is the driver's alone; its Parquet copy stays where every host sees it.
        store_path = os.path.join(driver_root, "store")
        shutil.move(data.store_path, store_path)
        data = dataclasses.replace(data, store_path=store_path)
        _log.info("bench suite %s: data written in %.1f s", SUITE, time.perf_counter() - start)
        try:
            cluster = LocalSparkCluster(workers=WORKERS, hidden=[driver_root])
            cluster.start()
        except HostsUnavailableError as exc:
            raise BenchError(
                f"bench suite {SUITE} needs hosts of its own for the Workers: {exc}"
            ) from exc
        from spark_statestore.connectors.kafka.local import LocalKafkaCluster

        with cluster, LocalKafkaCluster(brokers=1, host=cluster.address) as kafka:
            start = time.perf_counter()
            spark = cluster.session("spark-statestore-bench-cluster", kafka_source=True)
            import spark_statestore

            spark_statestore.register(spark)
            spark.sparkContext.setLogLevel("ERROR")
            startup_s = time.perf_counter() - start
            changelogs, kafka_sink = _topics(kafka, rounds)
            sink_rates = _sink_rates(
                spark, driver_root, shared_root, stream, warmup, rounds, changelogs, kafka_sink
            )
            owner_rates, host_rates = _scan_rates(spark, cluster.address, data, rounds)
    finally:
        shutil.rmtree(driver_root, ignore_errors=True)
        shutil.rmtree(shared_root, ignore_errors=True)
    common: dict[str, Any] = {
        "spark_master": f"standalone, {WORKERS} Workers on hosts of their own, 1 core each",
        "spark_startup_s": round(startup_s, 3),
        "rounds": rounds,
        "shared_data": f"{SHARED_ROOT} (Parquet: input, output, copy of the store)",
    }

    def scan(name: str, rates: dict[str, list[float]], candidate: str) -> Measurement:
        return Measurement(
            suite=SUITE,
            name=name,
            unit="rows/s",
            candidate=candidate,
            baseline="Spark read.parquet on the cluster (same rows, same aggregate)",
            candidate_rates=tuple(rates["store"]),
            baseline_rates=tuple(rates["parquet"]),
            target=None,
            parameters={**common, "records": data.records, "parquet_bytes": data.parquet_bytes},
        )

    return [
        Measurement(
            suite=SUITE,
            name="cluster_sink",
            unit="rows/s",
            candidate="writeStream.format('spark_statestore') on the cluster, no changelog",
            baseline="writeStream.format('parquet') on the cluster (same stream)",
            candidate_rates=tuple(sink_rates["store"]),
            baseline_rates=tuple(sink_rates["parquet"]),
            target=None,
            parameters={
                **common,
                "records": stream.records,
                "micro_batches": stream.batches,
                "input": f"{stream.files} Parquet files, maxFilesPerTrigger={FILES_PER_BATCH}",
                "staging": "tasks stream rows to the driver's store host (Flight DoPut)",
            },
        ),
        Measurement(
            suite=SUITE,
            name="cluster_sink_changelog_vs_kafka_sink",
            unit="rows/s",
            candidate="writeStream.format('spark_statestore') publishing a changelog, cluster",
            baseline="writeStream.format('kafka') (Spark's Kafka sink) on the cluster, same rows",
            candidate_rates=tuple(sink_rates["store_changelog"]),
            baseline_rates=tuple(sink_rates["kafka"]),
            target=None,
            parameters={
                **common,
                "records": stream.records,
                "micro_batches": stream.batches,
                "input": f"{stream.files} Parquet files, maxFilesPerTrigger={FILES_PER_BATCH}, "
                "keyed (the tasks of a batch write disjoint keys)",
                "broker": "one Kafka node on the cluster's bridge address",
                "publishing": "the driver's store host, while the executors' tasks stage",
            },
        ),
        scan(
            "cluster_scan_owner",
            owner_rates,
            "Spark read of the store via its live owner (TLS on the bridge address)",
        ),
        scan(
            "cluster_scan_host",
            host_rates,
            "Spark read of the store, no live owner (the driver's store host)",
        ),
    ]


def _topics(kafka: Any, rounds: int) -> tuple[Changelogs, Changelogs]:
    """Fresh changelogs (with their progress topics) for the runs publishing one, and fresh
    topics for Spark's Kafka sink: the warm-up's and each round's."""
    runs = range(rounds + 1)
    changelogs = [f"{APPLICATION_ID}-cluster-{n}-changelog" for n in runs]
    topics = [f"{APPLICATION_ID}-cluster-kafka-sink-{n}" for n in runs]
    for topic in changelogs:
        kafka.create_topic(topic, CHANGELOG_PARTITIONS)
        kafka.create_topic(f"{topic}-progress", 1)
    for topic in topics:
        kafka.create_topic(topic, CHANGELOG_PARTITIONS)
    servers = kafka.bootstrap_servers
    return Changelogs(servers, changelogs), Changelogs(servers, topics)


def _sink_rates(
    spark: Any,
    driver_root: str,
    shared_root: str,
    stream: Any,
    warmup: Any,
    rounds: int,
    changelogs: Changelogs,
    kafka_sink: Changelogs,
) -> dict[str, list[float]]:
    """Interleaved sink runs: the store's output and checkpoint on the driver, Parquet's on
    the shared directory (executors write its files); the changelog and Spark's Kafka sink
    on the broker every host reaches."""

    def sides(data: Any) -> dict[str, Any]:
        return {
            "store": partial(sink_run, spark, driver_root, data, "store", None),
            "store_changelog": partial(sink_run, spark, driver_root, data, "store", changelogs),
            "kafka": partial(sink_run, spark, driver_root, data, "kafka", kafka_sink),
            "parquet": partial(sink_run, spark, shared_root, data, "parquet", None),
        }

    for run in sides(warmup).values():
        run()
    return interleave(sides(stream), rounds)


def _scan_rates(
    spark: Any, address: str, data: Any, rounds: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Interleaved scans through a live owner on the bridge address, then without one."""
    from spark_statestore.serve import StoreServer
    from spark_statestore.serve.certificates import self_signed_certificate

    parquet = partial(scan_run, spark, data, "parquet", None)
    store = open_store(data.store_path, "spark-statestore bench (live owner on the cluster)")
    try:
        tls = self_signed_certificate([address], common_name="spark-statestore bench owner")
        with StoreServer(store, host=address, tls_certificates=tls) as server:
            owner = ScanOwner(server.location, server.token, tls[0])
            through_owner = partial(scan_run, spark, data, "store", owner)
            owner_rates = interleave_warm({"store": through_owner, "parquet": parquet}, rounds)
    finally:
        store.close()
    through_host = partial(scan_run, spark, data, "store", None)
    host_rates = interleave_warm({"store": through_host, "parquet": parquet}, rounds)
    return owner_rates, host_rates
