"""CPU seconds per process kind during a timed run: where a rate's work is done.

A Spark run spreads its work over processes the bench does not start itself: the driver's
JVM, Python workers forked by PySpark's daemons (one daemon per worker module: the tasks',
the sink commit's, the planners'), the driver's store host, the sink's store server, the
broker. :class:`CpuProfile` reads ``/proc`` (Linux) before, during (every
:data:`POLL_S`) and after a run and adds up each process's CPU time (user + system) by kind,
from the process's command line (:data:`KINDS`).

Processes that exit during the run are counted through their parent when the parent is a
PySpark daemon (a daemon reaps its forked workers, so their whole CPU time lands in its
``cutime``/``cstime``: nothing is lost between two polls); any other process that exits is
counted up to its last poll (at most :data:`POLL_S` of it can be missed, and the profile
says how many such processes there were).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType

__all__ = ["KINDS", "POLL_S", "CpuProfile", "Profiles", "kind_of"]

POLL_S = 0.25
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("commit", ("pyspark.sql.worker.python_streaming_sink_runner",)),
    ("python_workers", ("pyspark.daemon pyspark.worker", "-m pyspark.worker")),
    ("planning", ("pyspark.sql.worker.", "pyspark.daemon")),
    ("store_host", ("spark_statestore.connectors.spark.host",)),
    ("sink_server", ("spark_statestore.connectors.spark.leader",)),
    ("broker", ("kafka.Kafka", "kafka.server.KafkaRaftServer", " broker")),
    ("executor_jvm", ("org.apache.spark.executor.",)),
    ("cluster_daemons", ("org.apache.spark.deploy.master.", "org.apache.spark.deploy.worker.")),
    ("driver_jvm", ("org.apache.spark.deploy.SparkSubmit", "org.apache.spark")),
)
"""``(kind, substrings)``: a process is of the first kind one of whose substrings its
command line (arguments joined by spaces) contains; else ``other``. The driver's Python
process (this one, the profile's own polling included) is ``bench``."""

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


Kinds = tuple[tuple[str, tuple[str, ...]], ...]


def kind_of(command_line: str, kinds: Kinds = KINDS) -> str:
    """The kind of a process with this command line (see :data:`KINDS`)."""
    for kind, marks in kinds:
        if any(mark in command_line for mark in marks):
            return kind
    return "other"


@dataclass(slots=True)
class _Seen:
    kind: str
    parent: int
    own_start: float
    children_start: float
    own: float = 0.0
    children: float = 0.0
    alive: bool = True


@dataclass(slots=True)
class CpuProfile:
    """CPU seconds by process kind while the ``with`` block runs.

    Examples
    --------
    >>> with CpuProfile() as profile:  # doctest: +SKIP
    ...     run()
    >>> profile.seconds  # doctest: +SKIP
    {'driver_jvm': 3.1, 'python_workers': 2.4, 'commit': 1.9, ...}
    """

    poll_s: float = POLL_S
    kinds: Kinds = KINDS
    seconds: dict[str, float] = field(default_factory=dict)
    """CPU seconds by kind, set when the block ends."""
    unreaped_exits: int = 0
    """Processes that exited without a daemon to reap them: counted up to their last poll."""
    _seen: dict[tuple[int, int], _Seen] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> CpuProfile:
        self._poll(first=True)
        self._thread = threading.Thread(target=self._run, name="cpu-profile", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._poll()
        self.seconds, self.unreaped_exits = self._totals()

    def per_million(self, rows: int) -> dict[str, float]:
        """:attr:`seconds` per million ``rows``, rounded to milliseconds."""
        scale = 1_000_000 / max(1, rows)
        return {kind: round(s * scale, 3) for kind, s in sorted(self.seconds.items())}

    # -- internals ----------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            self._poll()

    def _poll(self, *, first: bool = False) -> None:
        alive = set()
        for pid, started, parent, own, children in _processes():
            key = (pid, started)
            alive.add(key)
            seen = self._seen.get(key)
            if seen is None:
                kind = "bench" if pid == os.getpid() else kind_of(_command_line(pid), self.kinds)
                # A process already running when the profile began counts from then on.
                base_own, base_children = (own, children) if first else (0.0, 0.0)
                seen = self._seen[key] = _Seen(kind, parent, base_own, base_children)
            seen.own, seen.children = own, children
        for key, seen in self._seen.items():
            if key not in alive:
                seen.alive = False

    def _totals(self) -> tuple[dict[str, float], int]:
        by_pid = {pid: seen for (pid, _), seen in self._seen.items() if seen.alive}
        totals: dict[str, float] = {}
        unreaped = 0
        for seen in self._seen.values():
            used = 0.0
            if seen.alive:
                used += seen.own - seen.own_start
                if _is_daemon(seen):
                    used += seen.children - seen.children_start
            else:
                reaper = by_pid.get(seen.parent)
                if reaper is not None and _is_daemon(reaper):
                    continue  # in the daemon's children's time
                used += seen.own - seen.own_start
                unreaped += 1
            if used > 0:
                totals[seen.kind] = totals.get(seen.kind, 0.0) + used
        return {kind: round(s, 3) for kind, s in totals.items()}, unreaped


def _is_daemon(seen: _Seen) -> bool:
    return seen.kind in ("commit", "python_workers", "planning")


def _processes() -> Iterator[tuple[int, int, int, float, float]]:
    """``(pid, start time, parent pid, own CPU s, reaped children's CPU s)`` of every
    process readable now."""
    from spark_statestore.connectors.spark.driver import proc_stat

    try:
        names = os.listdir("/proc")
    except OSError:
        return
    for name in names:
        if not name.isdigit():
            continue
        fields = proc_stat(int(name))
        if fields is None:
            continue
        try:
            parent = int(fields[1])
            own = (int(fields[11]) + int(fields[12])) / _TICK
            children = (int(fields[13]) + int(fields[14])) / _TICK
            started = int(fields[19])
        except (IndexError, ValueError):
            continue
        yield int(name), started, parent, own, children


def _command_line(pid: int) -> str:
    raw = _read(f"/proc/{pid}/cmdline")
    return "" if raw is None else raw.replace("\0", " ").strip()


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


class Profiles:
    """The profiles of every timed run of each side of a measurement, in run order (the
    order of the rates :func:`~spark_statestore.bench.measure.interleave` returns)."""

    def __init__(self) -> None:
        self._runs: dict[str, list[CpuProfile]] = {}

    def during(self, side: str) -> Callable[[str], CpuProfile]:
        """A ``during`` context factory for a run of ``side`` (its argument is ignored)."""

        def profile(_: str) -> CpuProfile:
            made = CpuProfile()
            self._runs.setdefault(side, []).append(made)
            return made

        return profile

    def of_best(self, rates: Mapping[str, list[float]], rows: int) -> dict[str, dict[str, float]]:
        """``{side: {kind: CPU s per million rows}}`` of each side's fastest run."""
        chosen = {}
        for side, runs in self._runs.items():
            side_rates = rates.get(side, [])
            if len(side_rates) != len(runs) or not runs:
                continue
            best = max(range(len(runs)), key=lambda n: side_rates[n])
            chosen[side] = runs[best].per_million(rows)
        return chosen
