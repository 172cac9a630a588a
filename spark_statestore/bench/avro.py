"""The ``avro`` suite: Avro values in our change feed and snapshot scan against Spark's own
``from_avro`` decoding the same bytes from Spark's Kafka source.

One changelog of framed Avro values (the registry serializers' frame: magic byte, schema id,
Avro binary; written with fastavro) is read in four ways, each into Spark's ``noop`` sink with
every field of the value selected, so that both sides decode every value:

* ``avro_feed_vs_from_avro``: ``readStream.format("spark_statestore")`` with ``valueFormat
  avro`` into a fresh store, against ``readStream.format("kafka")`` with
  ``from_avro(substring(value, 6), schema)`` (the frame cut off, as users of ``from_avro``
  do for registry-framed values), both ``availableNow``;
* ``avro_scan_vs_from_avro``: ``read.format("spark_statestore")`` of the store the feed
  built (one value per key), against ``read.format("kafka")`` with ``from_avro`` over the
  whole topic (the same bytes, once per record: the store holds fewer values when keys
  repeat, so the rate counts the rows each side delivered).

Spark runs in a child process whose JVM starts with the Kafka and Avro connectors.
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

from spark_statestore.bench.errors import BenchError
from spark_statestore.bench.measure import (
    BenchOptions,
    Measurement,
    child_result,
    interleave,
    timed,
)
from spark_statestore.bench.spark import MASTER

__all__ = ["AVRO_SCHEMA", "run_avro_suite"]

_log = logging.getLogger(__name__)

SUITE = "avro"
TOPIC = "bench-avro-changelog"
PARTITIONS = 4
SCHEMA_ID = 1
FORMAT = "spark_statestore"
DEADLINE_S = 1800.0
AVRO_SCHEMA: Mapping[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["OPEN", "DONE"]}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "items", "type": {"type": "array", "items": "string"}},
    ],
}
"""The values' schema: the field kinds of a typical order record."""


def run_avro_suite(options: BenchOptions) -> list[Measurement]:
    """Measure the avro format's feed and scan against ``from_avro`` on the same bytes.

    Raises
    ------
    BenchError
        The broker or Spark does not start, or a side did not read every row.
    """
    from spark_statestore.connectors.kafka.local.child import broker_child

    records = options.records
    with (
        tempfile.TemporaryDirectory(prefix="spark-statestore-bench-avro-") as root,
        broker_child(
            Path(root) / "broker.log", [f"{TOPIC}:{PARTITIONS}"], who=f"bench suite {SUITE}"
        ) as bootstrap,
    ):
        start = time.perf_counter()
        keys = _produce(bootstrap, records)
        _log.info(
            "bench suite %s: wrote %d Avro records in %.1f s",
            SUITE,
            records,
            time.perf_counter() - start,
        )
        request = AvroRequest(bootstrap, records, keys, root, options.rounds, not options.quick)
        result, _ = child_result(
            SUITE,
            [
                sys.executable,
                "-c",
                "from spark_statestore.bench.avro import _main; _main()",
                json.dumps(asdict(request)),
            ],
            "the avro reads",
            Path(root) / "avro-spark.log",
            DEADLINE_S * (options.rounds + 1),
        )
    common = {
        "records": records,
        "distinct_keys": keys,
        "partitions": PARTITIONS,
        "schema": "record of long, string, double, timestamp-millis, enum, optional string, "
        "array<string>",
        "frame": "registry serializers' (magic byte, 4-byte id), written with fastavro",
        "decoding": "ours: the compiled path (arrow-avro in the extension, a batch straight "
        "into Arrow) when the extension is installed, else fastavro per record; Spark: "
        "from_avro in the JVM",
        "spark_master": MASTER,
        "rounds": options.rounds,
        "warmup_runs": 0 if options.quick else 1,
        "sink": "noop, every field of the value selected",
    }
    return [
        Measurement(
            suite=SUITE,
            name="avro_feed_vs_from_avro",
            unit="rows/s",
            candidate="readStream.format('spark_statestore') valueFormat avro into a fresh "
            "store -> select(value.*) -> noop, availableNow",
            baseline="readStream.format('kafka') -> from_avro(substring(value, 6)) -> noop, "
            "availableNow (same topic)",
            candidate_rates=tuple(result["feed"]),
            baseline_rates=tuple(result["feed_from_avro"]),
            target=1.0,
            parameters=common,
        ),
        Measurement(
            suite=SUITE,
            name="avro_scan_vs_from_avro",
            unit="rows/s",
            candidate="read.format('spark_statestore') valueFormat avro (the store the feed "
            "built) -> select(value.*) -> noop",
            baseline="read.format('kafka') -> from_avro(substring(value, 6)) -> noop (the "
            "same topic)",
            candidate_rates=tuple(result["scan"]),
            baseline_rates=tuple(result["scan_from_avro"]),
            target=1.0,
            parameters=common,
        ),
    ]


@dataclass(frozen=True, slots=True)
class AvroRequest:
    """What the child process measures."""

    bootstrap: str
    records: int
    keys: int
    root: str
    rounds: int
    warmup: bool


