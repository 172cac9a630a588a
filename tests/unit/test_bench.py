"""``spark-statestore bench``: the store suite runs end to end and reports what it measured.

Rates are machine-dependent, so nothing here asserts that a ratio reaches its target; the
tests check the report's shape and arithmetic instead.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from spark_statestore.bench import BenchOptions, Measurement
from spark_statestore.cli import main
from spark_statestore.errors import OptionError


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temp directory the bench creates its databases in (checked to be left empty)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return scratch


def run_bench(*args: str) -> int:
    return main(["bench", "--quick", *args])


def test_quick_bench_writes_a_json_report_of_both_store_measurements(
    tmp_path: Path, scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "out" / "report.json"

    assert run_bench("--suite", "store", "--output", str(output)) == 0

    report = json.loads(output.read_text())
    assert report["suites"] == ["store"]
    assert report["options"]["quick"] is True
    assert {"python", "cpu_count", "platform"} <= report["machine"].keys()
    by_name = {m["name"]: m for m in report["measurements"]}
    assert {"txn_commit", "snapshot_get"} <= by_name.keys()
    for name, target in (("txn_commit", 0.7), ("snapshot_get", 0.7)):
        m = by_name[name]
        assert m["candidate_rate"] > 0
        assert m["baseline_rate"] > 0
        assert m["ratio"] == pytest.approx(m["candidate_rate"] / m["baseline_rate"])
        assert m["target"] == target
        assert m["status"] == ("PASS" if m["ratio"] >= target else "BELOW")
        assert len(m["rounds"]["candidate"]) == len(m["rounds"]["baseline"]) == 2
        assert m["candidate_rate"] == max(m["rounds"]["candidate"])
    assert by_name["txn_commit"]["parameters"]["sync"] is False
    assert by_name["txn_commit_sync"]["parameters"]["sync"] is True
    assert by_name["snapshot_get"]["parameters"]["gets"] == report["options"]["records"]
    assert list(scratch.iterdir()) == []  # every scratch database is deleted

    out = capsys.readouterr().out
    for name in by_name:
        line = next(line for line in out.splitlines() if line.startswith(name + " "))
        assert f"{by_name[name]['ratio']:.1%}" in line
        assert by_name[name]["status"] in line


def test_bench_prints_the_table_and_writes_no_file_without_output(
    tmp_path: Path,
    scratch: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)

    # Only the store suite: the others start a broker or Spark (integration tests).
    assert run_bench("--suite", "store", "--rounds", "1", "--records", "300") == 0

    out = capsys.readouterr().out
    assert "measurement" in out and "ratio" in out and "target" in out
    assert "300 records" in out
    rows = [line.split()[0] for line in out.splitlines() if "/s" in line]
    assert rows == ["txn_commit", "txn_commit_put", "txn_commit_sync", "snapshot_get"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scratch"]


def test_an_unknown_suite_exits_2_and_names_the_closest(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_bench("--suite", "stroe") == 2
    err = capsys.readouterr().err
    assert "unknown suite 'stroe'" in err and "did you mean 'store'?" in err


@pytest.mark.parametrize("flag", ["--rounds", "--records"])
def test_a_non_positive_size_exits_2_naming_it(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_bench(flag, "0") == 2
    assert f"bench option {flag.lstrip('-')} must be an int >= 1" in capsys.readouterr().err


def test_quick_sizes_are_overridden_by_flags_and_cap_the_batch() -> None:
    options = BenchOptions.for_run(quick=True, records=120)
    assert (options.rounds, options.records, options.batch_records) == (2, 120, 120)
    assert BenchOptions.for_run().batch_records == 10_000
    with pytest.raises(OptionError, match="records"):
        BenchOptions.for_run(records=-5)


def make_measurement(
    candidate_rates: tuple[float, ...], baseline_rates: tuple[float, ...], target: float | None
) -> Measurement:
    return Measurement(
        suite="store",
        name="x",
        unit="puts/s",
        candidate="candidate path",
        baseline="bare path",
        candidate_rates=candidate_rates,
        baseline_rates=baseline_rates,
        target=target,
    )


def test_a_measurement_keeps_the_best_round_of_each_side() -> None:
    m = make_measurement((50.0, 70.0), (100.0, 90.0), 0.7)
    assert (m.candidate_rate, m.baseline_rate, m.ratio, m.status) == (70.0, 100.0, 0.7, "PASS")


@pytest.mark.parametrize(("target", "status"), [(0.5, "BELOW"), (0.4, "PASS"), (None, "-")])
def test_a_measurement_is_below_only_under_its_target(target: float | None, status: str) -> None:
    assert make_measurement((45.0,), (100.0,), target).status == status


def test_a_suite_in_a_child_process_returns_its_measurements() -> None:
    from spark_statestore.bench.store import run_store_suite
    from spark_statestore.bench.suites import run_suite_in_child

    options = BenchOptions.for_run(quick=True, rounds=1)
    measurements = run_suite_in_child("store", options)
    assert [m.name for m in measurements] == [m.name for m in run_store_suite(options)]
    assert all(isinstance(m, Measurement) and m.candidate_rate > 0 for m in measurements)
