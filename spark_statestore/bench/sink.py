"""The ``sink`` suite: the transactional sink against Spark's Parquet file sink, on one stream.

Setup (not timed): the input stream is :func:`sink_records` rows written once (pyarrow,
snappy) as ``BATCHES * FILES_PER_BATCH`` Parquet files: ``key`` STRING (16 characters, drawn
from a key space of a quarter of the rows, so three rows in four are upserts of a key seen
before), ``value`` STRING (32 characters), and the input record's ``topic``, ``partition``
and ``offset``. The stream is keyed, as a Kafka source's is: the two files (tasks) of a
micro-batch write disjoint keys, each key's input partition is fixed
(:func:`write_stream`); a second stream of the same size lets both tasks of a batch write a
key (``shared_keys``). Every side reads it with ``spark.readStream.schema(...).parquet(dir)`` and
``maxFilesPerTrigger = FILES_PER_BATCH``: :data:`BATCHES` micro-batches of
:data:`FILES_PER_BATCH` tasks each (one per core of ``local[2]``). A real Apache Kafka
broker (KRaft, a JVM) runs through ``spark-statestore broker`` in a child process; it is
started with a fresh changelog
(:data:`CHANGELOG_PARTITIONS` partitions) and progress topic for every changelog run. A local
``local[2]`` SparkSession is started (or the active one reused); its start-up time is the
parameter ``spark_startup_s``, never inside a rate.

Every timed run gets a fresh checkpoint and a fresh output (store or directory) and is timed
from ``writeStream...start()`` to ``processAllAvailable()`` returning: query start-up and
every micro-batch with its commit. Afterwards (not timed) the run is checked: Spark's commit
log holds exactly the expected batches, the store holds exactly the distinct keys, its
commit record names the last batch (and, with a changelog, its changelog end offsets cover
every row), and the Parquet output holds every input row. A run that fails a check fails the
suite.

``sink``
    Rows/s of ``writeStream.format("spark_statestore")`` without a changelog against
    ``writeStream.format("parquet")`` on the same stream; target :data:`SINK_TARGET`.
``sink_changelog``
    The same with ``changelog`` (every change also published in one Kafka transaction per
    micro-batch, lz4, the writer's defaults) against the same Parquet runs; no target.
``sink_changelog_vs_kafka_sink``
    The runs publishing a changelog against ``writeStream.format("kafka")``, Spark's own
    Kafka sink, writing the same stream's ``key`` and ``value`` into a fresh topic of as
    many partitions (lz4, as our changelog): what publishing the rows to Kafka costs through
    Spark alone, without a store, transactions or exactly-once; target
    :data:`KAFKA_SINK_TARGET`. Measured when
    the suite's Spark driver has Spark's Kafka connector (its first session in the process,
    as in ``spark-statestore bench``), else left out with a warning.
``sink_changelog_streamed``
    The runs publishing a changelog (the driver's store host publishing each batch while its
    tasks stage it) against the same with ``publishWhileStaging=false`` (the whole batch
    published at its commit); no target.
``sink_changelog_shared_keys_vs_kafka_sink``
    The sink publishing a changelog on the shared-keys stream (where the host publishes a
    batch again at its commit when the tasks' writes of a key reached the changelog in
    another order than Spark partition order) against Spark's Kafka sink on that stream; no
    target.
``sink_changelog_served``
    The same with option ``serve`` (the sink's store server keeps the store and the
    transactional producer open across micro-batches, and serves the store) against the
    runs without it in the same rounds; no target.
``empty_commit``
    The fixed cost of a micro-batch without rows: a query over a directory of empty (0-row)
    Parquet files with ``maxFilesPerTrigger = 1`` runs its first batch untimed, then
    :data:`EMPTY_BATCHES` more empty files are moved in and the time until
    ``processAllAvailable()`` returns is divided among them. Reported as batches/s (ms per
    batch in the parameters), our sink against the Parquet sink; no target.

Every rows/s measurement records the CPU seconds per million rows of each process kind
(driver JVM, Python workers, commit, store host, sink server, broker: :mod:`.cpu`) of each
side's fastest run.

Each measurement interleaves its sides for ``rounds`` rounds, after one untimed warm-up run
of each side on a tiny stream (JIT, Python worker start-up).

Size: :data:`DEFAULT_RECORDS` unless ``--records`` (or ``--quick``) says otherwise. Since
:class:`~spark_statestore.bench.measure.BenchOptions` does not record whether ``--records``
was given, a ``records`` equal to the bench-wide default counts as "not given".

Why one module of over 500 lines: the three measurements share one input stream, one Spark
session, one broker and the checks every run gets; a third of it is this description.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from spark_statestore.bench.cpu import Profiles
from spark_statestore.bench.errors import BenchError
from spark_statestore.bench.measure import BenchOptions, Measurement, interleave, timed
from spark_statestore.bench.spark import spark_session
from spark_statestore.connectors.kafka.local.child import broker_child
from spark_statestore.store import Store, StoreOptions

_log = logging.getLogger(__name__)

__all__ = [
    "APPLICATION_ID",
    "BATCHES",
    "CHANGELOG_PARTITIONS",
    "DEFAULT_RECORDS",
    "EMPTY_BATCHES",
    "FILES_PER_BATCH",
    "KAFKA_SINK_TARGET",
    "QUICK_BATCHES",
    "SCHEMA",
    "SINK_TARGET",
    "SUITE",
    "WARMUP_RECORDS",
    "Changelogs",
    "SinkStream",
    "run_sink_suite",
    "sink_records",
    "sink_run",
    "write_stream",
]

SUITE = "sink"
SINK_TARGET = 0.8
"""Our sink without a changelog should reach 80 % of the Parquet sink's rows/s (issue 40; 50 %
before)."""
KAFKA_SINK_TARGET = 0.8
"""Our sink publishing a changelog should reach 80 % of Spark's Kafka sink's rows/s (issue 40)."""
DEFAULT_RECORDS = 1_000_000
"""Input rows of a run without ``--records``."""
BATCHES = 10
"""Micro-batches of the stream (:data:`QUICK_BATCHES` with ``--quick``; never more than there
are rows)."""
QUICK_BATCHES = 2
FILES_PER_BATCH = 2
"""Input files per micro-batch (``maxFilesPerTrigger``): one task per core of ``local[2]``."""
EMPTY_BATCHES = 5
"""Timed empty micro-batches per ``empty_commit`` run (:data:`QUICK_EMPTY_BATCHES` with
``--quick``)."""
QUICK_EMPTY_BATCHES = 2
KEYS_PER_ROW = 4
"""The key space is a quarter of the rows: each key is written about four times."""
CHANGELOG_PARTITIONS = 8
CHANGELOG_SIDES = 4
"""Runs publishing a changelog per round (each gets a fresh one): streamed, at the commit,
with ``serve``, and the shared-keys stream's."""
APPLICATION_ID = "spark-statestore-bench-sink"
SCHEMA = "key STRING, value STRING, topic STRING, partition INT, offset BIGINT"
FORMAT = "spark_statestore"
INPUT_TOPIC = "bench-input"
INPUT_PARTITIONS = 8
KEY_FORMAT = "key-%012d"  # 16 characters
VALUE_FORMAT = "value-%026d"  # 32 characters
WARMUP_RECORDS = 200
MASTER = "local[2]"
_STORE_LOCK_WAIT_S = 60.0


