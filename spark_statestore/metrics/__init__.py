"""Metrics of the long-running pieces, in Prometheus' text format through the standard Python
client (``prometheus_client``): collectors that read a piece's own counters when scraped (no
cost per record), and an opt-in HTTP endpoint per process.

Names follow Kafka Streams' metrics where they measure the same thing (``records-lag``,
``restore-remaining-records-total``, ``commit-latency``), in Prometheus' spelling under the
``spark_statestore_`` prefix. See docs/operations.md for the list.
"""

from spark_statestore.metrics.follower import FollowerMetrics
from spark_statestore.metrics.host_metrics import HostMetrics
from spark_statestore.metrics.server import MetricsServer
from spark_statestore.metrics.server_metrics import ServerMetrics
from spark_statestore.metrics.sink_metrics import SinkMetrics
from spark_statestore.metrics.store_metrics import StoreMetrics

__all__ = [
    "FollowerMetrics",
    "HostMetrics",
    "MetricsServer",
    "ServerMetrics",
    "SinkMetrics",
    "StoreMetrics",
]
