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
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

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


def test_spark_registers_the_installed_package_by_itself(
    installed_package: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    # Not the repository: its pyspark_statestore/ must not be importable from the cwd.
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    env = dict(
        os.environ,
        PYTHONPATH=str(installed_package),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONUNBUFFERED="1",
    )
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD), str(installed_package), str(store)],
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
