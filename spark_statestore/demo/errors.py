"""The demo's error."""

from __future__ import annotations

from spark_statestore.errors import StateStoreError

__all__ = ["DemoError"]


class DemoError(StateStoreError, RuntimeError):
    """The demo could not run (its work directory, the broker, the app or a query failed)."""
