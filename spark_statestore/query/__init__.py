"""Interactive queries in the style of Kafka Streams' IQv2 (KIP-796) and KIP-535.

Queries (:class:`KeyQuery`, :class:`RangeQuery`, :class:`PrefixQuery`, :class:`RawKeyQuery`,
:class:`RawScanQuery`, and for versioned stores :class:`VersionedKeyQuery` and
:class:`MultiVersionedKeyQuery`) are immutable value objects built with named constructors. A
:class:`StateQueryRequest` names the store, the query, the partitions, the
:class:`~spark_statestore.position.PositionBound` and a few flags; a store answers with a
:class:`StateQueryResult` holding one :class:`QueryResult` per partition, each carrying the
store's :class:`~spark_statestore.position.Position`. :class:`LagInfo`, :class:`HostInfo` and
:class:`KeyQueryMetadata` describe replicas for routing (KIP-535).

This module only describes queries and results; stores execute them.
"""

from spark_statestore.query._errors import FailureReason, QueryError, QueryFailedError
from spark_statestore.query._queries import (
    CustomQuery,
    KeyQuery,
    MultiVersionedKeyQuery,
    PrefixQuery,
    Query,
    RangeQuery,
    RawKeyQuery,
    RawScanQuery,
    VersionedKeyQuery,
)
from spark_statestore.query._requests import InStore, StateQueryRequest
from spark_statestore.query._results import QueryResult, StateQueryResult, VersionedRecord
from spark_statestore.query._routing import HostInfo, KeyQueryMetadata, LagInfo

__all__ = [
    "CustomQuery",
    "FailureReason",
    "HostInfo",
    "InStore",
    "KeyQuery",
    "KeyQueryMetadata",
    "LagInfo",
    "MultiVersionedKeyQuery",
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
    "VersionedKeyQuery",
    "VersionedRecord",
]
