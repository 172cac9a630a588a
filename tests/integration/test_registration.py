"""Spark registers ``spark_statestore`` by itself once the package is installed.

Spark imports every top-level ``pyspark_*`` module that ``pkgutil.iter_modules`` lists and
registers its ``DefaultSource`` (PySpark's ``pyspark/sql/worker/lookup_data_sources.py`` in
apache/spark). Our dev install is editable, and editable installs hide top-level modules from
``iter_modules``, so this test builds a wheel of the project, installs it into a scratch
directory and runs a fresh interpreter with only that copy importable: a plain local
SparkSession, no :func:`spark_statestore.register`, reads a store by format name and through
SQL.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.integration

# Everything but the sources of the package (and nothing written into the work tree: the
# build runs on a copy, setuptools would leave build/ and egg-info behind).
NOT_PACKAGED = shutil.ignore_patterns(
    ".*", "build", "dist", "*.egg-info", "__pycache__", "tests", "docs", "scripts"
)

CHILD = """
import json, sys
site, path = sys.argv[1], sys.argv[2]

import spark_statestore
assert spark_statestore.__file__.startswith(site), spark_statestore.__file__
from spark_statestore.store import Role, Store, StoreSpec

with Store.open(path, StoreSpec(Role.FOLLOWER, "t", 1)) as store:
    with store.begin() as txn:
        txn.put(b"a", b"1", partition=0, offset=0)
        txn.put(b"b", b"2", partition=0, offset=1)
        txn.put(b"gone", b"x", partition=0, offset=2)
        txn.put(b"c", b"3", partition=0, offset=3)
        txn.delete(b"gone")
        txn.set_changelog_offset(0, 5)

from pyspark.sql import SparkSession

spark = (
    SparkSession.builder.master("local[1]")
    .appName("spark-statestore-registration")
    .config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", "1")
    .config("spark.sql.python.filterPushdown.enabled", "true")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")

def rows(df):
    return sorted([bytes(r["key"]).decode(), bytes(r["value"]).decode(), r["offset"]]
                  for r in df.collect())

report = {}
report["format"] = rows(spark.read.format("spark_statestore").load(path))
spark.sql(f"CREATE TEMPORARY VIEW v USING spark_statestore OPTIONS (path '{path}')")
report["sql"] = rows(spark.sql("SELECT key, value, offset FROM v"))
report["sql_key"] = rows(spark.sql("SELECT key, value, offset FROM v WHERE key = X'62'"))
try:
    spark.read.format("statestore").load(path).collect()
    report["builtin"] = None
except Exception as exc:
    report["builtin"] = str(exc)[:2000]
print("REPORT " + json.dumps(report), flush=True)
spark.stop()
"""


def pip(*args: str) -> None:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def installed_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site directory holding a real (non-editable) install of the project's wheel."""
    root = tmp_path_factory.mktemp("wheel")
    source, dist, site = root / "src", root / "dist", root / "site"
    shutil.copytree(REPO_ROOT, source, ignore=NOT_PACKAGED)
    # Offline: the build backend comes from the venv, the dependencies are not needed.
    pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist), str(source))
    wheels = list(dist.glob("*.whl"))
    assert len(wheels) == 1, wheels
    pip("install", "--no-deps", "--no-index", "--target", str(site), str(wheels[0]))
    assert (site / "pyspark_statestore" / "__init__.py").is_file()
    assert not list(site.glob("*.pth")), "the install must be a plain copy, not editable"
    return site


def test_spark_registers_the_installed_package_by_itself(
    installed_copy: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    # Not the repository: its pyspark_statestore/ must not be importable from the cwd.
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    env = dict(
        os.environ,
        PYTHONPATH=str(installed_copy),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONUNBUFFERED="1",
    )
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD), str(installed_copy), str(store)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=workdir,
    )
    reports = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and reports, (
        f"child failed ({done.returncode}):\n{done.stdout}\n{done.stderr[-4000:]}"
    )
    report = json.loads(reports[-1].removeprefix("REPORT "))
    expected = [["a", "1", 0], ["b", "2", 1], ["c", "3", 3]]
    assert report["format"] == expected
    assert report["sql"] == expected
    assert report["sql_key"] == [["b", "2", 1]]
    # "statestore" stays Spark's own State Data Source, which reads checkpoints, not stores.
    builtin = report["builtin"]
    assert builtin is not None, "format 'statestore' read our store"
    assert builtin.startswith("[STDS_") and "spark_statestore" not in builtin, builtin