def sink_records(options: BenchOptions) -> int:
    """Input rows for this run: ``options.records`` when ``--records`` or ``--quick`` chose
    it, else :data:`DEFAULT_RECORDS`."""
    if options.quick or options.records != BenchOptions().records:
        return options.records
    return DEFAULT_RECORDS


@dataclass(frozen=True, slots=True)
class SinkStream:
    """The input directory and what writing all of it must produce."""

    directory: str
    records: int
    keys: int
    """Distinct keys: what the store holds afterwards."""
    batches: int
    files: int
    input_bytes: int


class Changelogs:
    """The changelog topics created with the broker, one per changelog run."""

    def __init__(self, bootstrap: str, topics: list[str]) -> None:
        self.bootstrap = bootstrap
        self._unused = iter(topics)

    def next_topic(self) -> str:
        topic = next(self._unused, None)
        if topic is None:
            raise BenchError(
                f"bench suite {SUITE}: every changelog topic created with the broker is used; "
                "the suite made more changelog runs than it planned"
            )
        return topic


def run_sink_suite(options: BenchOptions) -> list[Measurement]:
    """Measure the sink's rows/s with and without a changelog, and the fixed cost of an
    empty micro-batch, against Spark's Parquet file sink on the same stream.

    Parameters
    ----------
    options
        Rounds and ``records`` (see :func:`sink_records`).

    Returns
    -------
    list of Measurement
        ``sink`` (target :data:`SINK_TARGET`), ``sink_changelog``,
        ``sink_changelog_vs_kafka_sink`` (when the session has Spark's Kafka connector),
        ``sink_changelog_served`` and ``empty_commit`` (no target).

    Raises
    ------
    BenchError
        If the broker does not start, a query fails, or a run did not write what it read.
    """
    records = sink_records(options)
    rounds = options.rounds
    batches = QUICK_BATCHES if options.quick else BATCHES
    empty_batches = QUICK_EMPTY_BATCHES if options.quick else EMPTY_BATCHES
    # One fresh changelog per changelog run: the warm-up and every round; one fresh topic
    # per run of Spark's Kafka sink.
    topics = [f"{APPLICATION_ID}-{n}-changelog" for n in range(CHANGELOG_SIDES * (rounds + 1))]
    kafka_topics = [f"{APPLICATION_ID}-kafka-sink-{n}" for n in range(2 * (rounds + 1))]
    with tempfile.TemporaryDirectory(prefix="spark-statestore-bench-") as root:
        start = time.perf_counter()
        stream = write_stream(os.path.join(root, "input"), records, batches)
        shared = write_stream(os.path.join(root, "shared"), records, batches, shared_keys=True)
        warmup = write_stream(
            os.path.join(root, "warmup"), min(WARMUP_RECORDS, records), QUICK_BATCHES
        )
        empty_file = _write_empty_file(os.path.join(root, "empty.parquet"))
        _log.info(
            "bench suite %s: wrote %d input rows in %d Parquet files in %.1f s",
            SUITE,
            records,
            stream.files,
            time.perf_counter() - start,
        )
        specs = [
            spec
            for topic in topics
            for spec in (f"{topic}:{CHANGELOG_PARTITIONS}", f"{topic}-progress:1")
        ] + [f"{topic}:{CHANGELOG_PARTITIONS}" for topic in kafka_topics]
        with (
            broker_child(Path(root) / "broker.log", specs, who=f"bench suite {SUITE}") as bootstrap,
            spark_session() as session,
        ):
            spark, startup_s, started = session
            _log.info("bench suite %s: Spark session ready in %.1f s", SUITE, startup_s)
            changelogs = Changelogs(bootstrap, topics)
            kafka_sink = Changelogs(bootstrap, kafka_topics)
            from spark_statestore.connectors.spark.session import has_kafka_connector

            with_kafka_sink = has_kafka_connector(spark)
            if not with_kafka_sink:
                _log.warning(
                    "bench suite %s: this process's Spark driver has no Kafka connector "
                    "(it started without it): sink_changelog_vs_kafka_sink is not measured",
                    SUITE,
                )

            def sides(
                data: SinkStream, other: SinkStream, profiles: Profiles | None = None
            ) -> dict[str, Callable[[], float]]:
                def run(
                    side: str,
                    sink: str,
                    logs: Changelogs | None,
                    stream: SinkStream = data,
                    **more: Any,
                ) -> Any:
                    during = None if profiles is None else profiles.during(side)
                    return partial(sink_run, spark, root, stream, sink, logs, during=during, **more)

                at_commit = {"publishWhileStaging": "false"}
                runs: dict[str, Callable[[], float]] = {
                    "store": run("store", "store", None),
                    "store_changelog": run("store_changelog", "store", changelogs),
                    "store_changelog_at_commit": run(
                        "store_changelog_at_commit", "store", changelogs, options=at_commit
                    ),
                    "store_served": run("store_served", "store", changelogs, serve=True),
                    "store_shared": run("store_shared", "store", changelogs, other),
                    "parquet": run("parquet", "parquet", None),
                }
                if with_kafka_sink:
                    runs["kafka"] = run("kafka", "kafka", kafka_sink)
                    runs["kafka_shared"] = run("kafka_shared", "kafka", kafka_sink, other)
                return runs

            for warm in sides(warmup, warmup).values():
                warm()
            profiles = Profiles()
            rates = interleave(sides(stream, shared, profiles), rounds)
            cpu = profiles.of_best(rates, stream.records)
            empty_rates = interleave(
                {
                    side: partial(_empty_run, spark, root, empty_file, side, empty_batches)
                    for side in ("store", "parquet")
                },
                rounds,
            )
    common: dict[str, Any] = {
        "spark_master": MASTER,
        "spark_startup_s": round(startup_s, 3),
        "spark_session": "started" if started else "reused",
        "rounds": rounds,
    }
    stream_parameters = {
        "records": stream.records,
        "distinct_keys": stream.keys,
        "micro_batches": stream.batches,
        "input": f"{stream.files} Parquet files (snappy), maxFilesPerTrigger={FILES_PER_BATCH}, "
        "keyed: the files of a batch write disjoint keys, each key's input partition fixed",
        "input_bytes": stream.input_bytes,
        "schema": SCHEMA,
        "key_chars": len(KEY_FORMAT % 0),
        "value_chars": len(VALUE_FORMAT % 0),
        "timed": "writeStream.start() to processAllAvailable(), fresh checkpoint and output",
        "warmup_records": warmup.records,
        **common,
    }
    return [
        Measurement(
            suite=SUITE,
            name="sink",
            unit="rows/s",
            candidate="writeStream.format('spark_statestore'), no changelog",
            baseline="writeStream.format('parquet') (same stream)",
            candidate_rates=tuple(rates["store"]),
            baseline_rates=tuple(rates["parquet"]),
            target=SINK_TARGET,
            parameters={
                **stream_parameters,
                "sync": StoreOptions().sync,
                **_cpu(cpu, "store", "parquet"),
            },
        ),
        Measurement(
            suite=SUITE,
            name="sink_changelog",
            unit="rows/s",
            candidate="writeStream.format('spark_statestore') publishing a changelog",
            baseline="writeStream.format('parquet') (same stream)",
            candidate_rates=tuple(rates["store_changelog"]),
            baseline_rates=tuple(rates["parquet"]),
            target=None,
            parameters={
                **stream_parameters,
                "sync": StoreOptions().sync,
                "changelog_partitions": CHANGELOG_PARTITIONS,
                "compression": "lz4 (the changelog writer's default)",
                "transactions": "one Kafka transaction per micro-batch",
                "broker": "Apache Kafka (KRaft, one local node), child process",
                **_cpu(cpu, "store_changelog", "parquet"),
            },
        ),
        *(
            [
                Measurement(
                    suite=SUITE,
                    name="sink_changelog_vs_kafka_sink",
                    unit="rows/s",
                    candidate="writeStream.format('spark_statestore') publishing a changelog",
                    baseline="writeStream.format('kafka') (Spark's Kafka sink), same rows",
                    candidate_rates=tuple(rates["store_changelog"]),
                    baseline_rates=tuple(rates["kafka"]),
                    target=KAFKA_SINK_TARGET,
                    parameters={
                        **stream_parameters,
                        "partitions": CHANGELOG_PARTITIONS,
                        "baseline": "key and value into a fresh topic, compression.type=lz4, "
                        "the Java producer's defaults (acks=all, idempotent, no "
                        "transactions); no store",
                        **_cpu(cpu, "store_changelog", "kafka"),
                    },
                )
            ]
            if "kafka" in rates
            else []
        ),
        Measurement(
            suite=SUITE,
            name="sink_changelog_streamed",
            unit="rows/s",
            candidate="publishing a changelog, the store host publishing while the tasks stage",
            baseline="the same with publishWhileStaging=false (the whole batch at the commit)",
            candidate_rates=tuple(rates["store_changelog"]),
            baseline_rates=tuple(rates["store_changelog_at_commit"]),
            target=None,
            parameters={
                **stream_parameters,
                "changelog_partitions": CHANGELOG_PARTITIONS,
                **_cpu(cpu, "store_changelog", "store_changelog_at_commit"),
            },
        ),
        *(
            [
                Measurement(
                    suite=SUITE,
                    name="sink_changelog_shared_keys_vs_kafka_sink",
                    unit="rows/s",
                    candidate="publishing a changelog, a stream whose batches' tasks share keys",
                    baseline="writeStream.format('kafka') (Spark's Kafka sink), same rows",
                    candidate_rates=tuple(rates["store_shared"]),
                    baseline_rates=tuple(rates["kafka_shared"]),
                    target=None,
                    parameters={
                        **stream_parameters,
                        "input": f"{shared.files} Parquet files, both of a batch drawing from "
                        "the whole key space (a key may be written by both tasks of a batch: "
                        "the store host then publishes it again at the commit, in Spark "
                        "partition order)",
                        "distinct_keys": shared.keys,
                        "input_bytes": shared.input_bytes,
                        **_cpu(cpu, "store_shared", "kafka_shared"),
                    },
                )
            ]
            if "kafka_shared" in rates
            else []
        ),
        Measurement(
            suite=SUITE,
            name="sink_changelog_served",
            unit="rows/s",
            candidate="the same with option serve (the sink's store server commits)",
            baseline="writeStream.format('spark_statestore') publishing a changelog, no serve",
            candidate_rates=tuple(rates["store_served"]),
            baseline_rates=tuple(rates["store_changelog"]),
            target=None,
            parameters={
                **stream_parameters,
                "changelog_partitions": CHANGELOG_PARTITIONS,
                "server": "started by the first commit (inside the timed run), stopped after",
                **_cpu(cpu, "store_served", "store_changelog"),
            },
        ),
        Measurement(
            suite=SUITE,
            name="empty_commit",
            unit="batches/s",
            candidate="an empty micro-batch through spark_statestore",
            baseline="an empty micro-batch through the Parquet sink",
            candidate_rates=tuple(empty_rates["store"]),
            baseline_rates=tuple(empty_rates["parquet"]),
            target=None,
            parameters={
                "empty_batches_per_run": empty_batches,
                "input": "one 0-row Parquet file per micro-batch, maxFilesPerTrigger=1",
                "timed": "moving the files in to processAllAvailable(), after an untimed "
                "first batch (query start-up)",
                "candidate_ms_per_batch": round(1000 / max(empty_rates["store"]), 1),
                "baseline_ms_per_batch": round(1000 / max(empty_rates["parquet"]), 1),
                **common,
            },
        ),
    ]


