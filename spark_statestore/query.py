"""Interactive queries in the style of Kafka Streams' IQv2 (KIP-796) and KIP-535.

Queries (:class:`KeyQuery`, :class:`RangeQuery`, :class:`PrefixQuery`, :class:`RawKeyQuery`,
:class:`RawScanQuery`) are immutable value objects built with named constructors. A
:class:`StateQueryRequest` names the store, the query, the partitions, the
:class:`~spark_statestore.position.PositionBound` and a few flags; a store answers with a
:class:`StateQueryResult` holding one :class:`QueryResult` per partition, each carrying the
store's :class:`~spark_statestore.position.Position`. :class:`LagInfo`, :class:`HostInfo` and
:class:`KeyQueryMetadata` describe replicas for routing (KIP-535).

This module only describes queries and results; stores execute them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from types import MappingProxyType
from typing import Any, Generic, TypeAlias, TypeVar, cast

from spark_statestore.errors import StateStoreError
from spark_statestore.position import Position, PositionBound

__all__ = [
    "FailureReason",
    "HostInfo",
    "InStore",
    "KeyQuery",
    "KeyQueryMetadata",
    "LagInfo",
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
]

K = TypeVar("K")
V = TypeVar("V")
R = TypeVar("R")


class QueryError(StateStoreError, ValueError):
    """A query, request or query metadata object was built from invalid arguments."""


class FailureReason(str, Enum):
    """Why a store could not answer a query on one partition (KIP-796)."""

    UNKNOWN_QUERY_TYPE = "UNKNOWN_QUERY_TYPE"
    """The store does not know how to execute this kind of query."""
    NOT_ACTIVE = "NOT_ACTIVE"
    """The request required the active (leader) store and this replica is not it."""
    NOT_UP_TO_BOUND = "NOT_UP_TO_BOUND"
    """The store has not yet reached the request's position bound."""
    NOT_PRESENT = "NOT_PRESENT"
    """The requested partition is not held by this store (or replica)."""
    DOES_NOT_EXIST = "DOES_NOT_EXIST"
    """The requested store or partition does not exist at all."""
    STORE_EXCEPTION = "STORE_EXCEPTION"
    """The store raised an error while executing the query."""


class QueryFailedError(StateStoreError, RuntimeError):
    """The result of a failed :class:`QueryResult` was read.

    Attributes
    ----------
    reason
        The :class:`FailureReason` of the failed result.
    failure_message
        The store's explanation of the failure.
    """

    def __init__(self, reason: FailureReason, failure_message: str) -> None:
        super().__init__(
            f"the query failed with {reason.value}: {failure_message} "
            "(check QueryResult.is_success before reading .result)"
        )
        self.reason = reason
        self.failure_message = failure_message

    def __reduce__(self) -> tuple[type[QueryFailedError], tuple[FailureReason, str]]:
        # Keep the error picklable: it crosses process boundaries (Spark workers, Flight).
        return (type(self), (self.reason, self.failure_message))


# -- helpers -------------------------------------------------------------------------------
def _as_bytes(value: object, what: str, *, allow_empty: bool = True) -> bytes:
    if isinstance(value, str):
        raise QueryError(
            f"{what} must be bytes, got str {value!r}; encode it first, "
            f"e.g. {value!r}.encode('utf-8')"
        )
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise QueryError(f"{what} must be bytes, got {type(value).__name__}")
    data = bytes(value)
    if not allow_empty and not data:
        raise QueryError(f"{what} must not be empty")
    return data


def _check_not_none(value: object, what: str) -> None:
    if value is None:
        raise QueryError(f"{what} must not be None")


def _check_partition(partition: object, what: str = "partition") -> int:
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise QueryError(f"{what} must be an int >= 0, got {partition!r}")
    return partition


