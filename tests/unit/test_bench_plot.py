"""The ``scale`` suite's curves: an SVG of every point, or nothing when the run has none."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from spark_statestore.bench import BenchOptions
from spark_statestore.bench.measure import BenchRun, Measurement
from spark_statestore.bench.plot import plot_path, scale_svg, write_plots
from spark_statestore.bench.scale import size_label


def _restore(records: int, partitions: int, ours: float, bare: float) -> Measurement:
    return Measurement(
        suite="scale",
        name=f"restore_{size_label(records)}_{partitions}p",
        unit="records/s",
        candidate="ours",
        baseline="bare",
        candidate_rates=(ours,),
        baseline_rates=(bare,),
        target=None,
        parameters={
            "records": records,
            "partitions": partitions,
            "candidate_peak_rss_mib": 150.0 + records / 1e6,
            "baseline_peak_rss_mib": 200.0,
        },
    )


def _get(keys: int) -> Measurement:
    return Measurement(
        suite="scale",
        name=f"get_{size_label(keys)}",
        unit="operations/s (1e6 / p50 us)",
        candidate="ours",
        baseline="plyvel",
        candidate_rates=(1e6 / 4.0,),
        baseline_rates=(1e6 / 2.0,),
        target=None,
        parameters={
            "keys": keys,
            "candidate_p50_us": 4.0,
            "candidate_p99_us": 9.0,
            "baseline_p50_us": 2.0,
            "baseline_p99_us": 5.0,
        },
    )


@pytest.mark.parametrize(
    ("records", "label"),
    [(1_000_000, "1M"), (30_000_000, "30M"), (2_000, "2k"), (1_500, "1500"), (7, "7")],
)
def test_size_labels(records: int, label: str) -> None:
    assert size_label(records) == label


def test_every_point_is_drawn() -> None:
    points = [
        _restore(n, p, 400_000.0 - n / 100, 380_000.0)
        for p in (8, 64)
        for n in (1_000_000, 10_000_000, 30_000_000)
    ]
    svg = scale_svg([*points, _get(1_000_000), _get(10_000_000)])
    assert svg is not None
    root = ElementTree.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    lines = root.findall(f".//{ns}polyline")
    # rate and memory: 2 sides x 2 partition counts; reads: 2 sides x p50/p99
    assert len(lines) == 4 + 4 + 4
    for line in lines:
        assert len(line.get("points", "").split()) in (2, 3)
    for text in ("ours, 8 partitions", "bare, 64 partitions", "ours p99", "plyvel p50", "30M"):
        assert text in svg


def test_a_run_without_the_scale_suite_writes_no_plot(tmp_path: Path) -> None:
    other = Measurement("store", "txn_commit", "puts/s", "a", "b", (1.0,), (2.0,), 0.7)
    run = BenchRun(("store",), BenchOptions(), (other,), "2026-11-26T00:00:00+00:00", 1.0)
    assert write_plots(run, tmp_path / "report.json") is None
    assert not plot_path(tmp_path / "report.json").exists()


def test_the_plot_goes_next_to_the_report(tmp_path: Path) -> None:
    run = BenchRun(
        ("scale",),
        BenchOptions(),
        (_restore(1_000, 8, 10.0, 20.0), _restore(2_000, 8, 12.0, 20.0)),
        "2026-11-26T00:00:00+00:00",
        1.0,
    )
    path = write_plots(run, tmp_path / "out.json")
    assert path == tmp_path / "out.scale.svg"
    ElementTree.fromstring(path.read_text())
    assert [p.name for p in tmp_path.iterdir()] == ["out.scale.svg"]
