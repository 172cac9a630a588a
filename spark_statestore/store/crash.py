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
  (an atomic rename to ``<file>.fired.<pid>``) and SIGKILLs itself. A name written as
  ``stop <point>`` makes that process SIGSTOP itself there instead (it hangs, whole, until
  someone sends SIGCONT or SIGKILL), and ``hang <point>`` blocks only the thread that reached
  it, for good (a commit stuck in a process that still answers): the hung-server tests.

The points: :data:`SINK_POINTS`, :data:`STREAMED_POINTS` (in the store host), the store's
background close (``store.background_close``), its deferred commits (``store.deferred``: the
promise is written; ``store.deferred_apply``: about to apply it; ``store.deferred_applied``:
applied, the promise not yet removed), and the store's chunked commit: ``redo.sealed``,
``redo.marked``, ``redo.after_chunk.<n>``, ``redo.before_metadata`` and
``redo.after_metadata``.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable

__all__ = [
    "CRASH_AT",
    "CRASH_FILE",
    "CRASH_PGID",
    "HANG",
    "SINK_POINTS",
    "STOP",
    "STREAMED_POINTS",
    "crash_point",
    "hook",
]

CRASH_AT = "SPARK_STATESTORE_CRASH_AT"
CRASH_PGID = "SPARK_STATESTORE_CRASH_PGID"
CRASH_FILE = "SPARK_STATESTORE_CRASH_FILE"
STOP = "stop"
"""Written before a point's name in the crash file: SIGSTOP the process there."""
HANG = "hang"
"""Written before a point's name in the crash file: block the thread there forever."""

SINK_POINTS = (
    "sink.staged",  # a task has staged its file (executor side)
    "sink.before_publish",  # the driver commit starts, nothing published yet
    "sink.after_publish",  # the Kafka transaction is committed, the store is not
    "sink.after_store_commit",  # the store is committed, Spark's commit log is not
)
STREAMED_POINTS = (
    # The store host publishes a batch while its tasks stage it (a batch it was told comes
    # next, so never a run's first batch):
    "sink.streamed_produce",  # a chunk of a task's rows is in the open transaction
    "sink.streamed_before_commit",  # every row is in it; the commit asked to commit it
    "sink.streamed_after_commit",  # the host committed it; the commit has no answer yet
)

hook: Callable[[str], None] | None = None
"""Set by in-process tests: called with the name of every point reached."""


def crash_point(name: str) -> None:
    """Act at the point ``name``: call :data:`hook`, then SIGKILL the configured process
    group (and this process) if ``SPARK_STATESTORE_CRASH_AT`` names this point."""
    if hook is not None:
        hook(name)
    armed = os.environ.get(CRASH_FILE)
    action = _claim(armed, name) if armed else None
    if action == STOP:
        os.kill(os.getpid(), signal.SIGSTOP)
    elif action == HANG:
        threading.Event().wait()  # nobody sets it: this thread never goes on
    elif action is not None:
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get(CRASH_AT) != name:
        return
    group = os.environ.get(CRASH_PGID)
    if group:
        os.killpg(int(group), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _claim(path: str, name: str) -> str | None:
    """What to do at point ``name`` (:data:`STOP`, :data:`HANG` or "" for a SIGKILL) when
    the crash file at ``path`` names it and this process claimed it; None otherwise."""
    try:
        with open(path, encoding="utf-8") as handle:
            action, _, point = handle.read().strip().rpartition(" ")
        if point != name or action not in ("", STOP, HANG):
            return None
        os.rename(path, f"{path}.fired.{os.getpid()}")  # one process wins
    except OSError:
        return None
    return action
