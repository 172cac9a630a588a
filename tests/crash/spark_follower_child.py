"""Crash-test child: a Spark driver running the follower source on a store.

Usage: python -m tests.crash.spark_follower_child MODE STORE CHECKPOINT BOOTSTRAP CHANGELOG

Builds a local SparkSession the way the integration fixture does and starts
``spark.readStream.format("spark_statestore")`` on STORE with a no-op ``foreachBatch`` sink and
the checkpoint CHECKPOINT. Prints ``started <query id>`` once the query is started.

MODE ``follow``: then waits until it is killed (the parent SIGKILLs the whole process group).
MODE ``available-now``: runs with ``Trigger.AvailableNow``, prints ``done`` when the query
ended without error and exits 0 (1 if the query failed).
"""

from __future__ import annotations

import sys
from typing import Any

import spark_statestore
from spark_statestore.connectors.spark.session import local_session

MODES = ("follow", "available-now")


def ignore_batch(df: Any, batch_id: int) -> None:
    """The sink: the test checks the store the source materializes, not the feed."""


def main() -> int:
    mode, store, checkpoint, bootstrap, changelog = sys.argv[1:6]
    if mode not in MODES:
        print(f"unknown mode {mode!r}, expected one of {MODES}", file=sys.stderr)
        return 2
    spark = local_session("spark-statestore-crash-child")
    spark_statestore.register(spark)
    spark.sparkContext.setLogLevel("ERROR")
    writer = (
        spark.readStream.format("spark_statestore")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("changelog", changelog)
        .load(store)
        .writeStream.foreachBatch(ignore_batch)
        .option("checkpointLocation", checkpoint)
    )
    if mode == "available-now":
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    print(f"started {query.id}", flush=True)
    query.awaitTermination()  # raises when the query fails
    print("done", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
