"""Errors of the sink's engine side (the commit protocol and its staging area)."""

from __future__ import annotations

from spark_statestore.errors import StateStoreError

__all__ = ["PositionNotPublishedError", "StagingError"]


class StagingError(StateStoreError):
    """A staged file is missing, unreadable, or not where a commit message said."""


class PositionNotPublishedError(StateStoreError, LookupError):
    """No record of a sink's changelog carries a position that reaches the one asked for:
    the leader has not published it yet (or its commit is not readable yet), or got there
    with batches that changed nothing."""
