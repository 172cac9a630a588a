"""The ``latency`` bench suite runs end to end with tiny sizes and reports what it measured.

Latencies and memory are machine-dependent, so nothing here asserts a goal or a ratio; the
test checks the measurements' shape and arithmetic (positive numbers, p50 <= p99 <= max) and
that the suite cleans up after itself.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from spark_statestore.bench import BenchOptions
from spark_statestore.bench.latency import (
    DEFAULT_CHANGES,
    DEFAULT_RESTORE_RECORDS,
    GOAL_P50_MS,
    GOAL_P99_MS,
    GOAL_PEAK_RSS_MIB,
    QUICK_CHANGES,
    QUICK_RESTORE_RECORDS,
    SUITE,
    WARMUP_CHANGES,
    latency_changes,
    restore_records,
    run_latency_suite,
)
from tests.integration.bench_checks import one_round_each

pytestmark = pytest.mark.integration


def test_the_latency_suite_measures_visibility_and_restore_memory_against_bare_clients(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    options = BenchOptions.for_run(quick=True, rounds=1, records=1_000)

    measurements = run_latency_suite(options)

    by_name = one_round_each(measurements, SUITE, ["commit_to_visible", "restore_memory"])
    for m in measurements:
        assert m.parameters["partitions"] == 8
        assert (m.parameters["key_bytes"], m.parameters["value_bytes"]) == (16, 32)
        assert isinstance(m.parameters["goal_met"], bool)

    visible = by_name["commit_to_visible"]
    p = visible.parameters
    assert (p["changes"], p["warmup_changes"]) == (QUICK_CHANGES, WARMUP_CHANGES)
    for side in ("candidate", "baseline"):
        p50, p99, most = p[f"{side}_p50_ms"], p[f"{side}_p99_ms"], p[f"{side}_max_ms"]
        assert 0 < p50 <= p99 <= most
    # The rates are 1000 / p50 ms, so the ratio is raw p50 / our p50.
    assert visible.candidate_rate == pytest.approx(1000 / p["candidate_p50_ms"], rel=0.01)
    assert visible.baseline_rate == pytest.approx(1000 / p["baseline_p50_ms"], rel=0.01)
    assert p["p50_over_raw"] == pytest.approx(1 / visible.ratio, rel=0.01)
    assert p["leader_commit_p50_ms"] > 0
    assert (p["goal_p50_ms"], p["goal_p99_ms"]) == (GOAL_P50_MS, GOAL_P99_MS)
    assert f"p50 <= {GOAL_P50_MS:.0f} ms" in visible.candidate

    memory = by_name["restore_memory"]
    q = memory.parameters
    assert memory.unit == "records/s"
    assert q["records"] == 1_000 and q["rounds"] == 1
    for side in ("candidate", "baseline"):
        # The peak includes the interpreter that was there before the restore.
        assert 0 < q[f"{side}_start_rss_mib"] <= q[f"{side}_peak_rss_mib"]
        assert q[f"{side}_peak_rss_mib_rounds"] == [q[f"{side}_peak_rss_mib"]]
    assert q["peak_rss_over_bare"] == pytest.approx(
        q["candidate_peak_rss_mib"] / q["baseline_peak_rss_mib"], rel=0.01
    )
    assert q["goal_peak_rss_mib"] == GOAL_PEAK_RSS_MIB
    assert f"<= {GOAL_PEAK_RSS_MIB:.0f} MiB" in memory.candidate
    # The stores, the broker's data and its log are deleted.
    assert list(tmp_path.glob("spark-statestore-bench-*")) == []


def test_the_latency_suite_sizes_follow_quick_and_records() -> None:
    assert latency_changes(BenchOptions.for_run()) == DEFAULT_CHANGES == 300
    assert latency_changes(BenchOptions.for_run(quick=True)) == QUICK_CHANGES == 20
    assert restore_records(BenchOptions.for_run()) == DEFAULT_RESTORE_RECORDS == 3_000_000
    assert restore_records(BenchOptions.for_run(quick=True)) == QUICK_RESTORE_RECORDS == 20_000
    assert restore_records(BenchOptions.for_run(records=5_000)) == 5_000
    assert restore_records(BenchOptions.for_run(quick=True, records=700)) == 700
