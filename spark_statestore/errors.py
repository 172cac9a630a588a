"""The exception root of spark-statestore.

Every error the project raises on purpose derives from :class:`StateStoreError`.
The engine's top-level modules (positions, the follower) raise the errors here; each
subsystem defines its own in its own ``errors.py`` (``store/errors.py``, ``changelog/errors.py``,
``sink/errors.py``, ``serve/errors.py``, ``connectors/kafka/errors.py``, ...) and mixes in
the builtin that fits, so callers can catch either ``StateStoreError`` or, say,
``ValueError``.

Error text says what happened, where (option, topic, partition, offset, path) and what
to do about it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "FollowerError",
    "InvalidPositionError",
    "OptionError",
    "PositionUnavailableError",
    "StateStoreError",
    "TopologyError",
    "closest_hint",
]

SUGGESTION_CUTOFF = 0.6
"""How alike a valid name must be to be suggested (:func:`difflib.get_close_matches`)."""


class StateStoreError(Exception):
    """Root of every error raised by spark-statestore."""


class OptionError(StateStoreError, ValueError):
    """An option (Spark data source option, CLI flag, config key) is missing or malformed."""


class InvalidPositionError(StateStoreError, ValueError):
    """A Position or PositionBound could not be built from the given data (JSON, mapping)."""


class FollowerError(StateStoreError):
    """The follower cannot go on (its store, its changelog, or a record is unusable)."""


class PositionUnavailableError(FollowerError):
    """A follower cannot tell which rule gives its store's position (e.g. whether its
    changelog is a sink's: the progress topic cannot be described). It goes on applying
    records but grants no position until it can tell."""


class TopologyError(FollowerError, ValueError):
    """A Kafka Streams topology description cannot be read, or does not say what a
    follower needs (the store's sub-topology and the internal topics upstream of it)."""


def closest_hint(given: str, valid: Iterable[str], *, noun: str) -> str:
    """The end of an error about an unknown name: the closest valid one and all of them.

    ``"; did you mean 'b'? (valid options: a, b, c)"``, or only the parenthesis when no valid
    name is close. Case is ignored when comparing (Spark lower-cases option names) and the
    suggestion is spelled as in ``valid``. Every "unknown option / value / field / suite"
    error ends this way.

    Parameters
    ----------
    given
        The name that was not recognized.
    valid
        The valid names, spelled as users write them, in the order to list them.
    noun
        What the names are (``options``, ``values``, ``fields``, ...), for the listing.
    """
    names = list(dict.fromkeys(valid))
    spelled = {name.lower(): name for name in reversed(names)}  # the first spelling wins
    close = difflib.get_close_matches(given.lower(), spelled, n=1, cutoff=SUGGESTION_CUTOFF)
    hint = f"; did you mean {spelled[close[0]]!r}?" if close else ""
    return f"{hint} (valid {noun}: {', '.join(names)})"