def _check_range(lower: object, upper: object) -> None:
    if lower is None or upper is None:
        return
    try:
        inverted = lower > upper  # type: ignore[operator]
    except TypeError:
        if type(lower) is not type(upper):
            raise QueryError(
                f"range bounds {lower!r} and {upper!r} have different, incomparable types"
            ) from None
        return  # an unordered key type: the store orders keys by their serialized bytes
    if isinstance(inverted, bool) and inverted:
        raise QueryError(
            f"range lower bound {lower!r} is greater than upper bound {upper!r}; "
            "both bounds are inclusive, swap them or use with_descending_keys() for reverse order"
        )


# -- queries -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class KeyQuery(Generic[K, V]):
    """Look up the value of one key; the result is the value, or None when absent.

    Build with :meth:`with_key`.
    """

    key: K

    @classmethod
    def with_key(cls, key: K) -> KeyQuery[K, Any]:
        """A query for the value of ``key`` (any key object the store's key serde accepts)."""
        _check_not_none(key, "KeyQuery key")
        return cls(key)


@dataclass(frozen=True, slots=True)
class RangeQuery(Generic[K, V]):
    """Scan the keys between two optional bounds, both inclusive (as Kafka's ``RangeQuery``).

    Build with :meth:`with_range`, :meth:`with_lower_bound`, :meth:`with_upper_bound` or
    :meth:`with_no_bounds` (class-level constructors: each builds a fresh ascending query),
    then choose the order with :meth:`with_descending_keys` / :meth:`with_ascending_keys`.
    """

    lower: K | None = None
    upper: K | None = None
    descending: bool = False

    @classmethod
    def with_range(cls, lower: K | None, upper: K | None) -> RangeQuery[K, Any]:
        """Keys in ``[lower, upper]``; a None bound leaves that end open.

        Raises
        ------
        QueryError
            If both bounds are comparable and ``lower > upper``.
        """
        _check_range(lower, upper)
        return cls(lower, upper)

    @classmethod
    def with_lower_bound(cls, lower: K) -> RangeQuery[K, Any]:
        """Keys ``>= lower``."""
        _check_not_none(lower, "RangeQuery lower bound")
        return cls(lower, None)

    @classmethod
    def with_upper_bound(cls, upper: K) -> RangeQuery[K, Any]:
        """Keys ``<= upper``."""
        _check_not_none(upper, "RangeQuery upper bound")
        return cls(None, upper)

    @classmethod
    def with_no_bounds(cls) -> RangeQuery[Any, Any]:
        """Every key of the store."""
        return cls(None, None)

    def with_descending_keys(self) -> RangeQuery[K, V]:
        """A copy that returns keys from the largest to the smallest."""
        return replace(self, descending=True)

    def with_ascending_keys(self) -> RangeQuery[K, V]:
        """A copy that returns keys from the smallest to the largest (the default)."""
        return replace(self, descending=False)


@dataclass(frozen=True, slots=True)
class PrefixQuery:
    """Scan the keys whose serialized bytes start with ``prefix``, in ascending order."""

    prefix: bytes

    @classmethod
    def with_prefix(cls, prefix: bytes) -> PrefixQuery:
        """Keys starting with ``prefix`` (non-empty bytes; scan with :class:`RawScanQuery`)."""
        return cls(_as_bytes(prefix, "PrefixQuery prefix", allow_empty=False))


@dataclass(frozen=True, slots=True)
class RawKeyQuery:
    """Look up the value bytes stored under raw key bytes; the result is bytes or None."""

    key: bytes

    @classmethod
    def with_key(cls, key: bytes) -> RawKeyQuery:
        """A query for the value stored under ``key`` (bytes-like, copied to bytes)."""
        return cls(_as_bytes(key, "RawKeyQuery key"))


