"""A follower's metrics (:class:`FollowerMetrics`): read from the
:class:`~spark_statestore.follower.engine.Follower` when Prometheus scrapes, plus a histogram
of its store commits, observed as they happen (one observation per commit, not per record).

=======================================================  ======================================
metric                                                   Kafka Streams' counterpart
=======================================================  ======================================
``spark_statestore_follower_records_applied_total``      ``restore-total`` / ``process-total``
``spark_statestore_follower_records_lag{partition}``     ``records-lag`` (consumer fetch)
``spark_statestore_follower_restore_remaining_records``  ``restore-remaining-records-total``
``spark_statestore_follower_state{state}``               the client's state (1 for the current)
``spark_statestore_follower_commit_seconds``             ``commit-latency-avg`` / ``-max``
``spark_statestore_follower_commit_records``             (records per commit: its size)
=======================================================  ======================================

and ``spark_statestore_follower_last_commit_timestamp_seconds``, when it last committed (the
age of its position is ``time()`` minus it while records arrive).

Every series has the labels ``store`` (the store directory) and ``topic`` (the changelog).
The store's own metrics (its size, its commit number) are
:class:`~spark_statestore.metrics.store_metrics.StoreMetrics`, registered beside these.
The lag is the changelog's end offset minus the offset the store has applied, per partition;
end offsets are asked of Kafka at most every ``end_offsets_ttl_s`` seconds (a scrape never
waits on more than one such request).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from spark_statestore.errors import StateStoreError

if TYPE_CHECKING:
    from spark_statestore.follower.engine import Follower

__all__ = ["FollowerMetrics"]

_log = logging.getLogger(__name__)

PREFIX = "spark_statestore_"
COMMIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Seconds: a store commit of one small chunk takes about a millisecond, a restore chunk of
50,000 records a few hundred."""
SIZE_BUCKETS = (1, 10, 100, 1_000, 10_000, 50_000, 100_000, 500_000)
"""Records per commit: one record live, chunks of 50,000 (the default) while restoring."""
_STATES = ("created", "restoring", "running", "stopped", "failed")


class FollowerMetrics(Collector):
    """The metrics of one follower, registered in ``registry``.

    Parameters
    ----------
    follower
        The follower to report.
    registry
        Where to register (a process's own registry, served by a
        :class:`~spark_statestore.metrics.server.MetricsServer`).
    end_offsets_ttl_s
        How old the changelog's end offsets may be when a scrape reports the lag.
    """

    def __init__(
        self, follower: Follower, registry: CollectorRegistry, *, end_offsets_ttl_s: float = 5.0
    ) -> None:
        self._follower = follower
        self._labels = {"store": str(follower.store.path), "topic": follower.source.topic}
        self._ttl_s = end_offsets_ttl_s
        self._asked_at = float("-inf")
        self._lock = threading.Lock()
        self._commits = Histogram(
            f"{PREFIX}follower_commit_seconds",
            "Seconds a follower's store commit took (a chunk of changelog records)",
            labelnames=tuple(self._labels),
            buckets=COMMIT_BUCKETS,
            registry=registry,
        ).labels(**self._labels)
        self._sizes = Histogram(
            f"{PREFIX}follower_commit_records",
            "Changelog records per store commit of the follower (the commit's size)",
            labelnames=tuple(self._labels),
            buckets=SIZE_BUCKETS,
            registry=registry,
        ).labels(**self._labels)
        follower.commit_observers.append(self._observe_commit)
        registry.register(self)

    def _observe_commit(self, seconds: float, records: int) -> None:
        self._commits.observe(seconds)
        self._sizes.observe(records)

    def collect(self) -> Iterator[Any]:
        """The follower's metrics now (called by the registry at each scrape)."""
        follower = self._follower
        names, values = list(self._labels), list(self._labels.values())
        applied = CounterMetricFamily(
            f"{PREFIX}follower_records_applied",
            "Changelog records the follower applied to its store",
            labels=names,
        )
        applied.add_metric(values, follower.records_applied)
        yield applied
        lags = self._lags()
        lag = GaugeMetricFamily(
            f"{PREFIX}follower_records_lag",
            "Changelog end offset minus the offset the store has applied (Kafka Streams' "
            "records-lag), per partition",
            labels=[*names, "partition"],
        )
        for partition, info in sorted(lags.items()):
            lag.add_metric([*values, str(partition)], info.offset_lag)
        yield lag
        remaining = GaugeMetricFamily(
            f"{PREFIX}follower_restore_remaining_records",
            "Records still to apply to reach the end offsets seen when the restore started "
            "(Kafka Streams' restore-remaining-records-total); 0 once RUNNING",
            labels=names,
        )
        remaining.add_metric(values, follower.restore_remaining())
        yield remaining
        last = follower.last_commit_at
        if last is not None:
            committed = GaugeMetricFamily(
                f"{PREFIX}follower_last_commit_timestamp_seconds",
                "When the follower last committed to its store, seconds since the epoch (the "
                "position's age is time() minus it while records arrive)",
                labels=names,
            )
            committed.add_metric(values, last)
            yield committed
        state = GaugeMetricFamily(
            f"{PREFIX}follower_state",
            "The follower's state: 1 for the current one",
            labels=[*names, "state"],
        )
        for name in _STATES:
            state.add_metric([*values, name], 1.0 if follower.state.value == name else 0.0)
        yield state

    def _lags(self) -> dict[int, Any]:
        follower = self._follower
        with self._lock:
            now = time.monotonic()
            if now - self._asked_at >= self._ttl_s:
                self._asked_at = now
                try:
                    follower.refresh_end_offsets()
                except StateStoreError as exc:  # the scrape reports the last known ends
                    _log.debug("metrics of %s: end offsets unknown: %s", follower.store.path, exc)
        return follower.lags()
