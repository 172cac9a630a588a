"""The ``spark`` suite: Spark reading a live store against Spark reading the same rows from
Parquet.

Setup (not timed): a follower store of :func:`spark_records` records over 8 changelog
partitions (16-byte keys, 32-byte values, offsets and changelog offsets per partition) is
written directly with store transactions, and its snapshot's rows are written once to one
Parquet file (pyarrow, snappy, the store's Arrow schema). A local ``local[2]`` SparkSession
is started (or the active one reused); its start-up time is reported as the parameter
``spark_startup_s``, never inside a rate.

Every timed query builds a fresh DataFrame (PySpark 4.x replays a DataFrame's planned read
for its later queries), loads the source and consumes it completely in Spark
with one aggregate over all five columns (:data:`CONSUME`); the aggregate's result is
checked against the rows written, so a path that read the wrong rows fails the run.

``scan_owner``
    Rows/s of ``spark.read.format("spark_statestore").load(path)`` while this process owns
    the store and serves it over Flight (:class:`~spark_statestore.serve.StoreServer`), as a
    running follower query does: the reader pins a snapshot and streams it from the owner.
    The owner's scan counters check that every row went through it. Baseline:
    ``spark.read.parquet(dir)``, consumed the same way.
``lookup_keys``
    Queries/s (one key per query; its latency is in the parameters) of a read with the
    ``keys`` option (one point read through the owner) against the same lookup written as
    ``WHERE substr(key, 1, 16) = X'..'``, which no Spark version pushes, so the reader scans
    every row and Spark filters them. (On PySpark 4.x the reader pushes no filter at all:
    Spark replays a relation's pushed plan for its later scans; see ``lookup.py``.) The
    owner's counters check both plans.
``scan_local``
    Like ``scan_owner`` with no live owner: the server is stopped and the store closed, so
    the driver's store host reads a private checkpoint of the store and streams it to the
    task (executors never open a store's files). Baseline: Parquet again, interleaved with it.
``scan_raw_source``
    The raw limit of the two scans above: a Python data source that yields one ready-made
    Arrow batch of the reader's schema again and again, in one task as they run, consumed
    with the same aggregate (only its row count is checked). Baseline: Parquet again.

Each measurement interleaves its two sides for ``rounds`` rounds after one untimed warm-up
run of each side (JIT, Python worker start-up); there is no target.

Size: :data:`DEFAULT_RECORDS` unless ``--records`` (or ``--quick``) says otherwise. Since
:class:`~spark_statestore.bench.measure.BenchOptions` does not record whether ``--records``
was given, a ``records`` equal to the bench-wide default counts as "not given".
"""

from __future__ import annotations

import json
import logging
import os
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from spark_statestore.bench.errors import BenchError
from spark_statestore.bench.measure import BenchOptions, Measurement, interleave, timed
from spark_statestore.bench.raw_source import RAW_BATCH_ROWS, RAW_SOURCE, raw_source_class
from spark_statestore.store import Role, Store, StoreOptions, StoreSpec

_log = logging.getLogger(__name__)

__all__ = [
    "CONSUME",
    "DEFAULT_RECORDS",
    "MASTER",
    "PARTITIONS",
    "SUITE",
    "run_spark_suite",
    "spark_records",
    "spark_session",
]

SUITE = "spark"
DEFAULT_RECORDS = 1_000_000
"""Store rows of a run without ``--records``."""
PARTITIONS = 8
CHANGELOG_TOPIC = "bench-changelog"
KEY_FORMAT = b"key-%012d"  # 16 bytes
VALUE_FORMAT = b"value-%026d"  # 32 bytes
CONSUME = (
    "count(*) AS rows",
    "sum(length(key) + length(value)) AS bytes",
    "sum(partition) AS partitions",
    "sum(offset) AS offsets",
    "max(unix_millis(timestamp)) AS latest",
)
"""The aggregate every scan is consumed with: it reads every column of every row."""
FORMAT = "spark_statestore"
_SPEC = StoreSpec(Role.FOLLOWER, CHANGELOG_TOPIC, PARTITIONS)
_TIMESTAMP_MS = 1_700_000_000_000
_LOAD_CHUNK = 100_000
MASTER = "local[2]"

Checksum = tuple[int, int, int, int, int]
"""What :data:`CONSUME` returns: rows, key + value bytes, sum of partitions, sum of offsets,
latest timestamp (ms)."""


