"""The errors of the query package, and the argument check every module shares."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_statestore.errors import StateStoreError

if TYPE_CHECKING:
    # Only for annotations: _results imports this module, so a runtime import would cycle.
    from spark_statestore.query._results import FailureReason


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
def _check_partition(partition: object, what: str = "partition") -> int:
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise QueryError(f"{what} must be an int >= 0, got {partition!r}")
    return partition
