"""The registry of benchmark suites and the run of a selection of them.

A suite is a function ``(BenchOptions) -> list[Measurement]`` that sets up what it needs,
measures each of its paths against the raw limit of the same machine and cleans up. To add
one, write it in its own module and register it in :data:`SUITES`.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from types import MappingProxyType
from typing import Any

from spark_statestore.bench.avro import run_avro_suite
from spark_statestore.bench.cluster import run_cluster_suite
from spark_statestore.bench.enrich import run_enrich_suite
from spark_statestore.bench.errors import BenchError
from spark_statestore.bench.follower import run_follower_suite
from spark_statestore.bench.latency import run_latency_suite
from spark_statestore.bench.measure import BenchOptions, BenchRun, Measurement
from spark_statestore.bench.metrics import run_metrics_suite
from spark_statestore.bench.peers import run_peers_suite
from spark_statestore.bench.remote import run_remote_suite
from spark_statestore.bench.report import machine_facts
from spark_statestore.bench.scale import run_scale_suite
from spark_statestore.bench.sink import run_sink_suite
from spark_statestore.bench.spark import run_spark_suite
from spark_statestore.bench.store import run_store_suite
from spark_statestore.bench.streams import run_streams_suite
from spark_statestore.errors import OptionError, closest_hint

__all__ = ["FRESH_PROCESS", "SUITES", "Suite", "resolve_suites", "run_suite_in_child", "run_suites"]

Suite = Callable[[BenchOptions], list[Measurement]]

SUITES: Mapping[str, Suite] = MappingProxyType(
    {
        "store": run_store_suite,
        "follower": run_follower_suite,
        "spark": run_spark_suite,
        "sink": run_sink_suite,
        "peers": run_peers_suite,
        "latency": run_latency_suite,
        "streams": run_streams_suite,
        "enrich": run_enrich_suite,
        "remote": run_remote_suite,
        "cluster": run_cluster_suite,
        "scale": run_scale_suite,
        "avro": run_avro_suite,
        "metrics": run_metrics_suite,
    }
)
"""Every suite by name, in the order a run without ``--suite`` runs them."""

FRESH_PROCESS = frozenset({"cluster"})
"""Suites run in a child process of their own: the ``cluster`` suite's driver must be a fresh
driver JVM (a JVM keeps the settings it was started with, among them where its executors run,
which the store host and the plans read), and the suites before it start a local one."""
_CHILD = (
    "import sys\n"
    "from spark_statestore.bench.suites import _suite_in_child\n"
    "_suite_in_child(sys.stdin.buffer)\n"
)


def resolve_suites(names: Sequence[str] | None) -> tuple[str, ...]:
    """The suites to run: ``names`` in order without repeats, or every suite when empty.

    Raises
    ------
    OptionError
        For an unknown name; the message gives the closest known one.
    """
    if not names:
        return tuple(SUITES)
    for name in names:
        if name not in SUITES:
            raise OptionError(
                f"bench option --suite: unknown suite {name!r}"
                + closest_hint(name, SUITES, noun="suites")
            )
    return tuple(dict.fromkeys(names))


def run_suites(names: Sequence[str] | None, options: BenchOptions) -> BenchRun:
    """Run the suites ``names`` (every suite when empty) one after another.

    Parameters
    ----------
    names
        Suite names (see :data:`SUITES`), or None for all.
    options
        Sizes and rounds, shared by every suite.

    Returns
    -------
    BenchRun
        The measurements with the machine facts and the run's duration.

    Raises
    ------
    OptionError
        For an unknown suite name (before anything runs).
    BenchError
        If a suite could not measure what it claims.
    """
    suites = resolve_suites(names)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    start = time.perf_counter()
    measurements: list[Measurement] = []
    for name in suites:
        if name in FRESH_PROCESS:
            measurements.extend(run_suite_in_child(name, options))
        else:
            measurements.extend(SUITES[name](options))
    return BenchRun(
        suites=suites,
        options=options,
        measurements=tuple(measurements),
        started_at=started_at,
        seconds=time.perf_counter() - start,
        machine=machine_facts(),
    )


def run_suite_in_child(name: str, options: BenchOptions) -> list[Measurement]:
    """Run suite ``name`` in a fresh ``python -c`` child process (its log on this process's
    stderr) and return its measurements.

    The result comes back in a file, not on the child's stdout: the JVMs a suite starts
    inherit that stdout, and a line of theirs must not corrupt the result. What they print
    there is passed on to this process's stderr.

    Raises
    ------
    BenchError
        The suite failed in the child (its message), or the child died without a result.
    """
    with tempfile.TemporaryDirectory(prefix="spark-statestore-bench-suite-") as scratch:
        result_path = Path(scratch) / "result.pickle"
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD],
            input=pickle.dumps((name, options, str(result_path))),
            stdout=subprocess.PIPE,
            check=False,
        )
        if proc.stdout:
            sys.stderr.write(proc.stdout.decode(errors="replace"))
        try:
            outcome, value = pickle.loads(result_path.read_bytes())
        except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError):
            raise BenchError(
                f"bench suite {name}: its child process exited {proc.returncode} without a "
                "result (its log is above)"
            ) from None
    if outcome != "ok":
        raise BenchError(str(value))
    return list(value)


def _suite_in_child(stdin: Any) -> None:
    """The child's side of :func:`run_suite_in_child`."""
    name, options, result_path = pickle.load(stdin)
    try:
        result: tuple[str, Any] = ("ok", SUITES[name](options))
    except BenchError as exc:
        result = ("error", str(exc))
    Path(result_path).write_bytes(pickle.dumps(result))
