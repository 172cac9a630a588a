"""The ``peers`` suite: our follower against what a user would pick instead, on one changelog.

Setup (not timed): a real Apache Kafka broker (KRaft, a JVM) runs through
``spark-statestore broker`` in a child process, and the ``follower`` suite's own writer fills
its changelog (:func:`~spark_statestore.bench.follower.follower_records` records over 8
partitions, 16-byte keys, 32-byte values, ``v``/``c`` position headers, ``batch_records``
records per Kafka transaction, lz4) and checks that nothing was retained away. That one topic
is what every path below reads.

``feed_vs_spark_kafka``
    Rows/s of our follower feed, ``spark.readStream.format("spark_statestore")`` with
    ``changelog`` into a fresh store (so the follower restores the store while the executors
    deliver the change feed), against Spark's own Kafka source,
    ``spark.readStream.format("kafka")`` subscribed to the same topic from ``earliest`` with
    ``kafka.isolation.level=read_committed``. Both write to the ``noop`` sink with
    ``trigger(availableNow=True)`` and a fresh checkpoint, in one ``local[2]`` SparkSession
    with Spark's Kafka connector on its classpath (``local_session(kafka_source=True)``),
    started in a child process so that its JVM starts with the connector (this process may
    already run a JVM without it); its start-up time is the parameter ``spark_startup_s``,
    never inside a rate. The child times both sides and reports their rates. Timed:
    ``writeStream...start()`` to ``awaitTermination()`` returning, so query start-up, every
    micro-batch and, for ours, the follower's restore. After each run (not timed) the
    ``numInputRows`` of its progress reports must add up to the changelog's record count.
    One untimed warm-up run of each side comes first (JIT, Python worker start-up), except
    with ``--quick``.
``restore_vs_quixstreams``
    Records/s of the ``follower`` suite's restore (a
    :class:`~spark_statestore.follower.Follower` reading through
    :class:`~spark_statestore.connectors.kafka.follower.source.KafkaChangelogSource` into a
    fresh store, ``start_restore`` until RUNNING, checked afterwards) against quixstreams
    recovering a store of the same size. quixstreams writes its own changelog format, so it
    builds its store itself (setup, not timed): an ``Application`` (exactly-once, so its
    changelog is transactional too, committing every ``batch_records`` messages) runs a
    stateful ``apply`` over the same topic as its input, which stores every message's 32-byte
    value under its 16-byte key (``state.set_bytes``); its changelog then holds one record
    per input record. Each timed round starts the same application again, as a new process on
    an empty state directory, so it recovers the whole store from its changelog.
    Timed inside that process (by :func:`~spark_statestore.bench.measure.timed`, the
    same clock as our side): the call in which quixstreams recovers,
    ``StateStoreManager.do_recovery()``, from its start until it returns, which is when
    quixstreams' ``RecoveryManager`` has consumed every changelog partition up to the end
    offset it read at assignment and logs "Recovery process complete". It notices the end
    on a poll that returns nothing (1 s poll timeout, consumer positions cached for 1 s):
    that is part of its recovery, so part of the time, and dominates tiny ``--quick`` runs.
    Not timed: the interpreter start-up, the consumer group join and the opening of the
    RocksDB partitions (like our ``Store.open``), which come before; counting the recovered
    keys, which must equal the record count, after. quixstreams runs from its own virtual
    environment (:data:`PEERS_VENV`, created from PyPI with quixstreams
    :data:`QUIXSTREAMS_VERSION` on first use) because it needs an older confluent-kafka
    than this project's.

Neither measurement has a target: they are reported for information.

Size: as the ``follower`` suite, :data:`~spark_statestore.bench.follower.DEFAULT_RECORDS`
unless ``--records`` (or ``--quick``) says otherwise.
"""

from __future__ import annotations

import fcntl
import inspect
import json
import logging
import os
import shutil
import subprocess
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
    _RESTORE_DEADLINE_S,
    BROKERS,
    KEY_FORMAT,
    PARTITIONS,
    TOPIC,
    VALUE_FORMAT,
    _Changelog,
    _follower_run,
    _produce_changelog,
    follower_records,
)
from spark_statestore.bench.measure import BenchOptions, Measurement, interleave, timed
from spark_statestore.bench.spark import _MASTER
from spark_statestore.connectors.kafka.local.child import broker_child

