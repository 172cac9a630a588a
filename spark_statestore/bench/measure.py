"""What one benchmark run measures and how: options, measurement records, interleaved timing.

The machine the benchmark runs on is a noisy, shared 2-core VM, so every measurement compares a
candidate path with the raw limit of the same machine measured in the same run, alternating
between them (A B, B A, ...) for several rounds and keeping each side's best rate: the best
run is the one least disturbed by neighbours, and both sides get the same chances.
"""

from __future__ import annotations

import gc
import json
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from spark_statestore.bench.errors import BenchError
from spark_statestore.errors import OptionError

__all__ = [
    "BenchOptions",
    "BenchRun",
    "Measurement",
    "Status",
    "child_result",
    "interleave",
    "timed",
]

Status = Literal["PASS", "BELOW", "-"]
"""``PASS``: the ratio reaches the target; ``BELOW``: it does not; ``-``: no target."""

_QUICK_ROUNDS = 2
_QUICK_RECORDS = 2_000
_QUICK_BATCH = 500


@dataclass(frozen=True, slots=True)
class BenchOptions:
    """The sizes of a benchmark run, shared by every suite.

    Parameters
    ----------
    rounds
        Interleaved rounds per measurement; each side's best round is reported.
    records
        Records written (or keys read) by one timed run of a path.
    batch_records
        Records per transaction / write batch.
    value_bytes
        Size of every value.
    seed
        Seed of the shuffled read order.
    quick
        True for the tiny sizes of :meth:`for_run` with ``quick=True`` (tests, smoke runs).
    """

    rounds: int = 5
    records: int = 100_000
    batch_records: int = 10_000
    value_bytes: int = 20
    seed: int = 20_240_601
    quick: bool = False

    def __post_init__(self) -> None:
        for name in ("rounds", "records", "batch_records", "value_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise OptionError(f"bench option {name} must be an int >= 1, got {value!r}")

    @classmethod
    def for_run(
        cls, *, quick: bool = False, rounds: int | None = None, records: int | None = None
    ) -> BenchOptions:
        """The options of a run: the defaults (or the tiny ``quick`` sizes), overridden by
        ``rounds`` and ``records`` where given.

        Parameters
        ----------
        quick
            Start from tiny sizes that finish in about a second.
        rounds, records
            The ``--rounds`` and ``--records`` flags; None keeps the default.

        Returns
        -------
        BenchOptions
            With ``batch_records`` capped at ``records``.
        """
        defaults = (
            cls(
                rounds=_QUICK_ROUNDS, records=_QUICK_RECORDS, batch_records=_QUICK_BATCH, quick=True
            )
            if quick
            else cls()
        )
        records = defaults.records if records is None else records
        return replace(
            defaults,
            rounds=defaults.rounds if rounds is None else rounds,
            records=records,
            # A bad --records fails on its own name first (checks run in field order).
            batch_records=min(defaults.batch_records, records),
        )

    def to_json(self) -> dict[str, Any]:
        """The options as a JSON object."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Measurement:
    """One candidate path measured against its baseline on the same machine, in one run.

    Parameters
    ----------
    suite, name
        The suite that measured it and the measurement's name (``txn_commit``).
    unit
        What the rates count, per second (``"puts/s"``).
    candidate, baseline
        What was measured on each side, in a few words.
    candidate_rates, baseline_rates
        The rate of every round, in run order.
    target
        The ratio the candidate should reach (0.7: 70 % of the baseline), or None for a
        measurement reported for information only.
    parameters
        Sizes and settings of this measurement (records, batch size, sync, ...).
    """

    suite: str
    name: str
    unit: str
    candidate: str
    baseline: str
    candidate_rates: tuple[float, ...]
    baseline_rates: tuple[float, ...]
    target: float | None
    parameters: Mapping[str, Any] = field(default_factory=dict)

    @property
    def candidate_rate(self) -> float:
        """The candidate's best rate."""
        return max(self.candidate_rates)

    @property
    def baseline_rate(self) -> float:
        """The baseline's best rate."""
        return max(self.baseline_rates)

    @property
    def ratio(self) -> float:
        """Best candidate rate over best baseline rate."""
        return self.candidate_rate / self.baseline_rate

    @property
    def status(self) -> Status:
        """``"PASS"``, ``"BELOW"`` or ``"-"`` when there is no target."""
        if self.target is None:
            return "-"
        return "PASS" if self.ratio >= self.target else "BELOW"

    def to_json(self) -> dict[str, Any]:
        """The measurement as a JSON object (best rates, ratio, target, every round)."""
        return {
            "suite": self.suite,
            "name": self.name,
            "unit": self.unit,
            "candidate": self.candidate,
            "baseline": self.baseline,
            "candidate_rate": self.candidate_rate,
            "baseline_rate": self.baseline_rate,
            "ratio": self.ratio,
            "target": self.target,
            "status": self.status,
            "rounds": {
                "candidate": list(self.candidate_rates),
                "baseline": list(self.baseline_rates),
            },
            "parameters": dict(self.parameters),
        }


@dataclass(frozen=True, slots=True)
class BenchRun:
    """The result of one ``spark-statestore bench`` run.

    Parameters
    ----------
    suites
        The suites run, in order.
    options
        The sizes used.
    measurements
        Every measurement of every suite, in order.
    started_at
        When the run started (UTC, ISO 8601).
    seconds
        How long the whole run took.
    machine
        Facts about the machine (see :func:`~spark_statestore.bench.report.machine_facts`).
    """

    suites: tuple[str, ...]
    options: BenchOptions
    measurements: tuple[Measurement, ...]
    started_at: str
    seconds: float
    machine: Mapping[str, Any] = field(default_factory=dict)


def timed(work: Callable[[], object]) -> float:
    """Seconds ``work()`` takes, with the cyclic garbage collector paused (as ``timeit``
    does), so a collection triggered by the setup is not billed to the measured path."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        work()
        return time.perf_counter() - start
    finally:
        if enabled:
            gc.enable()


def interleave(runs: Mapping[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Run every path once per round, rotating their order each round, and collect rates.

    Parameters
    ----------
    runs
        ``{name: run}``; ``run()`` sets up, times one run of its path (with :func:`timed`),
        cleans up and returns the rate.
    rounds
        How many times each path runs.

    Returns
    -------
    dict
        ``{name: [rate of round 1, rate of round 2, ...]}``.
    """
    names = list(runs)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for round_no in range(rounds):
        shift = round_no % len(names)
        for name in names[shift:] + names[:shift]:
            rates[name].append(runs[name]())
    return rates


def child_result(
    suite: str, command: list[str], what: str, log_path: Path, deadline: float
) -> tuple[dict[str, Any], float]:
    """Run a measuring child process, its stderr to ``log_path``; its result is the JSON
    object on the last line of its stdout, or ``{"error": ...}`` for a BenchError of its own.

    Returns the result and the seconds the process ran.
    """
    start = time.perf_counter()
    with log_path.open("w") as log:
        try:
            proc = subprocess.run(
                command, stdout=subprocess.PIPE, stderr=log, text=True, timeout=deadline
            )
        except subprocess.TimeoutExpired as exc:
            raise BenchError(
                f"bench suite {suite}: {what} did not finish within {deadline:.0f} s "
                f"(its log: {log_path})"
            ) from exc
    seconds = time.perf_counter() - start
    lines = proc.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        result = None
    if isinstance(result, dict) and "error" in result:
        raise BenchError(f"bench suite {suite}: {what}: {result['error']}")
    if proc.returncode != 0 or not isinstance(result, dict):
        raise BenchError(
            f"bench suite {suite}: {what} ({command[0]}) exited {proc.returncode} without a "
            f"result: {log_path.read_text().strip()[-3000:]}"
        )
    return result, seconds