def _cpu(cpu: Mapping[str, Mapping[str, float]], candidate: str, baseline: str) -> dict[str, Any]:
    """The measurement's parameters for the CPU profiles of its sides' fastest runs."""
    return {
        "cpu_s_per_million_rows": {
            "candidate": dict(cpu.get(candidate, {})),
            "baseline": dict(cpu.get(baseline, {})),
            "kinds": "by process command line, see spark_statestore.bench.cpu.KINDS",
        }
    }


# -- timed runs ---------------------------------------------------------------------------
def sink_run(
    spark: Any,
    root: str,
    data: SinkStream,
    sink: str,
    changelogs: Changelogs | None,
    *,
    serve: bool = False,
    options: Mapping[str, str] | None = None,
    during: Callable[[str], AbstractContextManager[object]] | None = None,
) -> float:
    """Rows/s of one run of the whole stream into a fresh store (``sink="store"``, with a
    changelog when ``changelogs`` is given, through the sink's store server with ``serve``,
    with more sink ``options``) or a fresh Parquet directory; ``during(output)`` is a context
    around the timed run (metrics scraped meanwhile)."""
    run_dir = tempfile.mkdtemp(prefix=f"run-{sink}-", dir=root)
    try:
        checkpoint = os.path.join(run_dir, "checkpoint")
        output = os.path.join(run_dir, "output")
        topic = changelogs.next_topic() if changelogs is not None else None
        reader = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", FILES_PER_BATCH)
        frame = reader.parquet(data.directory)
        if sink == "kafka":  # Spark's Kafka sink would take partition and topic columns too
            frame = frame.select("key", "value")
        writer = frame.writeStream.option("checkpointLocation", checkpoint)
        if sink == "parquet":
            writer = writer.format("parquet").option("path", output)
        elif sink == "kafka":
            assert changelogs is not None and topic is not None
            writer = (
                writer.format("kafka")
                .option("kafka.bootstrap.servers", changelogs.bootstrap)
                .option("topic", topic)
                .option("kafka.compression.type", "lz4")
            )
        else:
            writer = writer.format(FORMAT).option("path", output)
            if changelogs is not None and topic is not None:
                writer = (
                    writer.option("kafka.bootstrap.servers", changelogs.bootstrap)
                    .option("application.id", APPLICATION_ID)
                    .option("changelog", topic)
                )
            if serve:
                writer = writer.option("serve", "true")
            writer = writer.options(**(options or {}))
        what = _describe(sink, topic) + (" with serve" if serve else "")
        queries: list[Any] = []
        try:
            with nullcontext() if during is None else during(output):
                seconds = timed(partial(_start_and_drain, writer, queries, what))
        finally:
            for query in queries:
                query.stop()
            if serve:
                from spark_statestore.connectors.spark.leader.remote import stop_sink_server

                if not stop_sink_server(output):
                    raise BenchError(f"{what}: no sink store server ran")
        _check_commit_log(checkpoint, data.batches - 1, what)
        if sink == "parquet":
            _check_parquet(spark, output, data.records, what)
        elif sink == "kafka":
            assert changelogs is not None and topic is not None
            _check_topic(changelogs.bootstrap, topic, data.records, what)
        else:
            published = data.records if topic is not None else None
            _check_store(output, data.keys, data.batches - 1, published, what)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    return data.records / seconds


