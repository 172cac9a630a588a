"""The crash-test seam: named points of the store's chunked commit and of the sink's commit
protocol, where crash and fault tests act.

Every point calls :func:`crash_point`. Unset (always, outside tests) it does nothing. Two
ways to act at a point:

* in-process: a test sets :data:`hook` to a callable that gets each point's name (and raises
  an exception or an I/O error there, or kills its own process);
* across processes: the sink's crash tests run a Spark query in a child process group and
  set, in its environment (Spark's Python workers inherit it), ``SPARK_STATESTORE_CRASH_AT``
  to a point's name and ``SPARK_STATESTORE_CRASH_PGID`` to the process group to kill (the
  driver's; Spark's worker daemons run in groups of their own). The point SIGKILLs that group
  and its own process.
* across processes started before the test knew the point: ``SPARK_STATESTORE_CRASH_FILE``
  names a file (set in the environment of what starts them, e.g. a Spark driver's, whose
  Python workers and the servers they start inherit it); the test writes a point's name into
  the file when it wants the crash, and the first process to reach that point claims the file
  (an atomic rename to ``<file>.fired.<pid>``) and SIGKILLs itself.

The points: :data:`SINK_POINTS`, and the store's chunked commit: ``redo.sealed``,
``redo.marked``, ``redo.after_chunk.<n>``, ``redo.before_metadata`` and
``redo.after_metadata``.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

__all__ = ["CRASH_AT", "CRASH_FILE", "CRASH_PGID", "SINK_POINTS", "crash_point", "hook"]

CRASH_AT = "SPARK_STATESTORE_CRASH_AT"
CRASH_PGID = "SPARK_STATESTORE_CRASH_PGID"
CRASH_FILE = "SPARK_STATESTORE_CRASH_FILE"

SINK_POINTS = (
    "sink.staged",  # a task has staged its file (executor side)
    "sink.before_publish",  # the driver commit starts, nothing published yet
    "sink.after_publish",  # the Kafka transaction is committed, the store is not
    "sink.after_store_commit",  # the store is committed, Spark's commit log is not
)

hook: Callable[[str], None] | None = None
"""Set by in-process tests: called with the name of every point reached."""


def crash_point(name: str) -> None:
    """Act at the point ``name``: call :data:`hook`, then SIGKILL the configured process
    group (and this process) if ``SPARK_STATESTORE_CRASH_AT`` names this point."""
    if hook is not None:
        hook(name)
    armed = os.environ.get(CRASH_FILE)
    if armed and _claim(armed, name):
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get(CRASH_AT) != name:
        return
    group = os.environ.get(CRASH_PGID)
    if group:
        os.killpg(int(group), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _claim(path: str, name: str) -> bool:
    """Whether the crash file at ``path`` names point ``name`` and this process claimed it."""
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read().strip() != name:
                return False
        os.rename(path, f"{path}.fired.{os.getpid()}")  # one process wins
    except OSError:
        return False
    return True
