"""spark-statestore: Kafka Streams style state stores for Spark Structured Streaming.

``import spark_statestore`` is cheap: it imports no Spark, no Kafka client, starts no thread.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from spark_statestore.errors import InvalidPositionError, OptionError, StateStoreError
from spark_statestore.position import Position, PositionBound
from spark_statestore.query import (
    FailureReason,
    HostInfo,
    InStore,
    KeyQuery,
    KeyQueryMetadata,
    LagInfo,
    PrefixQuery,
    Query,
    QueryError,
    QueryFailedError,
    QueryResult,
    RangeQuery,
    RawKeyQuery,
    RawScanQuery,
    StateQueryRequest,
    StateQueryResult,
)
from spark_statestore.version import __version__

if TYPE_CHECKING:
    from spark_statestore.serve.client import StoreClient


def connect(
    target: str | os.PathLike[str],
    *,
    token: str | None = None,
    tls_root_certs: bytes | None = None,
    timeout_s: float = 30.0,
    tls_client_cert: bytes | None = None,
    tls_client_key: bytes | None = None,
) -> StoreClient:
    """A client of a live store served by its owner: ``connect(path).query(request)``
    answers as ``Store.open(path).query(request)`` would (remote IQv2).

    ``target`` is the store's directory (its owner and credentials are found next to it)
    or a Flight location ``grpc+tcp://host:port`` with the server's ``token`` (and
    ``tls_root_certs`` for ``grpc+tls``, and a client certificate ``tls_client_cert`` and
    its ``tls_client_key`` for a server in mutual-TLS mode). See
    :func:`spark_statestore.serve.client.connect`; pyarrow loads on the first call.
    """
    from spark_statestore.serve.client import connect as connect_client

    return connect_client(
        target,
        token=token,
        tls_root_certs=tls_root_certs,
        timeout_s=timeout_s,
        tls_client_cert=tls_client_cert,
        tls_client_key=tls_client_key,
    )


def register(spark: Any) -> None:
    """Register the ``spark_statestore`` data source with ``spark`` (a SparkSession).

    Installing the package already registers it automatically (through the top-level
    ``pyspark_statestore`` module); call this when that is disabled or to be explicit.

    It also sets ``spark.sql.python.filterPushdown.enabled`` to true: the snapshot reader
    turns key and partition filters into store lookups, and Spark refuses a reader that
    pushes filters while that setting is off.
    """
    from spark_statestore.connectors.spark.datasource import StateStoreDataSource

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(StateStoreDataSource)


def enrich(df: Any, path: str | None = None, **options: Any) -> Any:
    """``df`` (a batch or streaming DataFrame) with the value of each row's key in the store
    at ``path``, looked up on the executors in batches through the store's live owner, or in
    the live replicas of ``changelog=`` on any host through the router; see
    :func:`spark_statestore.connectors.spark.enrich.enrich` for the options (``key_column``,
    formats, ``position_column`` to bound each lookup by the row's own position)."""
    from spark_statestore.connectors.spark.enrich import enrich as enrich_df

    return enrich_df(df, path, **options)


__all__ = [
    "FailureReason",
    "HostInfo",
    "InStore",
    "InvalidPositionError",
    "KeyQuery",
    "KeyQueryMetadata",
    "LagInfo",
    "OptionError",
    "Position",
    "PositionBound",
    "PrefixQuery",
    "Query",
    "QueryError",
    "QueryFailedError",
    "QueryResult",
    "RangeQuery",
    "RawKeyQuery",
    "RawScanQuery",
    "StateQueryRequest",
    "StateQueryResult",
    "StateStoreError",
    "__version__",
    "connect",
    "enrich",
    "register",
]
