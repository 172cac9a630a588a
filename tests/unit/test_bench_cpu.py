"""The bench's CPU profile by process kind (spark_statestore.bench.cpu)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from spark_statestore.bench.cpu import CpuProfile, Profiles, kind_of

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.mark.parametrize(
    ("command_line", "kind"),
    [
        ("python -m pyspark.daemon pyspark.sql.worker.python_streaming_sink_runner", "commit"),
        ("python -m pyspark.daemon pyspark.worker", "python_workers"),
        ("python -m pyspark.daemon pyspark.sql.worker.write_into_data_source", "planning"),
        ("python -m spark_statestore.connectors.spark.host", "store_host"),
        ("python -m spark_statestore.connectors.spark.leader", "sink_server"),
        ("java -cp x kafka.Kafka server.properties", "broker"),
        ("python -m spark_statestore.cli broker --brokers 1", "broker"),
        ("java -cp j org.apache.spark.executor.CoarseGrainedExecutorBackend", "executor_jvm"),
        ("java -cp j org.apache.spark.deploy.worker.Worker spark://h:7077", "cluster_daemons"),
        ("java -cp j org.apache.spark.deploy.SparkSubmit pyspark-shell", "driver_jvm"),
        ("sleep 10", "other"),
    ],
)
def test_processes_are_sorted_by_command_line(command_line: str, kind: str) -> None:
    assert kind_of(command_line) == kind


_MARK = "spark-statestore-cpu-test-burner"
_KINDS = (("burner", (_MARK,)),)
_BURN = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass\n"


def test_a_child_s_cpu_time_is_counted_while_it_lives() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _BURN.format(s=0.6) + "import sys\nsys.stdin.read()", _MARK],
        stdin=subprocess.PIPE,
    )
    try:
        with CpuProfile(poll_s=0.05, kinds=_KINDS) as profile:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and _cpu_of(child.pid) < 0.6:
                time.sleep(0.05)
    finally:
        child.communicate(b"")
    assert 0.55 <= profile.seconds.get("burner", 0.0) < 5.0
    assert profile.per_million(2_000_000)["burner"] == pytest.approx(
        profile.seconds["burner"] / 2, abs=0.001
    )


def test_cpu_time_spent_before_the_profile_is_not_counted() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _BURN.format(s=0.5) + "import sys\nsys.stdin.read()", _MARK],
        stdin=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _cpu_of(child.pid) < 0.5:
            time.sleep(0.05)
        with CpuProfile(poll_s=0.05, kinds=_KINDS) as profile:
            time.sleep(0.2)
    finally:
        child.communicate(b"")
    assert profile.seconds.get("burner", 0.0) < 0.2


def test_profiles_keep_the_fastest_run_of_each_side() -> None:
    profiles = Profiles()
    for _ in range(2):
        with profiles.during("a")("ignored"):
            pass
    chosen = profiles.of_best({"a": [1.0, 3.0]}, 1_000_000)
    assert set(chosen) == {"a"}
    assert profiles.of_best({"a": [1.0]}, 1) == {}  # rates and runs must line up


def _cpu_of(pid: int) -> float:
    import os

    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