_log = logging.getLogger(__name__)

__all__ = [
    "PEERS_VENV",
    "QUIXSTREAMS_VERSION",
    "SUITE",
    "quixstreams_python",
    "run_peers_suite",
]

SUITE = "peers"
QUIXSTREAMS_VERSION = "3.28.1"
"""The quixstreams release measured (it pins confluent-kafka < 2.13, older than ours)."""
PEERS_VENV = Path.home() / ".cache" / "spark-statestore" / "peers-venv"
"""The virtual environment the peers run from, created by :func:`quixstreams_python`."""
QUIX_GROUP = "spark-statestore-bench-quixstreams"
"""The quixstreams application's consumer group (its changelog topic is named after it)."""
QUIX_STATE_KEY = b"v"
"""The state key every message's value is stored under (the message key is the prefix)."""
FORMAT = "spark_statestore"
_QUIX_IDLE_TIMEOUT_S = 60.0
"""quixstreams stops when no message came for this long (a guard; runs stop by count)."""
_VENV_MARKER = ".spark-statestore-peers"
_PIP_TIMEOUT_S = 900.0


# -- the suite ----------------------------------------------------------------------------
def run_peers_suite(options: BenchOptions) -> list[Measurement]:
    """Measure our follower feed against Spark's Kafka source and our follower's restore
    against quixstreams' recovery, on the same changelog.

    Parameters
    ----------
    options
        Rounds, ``records`` (see :func:`~spark_statestore.bench.follower.follower_records`)
        and ``batch_records`` (records per Kafka transaction of the changelog, and per
        quixstreams checkpoint).

    Returns
    -------
    list of Measurement
        ``feed_vs_spark_kafka`` and ``restore_vs_quixstreams``, without targets.

    Raises
    ------
    BenchError
        If quixstreams' environment cannot be created, the broker or a Spark session does
        not start, or a path did not read or restore every record.
    """
    records = follower_records(options)
    quix_python = quixstreams_python()  # first: fail before minutes of setup
    with (
        tempfile.TemporaryDirectory(prefix="spark-statestore-bench-") as root,
        broker_child(
            Path(root) / "broker.log",
            [f"{TOPIC}:{PARTITIONS}"],
            brokers=BROKERS,
            who=f"bench suite {SUITE}",
        ) as bootstrap,
    ):
        start = time.perf_counter()
        changelog = _produce_changelog(bootstrap, records, options.batch_records)
        _log.info(
            "bench suite %s: wrote %d changelog records in %.1f s",
            SUITE,
            records,
            time.perf_counter() - start,
        )
        feed = _feed_rates_in_child(
            _FeedRequest(
                bootstrap=bootstrap,
                records=changelog.records,
                root=root,
                rounds=options.rounds,
                warmup=not options.quick,
            )
        )
        quix = _QuixApp(quix_python, root, changelog, options.batch_records)
        built = quix.build_store()
        recoveries: list[_QuixRecovery] = []
        restore_rates = interleave(
            {
                "follower": partial(_follower_run, root, changelog),
                "quixstreams": partial(quix.recovery_rate, recoveries),
            },
            options.rounds,
        )
    common: dict[str, Any] = {
        "records": changelog.records,
        "partitions": PARTITIONS,
        "transactions": changelog.transactions,
        "records_per_transaction": options.batch_records,
        "key_bytes": len(KEY_FORMAT % 0),
        "value_bytes": len(VALUE_FORMAT % 0),
        "changelog": "Kafka Streams format (v, c headers), lz4, written by the follower suite",
        "end_offsets": sum(changelog.end_offsets.values()),
        "broker": "Apache Kafka (KRaft, one local node), child process",
        "rounds": options.rounds,
    }
    last = recoveries[-1]
    return [
        Measurement(
            suite=SUITE,
            name="feed_vs_spark_kafka",
            unit="rows/s",
            candidate="readStream.format('spark_statestore') change feed into a fresh store "
            "-> noop, availableNow",
            baseline="readStream.format('kafka') read_committed -> noop, availableNow (same topic)",
            candidate_rates=feed.feed,
            baseline_rates=feed.spark_kafka,
            target=None,
            parameters={
                **common,
                "timed": "writeStream.start() to awaitTermination(), fresh checkpoint (and store)",
                "warmup_runs": 0 if options.quick else 1,
                "sink": "noop",
                "spark_master": _MASTER,
                "spark_startup_s": round(feed.spark_startup_s, 3),
                "spark_session": "started in a child process (a JVM with the Kafka connector)",
            },
        ),
        Measurement(
            suite=SUITE,
            name="restore_vs_quixstreams",
            unit="records/s",
            candidate="Follower + KafkaChangelogSource restore to RUNNING",
            baseline=f"quixstreams {QUIXSTREAMS_VERSION} recovery of its RocksDB store "
            "(a restart on an empty state dir)",
            candidate_rates=tuple(restore_rates["follower"]),
            baseline_rates=tuple(restore_rates["quixstreams"]),
            target=None,
            parameters={
                **common,
                "timed": "ours: start_restore() to RUNNING; quixstreams: "
                "StateStoreManager.do_recovery(), timed in its own process",
                "quixstreams": QUIXSTREAMS_VERSION,
                "quixstreams_python": str(quix_python),
                "quixstreams_changelog": last.changelog,
                "quixstreams_changelog_end_offsets": last.end_offsets,
                "quixstreams_store_key_bytes": last.key_bytes,
                "quixstreams_store_value_bytes": last.value_bytes,
                "quixstreams_processing_guarantee": "exactly-once",
                "quixstreams_build_s": round(built.seconds, 3),
                "quixstreams_process_s": [round(r.process_seconds, 3) for r in recoveries],
            },
        ),
    ]


