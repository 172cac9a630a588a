"""Keep the garbage collector off the objects a Spark Python worker holds for its lifetime.

PySpark's daemon forks the processes that run our tasks, our micro-batch commits and our
planning calls, and reuses them; after every call it runs a full ``gc.collect()``
(``pyspark/daemon.py``). A full collection walks every object the process tracks: the
modules of PySpark, pyarrow, pandas and ours, some 85,000 objects, about 40 ms of CPU, and in
a forked child it writes to every object's header, so the pages the daemon shared get
copied too. Those objects live as long as the process: walking them finds nothing. With a
sink's two tasks and its commit per micro-batch that was a fifth of the commit process's CPU
and a share of every task's, on the cores the tasks, the store host and the broker need.

:func:`freeze_long_lived`, called as each of our calls starts, moves the objects alive then
into the collector's permanent generation (:func:`gc.freeze`, meant for this) after one full
collection, whenever the process has imported modules since it last did (the first calls
import lazily): later collections, PySpark's and the automatic ones, walk only what calls
made since. The price is bounded: an object alive at a freeze that later becomes unreachable
in a reference cycle is never freed; a process freezes a few times in its life, at most
once per call that imported a module. Our detached servers (the store host, the sink's store
server) claim their process and freeze the same way; any other process is left alone.
"""

from __future__ import annotations

import gc
import os
import sys

__all__ = ["claim_process", "freeze_long_lived"]

_claimed_by: int | None = None
"""The process id that :func:`claim_process` claimed."""

_frozen_at: tuple[int, int] | None = None
"""(process id, modules imported) at this process's last freeze; a forked child inherits it
but none of the freeze's reason (its objects since the fork are not frozen)."""


def claim_process() -> None:
    """Say that this process is ours for its life (a detached server's main function):
    :func:`freeze_long_lived` freezes in it as in a PySpark worker."""
    global _claimed_by
    _claimed_by = os.getpid()


def freeze_long_lived() -> None:
    """Exclude every object alive now from later garbage collections, once per process and
    set of imported modules.

    Only in a process PySpark started to serve Spark (its main module is one of PySpark's
    worker entries, the daemon's included) or one that :func:`claim_process` claimed (the
    store host, the sink's store server): a direct call from a user's own process (a test,
    a script writing through the sink's classes) leaves that process's collector alone.
    """
    global _frozen_at
    if _claimed_by != os.getpid() and not _serves_spark():
        return
    mark = (os.getpid(), len(sys.modules))
    if _frozen_at == mark:
        return
    gc.collect()  # what is garbage already is not frozen
    gc.freeze()
    _frozen_at = mark


def _serves_spark() -> bool:
    """Whether this process runs a PySpark worker entry (``python -m pyspark.daemon``,
    ``pyspark.worker``, ``pyspark.sql.worker.*``)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None)
    return isinstance(name, str) and name.startswith("pyspark.")
