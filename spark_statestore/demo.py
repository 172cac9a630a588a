"""The end-to-end demo behind the README's first command (``make demo``).

1. Start a local Apache Kafka broker (KRaft, a JVM) through ``spark-statestore broker``, with the
   changelog topic ``inventory-app-stock-changelog`` (4 partitions) and the topics the Spark
   job of step 5 publishes to.
2. Start "another application" in its own process (:mod:`spark_statestore.demo_app`): a
   Kafka Streams-like inventory app that writes its changelog in transactions, with position
   headers, updates, a tombstone and one aborted transaction.
3. Start a Spark follower query on that changelog; its ``foreachBatch`` sink prints a line
   per micro-batch.
4. While it runs, query the live store with Spark SQL (a key lookup, a range, an aggregate,
   the position and lag views); let the app write more and show that the same SQL sees it.
5. Stop that query; then close the loop (:mod:`spark_statestore.demo_loop`): a Spark job
   aggregates the changelog and writes through the transactional sink into a store it leads,
   with a changelog of its own; a second query follows that changelog; SQL shows both stores
   agree, row for row and position for position; a read bounded by the app's next write
   fails with NOT_UP_TO_BOUND until the follower has caught up with it.
6. Check what was seen, stop every query, Spark, the app and the broker, exit 0.

The work directory (default ``/tmp/spark-statestore-demo``) is cleaned at the start of each
run and kept afterwards, so the store can be read again when the demo is over. Spark and
Kafka clients are imported inside :func:`run_demo`, never at module import.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from spark_statestore import demo_loop
from spark_statestore.demo_app import (
    ABORTED_STOCK,
    APP_ID,
    CHANGELOG,
    INPUT_TOPIC,
    PARTITIONS,
    AppState,
    expected_state,
)
from spark_statestore.demo_support import (
    FORMAT,
    DemoError,
    FeedPrinter,
    banner,
    create_view,
    run_sql,
    say,
    stop_query,
)
from spark_statestore.position import Position

__all__ = ["DEFAULT_WORKDIR", "DemoError", "run_demo"]

DEFAULT_WORKDIR = Path("/tmp/spark-statestore-demo")
LOOKUP_KEY = "item-042"
RANGE = ("item-010", "item-015")
_MARKER = ".spark-statestore-demo"
_STORE_DIR = "stock-store"
_CHECKPOINT_DIR = "follower-checkpoint"
_OWNED = (
    _STORE_DIR,
    _CHECKPOINT_DIR,
    "broker.log",
    "app.log",
    "bootstrap.servers",
    "log4j2.properties",
    *demo_loop.OWNED,
)


# -- work directory ---------------------------------------------------------------------------
@contextmanager
def _workdir(root: Path) -> Iterator[Path]:
    """Lock the demo's work directory and remove what an earlier run left in it."""
    if root.is_dir() and any(root.iterdir()) and not (root / _MARKER).exists():
        raise DemoError(
            f"{root} is not empty and is not a demo work directory; "
            "pass another --workdir (an empty or new directory)"
        )
    root.mkdir(parents=True, exist_ok=True)
    with (root / _MARKER).open("a") as marker:
        try:
            fcntl.flock(marker, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise DemoError(
                f"another demo is running in {root}; wait for it or pass another --workdir"
            ) from exc
        for name in _OWNED:
            entry = root / name
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink(missing_ok=True)
        yield root


# -- the processes the demo starts ------------------------------------------------------------
def _stop(proc: subprocess.Popen[str], timeout_s: float = 30) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def _broker_process(workdir: Path) -> Iterator[str]:
    """Run ``spark-statestore broker`` as a child; yields its bootstrap servers.

    Its own output (the launcher's; each Kafka node logs to its own data directory) goes to
    ``broker.log``, not to the demo's output.
    """
    cmd = [
        sys.executable,
        "-m",
        "spark_statestore.cli",
        "broker",
        "--brokers",
        "1",
        "--topic",
        f"{CHANGELOG}:{PARTITIONS}",
        *(arg for topic in demo_loop.TOPICS for arg in ("--topic", topic)),
        "--bootstrap-file",
        str(workdir / "bootstrap.servers"),
    ]
    with (workdir / "broker.log").open("w") as log_file:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_file, text=True)
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline().strip()
            if not first.startswith("bootstrap.servers="):
                raise DemoError(
                    f"the broker process did not start (said {first!r}); "
                    f"see {workdir / 'broker.log'}"
                )
            yield first.split("=", 1)[1]
        finally:
            _stop(proc)