# -- feed: ours against Spark's Kafka source ----------------------------------------------
# Both sides run in a child process: Spark's Kafka connector must be on the classpath of the
# JVM when it starts, and this process may already run one without it (the spark and sink
# suites start theirs first; a later session's spark.jars does not reach the driver).
@dataclass(frozen=True, slots=True)
class _FeedRequest:
    """What the child process measures: both feeds over the changelog at ``bootstrap``."""

    bootstrap: str
    records: int
    root: str
    rounds: int
    warmup: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> _FeedRequest:
        return cls(
            bootstrap=str(data["bootstrap"]),
            records=int(data["records"]),
            root=str(data["root"]),
            rounds=int(data["rounds"]),
            warmup=bool(data["warmup"]),
        )


@dataclass(frozen=True, slots=True)
class _FeedRates:
    """Rows/s of every round of each side, and the child's Spark start-up time."""

    feed: tuple[float, ...]
    spark_kafka: tuple[float, ...]
    spark_startup_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> _FeedRates:
        return cls(
            feed=tuple(float(rate) for rate in data["feed"]),
            spark_kafka=tuple(float(rate) for rate in data["spark_kafka"]),
            spark_startup_s=float(data["spark_startup_s"]),
        )


def _feed_rates_in_child(request: _FeedRequest) -> _FeedRates:
    """Measure both feeds in a child process (Spark's log: ``<root>/feed-spark.log``)."""
    command = [
        sys.executable,
        "-c",
        "from spark_statestore.bench.peers import _feed_main; _feed_main()",
        json.dumps(request.to_dict()),
    ]
    result, _seconds = _child_result(
        command,
        "the feed runs",
        Path(request.root) / "feed-spark.log",
        _RESTORE_DEADLINE_S * 2 * (request.rounds + 1),
    )
    return _FeedRates.from_dict(result)


