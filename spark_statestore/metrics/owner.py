"""The metrics endpoint of a process that owns a store and serves it over Flight (a follower
query's driver-side process, the sink's store server): its own metrics, its store's and its
Flight server's, from one registry (:func:`serve_owner_metrics`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client.registry import CollectorRegistry

from spark_statestore.metrics.server import HealthProvider, MetricsEndpoint, MetricsServer
from spark_statestore.metrics.server_metrics import ServerMetrics
from spark_statestore.metrics.store_metrics import StoreMetrics

if TYPE_CHECKING:
    from spark_statestore.serve import StoreServer

__all__ = ["serve_owner_metrics"]

_log = logging.getLogger(__name__)


def serve_owner_metrics(
    register: Callable[[CollectorRegistry], object],
    server: StoreServer,
    endpoint: MetricsEndpoint,
    *,
    what: str,
    health: HealthProvider,
) -> MetricsServer:
    """Serve the metrics of the owner of ``server``'s store: its own (``register`` registers
    them), its store's (:class:`StoreMetrics`) and its Flight server's
    (:class:`ServerMetrics`), as ``endpoint`` says, and the store's ``health`` at ``/health``;
    the URL is logged with ``what`` the owner is.

    Raises
    ------
    OptionError
        As :meth:`MetricsEndpoint.start`: a host beyond loopback without TLS and a token,
        unreadable TLS or token files, or a port that cannot be bound.
    """
    registry = CollectorRegistry()
    register(registry)
    StoreMetrics(server.store, registry)
    ServerMetrics(server, registry)
    metrics = endpoint.start(registry, health={str(server.store.path): health})
    _log.info("metrics of %s at %s", what, metrics.url)
    return metrics