def spark_records(options: BenchOptions) -> int:
    """Store rows for this run: ``options.records`` when ``--records`` or ``--quick`` chose
    it, else :data:`DEFAULT_RECORDS`."""
    if options.quick or options.records != BenchOptions().records:
        return options.records
    return DEFAULT_RECORDS


@dataclass(frozen=True, slots=True)
class Dataset:
    """The store and the Parquet copy of its rows, and what reading either must return."""

    store_path: str
    parquet_dir: str
    records: int
    parquet_bytes: int
    checksum: Checksum

    def lookup_keys(self, count: int, seed: int) -> list[tuple[bytes, bytes]]:
        """``count`` existing (key, value) pairs in a fixed random order."""
        rng = random.Random(seed)
        picks = [rng.randrange(self.records) for _ in range(count)]
        return [(KEY_FORMAT % i, VALUE_FORMAT % i) for i in picks]


def run_spark_suite(options: BenchOptions) -> list[Measurement]:
    """Measure Spark reading a live store (scans and key lookups) against Spark reading the
    same rows from Parquet, and reading the store without a live owner.

    Parameters
    ----------
    options
        Rounds and ``records`` (see :func:`spark_records`).

    Returns
    -------
    list of Measurement
        ``scan_owner``, ``lookup_keys``, ``scan_local`` and ``scan_raw_source``, without
        targets.

    Raises
    ------
    BenchError
        If a path returned other rows than were written, or did not read the way it claims
        (through the owner, with or without pushdown).
    """
    from spark_statestore.serve import StoreServer

    records = spark_records(options)
    rounds = options.rounds
    with tempfile.TemporaryDirectory(prefix="spark-statestore-bench-") as root:
        start = time.perf_counter()
        data = build_dataset(root, records)
        _log.info(
            "bench suite %s: wrote %d rows to a store and to Parquet in %.1f s",
            SUITE,
            records,
            time.perf_counter() - start,
        )
        with spark_session() as (spark, startup_s, started):
            _log.info("bench suite %s: Spark session ready in %.1f s", SUITE, startup_s)
            parquet = partial(scan_run, spark, data, "parquet", None)
            store = open_store(data.store_path, "spark-statestore bench (live owner)")
            try:
                with StoreServer(store) as server:
                    owner = ScanOwner(server.location, server.token)
                    scan = partial(scan_run, spark, data, "store", owner)
                    owner_rates = interleave_warm({"store": scan, "parquet": parquet}, rounds)
                    keys = data.lookup_keys(rounds + 1, options.seed)
                    lookup_rates = interleave_warm(
                        {
                            "keys_option": partial(
                                _lookup_run, spark, data, owner, iter(keys), by_option=True
                            ),
                            "full_scan": partial(
                                _lookup_run, spark, data, owner, iter(keys), by_option=False
                            ),
                        },
                        rounds,
                    )
            finally:
                store.close()
            local = partial(scan_run, spark, data, "store", None)
            local_rates = interleave_warm({"store": local, "parquet": parquet}, rounds)
            spark.dataSource.register(raw_source_class())
            raw = partial(raw_run, spark, data)
            raw_rates = interleave_warm({"store": raw, "parquet": parquet}, rounds)
    common = {
        "records": records,
        "partitions": PARTITIONS,
        "key_bytes": len(KEY_FORMAT % 0),
        "value_bytes": len(VALUE_FORMAT % 0),
        "spark_master": MASTER,
        "spark_startup_s": round(startup_s, 3),
        "spark_session": "started" if started else "reused",
        "rounds": rounds,
    }
    scan_parameters = {
        **common,
        "consume": f"selectExpr({', '.join(CONSUME)}).collect()",
        "parquet_files": 1,
        "parquet_bytes": data.parquet_bytes,
    }

    def scan_measurement(
        name: str, rates: dict[str, list[float]], candidate: str, store_access: str
    ) -> Measurement:
        return Measurement(
            suite=SUITE,
            name=name,
            unit="rows/s",
            candidate=candidate,
            baseline="Spark read.parquet (same rows, same aggregate)",
            candidate_rates=tuple(rates["store"]),
            baseline_rates=tuple(rates["parquet"]),
            target=None,
            parameters={**scan_parameters, "store_access": store_access},
        )

    lookup = Measurement(
        suite=SUITE,
        name="lookup_keys",
        unit="queries/s",
        candidate="Spark read with the keys option (a point read by the live owner)",
        baseline="same lookup as substr(key) filter (full scan)",
        candidate_rates=tuple(lookup_rates["keys_option"]),
        baseline_rates=tuple(lookup_rates["full_scan"]),
        target=None,
        parameters={
            **common,
            "keys_per_query": 1,
            "candidate_option": "keys '[\"hex:<16 bytes>\"]' (one point read)",
            "baseline_filter": "substr(key, 1, 16) = X'<16 bytes>' (not pushed: full scan)",
            "candidate_latency_ms": round(1000 / max(lookup_rates["keys_option"]), 1),
            "baseline_latency_ms": round(1000 / max(lookup_rates["full_scan"]), 1),
            "seed": options.seed,
        },
    )
    return [
        scan_measurement(
            "scan_owner",
            owner_rates,
            "Spark read of the store via its live owner",
            "pinned snapshot streamed by the owner's Flight server (this process)",
        ),
        lookup,
        scan_measurement(
            "scan_local",
            local_rates,
            "Spark read of the store, no live owner",
            "the driver's store host streams a private checkpoint to the task",
        ),
        scan_measurement(
            "scan_raw_source",
            raw_rates,
            "a Python data source yielding ready-made Arrow batches of the reader's schema "
            "(the API's own limit: no store, no Flight, no decoding)",
            f"none: one {RAW_BATCH_ROWS}-row batch built per task and yielded again and again "
            "(rows not the store's: only their count is checked)",
        ),
    ]


