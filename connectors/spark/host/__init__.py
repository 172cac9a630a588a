"""The store host: how Spark executors, wherever they run, reach the stores on the driver's
host without touching their files (:mod:`.server`), found or started by the driver-side code
that plans a read or a write (:func:`ensure_store_host`) and dialed by the tasks
(:class:`StoreHostClient`, with the :class:`HostRef` the plan carries)."""

from spark_statestore.connectors.spark.host.client import StoreHostClient
from spark_statestore.connectors.spark.host.launch import ensure_store_host
from spark_statestore.connectors.spark.host.record import HostRef

__all__ = ["HostRef", "StoreHostClient", "ensure_store_host"]
