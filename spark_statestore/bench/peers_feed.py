"""The ``peers`` suite's feed measurement: our follower feed against Spark's own Kafka source.

See :mod:`spark_statestore.bench.peers` for what is measured and how. Spark runs in a child
process (``python -c`` calling :func:`_feed_main`) so that its JVM starts with Spark's Kafka
connector on its classpath.
"""

from __future__ import annotations

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
from spark_statestore.bench.follower import (
    RESTORE_DEADLINE_S,
    TOPIC,
)
from spark_statestore.bench.measure import child_result, interleave, timed
from spark_statestore.bench.spark import MASTER

_log = logging.getLogger(__name__)

_SUITE = "peers"  # the suite this is part of (spark_statestore.bench.peers)

__all__ = ["FeedRates", "FeedRequest", "feed_rates_in_child"]

FORMAT = "spark_statestore"


# -- feed: ours against Spark's Kafka source ----------------------------------------------
# Both sides run in a child process: Spark's Kafka connector must be on the classpath of the
# JVM when it starts, and this process may already run one without it (the spark and sink
# suites start theirs first; a later session's spark.jars does not reach the driver).
@dataclass(frozen=True, slots=True)
class FeedRequest:
    """What the child process measures: both feeds over the changelog at ``bootstrap``."""

    bootstrap: str
    records: int
    root: str
    rounds: int
    warmup: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FeedRequest:
        return cls(
            bootstrap=str(data["bootstrap"]),
            records=int(data["records"]),
            root=str(data["root"]),
            rounds=int(data["rounds"]),
            warmup=bool(data["warmup"]),
        )


@dataclass(frozen=True, slots=True)
class FeedRates:
    """Rows/s of every round of each side, and the child's Spark start-up time."""

    feed: tuple[float, ...]
    spark_kafka: tuple[float, ...]
    spark_startup_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FeedRates:
        return cls(
            feed=tuple(float(rate) for rate in data["feed"]),
            spark_kafka=tuple(float(rate) for rate in data["spark_kafka"]),
            spark_startup_s=float(data["spark_startup_s"]),
        )


def feed_rates_in_child(request: FeedRequest) -> FeedRates:
    """Measure both feeds in a child process (Spark's log: ``<root>/feed-spark.log``)."""
    command = [
        sys.executable,
        "-c",
        "from spark_statestore.bench.peers_feed import _feed_main; _feed_main()",
        json.dumps(request.to_dict()),
    ]
    result, _seconds = child_result(
        _SUITE,
        command,
        "the feed runs",
        Path(request.root) / "feed-spark.log",
        RESTORE_DEADLINE_S * 2 * (request.rounds + 1),
    )
    return FeedRates.from_dict(result)


def _feed_main() -> None:
    """The child process: measure, print the rates (or the BenchError) as one JSON line."""
    logging.basicConfig(level=logging.WARNING)
    request = FeedRequest.from_dict(json.loads(sys.argv[1]))
    try:
        rates = _measure_feeds(request)
    except BenchError as exc:
        # The parent names the suite and the child again.
        print(json.dumps({"error": str(exc).removeprefix(f"bench suite {_SUITE}: ")}), flush=True)
        raise SystemExit(1) from exc
    print(json.dumps(rates.to_dict()), flush=True)


def _measure_feeds(request: FeedRequest) -> FeedRates:
    import spark_statestore
    from spark_statestore.connectors.kafka.errors import JarsMissingError
    from spark_statestore.connectors.spark.session import local_session

    start = time.perf_counter()
    try:
        spark = local_session("spark-statestore-bench", master=MASTER, kafka_source=True)
    except JarsMissingError as exc:
        raise BenchError(
            f"bench suite {_SUITE}: Spark's Kafka source is needed and its jars are missing: {exc}"
        ) from exc
    try:
        spark_statestore.register(spark)
        spark.sparkContext.setLogLevel("ERROR")
        # Every progress report of a run is needed to count its rows; the default keeps 100.
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")
        startup_s = time.perf_counter() - start
        sides: dict[str, Callable[[], float]] = {
            "feed": partial(_feed_run, spark, request, FORMAT),
            "spark_kafka": partial(_feed_run, spark, request, "kafka"),
        }
        if request.warmup:
            for run in sides.values():
                run()
        rates = interleave(sides, request.rounds)
    finally:
        spark.stop()
    return FeedRates(tuple(rates["feed"]), tuple(rates["spark_kafka"]), startup_s)


def _feed_run(spark: Any, request: FeedRequest, source: str) -> float:
    """Rows/s of one availableNow run of ``source`` (``spark_statestore`` into a fresh store,
    or ``kafka``) over the whole changelog into the noop sink."""
    from pyspark.errors import StreamingQueryException

    run_dir = tempfile.mkdtemp(prefix=f"feed-{source}-", dir=request.root)
    what = "our follower feed" if source == FORMAT else "Spark's Kafka source"
    try:
        reader = spark.readStream.format(source).option(
            "kafka.bootstrap.servers", request.bootstrap
        )
        if source == FORMAT:
            frame = reader.option("changelog", TOPIC).load(os.path.join(run_dir, "store"))
        else:
            frame = (
                reader.option("subscribe", TOPIC)
                .option("startingOffsets", "earliest")
                .option("kafka.isolation.level", "read_committed")
                .load()
            )
        writer = (
            frame.writeStream.format("noop")
            .option("checkpointLocation", os.path.join(run_dir, "checkpoint"))
            .trigger(availableNow=True)
        )
        queries: list[Any] = []
        try:
            seconds = timed(partial(_start_and_await, writer, queries))
        except StreamingQueryException as exc:
            raise BenchError(
                f"bench suite {_SUITE}: the query reading {what} failed: {exc}"
            ) from exc
        finally:
            for query in queries:
                query.stop()
        rows = sum(progress["numInputRows"] for progress in queries[0].recentProgress)
        if rows != request.records:
            raise BenchError(
                f"bench suite {_SUITE}: {what} delivered {rows:,} rows of {TOPIC}, which holds "
                f"{request.records:,} records; its rate would be meaningless"
            )
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    return request.records / seconds


def _start_and_await(writer: Any, queries: list[Any]) -> None:
    query = writer.start()
    queries.append(query)
    query.awaitTermination()
