"""A router's metrics (:class:`RouterMetrics`), for the process that keeps a
:class:`~spark_statestore.discovery.router.Router` (an application answering queries over a
changelog's replicas): read from the router's own counters, and its replica registry's
refused records, when Prometheus scrapes.

==================================================================  ===========================
metric                                                              meaning
==================================================================  ===========================
``spark_statestore_router_requests_total``                          requests routed
``spark_statestore_router_failovers_total``                         partitions asked of their
                                                                    next candidate after a
                                                                    failure
``spark_statestore_router_replica_failures_total{reason}``          replicas that failed a
                                                                    partition: ``unreachable``,
                                                                    or the answer's failure
                                                                    (``NOT_UP_TO_BOUND``, ...)
``spark_statestore_router_unanswered_partitions_total``             partitions no replica could
                                                                    answer
``spark_statestore_router_refused_announcements_total{reason}``     replicas-topic records
                                                                    refused: ``unverified``,
                                                                    ``replay``, ``clock_skew``,
                                                                    ``other_changelog``,
                                                                    ``malformed``
==================================================================  ===========================

Every series has the label ``changelog``. Register it in the registry the application serves
(``prometheus_client.REGISTRY`` by default, or a
:class:`~spark_statestore.metrics.MetricsServer`'s).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from spark_statestore.discovery.router import Router
from spark_statestore.metrics.follower import PREFIX

__all__ = ["RefusalCounts", "RouterMetrics"]


class RefusalCounts(Protocol):
    """What :class:`RouterMetrics` reads of a replica registry (``ReplicaRegistry``)."""

    def refused_counts(self) -> dict[str, int]:
        """Records refused so far, by reason."""
        ...


class RouterMetrics(Collector):
    """The metrics of one router (and, with ``replicas``, the refusals of the
    replica registry it routes with), registered in ``registry``.

    Parameters
    ----------
    router
        The router.
    changelog
        The changelog whose replicas it routes to (the ``changelog`` label).
    replicas
        Its replica registry, whose refused records to report too (None: not reported).
    registry
        Where to register (default: the client library's global registry).
    """

    def __init__(
        self,
        router: Router,
        changelog: str,
        *,
        replicas: RefusalCounts | None = None,
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        self._router = router
        self._changelog = changelog
        self._replicas = replicas
        registry.register(self)

    def collect(self) -> Iterator[Any]:
        """The router's counters now (called by the registry at each scrape)."""
        counts = self._router.stats.counts()
        label = [self._changelog]
        for name, key, text in (
            ("requests", "requests", "Requests the router routed"),
            ("failovers", "failovers", "Partitions asked of their next candidate replica"),
            ("unanswered_partitions", "unanswered", "Partitions no replica could answer"),
        ):
            family = CounterMetricFamily(f"{PREFIX}router_{name}", text, labels=["changelog"])
            family.add_metric(label, counts.get((key, ""), 0))
            yield family
        failures = CounterMetricFamily(
            f"{PREFIX}router_replica_failures",
            "Replicas that failed a partition, by reason (unreachable, or the answer's failure)",
            labels=["changelog", "reason"],
        )
        for (name, reason), count in sorted(counts.items()):
            if name == "replica_failures":
                failures.add_metric([*label, reason], count)
        yield failures
        if self._replicas is not None:
            refused = CounterMetricFamily(
                f"{PREFIX}router_refused_announcements",
                "Records of the replicas topic refused, by reason",
                labels=["changelog", "reason"],
            )
            for reason, count in sorted(self._replicas.refused_counts().items()):
                refused.add_metric([*label, reason], count)
            yield refused
