"""Processes as Linux's ``/proc`` shows them: a process told apart from a later one with its
pid, the Spark JVM a Python process runs under, a process's descendants.

Spark starts its Python workers (data source planning, readers, writers, commits) below its
JVM; the sink's store server watches the driver JVM, a local Connect server stops every
process below its JVM, and relative paths resolve against the JVM's working directory
(:mod:`~spark_statestore.connectors.spark.paths`). Without ``/proc`` (not Linux) each
answers "unknown" (None, empty).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["ProcessId", "descendants", "proc_stat", "spark_jvm"]


@dataclass(frozen=True, slots=True)
class ProcessId:
    """A process that can be told apart from a later one with the same pid."""

    pid: int
    start: str
    """Its start time in clock ticks since boot (``/proc/<pid>/stat`` field 22)."""

    @classmethod
    def of(cls, pid: int) -> ProcessId | None:
        """The process ``pid`` now, or None when there is none."""
        stat = proc_stat(pid)
        return None if stat is None else cls(pid, stat[19])

    def alive(self) -> bool:
        """True while this process (not a later one with its pid) runs."""
        stat = proc_stat(self.pid)
        return stat is not None and stat[19] == self.start and stat[0] != "Z"


def proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def spark_jvm() -> ProcessId | None:
    """The nearest ancestor of this process that is a JVM (the Spark driver), or None."""
    pid = os.getppid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as handle:
                command = handle.read().strip()
        except OSError:
            return None
        if command == "java":
            return ProcessId.of(pid)
        stat = proc_stat(pid)
        if stat is None:
            return None
        pid = int(stat[1])
    return None


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` in the process tree now, parents before children."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    children: dict[int, list[int]] = {}
    for entry in entries:
        stat = proc_stat(int(entry)) if entry.isdigit() else None
        if stat is not None:
            children.setdefault(int(stat[1]), []).append(int(entry))
    found: list[int] = []
    pending = [pid]
    while pending:
        below = children.get(pending.pop(0), [])
        found.extend(below)
        pending.extend(below)
    return found
