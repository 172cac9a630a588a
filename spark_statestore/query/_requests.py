"""Query requests: a query addressed to a store, its partitions and position bound."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from spark_statestore.position import Position, PositionBound
from spark_statestore.query._errors import QueryError, check_partition
from spark_statestore.query._queries import QUERY_TYPES, Query


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
        if not isinstance(self.query, QUERY_TYPES):
            raise QueryError(
                f"query must be one of {', '.join(t.__name__ for t in QUERY_TYPES[:-1])} "
                f"or a CustomQuery subclass, "
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
    checked = frozenset(check_partition(p, "each partition") for p in partitions)
    if not checked:
        raise QueryError(
            "partitions must not be empty (that would query nothing); "
            "use with_all_partitions() to query every partition"
        )
    return checked
