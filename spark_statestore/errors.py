"""The exception root of spark-statestore.

Every error the project raises on purpose derives from :class:`StateStoreError`.
Subsystems define their own errors in their own ``errors.py`` (``changelog/errors.py``,
``connectors/kafka/errors.py``, ...) and mix in the builtin that fits, so callers can
catch either ``StateStoreError`` or, say, ``ValueError``.

Error text says what happened, where (option, topic, partition, offset, path) and what
to do about it.
"""

from __future__ import annotations

__all__ = ["InvalidPositionError", "OptionError", "StateStoreError"]


class StateStoreError(Exception):
    """Root of every error raised by spark-statestore."""


class OptionError(StateStoreError, ValueError):
    """An option (Spark data source option, CLI flag, config key) is missing or malformed."""


class InvalidPositionError(StateStoreError, ValueError):
    """A Position or PositionBound could not be built from the given data (JSON, mapping)."""
