"""The end-to-end demo behind the README's first command (``make demo``).

1. Start the embedded Kafka broker in its own process (``spark-statestore broker``) with the
   changelog topic ``inventory-app-stock-changelog`` (4 partitions).
2. Start "another application" in its own process (:mod:`spark_statestore.demo_app`): a
   Kafka Streams-like inventory app that writes its changelog in transactions, with position
   headers, updates, a tombstone and one aborted transaction.
3. Start a Spark follower query on that changelog; its ``foreachBatch`` sink prints a line
   per micro-batch.
4. While it runs, query the live store with Spark SQL (a key lookup, a range, an aggregate,
   the position and lag views); let the app write more and show that the same SQL sees it.
5. Check what was seen, stop the query, Spark, the app and the broker, exit 0.

The work directory (default ``/tmp/spark-statestore-demo``) is cleaned at the start of each
run and kept afterwards, so the store can be read again when the demo is over. Spark and
Kafka clients are imported inside :func:`run_demo`, never at module import.
"""

from __future__ import annotations

import fcntl
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from spark_statestore.demo_app import (
    ABORTED_STOCK,
    APP_ID,
    CHANGELOG,
    INPUT_TOPIC,
    PARTITIONS,
    AppState,
    expected_state,
)
from spark_statestore.errors import StateStoreError
from spark_statestore.position import Position

__all__ = ["DEFAULT_WORKDIR", "DemoError", "run_demo"]

DEFAULT_WORKDIR = Path("/tmp/spark-statestore-demo")
FORMAT = "spark_statestore"
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
)
_WAIT_S = 180.0


class DemoError(StateStoreError, RuntimeError):
    """The demo could not run (its work directory, the broker or the app failed)."""


def _banner(text: str) -> None:
    print(f"\n=== {text}", flush=True)


def _say(text: str = "") -> None:
    print(f"  {text}" if text else "", flush=True)


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


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

    Its own log lines (librdkafka's mock cluster) go to ``broker.log``, not to the demo's output.
    """
    cmd = [
        sys.executable,
        "-m",
        "spark_statestore.cli",
        "broker",
        "--brokers",
        "3",
        "--topic",
        f"{CHANGELOG}:{PARTITIONS}",
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

    def run_phase(self, phase: int) -> None:
        stdin, stdout = self._proc.stdin, self._proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write(f"{phase}\n")
        stdin.flush()
        for line in stdout:
            if line.strip() == f"done {phase}":
                return
            _say(f"app | {line.rstrip()}")
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


def _wait_for_exit(pid: int, timeout_s: float) -> bool:
    """Wait until process ``pid`` has exited (a pidfd turns readable then)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], timeout_s)
        return bool(ready)
    finally:
        os.close(fd)


