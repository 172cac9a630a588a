"""spark-statestore: Kafka Streams style state stores for Spark Structured Streaming.

``import spark_statestore`` is cheap: it imports no Spark, no Kafka client, starts no thread.
"""

from __future__ import annotations

from typing import Any

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

__version__ = "0.1.0"


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


def enrich(df: Any, path: str, **options: Any) -> Any:
    """``df`` (a batch or streaming DataFrame) with the value of each row's key in the store
    at ``path``, looked up on the executors in batches through the store's live owner; see
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
    "enrich",
    "register",
]
