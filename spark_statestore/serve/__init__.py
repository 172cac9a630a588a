"""Serving a live store to other processes over Arrow Flight.

LevelDB lets one process open a store. That owner runs a :class:`StoreServer`; other
processes find it through the store's ``_owner.json`` (:func:`connect_to_owner`, which reads
the server's token from the owner-only ``_serve.json``: see
:mod:`~spark_statestore.serve.auth`) and read pinned or fresh snapshots with a
:class:`StoreClient`, described by a :class:`~spark_statestore.store.scan.ScanSpec`, or
query it with :meth:`StoreClient.query` exactly as the local ``Store.query``
(:func:`connect`; the wire form is in :mod:`~spark_statestore.serve.query_wire`).

Importing this package loads neither pyarrow nor LevelDB.
"""

from spark_statestore.serve.client import (
    PinnedSnapshotInfo,
    StoreClient,
    client_for_store,
    connect,
    connect_to_owner,
)
from spark_statestore.serve.errors import (
    AuthenticationError,
    BadRequestError,
    RemoteStoreError,
    ReplyTooLargeError,
    ServeError,
    ServerConfigError,
    ServerUnavailableError,
    SnapshotExpiredError,
    TlsHandshakeError,
    TooManyPinsError,
    UnknownActionError,
    WrongStoreError,
)
from spark_statestore.serve.server import StoreServer

__all__ = [
    "AuthenticationError",
    "BadRequestError",
    "PinnedSnapshotInfo",
    "RemoteStoreError",
    "ReplyTooLargeError",
    "ServeError",
    "ServerConfigError",
    "ServerUnavailableError",
    "SnapshotExpiredError",
    "StoreClient",
    "StoreServer",
    "TlsHandshakeError",
    "TooManyPinsError",
    "UnknownActionError",
    "WrongStoreError",
    "client_for_store",
    "connect",
    "connect_to_owner",
]
