"""Errors of the sink's engine side (the commit protocol and its staging area)."""

from __future__ import annotations

from spark_statestore.errors import StateStoreError

__all__ = ["StagingError"]


class StagingError(StateStoreError):
    """A staged file is missing, unreadable, or not where a commit message said."""
