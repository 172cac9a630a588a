"""Crash-test seam of the sink: SIGKILL the whole application at a named point of a commit.

The sink's crash tests run a Spark query in a child process group and set, in its
environment (Spark's Python workers inherit it):

* ``SPARK_STATESTORE_CRASH_AT``: the point, one of :data:`POINTS` or a store redo point
  (``redo.sealed``, ``redo.after_chunk.N``, ...);
* ``SPARK_STATESTORE_CRASH_PGID``: the process group to kill (the driver's; Spark's worker
  daemons run in groups of their own).

Unset (always, outside those tests) every call here is a no-op.
"""

from __future__ import annotations

import os
import signal

__all__ = ["CRASH_AT", "CRASH_PGID", "POINTS", "crash_point", "install"]

CRASH_AT = "SPARK_STATESTORE_CRASH_AT"
CRASH_PGID = "SPARK_STATESTORE_CRASH_PGID"

POINTS = (
    "sink.staged",  # a task has staged its file (executor side)
    "sink.before_publish",  # the driver commit starts, nothing published yet
    "sink.after_publish",  # the Kafka transaction is committed, the store is not
    "sink.after_store_commit",  # the store is committed, Spark's commit log is not
)


def crash_point(name: str) -> None:
    """SIGKILL the configured process group (and this process) if ``name`` is the point."""
    if os.environ.get(CRASH_AT) != name:
        return
    group = os.environ.get(CRASH_PGID)
    if group:
        os.killpg(int(group), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def install() -> None:
    """Route the store's redo points (a chunked commit) to :func:`crash_point` when asked."""
    if os.environ.get(CRASH_AT, "").startswith("redo."):
        from spark_statestore.store import redo

        redo.fault_hook = crash_point
