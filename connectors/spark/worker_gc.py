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
once per call that imported a module.
"""

from __future__ import annotations

import gc
import os
import sys

__all__ = ["freeze_long_lived"]

_frozen_at: tuple[int, int] | None = None
"""(process id, modules imported) at this process's last freeze; a forked child inherits it
but none of the freeze's reason (its objects since the fork are not frozen)."""


def freeze_long_lived() -> None:
    """Exclude every object alive now from later garbage collections, once per process and
    set of imported modules."""
    global _frozen_at
    mark = (os.getpid(), len(sys.modules))
    if _frozen_at == mark:
        return
    gc.collect()  # what is garbage already is not frozen
    gc.freeze()
    _frozen_at = mark