def _feed_main() -> None:
    """The child process: measure, print the rates (or the BenchError) as one JSON line."""
    logging.basicConfig(level=logging.WARNING)
    request = _FeedRequest.from_dict(json.loads(sys.argv[1]))
    try:
        rates = _measure_feeds(request)
    except BenchError as exc:
        # The parent names the suite and the child again.
        print(json.dumps({"error": str(exc).removeprefix(f"bench suite {SUITE}: ")}), flush=True)
        raise SystemExit(1) from exc
    print(json.dumps(rates.to_dict()), flush=True)


def _measure_feeds(request: _FeedRequest) -> _FeedRates:
    import spark_statestore
    from spark_statestore.connectors.kafka.errors import JarsMissingError
    from spark_statestore.connectors.spark.session import local_session

    start = time.perf_counter()
    try:
        spark = local_session("spark-statestore-bench", master=_MASTER, kafka_source=True)
    except JarsMissingError as exc:
        raise BenchError(
            f"bench suite {SUITE}: Spark's Kafka source is needed and its jars are missing: {exc}"
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
    return _FeedRates(tuple(rates["feed"]), tuple(rates["spark_kafka"]), startup_s)


def _feed_run(spark: Any, request: _FeedRequest, source: str) -> float:
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
                f"bench suite {SUITE}: the query reading {what} failed: {exc}"
            ) from exc
        finally:
            for query in queries:
                query.stop()
        rows = sum(progress["numInputRows"] for progress in queries[0].recentProgress)
        if rows != request.records:
            raise BenchError(
                f"bench suite {SUITE}: {what} delivered {rows:,} rows of {TOPIC}, which holds "
                f"{request.records:,} records; its rate would be meaningless"
            )
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    return request.records / seconds


def _start_and_await(writer: Any, queries: list[Any]) -> None:
    query = writer.start()
    queries.append(query)
    query.awaitTermination()


# -- restore: quixstreams' recovery -------------------------------------------------------
def quixstreams_python(venv: Path = PEERS_VENV) -> Path:
    """The interpreter of the peers' virtual environment, with quixstreams
    :data:`QUIXSTREAMS_VERSION` installed.

    The environment is created on first use (``python -m venv``, then ``pip install`` from
    PyPI), saying so on stderr; a partly created one is replaced. quixstreams pins an older
    confluent-kafka than this project, so it cannot share the project's environment.

    Parameters
    ----------
    venv
        Where the environment lives (:data:`PEERS_VENV`).

    Raises
    ------
    BenchError
        If the environment cannot be created or quixstreams cannot be installed (for
        example, PyPI is not reachable); the message names the command and its output.
    """
    python = venv / "bin" / "python"
    marker = venv / _VENV_MARKER
    wanted = f"quixstreams=={QUIXSTREAMS_VERSION}"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another bench run may be creating it
        if marker.is_file() and marker.read_text().strip() == wanted and python.exists():
            return python
        if venv.exists():
            _say(f"replacing {venv} (it does not have {wanted})")
            shutil.rmtree(venv)
        _say(f"creating {venv} for the peers (once): {sys.executable} -m venv")
        _setup_step([sys.executable, "-m", "venv", str(venv)], "create a virtual environment")
        _say(f"installing {wanted} from PyPI into {venv}")
        _setup_step(
            [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", wanted],
            f"install {wanted}",
        )
        marker.write_text(wanted + "\n")
        _say(f"{venv} is ready")
    return python


def _say(message: str) -> None:
    print(f"bench suite {SUITE}: {message}", file=sys.stderr, flush=True)


def _setup_step(command: list[str], what: str) -> None:
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BenchError(
            f"bench suite {SUITE}: cannot {what} ({' '.join(command)}): {exc}"
        ) from exc
    if proc.returncode != 0:
        output = (proc.stderr.strip() or proc.stdout.strip())[-2000:]
        raise BenchError(
            f"bench suite {SUITE}: cannot {what} for the quixstreams side: `{' '.join(command)}` "
            f"exited {proc.returncode}: {output}"
        )


@dataclass(frozen=True, slots=True)
class _QuixRequest:
    """What the quixstreams process is asked to do (``build`` its store from the input
    topic, or ``recover`` it on an empty state directory)."""

    mode: str
    bootstrap: str
    input_topic: str
    group: str
    state_dir: str
    records: int
    commit_every: int
    state_key: str
    idle_timeout_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class _QuixBuild:
    """What building the store reported: messages processed and how long it took."""

    processed: int
    seconds: float

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> _QuixBuild:
        return cls(processed=int(data["processed"]), seconds=float(data["seconds"]))


@dataclass(frozen=True, slots=True)
class _QuixRecovery:
    """What one recovery reported, plus how long its whole process ran."""

    seconds: float
    keys: int
    changelog: str
    end_offsets: int
    key_bytes: int
    value_bytes: int
    process_seconds: float = 0.0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], process_seconds: float) -> _QuixRecovery:
        return cls(
            seconds=float(data["seconds"]),
            keys=int(data["keys"]),
            changelog=str(data["changelog"]),
            end_offsets=int(data["end_offsets"]),
            key_bytes=int(data["key_bytes"]),
            value_bytes=int(data["value_bytes"]),
            process_seconds=process_seconds,
        )


