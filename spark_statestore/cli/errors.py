"""Errors of the store commands (``serve``, ``inspect``, ``lag``, ``query``).

Every failure of a command reaches :func:`~spark_statestore.cli.main.main` as a
:class:`~spark_statestore.errors.StateStoreError` and becomes one line on stderr; the
``exit_code`` of these classes tells scripts a stale answer (3) from other failures (2).
"""

from __future__ import annotations

from typing import ClassVar

from spark_statestore.errors import StateStoreError

__all__ = ["CommandError", "StaleStoreError"]


class CommandError(StateStoreError):
    """A store command cannot do what it was asked (exit code 2)."""

    exit_code: ClassVar[int] = 2


class StaleStoreError(CommandError):
    """The store has not reached ``--position-bound``, or lags more than ``--max-lag``
    (NOT_UP_TO_BOUND, KIP-535's stale-store refusal): exit code 3."""

    exit_code: ClassVar[int] = 3
