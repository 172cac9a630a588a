"""The ``follower`` bench suite is registered and sized as documented (no broker here: the
suite itself runs in tests/integration/test_follow_cli.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from spark_statestore.bench import SUITES, BenchOptions
from spark_statestore.bench.follower import DEFAULT_RECORDS, follower_records, run_follower_suite
from spark_statestore.bench.suites import resolve_suites
from spark_statestore.errors import OptionError


def test_the_follower_suite_is_registered_after_the_store_suite() -> None:
    assert SUITES["follower"] is run_follower_suite
    assert list(SUITES).index("follower") > list(SUITES).index("store")
    assert resolve_suites(["follower"]) == ("follower",)
    assert "follower" in resolve_suites(None)


def test_a_misspelled_follower_suite_gets_the_closest_name() -> None:
    with pytest.raises(OptionError, match="did you mean 'follower'"):
        resolve_suites(["folower"])


def test_the_follower_suite_restores_a_million_records_unless_told_otherwise() -> None:
    assert follower_records(BenchOptions.for_run()) == DEFAULT_RECORDS == 1_000_000
    assert follower_records(BenchOptions.for_run(records=5_000)) == 5_000
    quick = BenchOptions.for_run(quick=True)
    assert follower_records(quick) == quick.records < 10_000
    assert follower_records(BenchOptions.for_run(quick=True, records=300)) == 300


def test_importing_the_bench_loads_no_kafka_client() -> None:
    code = (
        "import sys\n"
        "import spark_statestore.bench.suites, spark_statestore.bench.follower\n"
        "loaded = [m for m in ('confluent_kafka', 'plyvel') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
