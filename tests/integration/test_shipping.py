"""Shipping the plugin to a cluster's executors (README, "Running on a cluster").

The cluster's Workers run on hosts of their own that see Spark's home and nothing else of
this machine's Python: not the checkout, not the driver's virtualenv, no compiler, no Rust,
no LevelDB or snappy library (``LocalSparkCluster(driver_code=False)``). The application
packs the package's wheel and the compiled extension's manylinux wheel into an environment
(:func:`~spark_statestore.connectors.spark.shipping.pack_environment`) and ships it with
``spark.archives``: each task must import the shipped package, run the compiled fast path
with the wheel's own LevelDB, and a snapshot read through the data source must return the
store's rows. The driver runs in a child process (a process has one SparkContext).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spark_statestore.connectors.spark.shipping import DEFAULT_NAME, pack_environment
from spark_statestore.store import Role, Store, StoreSpec
from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.beside]

DRIVER = Path(__file__).with_name("shipped_driver.py")


@pytest.fixture(scope="module")
def native_wheel() -> Path:
    """The extension's wheel the setup built and installed (scripts/build-native.sh), or the
    one under test (``$SPARK_STATESTORE_TEST_NATIVE_WHEEL``, set by scripts/dist-check.sh)."""
    given = os.environ.get("SPARK_STATESTORE_TEST_NATIVE_WHEEL")
    if given:
        return Path(given)
    wheels = sorted((Path(sys.prefix) / "native-wheel").glob("spark_statestore_native-*.whl"))
    if not wheels:
        pytest.skip(
            "the setup built no wheel of the compiled extension (SPARK_STATESTORE_NATIVE=0?)"
        )
    return wheels[-1]


def test_executors_run_the_shipped_package_and_its_fast_path(
    host_tools: None, package_wheel: Path, native_wheel: Path, tmp_path: Path
) -> None:
    archive = pack_environment(
        tmp_path / "statestore-env.tar.gz",
        [str(package_wheel), str(native_wheel)],
        pip_args=["-c", str(REPO_ROOT / "constraints.txt")],
    ).archive
    store = tmp_path / "data" / "store"
    expected = [[f"k{i:02d}", str(i)] for i in range(20)]
    with Store.open(store, StoreSpec(Role.FOLLOWER, "t", 1)) as opened, opened.begin() as txn:
        for offset, (key, value) in enumerate(expected):
            txn.put(key.encode(), value.encode(), partition=0, offset=offset)
        txn.set_changelog_offset(0, len(expected))
    workdir = tmp_path / "driver"
    workdir.mkdir()

    done = subprocess.run(
        [sys.executable, str(DRIVER), str(archive), str(store), str(workdir)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    reports = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and reports, (
        f"the driver failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    )
    report = json.loads(reports[-1].removeprefix("REPORT "))

    tasks = report["tasks"]
    assert sorted(t["host"] for t in tasks) == report["workers"]  # one task on each host
    for task in tasks:
        shipped = f"/{DEFAULT_NAME}/"
        assert shipped in task["python"] and shipped in task["package"], task
        assert not task["package"].startswith(str(REPO_ROOT)), task
        assert task["paths"].startswith("compiled fast paths: spark_statestore_native "), task
        assert shipped in task["paths"], task
        assert task["leveldb"], task
        assert all(
            f"{shipped}lib/" in lib and "spark_statestore_native.libs/" in lib
            for lib in task["leveldb"]
        ), task
        # The tools and libraries this machine has are not there (the harness covers them).
        assert set(task["builders"]) == set(report["builders"]), task
        assert all(seen in ([], 0) for seen in task["builders"].values()), task
    assert any("leveldb" in path for path in report["builders"]), report["builders"]
    assert report["rows"] == expected
