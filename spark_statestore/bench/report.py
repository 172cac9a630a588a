"""Rendering a :class:`~spark_statestore.bench.measure.BenchRun`: a table for people, JSON
for machines."""

from __future__ import annotations

import json
import os
import platform
import tempfile
from typing import Any

from spark_statestore import __version__
from spark_statestore.bench.measure import BenchRun, Measurement

__all__ = ["format_rate", "machine_facts", "render_table", "report_json", "to_json"]

_COLUMNS = ("measurement", "candidate", "baseline", "ratio", "target", "result")


def machine_facts() -> dict[str, Any]:
    """What the numbers depend on: interpreter, platform, CPUs, LevelDB, scratch directory."""
    import plyvel

    from spark_statestore import native

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    extension = native.module()
    fast_path: dict[str, Any] = {"fast_path": extension is not None}
    if extension is not None:
        fast_path["fast_path_leveldb"] = ".".join(map(str, extension.LEVELDB_VERSION))
        fast_path["fast_path_librdkafka"] = extension.LIBRDKAFKA_VERSION
    return {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "plyvel": plyvel.__version__,
        "leveldb": plyvel.__leveldb_version__,
        "spark_statestore": __version__,
        "temp_dir": tempfile.gettempdir(),
        **fast_path,
    }


def to_json(run: BenchRun) -> dict[str, Any]:
    """The report of ``run`` as a JSON object."""
    return {
        "command": "spark-statestore bench",
        "started_at": run.started_at,
        "seconds": run.seconds,
        "suites": list(run.suites),
        "options": run.options.to_json(),
        "machine": dict(run.machine),
        "measurements": [m.to_json() for m in run.measurements],
    }


def report_json(run: BenchRun) -> str:
    """The report of ``run`` as indented JSON text (ending in a newline)."""
    return json.dumps(to_json(run), indent=2) + "\n"


def format_rate(rate: float, unit: str) -> str:
    """``1234567.0, "puts/s"`` -> ``"1.23M puts/s"``."""
    if rate >= 1e6:
        return f"{rate / 1e6:.2f}M {unit}"
    if rate >= 1e3:
        return f"{rate / 1e3:.1f}k {unit}"
    return f"{rate:.0f} {unit}"


def render_table(run: BenchRun) -> str:
    """One line per measurement (name, candidate rate, baseline rate, ratio, target,
    PASS/BELOW), under a header naming the run and the machine, and a legend saying what
    each side of each line is."""
    options, machine = run.options, run.machine
    rows = [_COLUMNS, *(_row(m) for m in run.measurements)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    right = {1, 2, 3, 4}
    lines = [
        f"spark-statestore bench: suite(s) {', '.join(run.suites)}; best of {options.rounds} "
        f"interleaved round(s) per path; {options.records:,} records, "
        f"{options.batch_records:,} per transaction" + ("; quick" if options.quick else ""),
        f"machine: Python {machine.get('python')} on {machine.get('platform')}, "
        f"{machine.get('cpu_count')} CPU(s), plyvel {machine.get('plyvel')} "
        f"(LevelDB {machine.get('leveldb')}); "
        + (
            f"compiled fast path on (LevelDB {machine.get('fast_path_leveldb')}, librdkafka "
            f"{machine.get('fast_path_librdkafka')})"
            if machine.get("fast_path")
            else "reference paths (no compiled extension, or SPARK_STATESTORE_NATIVE=0)"
        ),
        "",
    ]
    for row in rows:
        cells = [
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    lines.append("")
    name_width = widths[0]
    for m in run.measurements:
        lines.append(f"{m.name.ljust(name_width)}  {m.candidate}  vs  {m.baseline}")
    profiled = [m for m in run.measurements if "cpu_s_per_million_rows" in m.parameters]
    if profiled:
        lines += ["", "CPU seconds per million rows, by process (each side's fastest run):"]
        for m in profiled:
            cpu = m.parameters["cpu_s_per_million_rows"]
            for side in ("candidate", "baseline"):
                kinds = cpu.get(side) or {}
                spent = ", ".join(f"{kind} {s:.2f}" for kind, s in kinds.items() if s >= 0.005)
                total = sum(kinds.values())
                lines.append(f"{m.name.ljust(name_width)}  {side:<9}  {total:5.2f} s: {spent}")
    below = [m.name for m in run.measurements if m.status == "BELOW"]
    lines.append("")
    if below:
        lines.append(f"BELOW target: {', '.join(below)} (a measurement, not a failure)")
    else:
        lines.append("every measurement with a target reaches it")
    lines.append(f"took {run.seconds:.1f} s")
    return "\n".join(lines)


def _row(m: Measurement) -> tuple[str, ...]:
    target = "-" if m.target is None else f">= {m.target:.0%}"
    return (
        m.name,
        format_rate(m.candidate_rate, m.unit),
        format_rate(m.baseline_rate, m.unit),
        f"{m.ratio:.1%}",
        target,
        m.status,
    )
