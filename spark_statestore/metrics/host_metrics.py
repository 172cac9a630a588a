"""The store host's metrics (:class:`HostMetrics`): the process on a Spark driver's host
through which executors stage a sink's rows and read stores (stage, scan and lookup calls);
counters read when Prometheus scrapes, a latency histogram observed once per call.

=============================================  =========  =======================================
metric                                         type       meaning
=============================================  =========  =======================================
``spark_statestore_host_staged_rows_total``    counter    rows sink tasks staged through the host
``spark_statestore_host_staged_bytes_total``   counter    bytes of the files they staged
``spark_statestore_host_calls_total``          counter    calls answered, by ``kind`` (``stage``,
                                                          ``scan``, ``lookup``) and ``status``
                                                          (``ok``, ``error``)
``spark_statestore_host_call_seconds``         histogram  seconds per call, by ``kind`` (a scan
                                                          until its last row was sent)
``spark_statestore_host_changelog_batches_``   counter    batches the host published to a sink's
``total``                                                 changelog, by ``changelog`` (topic) and
                                                          ``published`` (``while_staging``: as
                                                          its tasks staged it; ``at_commit``:
                                                          again at its commit, the first of a
                                                          run, another attempt, ... )
=============================================  =========  =======================================

A host serves every store of its driver's host, so its series have no ``store`` label.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from spark_statestore.metrics.follower import PREFIX
from spark_statestore.serve.calls import CallStats

__all__ = ["CALL_BUCKETS", "CountedHost", "HostMetrics"]

CALL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Seconds: a lookup of a few keys takes a millisecond, a task's staging or a scan of a large
store seconds."""


class CountedHost(Protocol):
    """What :class:`HostMetrics` reads of a store host."""

    calls: CallStats

    def staged_totals(self) -> tuple[int, int]:
        """Rows and bytes staged so far."""
        ...

    def published_totals(self) -> dict[str, tuple[int, int]]:
        """Per changelog topic, batches published while staged and at their commit."""
        ...


class HostMetrics(Collector):
    """The metrics of one store host, registered in ``registry``."""

    def __init__(self, host: CountedHost, registry: CollectorRegistry) -> None:
        self._host = host
        latency = Histogram(
            f"{PREFIX}host_call_seconds",
            "Seconds a store host call took, by kind (a scan until its last row was sent)",
            labelnames=("kind",),
            buckets=CALL_BUCKETS,
            registry=registry,
        )
        host.calls.observers.append(lambda kind, seconds: latency.labels(kind).observe(seconds))
        registry.register(self)

    def collect(self) -> Iterator[Any]:
        """The host's counters now (called by the registry at each scrape)."""
        rows, size = self._host.staged_totals()
        for name, text, value in (
            ("staged_rows", "Rows sink tasks staged through the store host", rows),
            ("staged_bytes", "Bytes of the files sink tasks staged through the store host", size),
        ):
            counter = CounterMetricFamily(f"{PREFIX}host_{name}", text)
            counter.add_metric([], value)
            yield counter
        calls = CounterMetricFamily(
            f"{PREFIX}host_calls",
            "Store host calls answered, by kind (stage, scan, lookup) and status (ok, error)",
            labels=["kind", "status"],
        )
        for (kind, status), count in self._host.calls.counts().items():
            calls.add_metric([kind, status], count)
        yield calls
        batches = CounterMetricFamily(
            f"{PREFIX}host_changelog_batches",
            "Batches the store host published to a sink's changelog, by changelog topic and "
            "when (while_staging: as the tasks staged them; at_commit: at the commit)",
            labels=["changelog", "published"],
        )
        for topic, (streamed, republished) in sorted(self._host.published_totals().items()):
            batches.add_metric([topic, "while_staging"], streamed)
            batches.add_metric([topic, "at_commit"], republished)
        yield batches
