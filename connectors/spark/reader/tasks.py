"""The snapshot reader's tasks (what planning hands the executors) and where they find the
store: its absolute path on the driver's host, the owner's location and credentials when
executors can dial it, and the driver's store host for the rest."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import InputPartition

from spark_statestore.connectors.spark.errors import SparkSourceError

if TYPE_CHECKING:
    from spark_statestore.connectors.spark.host import HostRef
    from spark_statestore.serve.auth import ServeCredentials

__all__ = ["RowsTask", "ScanTask", "host_row", "owner_scan_task", "placement"]


class ScanTask(InputPartition):
    """The data view's one task: a scan of a pinned (owner) or planned (local) snapshot.

    Parameters
    ----------
    scan
        The :class:`~spark_statestore.store.scan.ScanSpec` as JSON.
    location, credentials, snapshot_id
        The owner that pinned the snapshot, how to authenticate to it, and the pin (None:
        no owner executors can dial).
    commit_seq
        The store commit planned.
    store
        The store's absolute path on the driver's host.
    host
        The driver's store host, through which the task reads the store as it is now when
        the planned owner is gone or there is none (None: no Spark driver planned this, so
        the task runs on the store's host and reads it itself).
    """

    def __init__(
        self,
        scan: str,
        location: str | None,
        snapshot_id: str | None,
        commit_seq: int,
        *,
        store: str,
        credentials: ServeCredentials | None = None,
        host: HostRef | None = None,
    ) -> None:
        super().__init__(scan)
        self.scan = scan
        self.location = location
        self.snapshot_id = snapshot_id
        self.commit_seq = commit_seq
        self.store = store
        self.credentials = credentials
        self.host = host


class RowsTask(InputPartition):
    """A view computed at planning time (position, lag, metadata): the rows themselves."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        super().__init__(len(rows))
        self.rows = rows


def placement(path: str) -> dict[str, Any]:
    """Where a task finds the store at ``path``: ``store`` (its absolute path) and ``host``
    (the driver's store host, None outside a Spark driver), as :class:`ScanTask` takes them."""
    from spark_statestore.connectors.spark.host import ensure_store_host

    return {"store": os.path.abspath(path), "host": ensure_store_host()}


def host_row(path: str) -> tuple[Any, ...]:
    """The ``host`` view's row: the driver's store host as tasks dial it (with its client
    certificate and key when it is in mutual-TLS mode), and the store."""
    where = placement(path)
    ref = where["host"]
    if ref is None:
        raise SparkSourceError(
            "view 'host' is planned by a Spark driver only (this process runs under none)"
        )
    pems = (ref.tls_root_certs, ref.tls_client_cert, ref.tls_client_key)
    certs, client_cert, client_key = (None if pem is None else pem.decode("ascii") for pem in pems)
    return (ref.location, ref.token, certs, where["store"], client_cert, client_key)


def owner_scan_task(path: str, spec_json: str, client: Any, pinned: Any) -> ScanTask:
    """The task of a snapshot pinned in the owner ``client`` reaches: read there directly
    when executors can dial it (its credentials travel in the plan), else (the pin released)
    the store as it is then, through the store host (an owner on loopback is out of reach of
    executors on other hosts)."""
    from urllib.parse import urlsplit

    from spark_statestore.connectors.spark.driver import driver_deployment
    from spark_statestore.serve.auth import is_loopback, read_credentials

    where = placement(path)
    credentials = read_credentials(where["store"])
    dialable = where["host"] is None or driver_deployment().executors_local
    if not dialable:
        dialable = not is_loopback(urlsplit(client.location).hostname or "127.0.0.1")
    if credentials is None or not dialable:
        client.release(pinned.snapshot_id)
        return ScanTask(spec_json, None, None, pinned.commit_seq, **where)
    return ScanTask(
        spec_json,
        client.location,
        pinned.snapshot_id,
        pinned.commit_seq,
        credentials=credentials,
        **where,
    )
