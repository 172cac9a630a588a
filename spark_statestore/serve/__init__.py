"""Serving a live store to other processes over Arrow Flight (DESIGN.md §7).

LevelDB lets one process open a store. That owner runs a :class:`StoreServer`; other
processes find it through the store's ``_owner.json`` (:func:`connect_to_owner`) and read
pinned or fresh snapshots with a :class:`StoreClient`, described by a
:class:`~spark_statestore.store.scan.ScanSpec`.

Importing this package loads neither pyarrow nor LevelDB.
"""

from spark_statestore.serve.client import PinnedSnapshotInfo, StoreClient, connect_to_owner
from spark_statestore.serve.errors import (
    BadRequestError,
    RemoteStoreError,
    ServeError,
    ServerConfigError,
    ServerUnavailableError,
    SnapshotExpiredError,
    TooManyPinsError,
    UnknownActionError,
)
from spark_statestore.serve.server import StoreServer

__all__ = [
    "BadRequestError",
    "PinnedSnapshotInfo",
    "RemoteStoreError",
    "ServeError",
    "ServerConfigError",
    "ServerUnavailableError",
    "SnapshotExpiredError",
    "StoreClient",
    "StoreServer",
    "TooManyPinsError",
    "UnknownActionError",
    "connect_to_owner",
]
