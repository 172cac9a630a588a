"""The ``remote`` bench suite runs end to end on a tiny served store (no Kafka, no Spark) and
reports what it measured; rates are machine-dependent, so no ratio is asserted."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from spark_statestore.bench import BenchOptions
from spark_statestore.bench.remote import GOAL_RATIO, QUICK_CALLS, SUITE, run_remote_suite


def test_the_remote_suite_measures_lookups_against_the_flight_floor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    measurements = run_remote_suite(BenchOptions.for_run(quick=True, rounds=1, records=200))
    by_name = {m.name: m for m in measurements}
    assert sorted(by_name) == ["point_lookup_vs_floor", "routed_vs_direct"]
    lookup = by_name["point_lookup_vs_floor"]
    assert lookup.suite == SUITE and lookup.target == GOAL_RATIO
    assert lookup.parameters["calls"] == QUICK_CALLS
    assert lookup.parameters["candidate_p50_ms"] <= lookup.parameters["candidate_p99_ms"]
    assert lookup.candidate_rate == pytest.approx(
        1000 / lookup.parameters["candidate_p50_ms"], rel=0.05
    )
    assert list(tmp_path.glob("spark-statestore-bench-*")) == []