def _empty_run(spark: Any, root: str, empty_file: str, sink: str, batches: int) -> float:
    """Batches/s of ``batches`` micro-batches without rows, after an untimed first one."""
    run_dir = tempfile.mkdtemp(prefix=f"empty-{sink}-", dir=root)
    try:
        source = os.path.join(run_dir, "input")
        pending = os.path.join(run_dir, "pending")
        os.makedirs(source)
        os.makedirs(pending)
        shutil.copyfile(empty_file, os.path.join(source, "empty-00000.parquet"))
        names = [f"empty-{n:05d}.parquet" for n in range(1, batches + 1)]
        for name in names:
            shutil.copyfile(empty_file, os.path.join(pending, name))
        checkpoint = os.path.join(run_dir, "checkpoint")
        output = os.path.join(run_dir, "output")
        writer = (
            spark.readStream.schema(SCHEMA)
            .option("maxFilesPerTrigger", 1)
            .parquet(source)
            .writeStream.option("checkpointLocation", checkpoint)
            .format(FORMAT if sink == "store" else "parquet")
            .option("path", output)
        )
        what = f"an empty micro-batch through {_describe(sink, None)}"
        queries: list[Any] = []
        try:
            _start_and_drain(writer, queries, what)  # query start-up and batch 0: untimed

            def more_batches() -> None:
                for name in names:  # a rename: the file source never sees half a file
                    os.rename(os.path.join(pending, name), os.path.join(source, name))
                _drain(queries[0], what)

            seconds = timed(more_batches)
        finally:
            for query in queries:
                query.stop()
        _check_commit_log(checkpoint, batches, what)
        if sink == "store":
            _check_store(output, 0, batches, None, what)
        else:
            _check_parquet(spark, output, 0, what)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    return batches / seconds


