"""Versioned stores' changelogs: how Kafka Streams marks them, and following one into the
right kind of store.

A Kafka Streams versioned store's changelog has the record layout of a key-value store's with
another meaning: its records are versions, in put order rather than timestamp order, and a
tombstone means "deleted as of" its timestamp, so folded last-write-wins it gives wrong
current values. Kafka Streams marks it with ``min.compaction.lag.ms`` = history retention plus
a day (``VersionedChangelogTopicConfig``), unless the app sets that config itself.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from spark_statestore.errors import FollowerError

if TYPE_CHECKING:
    from spark_statestore.follower.protocols import ChangelogSource
    from spark_statestore.store import Store

__all__ = ["VERSIONED_EXTRA_LAG_MS", "check_versioned", "history_retention_of"]

_log = logging.getLogger(__name__)

VERSIONED_EXTRA_LAG_MS = 86_400_000
"""What Kafka Streams adds to a versioned store's history retention for its changelog's
``min.compaction.lag.ms`` (``VersionedChangelogTopicConfig``): one day."""


def history_retention_of(source: ChangelogSource, given: int | None = None) -> int | None:
    """The history retention to follow ``source`` with: ``given``, or what the changelog's
    ``min.compaction.lag.ms`` says (None when it is not a versioned store's changelog and
    nothing was given).

    Raises
    ------
    FollowerError
        If ``given`` disagrees with the changelog's.
    """
    return _retention_from_lag(source.topic, source.versioned_store_retention_ms(), given)


def _retention_from_lag(topic: str, lag: int | None, given: int | None) -> int | None:
    """:func:`history_retention_of` from the changelog's ``min.compaction.lag.ms`` as
    :meth:`ChangelogSource.versioned_store_retention_ms` gave it (one topic lookup)."""
    derived = None if lag is None else lag - VERSIONED_EXTRA_LAG_MS
    if given is not None and derived is not None and given != derived:
        raise FollowerError(
            f"changelog {topic!r} belongs to a Kafka Streams versioned store with a "
            f"history retention of {derived} ms (its min.compaction.lag.ms {lag} minus a day), "
            f"not the {given} ms asked for: versions would expire at other times than in "
            "Kafka Streams; give its retention, or leave it out to take the changelog's"
        )
    return given if given is not None else derived


def check_versioned(store: Store, source: ChangelogSource) -> None:
    """Refuse to follow a versioned store's changelog as a key-value store (and warn about
    the reverse).

    A versioned changelog's records are versions, out of timestamp order, and a tombstone
    means "deleted as of" its timestamp: folded last-write-wins they give wrong current
    values. Kafka Streams marks the changelog with ``min.compaction.lag.ms`` = history
    retention plus a day.
    """
    retention = store.manifest.history_retention_ms
    lag = source.versioned_store_retention_ms()
    if lag is not None and retention is None:
        theirs = lag - VERSIONED_EXTRA_LAG_MS
        raise FollowerError(
            f"changelog {source.topic!r} belongs to a Kafka Streams versioned store (its "
            f"min.compaction.lag.ms is {lag}, the history retention plus a day, as Kafka "
            "Streams sets it): its records are versions, out of timestamp order, and a "
            "tombstone means 'deleted as of' its timestamp, so following it as a key-value "
            f"store would give wrong current values. Follow it into a versioned store "
            f"(storeType 'versioned'; StoreSpec(history_retention_ms={theirs})) "
            f"at another path than {store.path}. If it is not a versioned store's changelog, "
            "lower the topic's min.compaction.lag.ms below one day"
        )
    if retention is not None:
        _retention_from_lag(source.topic, lag, retention)
        if lag is None:
            _log.warning(
                "store %s is a versioned store, but changelog %r is not marked as a Kafka "
                "Streams versioned store's (its min.compaction.lag.ms is under a day; Kafka "
                "Streams sets it to the history retention plus a day unless the app overrides "
                "it): its records are taken as versions at their timestamps, which gives wrong "
                "current values if it is a key-value store's changelog",
                store.path,
                source.topic,
            )