def _produce(bootstrap: str, records: int) -> int:
    """Write ``records`` framed Avro values (keys repeat every 4th record); the number of
    distinct keys."""
    import fastavro
    from confluent_kafka import Producer

    from spark_statestore.schemas import encode_frame

    parsed = fastavro.parse_schema(dict(AVRO_SCHEMA))
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 50, "compression.type": "lz4"}
    )
    distinct = max(1, records * 3 // 4)
    for number in range(records):
        out = io.BytesIO()
        fastavro.schemaless_writer(
            out,
            parsed,
            {
                "id": number,
                "customer": f"customer-{number % 997}",
                "amount": number * 0.25,
                "placed": 1_790_000_000_000 + number,
                "status": "OPEN" if number % 3 else "DONE",
                "note": None if number % 2 else "gift",
                "items": [f"sku-{number % 10}", f"sku-{number % 7}"],
            },
        )
        key = b"key-%012d" % (number % distinct)
        while True:
            try:
                producer.produce(TOPIC, key=key, value=encode_frame(SCHEMA_ID, out.getvalue()))
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(120):
        raise BenchError(f"bench suite {SUITE}: the Avro records were not all delivered")
    return distinct


def _main() -> None:
    """The child process: measure, print the rates (or the BenchError) as one JSON line."""
    logging.basicConfig(level=logging.WARNING)
    request = AvroRequest(**json.loads(sys.argv[1]))
    try:
        rates = _measure(request)
    except BenchError as exc:
        print(json.dumps({"error": str(exc).removeprefix(f"bench suite {SUITE}: ")}), flush=True)
        raise SystemExit(1) from exc
    print(json.dumps(rates), flush=True)


def _measure(request: AvroRequest) -> dict[str, list[float]]:
    import spark_statestore
    from spark_statestore.connectors.spark.session import local_session

    spark = local_session("spark-statestore-bench-avro", master=MASTER, kafka_source=True)
    try:
        spark_statestore.register(spark)
        spark.sparkContext.setLogLevel("ERROR")
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")
        store = os.path.join(request.root, "scan-store")
        _feed(spark, request, store)  # the store the scans read (and a warm JVM)
        sides: dict[str, Callable[[], float]] = {
            "feed": partial(_feed, spark, request, None),
            "feed_from_avro": partial(_feed_from_avro, spark, request),
            "scan": partial(_scan, spark, request, store),
            "scan_from_avro": partial(_scan_from_avro, spark, request),
        }
        if request.warmup:
            for run in sides.values():
                run()
        return interleave(sides, request.rounds)
    finally:
        spark.stop()


def _avro_options() -> dict[str, str]:
    return {
        "keyFormat": "string",
        "valueFormat": "avro",
        "valueSchema": json.dumps(AVRO_SCHEMA),
        "valueSchemaId": str(SCHEMA_ID),
    }


def _feed(spark: Any, request: AvroRequest, store: str | None) -> float:
    run_dir = tempfile.mkdtemp(prefix="avro-feed-", dir=request.root)
    try:
        frame = (
            spark.readStream.format(FORMAT)
            .option("kafka.bootstrap.servers", request.bootstrap)
            .option("changelog", TOPIC)
            .options(**_avro_options())
            .load(store or os.path.join(run_dir, "store"))
            .select("key", "value.*")
        )
        return _stream_rate(frame, run_dir, request.records, "our avro feed")
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _feed_from_avro(spark: Any, request: AvroRequest) -> float:
    run_dir = tempfile.mkdtemp(prefix="avro-kafka-", dir=request.root)
    try:
        frame = _from_avro(
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", request.bootstrap)
            .option("subscribe", TOPIC)
            .option("startingOffsets", "earliest")
            .option("kafka.isolation.level", "read_committed")
            .load()
        )
        return _stream_rate(frame, run_dir, request.records, "Spark's Kafka source")
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _scan(spark: Any, request: AvroRequest, store: str) -> float:
    frame = (
        spark.read.format(FORMAT).options(**_avro_options()).load(store).select("key", "value.*")
    )
    seconds = timed(lambda: frame.write.format("noop").mode("overwrite").save())
    return request.keys / seconds


def _scan_from_avro(spark: Any, request: AvroRequest) -> float:
    frame = _from_avro(
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", request.bootstrap)
        .option("subscribe", TOPIC)
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    seconds = timed(lambda: frame.write.format("noop").mode("overwrite").save())
    return request.records / seconds


def _from_avro(frame: Any) -> Any:
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    payload = F.expr("substring(value, 6, length(value) - 5)")
    return frame.select(
        F.col("key").cast("string").alias("key"),
        from_avro(payload, json.dumps(AVRO_SCHEMA)).alias("value"),
    ).select("key", "value.*")


def _stream_rate(frame: Any, run_dir: str, records: int, what: str) -> float:
    from pyspark.errors import StreamingQueryException

    writer = (
        frame.writeStream.format("noop")
        .option("checkpointLocation", os.path.join(run_dir, "checkpoint"))
        .trigger(availableNow=True)
    )
    queries: list[Any] = []

    def run() -> None:
        query = writer.start()
        queries.append(query)
        query.awaitTermination()

    try:
        seconds = timed(run)
    except StreamingQueryException as exc:
        raise BenchError(f"bench suite {SUITE}: the query reading {what} failed: {exc}") from exc
    finally:
        for query in queries:
            query.stop()
    rows = sum(progress["numInputRows"] for progress in queries[0].recentProgress)
    if rows != records:
        raise BenchError(
            f"bench suite {SUITE}: {what} delivered {rows:,} rows of {TOPIC}, which holds "
            f"{records:,} records; its rate would be meaningless"
        )
    return records / seconds