def _describe(sink: str, topic: str | None) -> str:
    if sink == "parquet":
        return "Spark's Parquet sink"
    if sink == "kafka":
        return f"Spark's Kafka sink into topic {topic}"
    return f"the {FORMAT} sink" + (f" with changelog {topic}" if topic else "")


def _start_and_drain(writer: Any, queries: list[Any], what: str) -> None:
    """Start the query (appended to ``queries`` for the caller to stop) and wait until it
    has written every file of its source."""
    query = writer.start()
    queries.append(query)
    _drain(query, what)


def _drain(query: Any, what: str) -> None:
    from pyspark.errors import StreamingQueryException

    try:
        query.processAllAvailable()
    except StreamingQueryException as exc:
        raise BenchError(f"bench suite {SUITE}: the query writing to {what} failed: {exc}") from exc


# -- checks -------------------------------------------------------------------------------
def _check_commit_log(checkpoint: str, last_batch: int, what: str) -> None:
    """Spark committed exactly batches ``0 .. last_batch``."""
    commits = os.path.join(checkpoint, "commits")
    committed = sorted(int(name) for name in os.listdir(commits) if name.isdigit())
    if committed != list(range(last_batch + 1)):
        raise BenchError(
            f"bench suite {SUITE}: {what} committed micro-batches {committed} (in {commits}), "
            f"expected 0 .. {last_batch}; its rate would be meaningless"
        )


