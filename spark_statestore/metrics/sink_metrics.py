"""A sink's metrics (:class:`SinkMetrics`), from the process that commits its micro-batches
(the sink's store server): counters read from its
:class:`~spark_statestore.sink.stats.SinkStats` when Prometheus scrapes, and histograms
observed once per batch.

=========================================================  =========  ============================
metric                                                     type       Kafka's counterpart
=========================================================  =========  ============================
``spark_statestore_sink_batches_committed_total``          counter    ``commit-total``
``spark_statestore_sink_commit_seconds``                   histogram  ``commit-latency-avg/max``
``spark_statestore_sink_commits_failed_total``             counter
``spark_statestore_sink_staged_rows_total``                counter
``spark_statestore_sink_staged_bytes_total``               counter
``spark_statestore_sink_records_published_total``          counter    ``record-send-total``
``spark_statestore_sink_changelog_produce_seconds``        histogram
``spark_statestore_sink_txn_commit_seconds``               histogram  ``txn-commit-time-ns-total``
``spark_statestore_sink_last_commit_timestamp_seconds``    gauge      (when a batch last committed)
=========================================================  =========  ============================

Batches have the label ``outcome``: ``committed`` (applied; published with a changelog),
``rolled_forward`` (the changelog had the batch and the store not: applied from the
changelog) or ``skipped`` (a replay of a batch the store has); their sum is the batches Spark
committed through this process. Failed commits have the label ``reason``: the class of the
error (``ProducerFencedError``, ``TransactionTimeoutError``, ``StagingError``, ...). Staged
rows and bytes are those of the batches applied (outcome ``committed``). Records published
are the changelog records of the batches' Kafka transactions (not their progress records);
produce seconds run from the transaction's begin until every record is acknowledged (reading
the staged rows included), transaction commit seconds the commit call. Every series has the
label ``store``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from spark_statestore.metrics.follower import COMMIT_BUCKETS, PREFIX
from spark_statestore.sink.stats import CommitReport, PublishReport, SinkStats

__all__ = ["SINK_BUCKETS", "SinkMetrics"]

SINK_BUCKETS = (*COMMIT_BUCKETS, 30.0, 60.0, 120.0, 300.0)
"""Seconds: an empty micro-batch commits in milliseconds, a batch of millions of rows with a
changelog in minutes (its Kafka transaction may last up to 5 by default)."""
OUTCOMES = ("committed", "rolled_forward", "skipped")


class SinkMetrics(Collector):
    """The metrics of one sink's committer, registered in ``registry``.

    Parameters
    ----------
    stats
        The committer's counters (it passes them to every commit and to its publisher).
    store
        The store directory (the ``store`` label).
    registry
        Where to register.
    """

    def __init__(self, stats: SinkStats, store: str, registry: CollectorRegistry) -> None:
        self._stats = stats
        self._store = store

        def histogram(name: str, text: str) -> Any:
            return Histogram(
                f"{PREFIX}sink_{name}",
                text,
                labelnames=("store",),
                buckets=SINK_BUCKETS,
                registry=registry,
            ).labels(store=store)

        self._commits = histogram(
            "commit_seconds", "Seconds a micro-batch's whole commit took (publish and store)"
        )
        self._produce = histogram(
            "changelog_produce_seconds",
            "Seconds from a batch's Kafka transaction's begin until its changelog records "
            "were acknowledged",
        )
        self._txn_commit = histogram(
            "txn_commit_seconds", "Seconds a batch's Kafka transaction's commit took"
        )
        stats.commit_observers.append(self._observe_commit)
        stats.publish_observers.append(self._observe_publish)
        registry.register(self)

    def _observe_commit(self, report: CommitReport) -> None:
        self._commits.observe(report.seconds)

    def _observe_publish(self, report: PublishReport) -> None:
        self._produce.observe(report.produce_seconds)
        self._txn_commit.observe(report.commit_seconds)

    def collect(self) -> Iterator[Any]:
        """The sink's counters now (called by the registry at each scrape)."""
        counters = self._stats.counters()
        store = [self._store]
        batches = CounterMetricFamily(
            f"{PREFIX}sink_batches_committed",
            "Micro-batches committed, by outcome (committed, rolled_forward, skipped)",
            labels=["store", "outcome"],
        )
        for outcome in sorted({*OUTCOMES, *counters.batches}):
            batches.add_metric([*store, outcome], counters.batches.get(outcome, 0))
        yield batches
        failed = CounterMetricFamily(
            f"{PREFIX}sink_commits_failed",
            "Micro-batch commits that failed, by the class of their error",
            labels=["store", "reason"],
        )
        for reason, count in sorted(counters.failures.items()):
            failed.add_metric([*store, reason], count)
        yield failed
        for name, text, value in (
            ("staged_rows", "Rows of the committed batches' staged files", counters.staged_rows),
            ("staged_bytes", "Bytes of the committed batches' staged files", counters.staged_bytes),
            (
                "records_published",
                "Changelog records published in committed Kafka transactions",
                counters.records_published,
            ),
        ):
            counter = CounterMetricFamily(f"{PREFIX}sink_{name}", text, labels=["store"])
            counter.add_metric(store, value)
            yield counter
        if counters.last_commit_at is not None:
            last = GaugeMetricFamily(
                f"{PREFIX}sink_last_commit_timestamp_seconds",
                "When the sink last committed a micro-batch, seconds since the epoch",
                labels=["store"],
            )
            last.add_metric(store, counters.last_commit_at)
            yield last
