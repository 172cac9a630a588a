"""Reading a store no live owner serves: how long to wait for a short-lived owner, how often
to look again for a bound, and a Spark task's private checkpoint of the store. Shared by the
snapshot reader and :func:`~spark_statestore.connectors.spark.enrich.enrich`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from spark_statestore.store.store import Store

__all__ = ["OWNER_WAIT_S", "RECHECK_MAX_S", "task_checkpoint"]

OWNER_WAIT_S = 120.0
"""How long a read without a live follower waits for the store's current owner (a sink's
commit, another read making its checkpoint) to close it: as long as a sink's commit waits for
readers (``connectors/spark/sink.py``), so a reader never gives up before a writer would."""


RECHECK_MAX_S = 1.0
"""With no live owner to wake the reader, the longest pause between two checks of the store
while waiting for ``positionBound`` (a sink's commit in another process moves it)."""


def task_checkpoint(path: str, purpose: str) -> AbstractContextManager[Store]:
    """A Spark task's private checkpoint of a store with no live owner: it owns the store
    only while it copies it (milliseconds), so a sink's commit never waits for the task,
    however long it runs; it waits for a short-lived owner up to :data:`OWNER_WAIT_S`."""
    from spark_statestore.store import StoreOptions
    from spark_statestore.store.checkpoint import reader_checkpoint

    options = StoreOptions(lock_wait_seconds=30.0, owner_wait_seconds=OWNER_WAIT_S)
    return reader_checkpoint(path, purpose=purpose, options=options)
