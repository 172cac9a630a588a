"""The driver of test_shipping.py's cluster, run in a process of its own (a process has one
SparkContext): a Spark standalone cluster whose Workers see Spark's home alone (not the
checkout, not the driver's environment, no compiler, no Rust, no system LevelDB or snappy),
and an application that ships the plugin to them as a packed environment.

    python shipped_driver.py ARCHIVE STORE WORKDIR

Prints one ``REPORT {json}`` line: what each task saw (its host, interpreter, where it
imported the package from, which paths ran and which LevelDB library it mapped) and the
rows a snapshot read of STORE returned through the data source.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from spark_statestore.connectors.local.bare import builder_paths
from spark_statestore.connectors.spark.local import LocalSparkCluster
from spark_statestore.connectors.spark.shipping import DEFAULT_NAME, ShippedEnvironment


def task_report(_: Iterator[int], builders: list[str]) -> Iterator[dict[str, object]]:
    """What a task sees, on whichever executor it runs; ``builders``: what the driver's host
    has of the build tools and native libraries (present there, covered on the hosts)."""
    import os
    import socket
    import sys
    import tempfile

    import spark_statestore
    from spark_statestore import native
    from spark_statestore.store import Role, Store, StoreSpec

    spec = StoreSpec(Role.FOLLOWER, "t", 1)
    with tempfile.TemporaryDirectory() as scratch, Store.open(scratch + "/s", spec) as store:
        with store.begin() as txn:
            txn.put(b"k", b"v", partition=0, offset=0)
            txn.set_changelog_offset(0, 1)
        with open("/proc/self/maps") as maps:
            mapped = {line.split()[-1] for line in maps if "leveldb" in line}
    yield {
        "host": socket.gethostname(),
        "python": sys.executable,
        "package": spark_statestore.__file__,
        "paths": native.status(),
        "leveldb": sorted(mapped),
        # A covered file is /dev/null (empty); a covered directory an empty tmpfs.
        "builders": {
            path: (os.listdir(path) if os.path.isdir(path) else os.path.getsize(path))
            for path in builders
        },
    }


def main() -> None:
    archive, store, workdir = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    shipped = ShippedEnvironment(archive=archive, name=DEFAULT_NAME, python=sys.executable)
    # The driver's own Python workers (a data source is planned there) run the same relative
    # interpreter, from the directory the driver started in: link it to this environment.
    os.chdir(workdir)
    shipped.link_driver()
    os.environ["PYSPARK_PYTHON"] = shipped.conf["spark.pyspark.python"]
    with LocalSparkCluster(
        workers=2, hidden=[Path(store).parent], prefix="sship", driver_code=False
    ) as cluster:
        spark = cluster.session("spark-statestore-shipped", conf=shipped.conf)
        # A barrier stage runs its two tasks at once: one on each Worker's single core.
        directories, files = builder_paths()
        builders = [str(p) for p in [*directories, *files]]
        tasks = spark.sparkContext.parallelize(range(2), 2).barrier()
        seen = tasks.mapPartitions(lambda part: task_report(part, builders)).collect()
        report: dict[str, object] = {"tasks": seen, "builders": builders}
        import spark_statestore

        spark_statestore.register(spark)
        rows = (
            spark.read.format("spark_statestore")
            .options(keyFormat="string", valueFormat="string")
            .load(store)
            .collect()
        )
        report["rows"] = sorted([r["key"], r["value"]] for r in rows)
        report["workers"] = sorted(h.namespace for h in cluster.hosts.hosts)
    print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
