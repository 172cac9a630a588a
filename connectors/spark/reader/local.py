"""Reading a store no live owner serves: how long to wait for a short-lived owner, how often
to look again for a bound, and a Spark task's private checkpoint of the store. Shared by the
snapshot reader and :func:`~spark_statestore.connectors.spark.enrich.enrich`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from spark_statestore.store.store import Store

__all__ = ["OWNER_RECHECK_S", "OWNER_WAIT_S", "RECHECK_MAX_S", "task_checkpoint"]

OWNER_WAIT_S = 120.0
"""How long a read without a live follower waits for the store's current owner (a sink's
commit, another read making its checkpoint) to close it: as long as a sink's commit waits for
readers (``connectors/spark/sink.py``), so a reader never gives up before a writer would."""


OWNER_RECHECK_S = 0.5
"""How long one attempt to open a store waits for its lock before the reader looks for a
server again (an owner that took the store meanwhile may be one that serves it); the
attempts go on up to :data:`OWNER_WAIT_S` in all."""
RECHECK_MAX_S = 1.0
"""With no live owner to wake the reader, the longest pause between two checks of the store
while waiting for ``positionBound`` (a sink's commit in another process moves it)."""


def task_checkpoint(
    path: str, purpose: str, *, owner_wait_s: float = OWNER_WAIT_S
) -> AbstractContextManager[Store]:
    """A Spark task's private checkpoint of a store with no live owner: it owns the store
    only while it copies it (milliseconds), so a sink's commit never waits for the task,
    however long it runs; it waits for a short-lived owner up to ``owner_wait_s`` (a caller
    that looks for a serving owner between attempts waits :data:`OWNER_RECHECK_S`)."""
    from spark_statestore.store import StoreOptions
    from spark_statestore.store.checkpoint import reader_checkpoint

    options = StoreOptions(lock_wait_seconds=30.0, owner_wait_seconds=owner_wait_s)
    return reader_checkpoint(path, purpose=purpose, options=options)
