"""A store server's metrics (:class:`ServerMetrics`): read from the
:class:`~spark_statestore.serve.StoreServer`'s own counters when Prometheus scrapes.

===================================================  =========  ==================================
metric                                               type       meaning
===================================================  =========  ==================================
``spark_statestore_server_requests_total``           counter    scans and multi-key lookups
                                                                served (Flight reads)
``spark_statestore_server_rows_examined_total``      counter    rows its scans and lookups read
``spark_statestore_server_rows_returned_total``      counter    rows they returned
``spark_statestore_server_not_up_to_bound_total``    counter    pins, lookups and queries
                                                                answered short of their
                                                                position bound (the client
                                                                refuses: NOT_UP_TO_BOUND)
``spark_statestore_server_calls_total``             counter    calls answered, by ``kind``
                                                                (``scan``, ``lookup``, ``pin``,
                                                                ``query``, ...) and ``status``
                                                                (``ok``, ``error``)
``spark_statestore_server_call_seconds``             histogram  seconds per call, by ``kind``
``spark_statestore_server_pins``                     gauge      snapshots pinned now
``spark_statestore_server_waiting_calls``            gauge      calls waiting for a position bound
===================================================  =========  ==================================

Every series has the label ``store`` (the store directory).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from spark_statestore.metrics.follower import PREFIX
from spark_statestore.metrics.host_metrics import CALL_BUCKETS

if TYPE_CHECKING:
    from spark_statestore.serve import StoreServer

__all__ = ["ServerMetrics"]

_COUNTERS = (
    ("requests", "server_requests", "Scans and multi-key lookups the store server served"),
    ("rows_examined", "server_rows_examined", "Rows the store server's scans and lookups read"),
    ("rows_returned", "server_rows_returned", "Rows the store server's scans and lookups returned"),
    (
        "not_up_to_bound",
        "server_not_up_to_bound",
        "Pins, lookups and queries answered from a commit short of their position bound "
        "(refused by the client as NOT_UP_TO_BOUND)",
    ),
)
_GAUGES = (
    ("pins", "server_pins", "Snapshots pinned on the store server now"),
    ("waiting", "server_waiting_calls", "Calls waiting for a position bound now"),
)


class ServerMetrics(Collector):
    """The metrics of one store server, registered in ``registry``."""

    def __init__(self, server: StoreServer, registry: CollectorRegistry) -> None:
        self._server = server
        self._store = str(server.store.path)
        latency = Histogram(
            f"{PREFIX}server_call_seconds",
            "Seconds a store server call took, by kind (a scan until its last row was sent)",
            labelnames=("store", "kind"),
            buckets=CALL_BUCKETS,
            registry=registry,
        )
        server.calls.observers.append(
            lambda kind, seconds: latency.labels(self._store, kind).observe(seconds)
        )
        registry.register(self)

    def collect(self) -> Iterator[Any]:
        """The server's counters now (called by the registry at each scrape)."""
        counters = self._server.counters()
        for key, name, text in _COUNTERS:
            counter = CounterMetricFamily(f"{PREFIX}{name}", text, labels=["store"])
            counter.add_metric([self._store], counters[key])
            yield counter
        calls = CounterMetricFamily(
            f"{PREFIX}server_calls",
            "Store server calls answered, by kind (scan, lookup, pin, query, query_key, "
            "describe, ...) and status (ok, error)",
            labels=["store", "kind", "status"],
        )
        for (kind, status), count in self._server.calls.counts().items():
            calls.add_metric([self._store, kind, status], count)
        yield calls
        for key, name, text in _GAUGES:
            gauge = GaugeMetricFamily(f"{PREFIX}{name}", text, labels=["store"])
            gauge.add_metric([self._store], counters[key])
            yield gauge
