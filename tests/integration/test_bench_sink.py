"""The ``sink`` bench suite runs end to end on a tiny stream and reports what it measured.

Rates are machine-dependent, so nothing here asserts a ratio against its target; the test
checks the measurements' shape and arithmetic, and that the suite cleans up after itself.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from spark_statestore.bench import BenchOptions
from spark_statestore.bench.sink import (
    DEFAULT_RECORDS,
    KAFKA_SINK_TARGET,
    QUICK_BATCHES,
    QUICK_EMPTY_BATCHES,
    SINK_TARGET,
    SUITE,
    run_sink_suite,
    sink_records,
)

pytestmark = pytest.mark.integration


@pytest.mark.soak  # half a minute of Spark applications; `spark-statestore bench` runs it in full
def test_the_sink_suite_measures_our_sink_against_the_parquet_sink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    options = BenchOptions.for_run(quick=True, rounds=1, records=400)

    measurements = run_sink_suite(options)

    by_name = {m.name: m for m in measurements}
    # Spark's Kafka sink is measured when the process's Spark driver has its connector (the
    # first session of the process; a test session started earlier may not).
    from pyspark.sql import SparkSession

    from spark_statestore.connectors.spark.session import has_kafka_connector

    active = SparkSession.getActiveSession()
    kafka = active is None or has_kafka_connector(active)
    assert list(by_name) == [
        "sink",
        "sink_changelog",
        *(["sink_changelog_vs_kafka_sink"] if kafka else []),
        "sink_changelog_streamed",
        *(["sink_changelog_shared_keys_vs_kafka_sink"] if kafka else []),
        "sink_changelog_served",
        "empty_commit",
    ]
    if kafka:
        against_kafka = by_name["sink_changelog_vs_kafka_sink"]
        assert against_kafka.candidate_rates == by_name["sink_changelog"].candidate_rates
        assert against_kafka.target == KAFKA_SINK_TARGET
        shared = by_name["sink_changelog_shared_keys_vs_kafka_sink"]
        assert shared.baseline_rates != against_kafka.baseline_rates  # its own Kafka runs
    # Streaming while the tasks stage against publishing at the commit, same stream.
    streamed = by_name["sink_changelog_streamed"]
    assert streamed.candidate_rates == by_name["sink_changelog"].candidate_rates
    # Each side's fastest run was profiled: CPU seconds per million rows by process kind.
    cpu = streamed.parameters["cpu_s_per_million_rows"]
    assert cpu["candidate"]["store_host"] > 0 and cpu["baseline"]["commit"] > 0
    for m in measurements:
        assert m.suite == SUITE
        assert len(m.candidate_rates) == len(m.baseline_rates) == 1
        assert m.candidate_rate > 0 and m.baseline_rate > 0
        assert m.ratio == pytest.approx(m.candidate_rate / m.baseline_rate)
        assert m.parameters["spark_startup_s"] >= 0
        assert m.to_json()["ratio"] == pytest.approx(m.ratio)

    sink, changelog, empty = by_name["sink"], by_name["sink_changelog"], by_name["empty_commit"]
    assert sink.target == SINK_TARGET and sink.status in ("PASS", "BELOW")
    assert sink.to_json()["status"] == ("PASS" if sink.ratio >= SINK_TARGET else "BELOW")
    assert changelog.target is None and empty.target is None
    assert sink.unit == changelog.unit == "rows/s" and empty.unit == "batches/s"
    # Both rows/s measurements compare against the same Parquet runs.
    assert sink.baseline_rates == changelog.baseline_rates
    # Served runs compare against the runs without serve.
    assert by_name["sink_changelog_served"].baseline_rates == changelog.candidate_rates
    assert sink.parameters["records"] == 400
    assert sink.parameters["distinct_keys"] == 100
    assert sink.parameters["micro_batches"] == QUICK_BATCHES
    assert changelog.parameters["changelog_partitions"] >= 1
    assert empty.parameters["empty_batches_per_run"] == QUICK_EMPTY_BATCHES
    assert empty.parameters["candidate_ms_per_batch"] == pytest.approx(
        1000 / empty.candidate_rate, abs=0.1
    )
    assert empty.parameters["baseline_ms_per_batch"] == pytest.approx(
        1000 / empty.baseline_rate, abs=0.1
    )
    # The input, the stores, the Parquet outputs and the broker's log are deleted.
    assert list(tmp_path.glob("spark-statestore-bench-*")) == []


def test_the_sink_suite_writes_a_million_rows_unless_records_or_quick_say_otherwise() -> None:
    assert sink_records(BenchOptions.for_run()) == DEFAULT_RECORDS == 1_000_000
    assert sink_records(BenchOptions.for_run(records=5_000)) == 5_000
    quick = BenchOptions.for_run(quick=True)
    assert sink_records(quick) == quick.records