# -- the follower query's sink ----------------------------------------------------------------
class _FeedPrinter:
    """The ``foreachBatch`` sink: a line per micro-batch, and a count the demo waits on."""

    def __init__(self) -> None:
        self.delivered = 0
        self.aborted_values = 0
        self._changed = threading.Condition()

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = df.select("op", "value", "position").collect()
        deletes = sum(1 for r in rows if r["op"] == "delete")
        if rows:
            # Each change carries its decoded c header; merged, they are the batch's position.
            position = Position.empty()
            for row in rows:
                position = position.merge(Position.from_map(row["position"] or {}))
            _say(
                f"follower | micro-batch {batch_id}: {_count(len(rows), 'change')} "
                f"({_count(len(rows) - deletes, 'upsert')}, {_count(deletes, 'delete')}), "
                f"position {position.to_json()}"
            )
        else:
            _say(f"follower | micro-batch {batch_id}: no changes")
        with self._changed:
            self.delivered += len(rows)
            self.aborted_values += sum(1 for r in rows if r["value"] == ABORTED_STOCK)
            self._changed.notify_all()

    def wait_for(self, count: int, query: Any, timeout_s: float = _WAIT_S) -> None:
        """Block until ``count`` changes were delivered (or the query died, or time is up)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self.delivered < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DemoError(
                        f"only {self.delivered} of {count} changes arrived in {timeout_s:.0f} s"
                    )
                # Woken by every batch; the bounded wait only re-checks that the query lives.
                self._changed.wait(min(left, 1.0))
                if not query.isActive:
                    raise DemoError(f"the follower query stopped: {query.exception()}")


# -- Spark SQL against the live store ---------------------------------------------------------
def _table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(c) for c in columns]] + [
        ["null" if v is None else str(v) for v in r] for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    for row in cells:
        _say("  " + "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))
    if not rows:
        _say("  (no rows)")


class _LiveSql:
    """Runs SQL against temporary views of the store, each created just before its query.

    Spark 4.3 replays a view's last pushed-down plan for later queries of the same view, so
    every query gets a fresh ``CREATE OR REPLACE TEMPORARY VIEW``.
    """

    def __init__(self, spark: Any, store: Path) -> None:
        self._spark = spark
        self._store = store

    def query(self, sql: str, view: str = "data", **options: str) -> list[Any]:
        name = "stock" if view == "data" else f"stock_{view}"
        settings = {"path": str(self._store), "keyFormat": "string", "valueFormat": "long"}
        settings.update({"view": view, **options})
        rendered = ", ".join(f"{k} '{v}'" for k, v in settings.items())
        self._spark.sql(
            f"CREATE OR REPLACE TEMPORARY VIEW {name} USING {FORMAT} OPTIONS ({rendered})"
        )
        _say(f"SQL> {sql}")
        df = self._spark.sql(sql)
        rows: list[Any] = df.collect()
        _table(df.columns, rows)
        return rows


def _lookup(sql: _LiveSql, **options: str) -> list[Any]:
    return sql.query(
        "SELECT key, value AS stock, partition, offset, "
        "date_format(timestamp, 'HH:mm:ss.SSS') AS written_at "
        f"FROM stock WHERE key = '{LOOKUP_KEY}'",
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
    _say("-- a key lookup (pushed down to the store: one LevelDB get, not a scan)")
    rows = _lookup(sql)
    if [r["stock"] for r in rows] != [expected.stock[LOOKUP_KEY]]:
        problems.append(f"lookup of {LOOKUP_KEY} returned {rows}")
    lookup_offset = int(rows[0]["offset"]) if rows else -1

    _say()
    _say("-- a key range (item-013 was discontinued: its tombstone deleted it)")
    rows = sql.query(
        "SELECT key, value AS stock, partition, offset FROM stock "
        f"WHERE key BETWEEN '{RANGE[0]}' AND '{RANGE[1]}' ORDER BY key"
    )
    wanted = sorted(k for k in expected.stock if RANGE[0] <= k <= RANGE[1])
    if [r["key"] for r in rows] != wanted:
        problems.append(f"range {RANGE} returned {[r['key'] for r in rows]}, expected {wanted}")

    _say()
    _say(f"-- an aggregate over the whole store (the aborted {ABORTED_STOCK} is nowhere)")
    rows = sql.query(
        "SELECT count(*) AS items, sum(value) AS units, min(value) AS min_units, "
        f"max(value) AS max_units, count_if(value = {ABORTED_STOCK}) AS aborted_values FROM stock"
    )
    got = (rows[0]["items"], rows[0]["units"], rows[0]["aborted_values"]) if rows else None
    want = (len(expected.stock), sum(expected.stock.values()), 0)
    if got != want:
        problems.append(f"aggregate (items, units, aborted) = {got}, expected {want}")

    _say()
    _say("-- the store's position: the app's input offsets, merged from the c headers")
    position = _position_rows(sql)
    if position != expected.position:
        problems.append(f"position view {position} != the app's position {expected.position}")

    _say()
    _say("-- the lag view: per changelog partition, applied offset vs end offset")
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
        spark = local_session("spark-statestore-demo")
    finally:
        if submit_args is None:
            del os.environ["PYSPARK_SUBMIT_ARGS"]
    spark.sparkContext.setLogLevel("ERROR")
    # Editable installs hide the top-level pyspark_statestore module from Spark's automatic
    # registration; registering explicitly works for every install.
    spark_statestore.register(spark)
    return spark


def _follow(spark: Any, bootstrap: str, store: Path, checkpoint: Path, feed: _FeedPrinter) -> Any:
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
    from spark_statestore.store.ownership import read_owner

    _banner("3. a Spark follower query materializes the changelog into a local store")
    started = time.monotonic()
    spark = _start_spark(store.parent)
    try:
        _say(f"Spark {spark.version} is up ({time.monotonic() - started:.0f} s)")
        _say(f'spark.readStream.format("{FORMAT}")')
        _say(f'    .option("kafka.bootstrap.servers", ...).option("changelog", "{CHANGELOG}")')
        _say('    .option("keyFormat", "string").option("valueFormat", "long")')
        _say(f'    .load("{store}")')
        _say('    .writeStream.foreachBatch(print_summary).trigger(processingTime="1 second")')
        feed = _FeedPrinter()
        query = _follow(spark, bootstrap, store, checkpoint, feed)
        try:
            first = expected_state(1)
            feed.wait_for(first.committed_changes, query)
            _say(f"all {first.committed_changes} committed changes delivered; query still running")

            _banner("4. Spark SQL on the live store while the query runs")
            sql = _LiveSql(spark, store)
            before = _query_live_store(sql, first, problems)

            _banner("5. the app writes more while the query keeps running")
            app.run_phase(2)
            final = expected_state(2)
            feed.wait_for(final.committed_changes, query)
            _say(f"all {final.committed_changes} committed changes delivered")
            _say()
            _say(
                f"-- the same lookup, bounded by the app's position {final.position.to_json()} "
                "(read your writes)"
            )
            rows = _lookup(sql, positionBound=final.position.to_json())
            if [r["stock"] for r in rows] != [final.stock[LOOKUP_KEY]] or not (
                rows and rows[0]["offset"] > before
            ):
                problems.append(f"second lookup of {LOOKUP_KEY} returned {rows}")
            _say()
            _say("-- the position moved on with the new changes")
            if _position_rows(sql) != final.position:
                problems.append("the position view did not reach the app's final position")
            if feed.delivered != final.committed_changes:
                problems.append(
                    f"{feed.delivered} changes delivered, expected {final.committed_changes}"
                )
            if feed.aborted_values:
                problems.append(f"{feed.aborted_values} aborted value(s) reached the feed")
            if query.exception() is not None:
                problems.append(f"the follower query failed: {query.exception()}")
        finally:
            query.stop()
        # Spark ends the query's reader process (the store's owner) soon after stop().
        owner = read_owner(str(store))
        if owner is not None and not _wait_for_exit(owner.pid, 60):
            problems.append(f"the query's reader process {owner.pid} did not exit")
    finally:
        spark.stop()
    _say("the follower query and Spark are stopped")


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
        _banner("1. the embedded Kafka broker (a separate process)")
        with _broker_process(root) as bootstrap:
            _say(f"bootstrap.servers = {bootstrap}")
            _say(f"changelog topic {CHANGELOG} ({PARTITIONS} partitions)")

            _banner(f"2. another application ({APP_ID!r}, a separate process) writes its changelog")
            _say("keys: UTF-8 item ids; values: 8-byte big-endian longs (units in stock);")
            _say(f"headers v/c: the app's position in its input topic {INPUT_TOPIC}")
            with _app_process(root, bootstrap) as app:
                app.run_phase(1)
                _run_spark_part(bootstrap, app, store, checkpoint, problems)
            _say("the application process is stopped")
        _say("the broker process is stopped")

        _banner("6. what to look at")
        final = expected_state(2)
        _say(f"- the store is kept at {store}; read it again with")
        _say(f'    spark.read.format("{FORMAT}").option("keyFormat", "string")')
        _say(f'        .option("valueFormat", "long").load("{store}")')
        _say(
            f"- the aborted transaction ({LOOKUP_KEY} and item-007 set to {ABORTED_STOCK}, "
            "item-030 deleted) never appeared: not in the change feed, not in any SQL result"
        )
        _say("- item-013 and item-021 are gone: their tombstones deleted them")
        _say(
            f"- the position {final.position.to_json()} is the merge of the c headers of "
            "the applied records: per input partition, the last offset the app processed"
        )
        _say(
            "- every row carries its changelog partition and offset; "
            f"{LOOKUP_KEY}'s offset moved when the app restocked it"
        )
        _say(f"- logs of the broker and the app: {root / 'broker.log'}, {root / 'app.log'}")
    elapsed = time.monotonic() - started
    if problems:
        for problem in problems:
            print(f"demo FAILED: {problem}", file=sys.stderr, flush=True)
        return 1
    print(f"\ndemo OK ({elapsed:.0f} s)", flush=True)
    return 0
