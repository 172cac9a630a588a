"""Crash-test child: a Spark driver running the transactional sink over a JSON file source.

Usage: python -m tests.crash.sink_child INPUT STORE CHECKPOINT BOOTSTRAP CHANGELOG APP_ID
[UNCOMMITTED_MAX_BYTES]

``-`` for BOOTSTRAP, CHANGELOG and APP_ID: no changelog (the sink's deferred commits).

Builds a local SparkSession the way the integration fixture does and runs
``spark.readStream.json(INPUT).writeStream.format("spark_statestore")`` into STORE with the
checkpoint CHECKPOINT, publishing to CHANGELOG (owned by APP_ID). ``maxFilesPerTrigger=1``
makes each input file one micro-batch, in the order of their modification times (after a
crash Spark may put two files in one batch: see :class:`tests.crash.test_sink_crash.Input`).
Files are split into tasks of at most :data:`MAX_PARTITION_BYTES`, so a batch usually commits
several staged files.

Prints ``started <query id>`` once the query is started, then ``done`` once every file present
at start is committed (``processAllAvailable``), and exits 0; a failed query exits 1.

The crash tests set ``SPARK_STATESTORE_CRASH_AT`` in this process's environment (see
:mod:`spark_statestore.store.crash`); unless ``SPARK_STATESTORE_CRASH_PGID`` is set too, this
process sets it to its own process group before Spark starts, so the JVM and Spark's Python workers
(which inherit the environment) kill the whole driver at the point.
"""

from __future__ import annotations

import os
import sys

import spark_statestore
from spark_statestore.connectors.spark.session import local_session
from spark_statestore.store.crash import CRASH_AT, CRASH_PGID

SERVE = "SPARK_STATESTORE_TEST_SINK_SERVE"
"""Set (to anything): the query writes with option ``serve`` (the sink's store server)."""
SCHEMA = "key STRING, value STRING, topic STRING, partition INT, offset BIGINT, timestamp BIGINT"
MAX_PARTITION_BYTES = 1024 * 1024
"""Task split size (Spark also splits a file over the 2 cores): a batch of a few hundred KB of
JSON gives two tasks, so two staged files; a 5 MB batch five."""


def main() -> int:
    if len(sys.argv) not in (7, 8):
        print(__doc__, file=sys.stderr)
        return 2
    source, store, checkpoint, bootstrap, changelog, app_id = sys.argv[1:7]
    if os.environ.get(CRASH_AT):
        os.environ.setdefault(CRASH_PGID, str(os.getpgrp()))
    spark = local_session("spark-statestore-sink-crash-child")
    spark_statestore.register(spark)
    spark.sparkContext.setLogLevel("ERROR")
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(MAX_PARTITION_BYTES))
    spark.conf.set("spark.sql.files.openCostInBytes", "0")
    writer = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(source)
        .writeStream.format("spark_statestore")
        .option("checkpointLocation", checkpoint)
    )
    if changelog != "-":
        writer = (
            writer.option("kafka.bootstrap.servers", bootstrap)
            .option("changelog", changelog)
            .option("application.id", app_id)
        )
    if len(sys.argv) == 8:
        writer = writer.option("uncommitted.max.bytes", sys.argv[7])
    if os.environ.get(SERVE):
        writer = writer.option("serve", "true")
    query = writer.start(store)
    print(f"started {query.id}", flush=True)
    try:
        query.processAllAvailable()  # raises when the query fails
    finally:
        query.stop()
    print("done", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