class _QuixApp:
    """The quixstreams application over the changelog topic, run as a process of the
    peers' interpreter."""

    def __init__(self, python: Path, root: str, changelog: _Changelog, commit_every: int) -> None:
        self._python = python
        self._root = root
        self._changelog = changelog
        self._commit_every = commit_every
        self._script = os.path.join(root, "quixstreams_side.py")
        Path(self._script).write_text(_quixstreams_script())

    def build_store(self) -> _QuixBuild:
        """Run the application over the whole topic once, filling its changelog."""
        state_dir = tempfile.mkdtemp(prefix="quixstreams-build-", dir=self._root)
        try:
            result, _seconds = self._run("build", state_dir)
        finally:
            shutil.rmtree(state_dir, ignore_errors=True)
        build = _QuixBuild.from_dict(result)
        if build.processed != self._changelog.records:
            raise BenchError(
                f"bench suite {SUITE}: quixstreams processed {build.processed:,} messages of "
                f"{TOPIC}, which holds {self._changelog.records:,}; its store would be smaller"
            )
        return build

    def recovery_rate(self, recoveries: list[_QuixRecovery]) -> float:
        """Records/s of one recovery on an empty state directory (appended to
        ``recoveries``)."""
        state_dir = tempfile.mkdtemp(prefix="quixstreams-recover-", dir=self._root)
        try:
            result, process_seconds = self._run("recover", state_dir)
        finally:
            shutil.rmtree(state_dir, ignore_errors=True)
        recovery = _QuixRecovery.from_dict(result, process_seconds)
        if recovery.keys != self._changelog.records:
            raise BenchError(
                f"bench suite {SUITE}: quixstreams recovered {recovery.keys:,} keys from "
                f"{recovery.changelog}, expected {self._changelog.records:,}; its rate would "
                "be meaningless"
            )
        recoveries.append(recovery)
        return self._changelog.records / recovery.seconds

    def _run(self, mode: str, state_dir: str) -> tuple[dict[str, Any], float]:
        request = _QuixRequest(
            mode=mode,
            bootstrap=self._changelog.bootstrap,
            input_topic=TOPIC,
            group=QUIX_GROUP,
            state_dir=state_dir,
            records=self._changelog.records,
            commit_every=self._commit_every,
            state_key=QUIX_STATE_KEY.decode(),
            idle_timeout_s=_QUIX_IDLE_TIMEOUT_S,
        )
        command = [str(self._python), self._script, json.dumps(request.to_dict())]
        log_path = Path(self._root) / f"quixstreams-{mode}.log"
        return _child_result(command, f"quixstreams ({mode})", log_path, _RESTORE_DEADLINE_S)


