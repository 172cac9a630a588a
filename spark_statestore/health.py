"""The health of a store's owner (:class:`Health`): what a ``health`` view, a ``/health``
endpoint and ``spark-statestore status`` report per store.

The states follow Kafka Streams' client states where they mean the same thing:

==============  ===================================================  ========================
state           meaning                                              Kafka Streams
==============  ===================================================  ========================
``CREATED``     the owner has the store open and has not started     ``CREATED``
``RESTORING``   a follower catching up to the end offsets it saw     ``REBALANCING``
                when it started (not yet fit for fresh reads)        (restoring tasks)
``RUNNING``     a follower caught up once and following; a sink's   ``RUNNING``
                store server taking commits
``STOPPED``     the owner stopped (the store is no longer served)   ``NOT_RUNNING``
``FAILED``      the owner failed; ``reason`` says why               ``ERROR``
``UNKNOWN``     a live owner that reports no health where asked     (none)
                (``reason`` says where to ask: its ``/health``)
==============  ===================================================  ========================

A store nobody has open has no owner to ask: readers report it as ``STOPPED`` with the reason
"no process has the store open".
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from spark_statestore.errors import StateStoreError

__all__ = ["NOT_OPEN", "Health", "HealthState", "served"]


class HealthState(str, Enum):
    """The state of a store's owner (see the module docstring)."""

    CREATED = "CREATED"
    RESTORING = "RESTORING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"

    @property
    def healthy(self) -> bool:
        """True for the one state in which the store answers fresh reads: RUNNING."""
        return self is HealthState.RUNNING


NOT_OPEN = "no process has the store open"
"""The reason of a store nobody serves."""


@dataclass(frozen=True)
class Health:
    """The health of one store's owner now.

    Parameters
    ----------
    state
        The owner's state.
    reason
        Why it is in that state, in one line, when it is not plainly RUNNING: the error of a
        FAILED owner, the records still to restore of a RESTORING one. None otherwise.
    since
        When it entered that state, seconds since the epoch (the owner's clock); None when
        unknown (a store nobody has open).
    details
        Numbers behind the state, by name (``restore_remaining_records``, ...): JSON values.
    """

    state: HealthState
    reason: str | None = None
    since: float | None = field(default_factory=time.time)
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (what the ``/health`` endpoint and the describe action carry)."""
        return {
            "state": self.state.value,
            "reason": self.reason,
            "since": self.since,
            "details": dict(self.details),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Health:
        """The inverse of :meth:`to_dict`.

        Raises
        ------
        StateStoreError
            ``raw`` is not a health object (naming what is wrong).
        """
        try:
            state = HealthState(raw["state"])
            reason = raw.get("reason")
            since = None if raw["since"] is None else float(raw["since"])
            details = dict(raw.get("details") or {})
        except (KeyError, TypeError, ValueError) as exc:
            raise StateStoreError(f"not a health object: {dict(raw)!r} ({exc})") from None
        if reason is not None and not isinstance(reason, str):
            raise StateStoreError(f"not a health object: reason {reason!r} is not a string")
        return cls(state=state, reason=reason, since=since, details=details)


def served(purpose: str, started_at: str) -> Health:
    """The health of a store whose live owner serves it but reports no state of its own (an
    older server, or ``spark-statestore serve``, which only serves): RUNNING since the owner
    took the store (``started_at``, ISO 8601; now if it does not parse)."""
    import datetime as dt

    try:
        since = dt.datetime.fromisoformat(started_at).timestamp()
    except (TypeError, ValueError):
        since = time.time()
    return Health(HealthState.RUNNING, f"served by {purpose or 'its owner'}", since)
