"""A Spark Connect client program, as a notebook would run it: one scenario per run.

``python -m tests.integration.connect_client SCENARIO`` reads its arguments (JSON, with the
server's ``url``) from stdin, connects with ``SparkSession.builder.remote(url)``, runs the
scenario and prints ``REPORT <json>``: what the client saw, for the test to compare with
ground truth it reads itself (Kafka, the stores on disk).

It runs in a process of its own, never inside pytest's: PySpark allows no remote session in a
process with a classic one (``SESSION_ALREADY_EXIST``), and a process that holds both gets
classic columns from ``pyspark.sql.functions`` for its Connect DataFrames (``is_remote()`` is
process-wide). Run as ``__main__``, the functions a scenario sends to the server
(``foreachBatch``) travel by value, as a notebook's do.
"""

from __future__ import annotations

import json
import sys
from typing import Any

FORMAT = "spark_statestore"


def _error(exc: BaseException) -> dict[str, str]:
    return {"type": f"{type(exc).__module__}.{type(exc).__name__}", "message": str(exc)}


def read(spark: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Snapshot reads by format name and through SQL before any ``register`` call (the
    server's Python has the package installed, so Spark registered it by itself), then a
    source registered by the client."""
    path = args["path"]
    strings = {"keyFormat": "string", "valueFormat": "string"}

    def rows(df: Any) -> list[list[Any]]:
        return sorted([r["key"], r["value"], r["partition"], r["offset"]] for r in df.collect())

    report: dict[str, Any] = {}
    report["format"] = rows(spark.read.format(FORMAT).options(**strings).load(path))
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW connect_read USING {FORMAT} "
        f"OPTIONS (path '{path}', keyFormat 'string', valueFormat 'string')"
    )
    report["sql"] = rows(spark.sql("SELECT key, value, partition, offset FROM connect_read"))
    position = spark.read.format(FORMAT).option("view", "position").load(path).collect()
    report["position"] = sorted([r["topic"], r["partition"], r["offset"]] for r in position)
    try:
        spark.read.format(FORMAT).option("keyFromat", "string").load(path).collect()
        report["misspelled"] = None
    except Exception as exc:
        report["misspelled"] = _error(exc)

    # Registration from the client: what spark_statestore.register does, under a name the
    # server cannot have found by itself (the class travels by value, its base by name).
    import spark_statestore
    from spark_statestore.connectors.spark.datasource import StateStoreDataSource

    spark_statestore.register(spark)

    class Probe(StateStoreDataSource):
        @classmethod
        def name(cls) -> str:
            return "spark_statestore_probe"

    spark.dataSource.register(Probe)
    report["registered"] = rows(spark.read.format(Probe.name()).options(**strings).load(path))
    return report


def follow(spark: Any, args: dict[str, Any]) -> dict[str, Any]:
    """A follower query into a memory sink, and SQL over the live store while it runs."""
    import spark_statestore

    spark_statestore.register(spark)
    path = args["path"]
    feed = (
        spark.readStream.format(FORMAT)
        .option("kafka.bootstrap.servers", args["bootstrap"])
        .option("changelog", args["changelog"])
        .option("keyFormat", "string")
        .option("valueFormat", "string")
        .load(path)
    )
    query = (
        feed.writeStream.format("memory")
        .queryName("connect_feed")
        .option("checkpointLocation", args["checkpoint"])
        .start()
    )
    report: dict[str, Any] = {}
    try:
        query.processAllAvailable()
        report["feed"] = [
            [r["key"], r["value"], r["partition"], r["offset"], r["op"], r["position"]]
            for r in spark.sql("SELECT * FROM connect_feed").collect()
        ]
        spark.sql(
            f"CREATE OR REPLACE TEMPORARY VIEW connect_live USING {FORMAT} "
            f"OPTIONS (path '{path}', keyFormat 'string', valueFormat 'string')"
        )
        report["live"] = {
            r["key"]: r["value"] for r in spark.sql("SELECT * FROM connect_live").collect()
        }
        meta = spark.read.format(FORMAT).option("view", "metadata").load(path).collect()[0]
        report["owner_pid"], report["flight_location"] = meta["owner_pid"], meta["flight_location"]
        report["exception"] = None if query.exception() is None else str(query.exception())
    finally:
        query.stop()
    return report


def sink(spark: Any, args: dict[str, Any]) -> dict[str, Any]:
    """The streaming sink publishing a changelog, and the batch writer inside foreachBatch
    for an update-mode aggregation (each version written twice: a retried foreachBatch)."""
    import spark_statestore

    spark_statestore.register(spark)
    schema = "key STRING, value STRING, topic STRING, partition INT, offset BIGINT"
    report: dict[str, Any] = {}
    leader = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", 1)
        .json(args["source"])
        .writeStream.format(FORMAT)
        .option("checkpointLocation", args["checkpoint"])
        .option("kafka.bootstrap.servers", args["bootstrap"])
        .option("changelog", args["changelog"])
        .option("application.id", args["application_id"])
        .start(args["store"])
    )
    try:
        leader.processAllAvailable()
        report["leader_batches"] = sorted(p["batchId"] for p in leader.recentProgress)
    finally:
        leader.stop()

    counts_store = args["counts_store"]

    def upsert(df: Any, batch_id: int) -> None:
        for _ in range(2):
            (
                df.write.format("spark_statestore")
                .mode("append")
                .option("txnAppId", "connect-counts")
                .option("txnVersion", batch_id)
                .save(counts_store)
            )

    counts = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", 1)
        .json(args["counts_source"])
        .groupBy("key")
        .count()
        .selectExpr("key", "CAST(count AS STRING) AS value")
    )
    writer = (
        counts.writeStream.outputMode("update")
        .foreachBatch(upsert)
        .option("checkpointLocation", args["counts_checkpoint"])
        .start()
    )
    try:
        writer.processAllAvailable()
        report["counts_batches"] = sorted(p["batchId"] for p in writer.recentProgress)
    finally:
        writer.stop()
    return report


def enrich(spark: Any, args: dict[str, Any]) -> dict[str, Any]:
    """``spark_statestore.enrich`` (mapInArrow on the executors) on a client's DataFrame."""
    import spark_statestore

    items = args["items"]
    df = spark.createDataFrame([(item, n) for n, item in enumerate(items)], "item STRING, n INT")
    enriched = spark_statestore.enrich(
        df.repartition(2),
        args["path"],
        key_column="item",
        value_column="price",
        key_format="string",
        value_format="long",
    )
    return {
        "columns": enriched.columns,
        "rows": sorted((list(r) for r in enriched.collect()), key=lambda r: r[1]),
    }


SCENARIOS = {"read": read, "follow": follow, "sink": sink, "enrich": enrich}


def main() -> None:
    from pyspark.sql import SparkSession

    scenario = SCENARIOS[sys.argv[1]]
    args = json.loads(sys.stdin.read())
    spark = SparkSession.builder.remote(args["url"]).getOrCreate()
    assert type(spark).__module__ == "pyspark.sql.connect.session", type(spark)
    try:
        report = scenario(spark, args)
    finally:
        spark.stop()
    print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
