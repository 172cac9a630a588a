"""The errors of the query package: why a query failed (:class:`FailureReason`), the
exceptions, and the argument check every module shares."""

from __future__ import annotations

from enum import Enum

from spark_statestore.errors import StateStoreError


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


class QueryError(StateStoreError, ValueError):
    """A query, request or query metadata object was built from invalid arguments."""


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
def check_partition(partition: object, what: str = "partition") -> int:
    """``partition`` when it is an int >= 0; a :class:`QueryError` naming ``what`` if not."""
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise QueryError(f"{what} must be an int >= 0, got {partition!r}")
    return partition
