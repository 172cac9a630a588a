"""The ``enrich`` suite: :func:`spark_statestore.enrich` against the join a Spark user would
write instead, in the same run.

The store is the ``spark`` suite's (``records`` rows of 16-byte keys and 32-byte values, with
a Parquet copy of its rows). The input is ``records`` rows whose keys are random store keys
(one in ten absent from the store). One timed run consumes the enriched rows, counting them
and the bytes of the values found:

- ``enrich_owner``: ``enrich`` through the store's live owner (a Flight server in this
  process; one lookup exchange, in one snapshot, per Arrow batch);
- the baseline: a left join of the input with ``broadcast(read.parquet(copy))``, Spark's own
  fastest lookup join against a table that fits in memory.

Both must return the same counts, or the suite fails. No target: reported for information.
"""

from __future__ import annotations

import logging
import tempfile
import time
from functools import partial
from typing import Any

from spark_statestore.bench.errors import BenchError
from spark_statestore.bench.measure import BenchOptions, Measurement, timed
from spark_statestore.bench.spark import (
    KEY_FORMAT,
    MASTER,
    VALUE_FORMAT,
    Dataset,
    build_dataset,
    interleave_warm,
    open_store,
    spark_records,
    spark_session,
)

__all__ = ["SUITE", "run_enrich_suite"]

_log = logging.getLogger(__name__)

SUITE = "enrich"
ABSENT_ONE_IN = 10
_CONSUME = ("count(*) AS n", "count(value) AS found", "sum(length(value)) AS value_bytes")


def run_enrich_suite(options: BenchOptions) -> list[Measurement]:
    """Measure ``enrich`` through a live owner against a broadcast join of a Parquet copy.

    Raises
    ------
    BenchError
        If the two sides return different counts.
    """
    from spark_statestore.serve import StoreServer

    records = spark_records(options)
    with tempfile.TemporaryDirectory(prefix="spark-statestore-bench-") as root:
        start = time.perf_counter()
        data = build_dataset(root, records)
        _log.info(
            "bench suite %s: wrote %d rows in %.1f s", SUITE, records, time.perf_counter() - start
        )
        with spark_session() as (spark, startup_s, started):
            store = open_store(data.store_path, "spark-statestore bench (enrich owner)")
            try:
                with StoreServer(store):
                    rates = interleave_warm(
                        {
                            "enrich": partial(_enrich_run, spark, data, options.seed),
                            "join": partial(_join_run, spark, data, options.seed),
                        },
                        options.rounds,
                    )
            finally:
                store.close()
    return [
        Measurement(
            suite=SUITE,
            name="enrich_owner",
            unit="rows/s",
            candidate="spark_statestore.enrich through the live owner (multi-get per batch)",
            baseline="left join with broadcast(read.parquet(copy of the store))",
            candidate_rates=tuple(rates["enrich"]),
            baseline_rates=tuple(rates["join"]),
            target=None,
            parameters={
                "records": records,
                "input_rows": records,
                "absent_keys": f"1 in {ABSENT_ONE_IN}",
                "key_bytes": len(KEY_FORMAT % 0),
                "value_bytes": len(VALUE_FORMAT % 0),
                "consume": f"selectExpr({', '.join(_CONSUME)}).collect()",
                "spark_master": MASTER,
                "spark_startup_s": round(startup_s, 3),
                "spark_session": "started" if started else "reused",
                "rounds": options.rounds,
            },
        )
    ]


def _input(spark: Any, data: Dataset, seed: int) -> Any:
    """``records`` rows of random store keys (binary), one in :data:`ABSENT_ONE_IN` absent."""
    return spark.range(data.records).selectExpr(
        f"CAST(IF(pmod(hash(id, {seed}), {ABSENT_ONE_IN}) = 0, "
        f"format_string('nokey-%012d', id), "
        f"format_string('key-%012d', pmod(hash(id, {seed + 1}), {data.records}))) AS BINARY) "
        "AS key",
    )


def _expected(spark: Any, data: Dataset, seed: int) -> tuple[int, int, int]:
    row = (
        _input(spark, data, seed)
        .selectExpr(
            "count(*)",
            "count_if(NOT startswith(CAST(key AS STRING), 'nokey'))",
        )
        .collect()[0]
    )
    found = int(row[1])
    return int(row[0]), found, found * len(VALUE_FORMAT % 0)


def _enrich_run(spark: Any, data: Dataset, seed: int) -> float:
    import spark_statestore

    enriched = spark_statestore.enrich(_input(spark, data, seed), data.store_path, key_column="key")
    return _timed_consume(spark, data, seed, enriched, "enrich")


def _join_run(spark: Any, data: Dataset, seed: int) -> float:
    from pyspark.sql.functions import broadcast

    table = broadcast(spark.read.parquet(data.parquet_dir).select("key", "value"))
    joined = _input(spark, data, seed).join(table, "key", "left")
    return _timed_consume(spark, data, seed, joined, "broadcast join")


def _timed_consume(spark: Any, data: Dataset, seed: int, df: Any, what: str) -> float:
    result: list[Any] = []
    seconds = timed(lambda: result.append(df.selectExpr(*_CONSUME).collect()[0]))
    got = tuple(int(v or 0) for v in result[0])
    expected = _expected(spark, data, seed)
    if got != expected:
        raise BenchError(
            f"bench suite {SUITE}: the {what} returned (rows, found, value bytes) {got}, "
            f"expected {expected}; its rate would be meaningless"
        )
    return data.records / seconds
