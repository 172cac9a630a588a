"""The ``peers`` bench suite runs end to end on a tiny changelog and reports what it measured.

Rates are machine-dependent, so nothing here asserts a ratio; the test checks the
measurements' shape and arithmetic, that each peer really read or recovered every record,
and that the suite cleans up after itself. quixstreams runs from the peers' own virtual
environment, which the suite creates from the package index on first use (outside the timed
part here). It is a soak variant (``make soak``): on a fresh machine that environment costs CI
a minute before the suite even starts, and ``spark-statestore bench`` runs it in full.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from spark_statestore.bench import SUITES, BenchOptions
from spark_statestore.bench.peers import SUITE, run_peers_suite
from spark_statestore.bench.peers_quixstreams import (
    QUIX_STATE_KEY,
    QUIXSTREAMS_VERSION,
    quixstreams_python,
)
from tests.integration.bench_checks import one_round_each

pytestmark = [pytest.mark.integration, pytest.mark.soak]


def test_the_peers_suite_measures_our_feed_and_restore_against_spark_and_quixstreams(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `spark`: this process already runs a JVM without Spark's Kafka connector, as it does
    # in a full bench run (the spark and sink suites come first); the suite must not need it.
    assert spark is not None
    quixstreams_python()  # creates the peers' environment once; not part of the run below
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    options = BenchOptions.for_run(quick=True, rounds=1, records=400)

    measurements = run_peers_suite(options)

    by_name = one_round_each(measurements, SUITE, ["feed_vs_spark_kafka", "restore_vs_quixstreams"])
    for m in measurements:
        assert m.parameters["records"] == 400
        assert m.parameters["partitions"] == 8
        assert (m.parameters["key_bytes"], m.parameters["value_bytes"]) == (16, 32)

    feed, restore = by_name["feed_vs_spark_kafka"], by_name["restore_vs_quixstreams"]
    assert feed.unit == "rows/s" and restore.unit == "records/s"
    assert feed.parameters["spark_startup_s"] > 0  # a session of the suite's own
    assert restore.parameters["quixstreams"] == QUIXSTREAMS_VERSION
    # quixstreams' store holds each message's value under "<message key>|<state key>".
    assert restore.parameters["quixstreams_store_key_bytes"] == 16 + 1 + len(QUIX_STATE_KEY)
    assert restore.parameters["quixstreams_store_value_bytes"] >= 32
    # Its changelog holds one record per input record, plus transaction markers.
    assert restore.parameters["quixstreams_changelog_end_offsets"] >= 400
    assert restore.parameters["quixstreams_changelog"].startswith("changelog__")
    # The timed recovery is a part of its process's run.
    (process_s,) = restore.parameters["quixstreams_process_s"]
    assert 400 / restore.baseline_rate < process_s
    # The changelog, the stores, the checkpoints and the broker's log are deleted.
    assert list(tmp_path.glob("spark-statestore-bench-*")) == []
    # About 50 s on an idle 2-core machine (broker, Spark and quixstreams start-ups); the
    # bound leaves room for a busy one.


def test_the_peers_suite_runs_after_the_sink_suite() -> None:
    names = list(SUITES)
    assert names.index("peers") == names.index("sink") + 1
