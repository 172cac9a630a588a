"""The ``streams`` bench suite runs end to end with tiny sizes against the real Kafka Streams app.

Rates are machine-dependent, so nothing here asserts a ratio; the test checks that both sides
restored the same Kafka Streams changelog, that Kafka Streams' timing came from inside the
app, the latency samples' arithmetic, and that the suite cleans up after itself.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from spark_statestore.bench import BenchOptions
from spark_statestore.bench.streams import (
    QUICK_CHANGES,
    QUICK_RYW_TRIALS,
    SUITE,
    WARMUP_CHANGES,
    run_streams_suite,
)
from spark_statestore.connectors.kafka.local.shapes_app import SHAPES
from tests.integration.bench_checks import one_round_each

pytestmark = pytest.mark.integration


@pytest.mark.soak  # a minute of Kafka Streams and Spark; `spark-statestore bench` runs it in full
def test_the_streams_suite_measures_our_follower_against_kafka_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    options = BenchOptions.for_run(quick=True, rounds=1, records=400)

    measurements = run_streams_suite(options)

    ryw = [f"read_your_writes_{shape}{mode}" for mode in ("", "_topology") for shape in SHAPES]
    by_name = one_round_each(
        measurements,
        SUITE,
        ["restore_vs_kafka_streams", "restore_vs_kafka_streams_startup", "commit_to_visible", *ryw],
    )
    restore = by_name["restore_vs_kafka_streams"].parameters
    # Kafka Streams wrote one changelog record per customer (the latency orders' too) and
    # restored all of them.
    customers = 400 + 2 * (WARMUP_CHANGES + QUICK_CHANGES)
    assert restore["orders"] == 400
    assert restore["records"] == restore["kafka_streams_restored"] == customers
    assert restore["changelog"].startswith("bench-streams-totals-changelog")
    assert restore["changelog_end_offsets"] > customers  # records and transaction markers
    (span,) = restore["kafka_streams_restore_s"]
    (startup,) = restore["kafka_streams_start_to_running_s"]
    assert 0 < span <= startup
    startup_rate = by_name["restore_vs_kafka_streams_startup"].baseline_rate
    assert startup_rate == pytest.approx(customers / startup, rel=0.01)

    visible = by_name["commit_to_visible"]
    p = visible.parameters
    assert p["changes"] == QUICK_CHANGES
    for side in ("candidate", "baseline", "changelog_raw"):
        assert 0 < p[f"{side}_p50_ms"] <= p[f"{side}_p99_ms"] <= p[f"{side}_max_ms"]
    assert visible.candidate_rate == pytest.approx(1000 / p["candidate_p50_ms"], rel=0.01)
    assert p["p50_over_kafka_streams"] == pytest.approx(1 / visible.ratio, rel=0.01)
    for name in ryw:
        p = by_name[name].parameters
        assert p["trials"] == QUICK_RYW_TRIALS and p["stale"] == 0
        for side in ("candidate", "floor"):
            assert 0 < p[f"{side}_p50_ms"] <= p[f"{side}_p99_ms"] <= p[f"{side}_max_ms"]
    # The stores, Kafka Streams' state, the broker's data and the logs are deleted.
    assert list(tmp_path.glob("spark-statestore-bench-*")) == []