@dataclass(frozen=True, slots=True)
class RawScanQuery:
    """Scan all ``(key, value)`` byte pairs of the store in key order, optionally limited."""

    limit: int | None = None

    @classmethod
    def scan(cls) -> RawScanQuery:
        """Every record of the store."""
        return cls(None)

    def with_limit(self, limit: int) -> RawScanQuery:
        """A copy that stops after ``limit`` records (an int >= 1)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise QueryError(f"RawScanQuery limit must be an int >= 1, got {limit!r}")
        return replace(self, limit=limit)


Query: TypeAlias = (
    KeyQuery[Any, Any] | RangeQuery[Any, Any] | PrefixQuery | RawKeyQuery | RawScanQuery
)
"""Any query a store may be asked to execute."""

_QUERY_TYPES = (KeyQuery, RangeQuery, PrefixQuery, RawKeyQuery, RawScanQuery)


# -- results -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class QueryResult(Generic[R]):
    """One partition's (or a global store's) answer to a query.

    Build with :meth:`for_result`, :meth:`for_failure`, :meth:`for_unknown_query_type` or
    :meth:`not_up_to_bound`. Check :attr:`is_success` before reading :attr:`result`.

    Parameters
    ----------
    value
        The raw result of a success (None for a failure); prefer :attr:`result`.
    position
        The store's position when it executed (or refused) the query.
    execution_info
        Execution details, when the request enabled them.
    failure_reason, failure_message
        Why the query failed; both None for a success.
    """

    value: R | None
    position: Position
    execution_info: tuple[str, ...] = ()
    failure_reason: FailureReason | None = None
    failure_message: str | None = None

    def __post_init__(self) -> None:
        _check_position(self.position)
        object.__setattr__(self, "execution_info", _check_info(self.execution_info))
        if self.failure_reason is None:
            if self.failure_message is not None:
                raise QueryError("a successful QueryResult cannot have a failure message")
            return
        try:
            reason = FailureReason(self.failure_reason)
        except ValueError:
            raise QueryError(f"unknown failure reason {self.failure_reason!r}") from None
        object.__setattr__(self, "failure_reason", reason)
        if not isinstance(self.failure_message, str):
            raise QueryError(
                f"failure message must be a str, got {type(self.failure_message).__name__}"
            )
        if self.value is not None:
            raise QueryError(f"a failed QueryResult ({reason.value}) cannot carry a result")

    @classmethod
    def for_result(
        cls, result: R, position: Position, execution_info: Iterable[str] = ()
    ) -> QueryResult[R]:
        """A successful result, with the store position it was read at."""
        return cls(result, position, _check_info(execution_info))

    @classmethod
    def for_failure(
        cls, reason: FailureReason, message: str, position: Position | None = None
    ) -> QueryResult[R]:
        """A failed result; ``position`` defaults to the empty position."""
        return cls(None, Position.empty() if position is None else position, (), reason, message)

    @classmethod
    def for_unknown_query_type(
        cls, query: object, store_name: str, position: Position | None = None
    ) -> QueryResult[R]:
        """The failure of a store that does not know how to execute ``query``."""
        return cls.for_failure(
            FailureReason.UNKNOWN_QUERY_TYPE,
            f"the store {store_name!r} does not know how to execute {type(query).__name__} "
            f"({query!r}); use a query type this store supports",
            position,
        )

    @classmethod
    def not_up_to_bound(
        cls, seen: Position, bound: PositionBound, partition: int | None = None
    ) -> QueryResult[R]:
        """The failure of a store whose position ``seen`` does not satisfy ``bound``.

        The message shows both positions as offsets JSON; the result's position is ``seen``.
        ``partition`` names the store partition that was checked (None: the whole store).
        """
        if partition is not None:
            _check_partition(partition)
        if not isinstance(bound, PositionBound):
            raise QueryError(f"bound must be a PositionBound, got {type(bound).__name__}")
        where = "the store" if partition is None else f"store partition {partition}"
        return cls.for_failure(
            FailureReason.NOT_UP_TO_BOUND,
            f"{where} is at position {_check_position(seen).to_json()}, not yet up to the "
            f"bound {bound.to_json() or 'unbounded'}; retry later or query another replica",
            seen,
        )

    @property
    def is_success(self) -> bool:
        """True when the query succeeded; :attr:`result` is then available."""
        return self.failure_reason is None

    @property
    def is_failure(self) -> bool:
        """True when the query failed; see :attr:`failure_reason` and :attr:`failure_message`."""
        return self.failure_reason is not None

    @property
    def result(self) -> R:
        """The query's result (may be None, e.g. a :class:`KeyQuery` for an absent key).

        Raises
        ------
        QueryFailedError
            If the query failed, naming the failure reason and message.
        """
        if self.failure_reason is not None:
            raise QueryFailedError(self.failure_reason, self.failure_message or "")
        return cast(R, self.value)

    def with_execution_info(self, line: str) -> QueryResult[R]:
        """A copy with ``line`` appended to :attr:`execution_info`."""
        return replace(self, execution_info=(*self.execution_info, *_check_info((line,))))

    def with_position(self, position: Position) -> QueryResult[R]:
        """A copy that reports ``position`` as the store's position."""
        return replace(self, position=position)

    def _describe(self) -> str:
        return "ok" if self.failure_reason is None else self.failure_reason.value


