"""The ``enrich`` bench suite runs end to end on a tiny store and reports what it measured
(rates are machine-dependent: nothing here asserts a ratio)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from spark_statestore.bench import BenchOptions
from spark_statestore.bench.enrich import SUITE, run_enrich_suite
from tests.integration.bench_checks import one_round_each

pytestmark = pytest.mark.integration


@pytest.mark.soak  # half a minute of Spark; `spark-statestore bench` runs it in full
def test_the_enrich_suite_measures_enrichment_against_a_broadcast_join(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    options = BenchOptions.for_run(quick=True, rounds=1, records=500)

    measurements = run_enrich_suite(options)

    (measurement,) = one_round_each(measurements, SUITE, ["enrich_owner"]).values()
    assert measurement.parameters["records"] == 500
    assert measurement.unit == "rows/s"
    assert list(tmp_path.glob("spark-statestore-bench-*")) == []