class _App:
    """The other application's process: phases go in on stdin, its report comes back."""

    def __init__(self, proc: subprocess.Popen[str], log_path: Path) -> None:
        self._proc = proc
        self._log_path = log_path

    def run_phase(self, phase: int) -> Position:
        """Let the app write ``phase``; returns where its committed records went (the
        changelog partition -> offset of the last record of the phase)."""
        stdin, stdout = self._proc.stdin, self._proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write(f"{phase}\n")
        stdin.flush()
        for line in stdout:
            if line.startswith(f"done {phase} "):
                return Position.from_json(line.split(" ", 2)[2])
            say(f"app | {line.rstrip()}")
        raise DemoError(
            f"the application process exited with {self._proc.wait()} during phase {phase}; "
            f"see {self._log_path}"
        )


@contextmanager
def _app_process(workdir: Path, bootstrap: str) -> Iterator[_App]:
    log_path = workdir / "app.log"
    cmd = [sys.executable, "-m", "spark_statestore.demo_app", "--bootstrap-servers", bootstrap]
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file, text=True
        )
        try:
            yield _App(proc, log_path)
        finally:
            assert proc.stdin is not None
            proc.stdin.close()  # end of input: the app flushes and exits
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _stop(proc)
            assert proc.stdout is not None
            proc.stdout.close()


# -- Spark SQL against the live store ---------------------------------------------------------
class _LiveSql:
    """Runs SQL against temporary views of the store, each created just before its query."""

    def __init__(self, spark: Any, store: Path) -> None:
        self._spark = spark
        self._store = store

    def query(
        self, sql: str, view: str = "data", name: str | None = None, **options: str
    ) -> list[Any]:
        if name is None:
            name = "stock" if view == "data" else f"stock_{view}"
        create_view(
            self._spark,
            name,
            self._store,
            keyFormat="string",
            valueFormat="long",
            view=view,
            **options,
        )
        return run_sql(self._spark, sql)


def _lookup(sql: _LiveSql, **options: str) -> list[Any]:
    # The key is an option of the view (one LevelDB get): PySpark 4.x would replay a pushed
    # WHERE key = ... for the view's later queries, so the reader never pushes filters there.
    return sql.query(
        "SELECT key, value AS stock, partition, offset, "
        "date_format(timestamp, 'HH:mm:ss.SSS') AS written_at FROM stock_item",
        name="stock_item",
        keys=json.dumps([LOOKUP_KEY]),
        **options,
    )


def _position_rows(sql: _LiveSql) -> Position:
    rows = sql.query(
        "SELECT topic, partition, offset FROM stock_position ORDER BY partition", view="position"
    )
    offsets: dict[str, dict[int, int]] = {}
    for row in rows:
        offsets.setdefault(row["topic"], {})[row["partition"]] = row["offset"]
    return Position.from_map(offsets)