def _check_position(position: object) -> Position:
    if not isinstance(position, Position):
        raise QueryError(f"position must be a Position, got {type(position).__name__}")
    return position


def _check_info(lines: Iterable[str]) -> tuple[str, ...]:
    if isinstance(lines, str):
        raise QueryError("execution info must be an iterable of str lines, got one str")
    info = tuple(lines)
    for line in info:
        if not isinstance(line, str):
            raise QueryError(f"execution info lines must be str, got {type(line).__name__}")
    return info


def _check_query_result(result: object, what: str) -> None:
    if not isinstance(result, QueryResult):
        raise QueryError(f"{what} must be a QueryResult, got {type(result).__name__}")


@dataclass(frozen=True, slots=True)
class StateQueryResult(Generic[R]):
    """A store's answer to a :class:`StateQueryRequest`: one result per partition.

    Build with :meth:`for_partitions` (partitioned stores) or :meth:`for_global`; read with
    :attr:`partition_results`, :meth:`only_partition_result` and :attr:`position`.

    Parameters
    ----------
    partition_items
        ``(partition, result)`` pairs, one per partition (kept sorted by partition).
    global_result
        The result of a global (unpartitioned) store, else None.
    """

    partition_items: tuple[tuple[int, QueryResult[R]], ...] = ()
    global_result: QueryResult[R] | None = None

    def __post_init__(self) -> None:
        items = tuple(sorted(self.partition_items, key=lambda item: item[0]))
        for partition, result in items:
            _check_partition(partition)
            _check_query_result(result, f"result of partition {partition}")
        partitions = [p for p, _ in items]
        if len(set(partitions)) != len(partitions):
            raise QueryError(f"one result per partition, got partitions {partitions}")
        object.__setattr__(self, "partition_items", items)
        if self.global_result is not None:
            _check_query_result(self.global_result, "global result")

    @classmethod
    def for_partitions(cls, results: Mapping[int, QueryResult[R]]) -> StateQueryResult[R]:
        """The results of a partitioned store, keyed by partition."""
        return cls(tuple(results.items()))

    @classmethod
    def for_global(cls, result: QueryResult[R]) -> StateQueryResult[R]:
        """The single result of a global (unpartitioned) store."""
        return cls((), result)

    def with_partition_result(self, partition: int, result: QueryResult[R]) -> StateQueryResult[R]:
        """A copy with the result of ``partition`` added (or replaced)."""
        kept = tuple(item for item in self.partition_items if item[0] != partition)
        return replace(self, partition_items=(*kept, (partition, result)))

    @property
    def partition_results(self) -> Mapping[int, QueryResult[R]]:
        """Read-only ``{partition: QueryResult}`` (empty for a global store)."""
        return MappingProxyType(dict(self.partition_items))

    def only_partition_result(self) -> QueryResult[R]:
        """The result of a query that ran on exactly one partition (success or failure).

        Kafka Streams returns the single non-null result among all partitions instead; here
        a request for one key should be sent to the key's partition
        (``with_partitions([n])``), so any other count is an error.

        Raises
        ------
        QueryError
            If there is not exactly one partition result; the message names the partitions.
        """
        if len(self.partition_items) != 1:
            described = ", ".join(f"{p}: {r._describe()}" for p, r in self.partition_items)
            raise QueryError(
                f"expected exactly one partition result, got {len(self.partition_items)} "
                f"({{{described}}}); restrict the request with with_partitions([n])"
            )
        return self.partition_items[0][1]

    @property
    def position(self) -> Position:
        """The merge of the positions of every result, successful or failed."""
        merged = Position.empty()
        for _, result in self.partition_items:
            merged = merged.merge(result.position)
        if self.global_result is not None:
            merged = merged.merge(self.global_result.position)
        return merged