def _check_topic(bootstrap: str, topic: str, records: int, what: str) -> None:
    """``topic`` holds exactly ``records`` records (a fresh topic, no transactions: its end
    offsets add up to what was written; an idempotent producer writes no duplicates)."""
    from spark_statestore.connectors.kafka import clients

    consumer = clients.consumer(
        bootstrap, None, group=f"{APPLICATION_ID}-check", what=f"topic {topic!r}"
    )
    try:
        ends = [
            clients.watermarks(consumer, topic, partition, 30.0)[1]
            for partition in range(CHANGELOG_PARTITIONS)
        ]
    finally:
        consumer.close()
    if sum(ends) != records:
        raise BenchError(
            f"bench suite {SUITE}: {what} wrote {sum(ends):,} records, expected {records:,}; "
            "its rate would be meaningless"
        )


def _check_store(
    path: str, keys: int, last_batch: int, published_at_least: int | None, what: str
) -> None:
    """The store holds exactly ``keys`` keys, committed ``last_batch`` last and (with a
    changelog) published at least ``published_at_least`` records."""
    # The commit of the last batch ran in a Python worker that has closed the store by the
    # time Spark logs the batch; the wait only covers a slow exit.
    options = StoreOptions(lock_wait_seconds=_STORE_LOCK_WAIT_S)
    with Store.open(path, options=options) as store, store.snapshot() as snapshot:
        found = snapshot.count()
        metadata = store.metadata
    record = metadata.commit_record
    committed = None if record is None else record.batch_id
    problems = []
    if found != keys:
        problems.append(f"it holds {found:,} keys, expected {keys:,}")
    if committed != last_batch:
        problems.append(f"its last committed batch is {committed}, expected {last_batch}")
    published = sum(metadata.changelog_offsets.values())
    if published_at_least is not None and published < published_at_least:
        problems.append(
            f"its changelog end offsets add up to {published:,}, fewer than the "
            f"{published_at_least:,} rows written"
        )
    if problems:
        raise BenchError(
            f"bench suite {SUITE}: the store at {path} written by {what} is wrong: "
            f"{'; '.join(problems)}; its rate would be meaningless"
        )


