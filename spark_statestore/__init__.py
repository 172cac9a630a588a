"""spark-statestore: Kafka Streams style state stores for Spark Structured Streaming.

``import spark_statestore`` is cheap: it imports no Spark, no Kafka client, starts no thread.
"""

from __future__ import annotations

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
]