def interleave_warm(runs: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """:func:`interleave` after one untimed run of each side: the first query of a kind
    pays for JIT compilation and Python worker start-up, seconds that belong to neither
    side's rate."""
    for run in runs.values():
        run()
    return interleave(runs, rounds)


# -- timed paths ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ScanOwner:
    """The live owner's Flight location and token, for its scan counters."""

    location: str
    token: str
    tls_root_certs: bytes | None = None

    def rows_examined(self) -> int:
        from spark_statestore.serve import StoreClient

        client = StoreClient(self.location, token=self.token, tls_root_certs=self.tls_root_certs)
        with client:
            return client.stats()["rows_examined"]


def scan_run(spark: Any, data: Dataset, source: str, owner: ScanOwner | None) -> float:
    """Rows/s of one fully consumed read of ``source`` (``"store"`` or ``"parquet"``)."""
    if source == "parquet":

        def load() -> Any:
            return spark.read.parquet(data.parquet_dir)
    else:

        def load() -> Any:
            return spark.read.format(FORMAT).load(data.store_path)

    result: list[Checksum] = []
    before = owner.rows_examined() if owner is not None else 0
    seconds = timed(lambda: result.append(_consume(load())))
    what = f"Spark reading the {source}" + (" through its owner" if owner is not None else "")
    if result[0] != data.checksum:
        raise BenchError(
            f"bench suite {SUITE}: {what} returned {result[0]} (rows, bytes, sum of partitions, "
            f"sum of offsets, latest timestamp), expected {data.checksum}; its rate would be "
            "meaningless"
        )
    if owner is not None:
        _check_examined(owner, before, data.records, what)
    return data.records / seconds


def raw_run(spark: Any, data: Dataset) -> float:
    """Rows/s of one fully consumed read of :func:`raw_source_class`'s source."""
    df = spark.read.format(RAW_SOURCE).option("rows", data.records).load()
    result: list[Checksum] = []
    seconds = timed(lambda: result.append(_consume(df)))
    if result[0][0] != data.records:
        raise BenchError(
            f"bench suite {SUITE}: the raw Python data source returned {result[0][0]} rows, "
            f"expected {data.records}"
        )
    return data.records / seconds


def _consume(df: Any) -> Checksum:
    row = df.selectExpr(*CONSUME).collect()[0]
    return (row[0], row[1], row[2], row[3], row[4])


def _lookup_run(
    spark: Any,
    data: Dataset,
    owner: ScanOwner,
    keys: Iterator[tuple[bytes, bytes]],
    *,
    by_option: bool,
) -> float:
    """Queries/s of one Spark lookup of the next key: the ``keys`` option or a full scan."""
    key, value = next(keys)
    rows: list[Any] = []
    if by_option:
        what = "Spark read with option keys through the owner"

        def query() -> None:
            df = spark.read.format(FORMAT).option("keys", json.dumps([f"hex:{key.hex()}"]))
            rows.extend(df.load(data.store_path).select("value").collect())

    else:
        condition = f"substr(key, 1, {len(key)}) = X'{key.hex()}'"
        what = f"Spark SQL WHERE {condition} through the owner"

        def query() -> None:
            df = spark.read.format(FORMAT).load(data.store_path)
            rows.extend(df.where(condition).select("value").collect())

    before = owner.rows_examined()
    seconds = timed(query)
    found = [bytes(row[0]) for row in rows]
    if found != [value]:
        raise BenchError(
            f"bench suite {SUITE}: {what} returned {found!r}, expected [{value!r}]; its rate "
            "would be meaningless"
        )
    _check_examined(owner, before, 1 if by_option else data.records, what)
    return 1 / seconds


def _check_examined(owner: ScanOwner, before: int, expected: int, what: str) -> None:
    examined = owner.rows_examined() - before
    if examined != expected:
        raise BenchError(
            f"bench suite {SUITE}: {what} made the owner at {owner.location} examine "
            f"{examined:,} rows, expected {expected:,}; it did not read the way it is "
            "reported"
        )


# -- setup ----------------------------------------------------------------------------------
def open_store(path: str, purpose: str) -> Store:
    # No fsync: the suite measures reads, and the store is deleted after the run.
    return Store.open(path, _SPEC, purpose=purpose, options=StoreOptions(sync=False))


def build_dataset(root: str, records: int) -> Dataset:
    """Write the store, then its snapshot's rows to Parquet."""
    store_path = os.path.join(root, "store")
    parquet_dir = os.path.join(root, "parquet")
    with open_store(store_path, "spark-statestore bench (setup)") as store:
        for start in range(0, records, _LOAD_CHUNK):
            stop = min(start + _LOAD_CHUNK, records)
            with store.begin() as txn:
                txn.put_all(
                    (
                        KEY_FORMAT % i,
                        VALUE_FORMAT % i,
                        i % PARTITIONS,
                        i // PARTITIONS,
                        _TIMESTAMP_MS + i,
                    )
                    for i in range(start, stop)
                )
                for partition in range(PARTITIONS):
                    txn.set_changelog_offset(partition, _records_of(partition, stop))
        parquet_bytes = _write_parquet(store, parquet_dir)
    checksum = (
        records,
        records * (len(KEY_FORMAT % 0) + len(VALUE_FORMAT % 0)),
        sum(p * _records_of(p, records) for p in range(PARTITIONS)),
        # Partition p holds offsets 0 .. n_p - 1.
        sum(n * (n - 1) // 2 for n in (_records_of(p, records) for p in range(PARTITIONS))),
        _TIMESTAMP_MS + records - 1,
    )
    return Dataset(store_path, parquet_dir, records, parquet_bytes, checksum)


def _records_of(partition: int, records: int) -> int:
    """How many of records ``0 .. records - 1`` (record i goes to partition i % PARTITIONS)
    partition ``partition`` holds: its next changelog offset."""
    return (records - partition + PARTITIONS - 1) // PARTITIONS


def _write_parquet(store: Store, directory: str) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_statestore.store import ScanSpec, arrow_schema, scan_batches

    os.makedirs(directory)
    path = os.path.join(directory, "part-00000.snappy.parquet")
    with store.snapshot() as snapshot:
        table = pa.Table.from_batches(
            list(scan_batches(snapshot, ScanSpec.everything())), schema=arrow_schema()
        )
    pq.write_table(table, path, compression="snappy")
    return os.path.getsize(path)


@contextmanager
def spark_session() -> Iterator[tuple[Any, float, bool]]:
    """A local SparkSession with the data source registered, the seconds it took to get
    and whether it was started here; an already active session is reused (and left
    running).

    The first session of a process also gets Spark's own Kafka connector (the ``sink``
    suite measures Spark's Kafka sink beside ours): a driver's classpath is fixed when its
    JVM starts. Where that JVM was started without it, or the connector's jars were never
    resolved, the session comes without it
    (:func:`~spark_statestore.connectors.spark.session.has_kafka_connector` says which).
    """
    from pyspark.sql import SparkSession

    import spark_statestore
    from spark_statestore.connectors.kafka.errors import JarsMissingError
    from spark_statestore.connectors.spark.session import local_session
    from spark_statestore.errors import StateStoreError

    existing = SparkSession.getActiveSession()
    start = time.perf_counter()
    try:
        spark = local_session("spark-statestore-bench", master=MASTER, kafka_source=True)
    except (JarsMissingError, StateStoreError) as exc:
        _log.warning("the bench's Spark session comes without Spark's Kafka connector: %s", exc)
        spark = local_session("spark-statestore-bench", master=MASTER)
    spark_statestore.register(spark)
    startup_s = time.perf_counter() - start
    if existing is None:
        spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark, startup_s, existing is None
    finally:
        if existing is None:
            spark.stop()
