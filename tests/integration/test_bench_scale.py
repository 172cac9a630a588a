"""The ``scale`` bench suite runs end to end with tiny sizes and reports what it measured.

Rates, latencies and memory are machine-dependent, so nothing here asserts a goal or a ratio;
the test checks the measurements' shape (every point, both sides, p50 <= p99 <= max), the
curves written next to a report, and that the suite cleans up after itself. A soak test: the
quick ladder still produces and restores eight changelogs (about half a minute).
"""

from __future__ import annotations

import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from spark_statestore.bench import BenchOptions
from spark_statestore.bench.measure import BenchRun
from spark_statestore.bench.plot import write_plots
from spark_statestore.bench.scale import (
    PARTITION_COUNTS,
    QUICK_RESTORE_SIZES,
    SUITE,
    run_scale_suite,
    size_label,
)

pytestmark = [pytest.mark.integration, pytest.mark.soak]


def test_the_scale_suite_measures_every_point_and_plots_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(work))
    options = BenchOptions.for_run(quick=True, rounds=1)

    measurements = run_scale_suite(options)

    names = [m.name for m in measurements]
    restores = [
        f"restore_{size_label(n)}_{p}p" for p in PARTITION_COUNTS for n in QUICK_RESTORE_SIZES
    ]
    reads = [
        f"{kind}_{size_label(n)}"
        for n in QUICK_RESTORE_SIZES[:2]
        for kind in ("get", "range100", "full_scan")
    ]
    assert names == restores + reads
    for m in measurements:
        assert m.suite == SUITE and m.target is None
        assert len(m.candidate_rates) == len(m.baseline_rates) == 1
        assert m.candidate_rate > 0 and m.baseline_rate > 0
    for m in measurements[: len(restores)]:
        p = m.parameters
        assert p["records"] in QUICK_RESTORE_SIZES and p["partitions"] in PARTITION_COUNTS
        for side in ("candidate", "baseline"):
            assert 0 < p[f"{side}_start_rss_mib"] <= p[f"{side}_peak_rss_mib"]
    for m in measurements[len(restores) :]:
        if m.name.startswith("full_scan"):
            continue
        for side in ("candidate", "baseline"):
            p = m.parameters
            assert 0 < p[f"{side}_p50_us"] <= p[f"{side}_p99_us"] <= p[f"{side}_max_us"]
    # The stores, the broker's data and its log are deleted.
    assert list(work.iterdir()) == []

    run = BenchRun((SUITE,), options, tuple(measurements), "2026-11-26T00:00:00+00:00", 1.0)
    svg = write_plots(run, tmp_path / "report.json")
    assert svg == tmp_path / "report.scale.svg"
    text = svg.read_text()
    ElementTree.fromstring(text)  # well-formed
    for label in ("restore rate", "restore peak RSS", "point read latency", "ours, 64 partitions"):
        assert label in text