# -- requests ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class InStore:
    """The first half of a request: a store name waiting for :meth:`with_query`."""

    store_name: str

    def with_query(self, query: Query) -> StateQueryRequest:
        """A request to run ``query`` on this store, on all partitions, unbounded."""
        return StateQueryRequest(self.store_name, query)


@dataclass(frozen=True, slots=True)
class StateQueryRequest:
    """A query addressed to a store: ``StateQueryRequest.in_store(name).with_query(q)``.

    The ``with_*``, :meth:`require_active` and :meth:`enable_execution_info` methods return
    modified copies.

    Parameters
    ----------
    store_name
        The store to query.
    query
        What to ask it.
    partitions
        The partitions to query, or None for all of them.
    position_bound
        The position the answering store must have reached.
    active_only
        Only the active (leader) store may answer; replicas fail with ``NOT_ACTIVE``.
    execution_info_enabled
        Stores add execution details to :attr:`QueryResult.execution_info`.
    """

    store_name: str
    query: Query
    partitions: frozenset[int] | None = None
    position_bound: PositionBound = field(default_factory=PositionBound.unbounded)
    active_only: bool = False
    execution_info_enabled: bool = False

    def __post_init__(self) -> None:
        _check_store_name(self.store_name)
        if not isinstance(self.query, _QUERY_TYPES):
            raise QueryError(
                f"query must be one of {', '.join(t.__name__ for t in _QUERY_TYPES)}, "
                f"got {type(self.query).__name__}"
            )
        if self.partitions is not None:
            object.__setattr__(self, "partitions", _check_partitions(self.partitions))
        if not isinstance(self.position_bound, PositionBound):
            hint = ""
            if isinstance(self.position_bound, Position):
                hint = " (wrap a Position with PositionBound.at(position))"
            raise QueryError(
                f"position bound must be a PositionBound, "
                f"got {type(self.position_bound).__name__}{hint}"
            )

    @staticmethod
    def in_store(store_name: str) -> InStore:
        """Start a request to the store ``store_name``; finish it with ``.with_query(q)``."""
        return InStore(_check_store_name(store_name))

    @property
    def is_all_partitions(self) -> bool:
        """True when the request queries every partition of the store."""
        return self.partitions is None

    def with_partitions(self, partitions: Iterable[int]) -> StateQueryRequest:
        """A copy limited to ``partitions`` (non-empty, ints >= 0)."""
        return replace(self, partitions=_check_partitions(partitions))

    def with_all_partitions(self) -> StateQueryRequest:
        """A copy that queries every partition (the default)."""
        return replace(self, partitions=None)

    def with_position_bound(self, bound: PositionBound) -> StateQueryRequest:
        """A copy that only accepts answers from stores satisfying ``bound``."""
        return replace(self, position_bound=bound)

    def require_active(self) -> StateQueryRequest:
        """A copy that only the active (leader) store may answer."""
        return replace(self, active_only=True)

    def enable_execution_info(self) -> StateQueryRequest:
        """A copy that asks stores for execution details."""
        return replace(self, execution_info_enabled=True)


