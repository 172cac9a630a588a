"""The ``spark`` bench suite runs end to end on a tiny store and reports what it measured.

Rates are machine-dependent, so nothing here asserts a ratio; the test checks the
measurements' shape and arithmetic, and that the suite cleans up after itself.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from spark_statestore.bench import BenchOptions
from spark_statestore.bench.spark import DEFAULT_RECORDS, SUITE, run_spark_suite, spark_records
from tests.integration.bench_checks import one_round_each

pytestmark = pytest.mark.integration


@pytest.mark.soak  # half a minute of Spark; `spark-statestore bench` runs it in full
def test_the_spark_suite_measures_scans_and_lookups_against_their_baselines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    options = BenchOptions.for_run(quick=True, rounds=1, records=300)

    measurements = run_spark_suite(options)

    by_name = one_round_each(
        measurements, SUITE, ["scan_owner", "lookup_keys", "scan_local", "scan_raw_source"]
    )
    for m in measurements:
        assert m.parameters["records"] == 300
        assert m.parameters["spark_startup_s"] >= 0
    assert {m.unit for m in measurements} == {"rows/s", "queries/s"}
    lookup = by_name["lookup_keys"]
    assert lookup.parameters["candidate_latency_ms"] == pytest.approx(
        1000 / lookup.candidate_rate, abs=0.1
    )
    # The store and its Parquet copy are deleted.
    assert list(tmp_path.glob("spark-statestore-bench-*")) == []


def test_the_spark_suite_reads_a_million_rows_unless_records_or_quick_say_otherwise() -> None:
    assert spark_records(BenchOptions.for_run()) == DEFAULT_RECORDS == 1_000_000
    assert spark_records(BenchOptions.for_run(records=5_000)) == 5_000
    assert (
        spark_records(BenchOptions.for_run(quick=True)) == BenchOptions.for_run(quick=True).records
    )
