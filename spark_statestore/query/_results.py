"""Query results: one store's answer per partition (KIP-796)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from operator import itemgetter
from types import MappingProxyType
from typing import Generic, TypeVar, cast

from spark_statestore.position import Position, PositionBound
from spark_statestore.query._errors import (
    FailureReason,
    QueryError,
    QueryFailedError,
    check_partition,
)

R = TypeVar("R")

_log = logging.getLogger(__name__)


# -- results -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class VersionedRecord:
    """A value with its validity interval, as Kafka Streams' ``VersionedRecord``: the result
    of a :class:`~spark_statestore.query.VersionedKeyQuery`, and the items of a
    :class:`~spark_statestore.query.MultiVersionedKeyQuery`'s result.

    Parameters
    ----------
    value
        The value bytes.
    timestamp
        When the version became valid (epoch milliseconds).
    valid_to
        When the next version replaced it (exclusive), or None for the latest version.
    """

    value: bytes
    timestamp: int
    valid_to: int | None = None


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
        if self.execution_info != ():  # (the common case needs no copy: () is checked)
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
        cls,
        seen: Position,
        bound: PositionBound,
        partition: int | None = None,
        note: str | None = None,
    ) -> QueryResult[R]:
        """The failure of a store whose position ``seen`` does not satisfy ``bound``.

        The message shows both positions as offsets JSON; the result's position is ``seen``.
        ``partition`` names the store partition that was checked (None: the whole store);
        ``note`` says why the store's position may not be advancing, when it is known.
        """
        if partition is not None:
            check_partition(partition)
        if not isinstance(bound, PositionBound):
            raise QueryError(f"bound must be a PositionBound, got {type(bound).__name__}")
        where = "the store" if partition is None else f"store partition {partition}"
        return cls.for_failure(
            FailureReason.NOT_UP_TO_BOUND,
            f"{where} is at position {_check_position(seen).to_json()}, not yet up to the "
            f"bound {bound.to_json() or 'unbounded'}; "
            + (f"{note}; " if note else "")
            + "retry later or query another replica",
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


_partition_of_item = itemgetter(0)


def _checked(
    result: QueryResult[R],
    bound: PositionBound,
    partition: int | None,
    store_wide: bool,
    answered_by: str,
) -> QueryResult[R]:
    """``result``, or the NOT_UP_TO_BOUND failure that refuses it (see
    :meth:`StateQueryResult.checked_against`); ``partition`` None: a global store's."""
    if result.failure_reason is not None:
        return result
    by_partition = None if store_wide or partition is None else partition
    if bound.permits(result.position, by_partition):
        return result
    if by_partition is None:
        where = "the global store" if partition is None else f"partition {partition}"
        rule = "every entry of the bound applies: the store's position holds store-wide"
    else:
        where = f"partition {partition}"
        rule = f"the bound's entries for partition {partition} apply"
    refused: QueryResult[R] = QueryResult.for_failure(
        FailureReason.NOT_UP_TO_BOUND,
        f"{answered_by} answered {where} as a success at position "
        f"{result.position.to_json()}, which has not reached the bound {bound.to_json()} "
        f"({rule}); the answer is refused: retry later or query another replica",
        result.position,
    )
    _log.warning("%s", refused.failure_message)
    return refused


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
        items = tuple(sorted(self.partition_items, key=_partition_of_item))
        for partition, result in items:
            check_partition(partition)
            if not isinstance(result, QueryResult):  # (the message is built on failure only)
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

    def checked_against(
        self, bound: PositionBound, *, store_wide: bool, answered_by: str
    ) -> StateQueryResult[R]:
        """This answer as the one who asked may use it: each success whose position does not
        satisfy ``bound`` becomes a ``NOT_UP_TO_BOUND`` failure, with that position, saying
        who answered it and why it is refused (and logged as a warning).

        A store checks its own answers against the request's bound; an answer from another
        process is checked again by whoever asked, so that a store that answers a bound it
        has not reached (a bug, or a server that lies) never makes a bounded query succeed.

        Parameters
        ----------
        bound
            The request's position bound.
        store_wide
            Whether the answering store's position holds for each of its partitions
            (``spark_statestore.store.queries.is_store_wide``: a leader store, a follower of
            a sink's changelog): then every entry of the bound applies to every partition.
            False applies Kafka Streams' rule, the bound's entries for the result's
            partition only: an answer a store checked by either rule satisfies it.
        answered_by
            Who answered, for the message (a server's location and store id, a replica).

        Returns
        -------
        StateQueryResult
            ``self`` when nothing is refused (always for an unbounded request).
        """
        if bound.position is None:
            return self
        items = []
        refused = False
        for partition, result in self.partition_items:
            checked = _checked(result, bound, partition, store_wide, answered_by)
            refused = refused or checked is not result
            items.append((partition, checked))
        global_result = self.global_result
        if global_result is not None:
            checked = _checked(global_result, bound, None, True, answered_by)
            refused = refused or checked is not global_result
            global_result = checked
        return StateQueryResult(tuple(items), global_result) if refused else self

    @property
    def position(self) -> Position:
        """The merge of the positions of every result, successful or failed."""
        merged = Position.empty()
        for _, result in self.partition_items:
            merged = merged.merge(result.position)
        if self.global_result is not None:
            merged = merged.merge(self.global_result.position)
        return merged