def _query_live_store(sql: _LiveSql, expected: AppState, problems: list[str]) -> int:
    """Run the demo's queries; returns the changelog offset of the looked-up key's row."""
    say(f"-- a key lookup: a view with keys '[\"{LOOKUP_KEY}\"]' (one LevelDB get, not a scan)")
    rows = _lookup(sql)
    if [r["stock"] for r in rows] != [expected.stock[LOOKUP_KEY]]:
        problems.append(f"lookup of {LOOKUP_KEY} returned {rows}")
    lookup_offset = int(rows[0]["offset"]) if rows else -1

    say()
    say(
        f"-- a key range: keyFrom '{RANGE[0]}', keyTo '{RANGE[1]}' (item-013 was discontinued: "
        "its tombstone deleted it)"
    )
    rows = sql.query(
        "SELECT key, value AS stock, partition, offset FROM stock_range ORDER BY key",
        name="stock_range",
        keyFrom=RANGE[0],
        keyTo=RANGE[1],
    )
    wanted = sorted(k for k in expected.stock if RANGE[0] <= k <= RANGE[1])
    if [r["key"] for r in rows] != wanted:
        problems.append(f"range {RANGE} returned {[r['key'] for r in rows]}, expected {wanted}")

    say()
    say(f"-- an aggregate over the whole store (the aborted {ABORTED_STOCK} is nowhere)")
    rows = sql.query(
        "SELECT count(*) AS items, sum(value) AS units, min(value) AS min_units, "
        f"max(value) AS max_units, count_if(value = {ABORTED_STOCK}) AS aborted_values FROM stock"
    )
    got = (rows[0]["items"], rows[0]["units"], rows[0]["aborted_values"]) if rows else None
    want = (len(expected.stock), sum(expected.stock.values()), 0)
    if got != want:
        problems.append(f"aggregate (items, units, aborted) = {got}, expected {want}")

    say()
    say("-- the store's position: the app's input offsets, merged from the c headers")
    position = _position_rows(sql)
    if position != expected.position:
        problems.append(f"position view {position} != the app's position {expected.position}")

    say()
    say("-- the lag view: per changelog partition, applied offset vs end offset")
    rows = sql.query(
        "SELECT partition, current_offset, end_offset, lag FROM stock_lag ORDER BY partition",
        view="lag",
    )
    if any(r["lag"] != 0 for r in rows) or len(rows) != PARTITIONS:
        problems.append(f"lag view: {rows}")
    return lookup_offset


# -- the demo ---------------------------------------------------------------------------------
_LOG4J2 = """\
# Written by spark-statestore demo: Spark logs errors only, so the demo's output stays readable.
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def _start_spark(workdir: Path) -> Any:
    """The demo's local SparkSession, logging errors only and without progress bars."""
    import spark_statestore
    from spark_statestore.connectors.spark.session import local_session

    # Startup lines are logged before setLogLevel() can run: give the driver JVM a log4j2
    # configuration at launch (PySpark passes PYSPARK_SUBMIT_ARGS to spark-submit). A user's
    # own PYSPARK_SUBMIT_ARGS wins.
    config = workdir / "log4j2.properties"
    config.write_text(_LOG4J2)
    submit_args = os.environ.get("PYSPARK_SUBMIT_ARGS")
    if submit_args is None:
        os.environ["PYSPARK_SUBMIT_ARGS"] = (
            f"--driver-java-options -Dlog4j2.configurationFile=file:{config} "
            "--conf spark.ui.showConsoleProgress=false pyspark-shell"
        )
    try:
        # Spark's own Kafka source reads the leader's input (demo_loop).
        spark = local_session("spark-statestore-demo", kafka_source=True)
    finally:
        if submit_args is None:
            del os.environ["PYSPARK_SUBMIT_ARGS"]
    spark.sparkContext.setLogLevel("ERROR")
    # Editable installs hide the top-level pyspark_statestore module from Spark's automatic
    # registration; registering explicitly works for every install.
    spark_statestore.register(spark)
    return spark


def _follow(spark: Any, bootstrap: str, store: Path, checkpoint: Path, feed: FeedPrinter) -> Any:
    stream = (
        spark.readStream.format(FORMAT)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("changelog", CHANGELOG)
        .option("keyFormat", "string")
        .option("valueFormat", "long")
        .load(str(store))
    )
    return (
        stream.writeStream.foreachBatch(feed)
        .trigger(processingTime="1 second")
        .option("checkpointLocation", str(checkpoint))
        .queryName("inventory_follower")
        .start()
    )