def _check_parquet(spark: Any, path: str, records: int, what: str) -> None:
    """The output directory (read through its ``_spark_metadata`` log) holds every row."""
    rows = spark.read.schema(SCHEMA).parquet(path).count()
    if rows != records:
        raise BenchError(
            f"bench suite {SUITE}: {what} wrote {rows:,} rows to {path}, expected {records:,}; "
            "its rate would be meaningless"
        )


# -- setup --------------------------------------------------------------------------------
def _arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("key", pa.string()),
            pa.field("value", pa.string()),
            pa.field("topic", pa.string()),
            pa.field("partition", pa.int32()),
            pa.field("offset", pa.int64()),
        ]
    )


def write_stream(
    directory: str, records: int, batches: int, *, shared_keys: bool = False
) -> SinkStream:
    """Write ``records`` input rows as up to ``batches * FILES_PER_BATCH`` Parquet files.

    Keys are drawn from a space of ``records / KEYS_PER_ROW`` with stride 7919 (prime: every
    key of the space occurs, consecutive rows hit distant keys). By default the stream is
    keyed, as a Kafka source's is: the files (tasks) of one micro-batch write disjoint keys
    (file ``n`` those whose number is ``n`` modulo :data:`FILES_PER_BATCH`), and each key's
    input record metadata is one partition's (``key % 8``), its offsets counting on. With
    ``shared_keys`` both files of a batch draw from the whole space, so a key may be written
    by both tasks of a batch (row ``i``: key ``i * 7919 % keys``, partition ``i % 8``,
    offset ``i // 8``).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(directory)
    keys = max(FILES_PER_BATCH, records // KEYS_PER_ROW)
    files = min(batches * FILES_PER_BATCH, records)
    schema = _arrow_schema()
    size = 0
    bounds = [records * n // files for n in range(files + 1)]
    next_offset = [0] * INPUT_PARTITIONS
    written: set[int] = set()
    for n in range(files):
        rows = range(bounds[n], bounds[n + 1])
        if shared_keys:
            numbers = [i * 7919 % keys for i in rows]
            partitions = [i % INPUT_PARTITIONS for i in rows]
            offsets = [i // INPUT_PARTITIONS for i in rows]
        else:
            share = keys // FILES_PER_BATCH
            numbers = [(i * 7919 % share) * FILES_PER_BATCH + n % FILES_PER_BATCH for i in rows]
            partitions = [k % INPUT_PARTITIONS for k in numbers]
            offsets = []
            for partition in partitions:
                offsets.append(next_offset[partition])
                next_offset[partition] += 1
        written.update(numbers)
        table = pa.Table.from_arrays(
            [
                pa.array([KEY_FORMAT % k for k in numbers], pa.string()),
                pa.array([VALUE_FORMAT % i for i in rows], pa.string()),
                pa.array([INPUT_TOPIC] * len(rows), pa.string()),
                pa.array(partitions, pa.int32()),
                pa.array(offsets, pa.int64()),
            ],
            schema=schema,
        )
        path = os.path.join(directory, f"part-{n:05d}.snappy.parquet")
        pq.write_table(table, path, compression="snappy")
        # The file source orders files by modification time; make it the written order.
        os.utime(path, ns=(time.time_ns(), 1_700_000_000_000_000_000 + n * 1_000_000_000))
        size += os.path.getsize(path)
    return SinkStream(directory, records, len(written), -(-files // FILES_PER_BATCH), files, size)


def _write_empty_file(path: str) -> str:
    """A 0-row Parquet file with the input schema."""
    import pyarrow.parquet as pq

    pq.write_table(_arrow_schema().empty_table(), path, compression="snappy")
    return path
