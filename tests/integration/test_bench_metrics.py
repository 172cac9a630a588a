"""The ``metrics`` bench suite runs end to end on tiny sizes and reports what it measured: the
follower's restore and the served sink, each with its metrics served and scraped against
the same path without them.

Rates are machine-dependent, so nothing here asserts a ratio against its target; the test
checks the measurements' shape, that every run with metrics was scraped while it ran, and
that the suite cleans up after itself.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from spark_statestore.bench import SUITES, BenchOptions
from spark_statestore.bench.metrics import METRICS_TARGET, SUITE, run_metrics_suite

pytestmark = pytest.mark.integration


@pytest.mark.soak  # a minute of a broker and Spark; `spark-statestore bench` runs it in full
def test_the_metrics_suite_measures_each_path_with_and_without_its_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert SUITES[SUITE] is run_metrics_suite
    options = BenchOptions.for_run(quick=True, rounds=1, records=400)

    measurements = run_metrics_suite(options)

    by_name = {m.name: m for m in measurements}
    assert list(by_name) == ["restore_metrics", "sink_metrics"]
    for m in measurements:
        assert m.suite == SUITE and m.target == METRICS_TARGET
        assert len(m.candidate_rates) == len(m.baseline_rates) == 1
        assert m.candidate_rate > 0 and m.baseline_rate > 0
        assert m.ratio == pytest.approx(m.candidate_rate / m.baseline_rate)
        # Every run with metrics was scraped while it ran.
        (scrapes,) = m.parameters["scrapes_per_run"]
        assert scrapes >= 1
    assert by_name["restore_metrics"].parameters["records"] == 400
    assert by_name["sink_metrics"].parameters["records"] == 400
    # The changelog, the stores, the input and the broker's log are deleted.
    assert list(tmp_path.glob("spark-statestore-bench-*")) == []