def _child_result(
    command: list[str], what: str, log_path: Path, deadline: float
) -> tuple[dict[str, Any], float]:
    """Run a measuring child process, its stderr to ``log_path``; its result is the JSON
    object on the last line of its stdout, or ``{"error": ...}`` for a BenchError of its own.

    Returns the result and the seconds the process ran.
    """
    start = time.perf_counter()
    with log_path.open("w") as log:
        try:
            proc = subprocess.run(
                command, stdout=subprocess.PIPE, stderr=log, text=True, timeout=deadline
            )
        except subprocess.TimeoutExpired as exc:
            raise BenchError(
                f"bench suite {SUITE}: {what} did not finish within {deadline:.0f} s "
                f"(its log: {log_path})"
            ) from exc
    seconds = time.perf_counter() - start
    lines = proc.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        result = None
    if isinstance(result, dict) and "error" in result:
        raise BenchError(f"bench suite {SUITE}: {what}: {result['error']}")
    if proc.returncode != 0 or not isinstance(result, dict):
        raise BenchError(
            f"bench suite {SUITE}: {what} ({command[0]}) exited {proc.returncode} without a "
            f"result: {log_path.read_text().strip()[-3000:]}"
        )
    return result, seconds


def _quixstreams_script() -> str:
    """The program the peers' interpreter runs: :func:`_quixstreams_side` and the suite's
    own :func:`~spark_statestore.bench.measure.timed`, from their source in this package, so
    both sides are timed by the same code and the program is linted and type-checked here."""
    return "\n\n".join(
        [
            "from __future__ import annotations\n\nimport gc\nimport json\nimport sys\nimport time",
            inspect.getsource(timed),
            inspect.getsource(_quixstreams_side),
            "_quixstreams_side(json.loads(sys.argv[1]))\n",
        ]
    )


def _quixstreams_side(request: dict[str, Any]) -> None:  # runs in the peers' interpreter
    """Build the quixstreams store (``mode="build"``) or recover it on an empty state
    directory and time the recovery (``mode="recover"``); print the result as one JSON line.

    Uses only the standard library, quixstreams and :func:`timed` (see
    :func:`_quixstreams_script`).
    """
    from quixstreams import Application  # type: ignore[import-not-found,unused-ignore]

    state_key = request["state_key"].encode()
    processed = 0

    def remember(value: bytes, state: Any) -> bytes:
        nonlocal processed
        state.set_bytes(state_key, value)
        processed += 1
        return value

    app = Application(
        broker_address=request["bootstrap"],
        consumer_group=request["group"],
        state_dir=request["state_dir"],
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        commit_every=request["commit_every"],
        loglevel="WARNING",
    )
    topic = app.topic(request["input_topic"], key_deserializer="bytes", value_deserializer="bytes")
    app.dataframe(topic).apply(remember, stateful=True)

    if request["mode"] == "build":
        start = time.perf_counter()
        app.run(count=request["records"], timeout=request["idle_timeout_s"])
        print(json.dumps({"processed": processed, "seconds": time.perf_counter() - start}))
        return

    # quixstreams has no hook for "recovery finished": the application's run loop calls
    # StateStoreManager.do_recovery() once partitions needing recovery are assigned, and it
    # returns when RecoveryManager has consumed every changelog partition to the end offset
    # it read at assignment. Time that call (on this application's own instance only).
    manager = app._state_manager
    recover = manager.do_recovery
    result: dict[str, Any] = {}

    def timed_recovery() -> None:
        recovering = [
            rp
            for by_name in manager._recovery_manager.partitions.values()
            for rp in by_name.values()
        ]
        seconds = timed(recover)
        keys = key_bytes = value_bytes = 0
        for stores in manager.stores.values():
            for store in stores.values():
                for partition in store.partitions.values():
                    for key, value in partition.iter_items(lower_bound=b""):
                        keys += 1
                        key_bytes, value_bytes = len(key), len(value)
        result.update(
            seconds=seconds,
            keys=keys,
            changelog=",".join(sorted({rp.changelog_name for rp in recovering})),
            end_offsets=sum(rp.changelog_highwater for rp in recovering),
            key_bytes=key_bytes,
            value_bytes=value_bytes,
        )
        app.stop()

    manager.do_recovery = timed_recovery
    app.run(timeout=request["idle_timeout_s"])
    if not result:
        result["error"] = (
            f"the application on the empty state dir {request['state_dir']} never recovered: "
            f"no changelog partition of consumer group {request['group']} needed recovery"
        )
    print(json.dumps(result))