def _run_spark_part(
    bootstrap: str, app: _App, store: Path, checkpoint: Path, problems: list[str]
) -> None:
    banner("3. a Spark follower query materializes the changelog into a local store")
    started = time.monotonic()
    spark = _start_spark(store.parent)
    try:
        say(f"Spark {spark.version} is up ({time.monotonic() - started:.0f} s)")
        say(f'spark.readStream.format("{FORMAT}")')
        say(f'    .option("kafka.bootstrap.servers", ...).option("changelog", "{CHANGELOG}")')
        say('    .option("keyFormat", "string").option("valueFormat", "long")')
        say(f'    .load("{store}")')
        say('    .writeStream.foreachBatch(print_summary).trigger(processingTime="1 second")')
        feed = FeedPrinter("follower")
        query = _follow(spark, bootstrap, store, checkpoint, feed)
        try:
            first = expected_state(1)
            feed.wait_for(first.committed_changes, query)
            say(f"all {first.committed_changes} committed changes delivered; query still running")

            banner("4. Spark SQL on the live store while the query runs")
            sql = _LiveSql(spark, store)
            before = _query_live_store(sql, first, problems)

            banner("5. the app writes more while the query keeps running")
            app.run_phase(2)
            final = expected_state(2)
            feed.wait_for(final.committed_changes, query)
            say(f"all {final.committed_changes} committed changes delivered")
            say()
            say(
                f"-- the same lookup, bounded by the app's position {final.position.to_json()} "
                "(read your writes)"
            )
            rows = _lookup(sql, positionBound=final.position.to_json())
            if [r["stock"] for r in rows] != [final.stock[LOOKUP_KEY]] or not (
                rows and rows[0]["offset"] > before
            ):
                problems.append(f"second lookup of {LOOKUP_KEY} returned {rows}")
            say()
            say("-- the position moved on with the new changes")
            if _position_rows(sql) != final.position:
                problems.append("the position view did not reach the app's final position")
            if feed.delivered != final.committed_changes:
                problems.append(
                    f"{feed.delivered} changes delivered, expected {final.committed_changes}"
                )
            if feed.values[ABORTED_STOCK]:
                problems.append(f"{feed.values[ABORTED_STOCK]} aborted value(s) reached the feed")
        finally:
            stop_query(query, [store], problems)
        say("the follower query is stopped (its store stays on disk)")
        demo_loop.run_loop(spark, bootstrap, app, store.parent, problems)
    finally:
        spark.stop()
    say("Spark is stopped")


def run_demo(workdir: Path | None = None) -> int:
    """Run the demo; returns the process exit code (0 when everything checked out).

    Parameters
    ----------
    workdir
        Where the store, the query checkpoint and the logs go (default
        :data:`DEFAULT_WORKDIR`). Cleaned at the start, kept at the end.
    """
    started = time.monotonic()
    problems: list[str] = []
    with _workdir(workdir or DEFAULT_WORKDIR) as root:
        store, checkpoint = root / _STORE_DIR, root / _CHECKPOINT_DIR
        banner("1. a local Apache Kafka broker (KRaft, a separate JVM process)")
        with _broker_process(root) as bootstrap:
            say(f"bootstrap.servers = {bootstrap}")
            say(f"changelog topic {CHANGELOG} ({PARTITIONS} partitions)")
            say(f"topics {', '.join(demo_loop.TOPICS)} (name:partitions) for the Spark job's sink")

            banner(f"2. another application ({APP_ID!r}, a separate process) writes its changelog")
            say("keys: UTF-8 item ids; values: 8-byte big-endian longs (units in stock);")
            say(f"headers v/c: the app's position in its input topic {INPUT_TOPIC}")
            with _app_process(root, bootstrap) as app:
                app.run_phase(1)
                _run_spark_part(bootstrap, app, store, checkpoint, problems)
            say("the application process is stopped")
        say("the broker process is stopped")

        banner("8. what to look at")
        final = expected_state(2)
        say(f"- the follower store is kept at {store} (as of phase 2); read it again with")
        say(f'    spark.read.format("{FORMAT}").option("keyFormat", "string")')
        say(f'        .option("valueFormat", "long").load("{store}")')
        say(
            f"- the aborted transaction ({LOOKUP_KEY} and item-007 set to {ABORTED_STOCK}, "
            "item-030 deleted) never appeared: not in the change feed, not in any SQL result"
        )
        say("- item-013 and item-021 are gone: their tombstones deleted them")
        say(
            f"- the position {final.position.to_json()} is the merge of the c headers of "
            "the applied records: per input partition, the last offset the app processed"
        )
        say(
            "- every row carries its changelog partition and offset; "
            f"{LOOKUP_KEY}'s offset moved when the app restocked it"
        )
        demo_loop.what_to_look_at(root)
        say(f"- logs of the broker and the app: {root / 'broker.log'}, {root / 'app.log'}")
    elapsed = time.monotonic() - started
    if problems:
        for problem in problems:
            print(f"demo FAILED: {problem}", file=sys.stderr, flush=True)
        return 1
    print(f"\ndemo OK ({elapsed:.0f} s)", flush=True)
    return 0