def _check_store_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise QueryError(f"store name must be a non-empty str, got {name!r}")
    return name


def _check_partitions(partitions: object) -> frozenset[int]:
    if isinstance(partitions, (str, bytes)) or not isinstance(partitions, Iterable):
        raise QueryError(f"partitions must be an iterable of ints, got {partitions!r}")
    checked = frozenset(_check_partition(p, "each partition") for p in partitions)
    if not checked:
        raise QueryError(
            "partitions must not be empty (that would query nothing); "
            "use with_all_partitions() to query every partition"
        )
    return checked


# -- replicas and lag (KIP-535) ------------------------------------------------------------
def _check_offset(value: object, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise QueryError(f"{what} must be an int >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class LagInfo:
    """How far a store partition is behind its changelog (KIP-535).

    Offsets are positions, i.e. the *next* offset to read: ``current_offset_position`` is the
    offset after the last changelog record the store has applied (last applied + 1) and
    ``end_offset_position`` is the changelog's end offset (the offset the next record will
    get). So ``offset_lag = end - current``, floored at 0. With transactional changelogs the
    end offset counts commit markers too, so a caught-up store may show a small lag.

    Raises
    ------
    QueryError
        If an offset is not an int >= 0.
    """

    current_offset_position: int
    end_offset_position: int

    def __post_init__(self) -> None:
        _check_offset(self.current_offset_position, "current_offset_position")
        _check_offset(self.end_offset_position, "end_offset_position")

    @property
    def offset_lag(self) -> int:
        """Records the store still has to apply, never negative."""
        return max(0, self.end_offset_position - self.current_offset_position)


@dataclass(frozen=True, slots=True)
class HostInfo:
    """Where a store replica is served: a host name or IP and a TCP port (1..65535)."""

    host: str
    port: int

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host.strip():
            raise QueryError(f"host must be a non-empty str, got {self.host!r}")
        if isinstance(self.port, bool) or not isinstance(self.port, int):
            raise QueryError(f"port of {self.host} must be an int, got {self.port!r}")
        if not 1 <= self.port <= 65535:
            raise QueryError(f"port of {self.host} must be in 1..65535, got {self.port}")

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class KeyQueryMetadata:
    """Which replicas can answer a query for one key (KIP-535).

    Parameters
    ----------
    active
        The active (leader) store's host, or None when no leader is alive.
    standbys
        Hosts of follower replicas of the key's partition.
    partition
        The key's changelog partition; -1 only for :meth:`not_available`.
    """

    active: HostInfo | None
    standbys: frozenset[HostInfo]
    partition: int

    def __post_init__(self) -> None:
        if self.active is not None and not isinstance(self.active, HostInfo):
            raise QueryError(f"active must be a HostInfo or None, got {self.active!r}")
        if isinstance(self.standbys, (str, bytes)) or not isinstance(self.standbys, Iterable):
            raise QueryError(f"standbys must be an iterable of HostInfo, got {self.standbys!r}")
        standbys = frozenset(self.standbys)
        if not all(isinstance(h, HostInfo) for h in standbys):
            raise QueryError(f"standbys must all be HostInfo, got {set(standbys)!r}")
        object.__setattr__(self, "standbys", standbys)
        if self.partition == -1 and not isinstance(self.partition, bool):
            if self.active is not None or standbys:
                raise QueryError("partition -1 means not available: it cannot have hosts")
        else:
            _check_partition(self.partition)

    @classmethod
    def not_available(cls) -> KeyQueryMetadata:
        """The metadata of a key no replica can answer for (partition -1, no hosts)."""
        return _NOT_AVAILABLE

    @property
    def is_available(self) -> bool:
        """True when some host (active or standby) can answer for the key."""
        return self.active is not None or bool(self.standbys)


_NOT_AVAILABLE = KeyQueryMetadata(None, frozenset(), -1)
