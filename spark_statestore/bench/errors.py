"""Errors of the benchmark command."""

from __future__ import annotations

from spark_statestore.errors import StateStoreError

__all__ = ["BenchError"]


class BenchError(StateStoreError):
    """A benchmark could not measure what it claims (e.g. a path did not store its records)."""
