"""The demo's sequence, section by section (see :mod:`spark_statestore.demo`)."""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from spark_statestore.demo import follow_part, loop_part
from spark_statestore.demo.app import (
    APP_ID,
    CHANGELOG,
    INPUT_TOPIC,
    PARTITIONS,
    STATE_DIR,
    shop_app,
)
from spark_statestore.demo.errors import DemoError
from spark_statestore.demo.output import banner, say

__all__ = ["DEFAULT_WORKDIR", "run_demo"]

DEFAULT_WORKDIR = Path("/tmp/spark-statestore-demo")
_MARKER = ".spark-statestore-demo"
_OWNED = (
    "broker.log",
    "app.log",
    "bootstrap.servers",
    "log4j2.properties",
    STATE_DIR,
    *follow_part.OWNED,
    *loop_part.OWNED,
)


def run_demo(workdir: Path | None = None) -> int:
    """Run the demo; returns the process exit code (0 when everything checked out).

    Parameters
    ----------
    workdir
        Where the stores, the query checkpoints and the logs go (default
        :data:`DEFAULT_WORKDIR`). Cleaned at the start, kept at the end.
    """
    from spark_statestore.connectors.kafka.local.child import broker_child

    started = time.monotonic()
    problems: list[str] = []
    with _workdir(workdir or DEFAULT_WORKDIR) as root:
        banner("1. a local Apache Kafka broker (KRaft, a separate JVM process)")
        # Kafka Streams creates its changelogs itself (as many partitions as the orders).
        topics = [f"{INPUT_TOPIC}:{PARTITIONS}", *loop_part.TOPICS]
        with broker_child(
            root / "broker.log", topics, bootstrap_file=root / "bootstrap.servers", who="demo"
        ) as bootstrap:
            say(f"bootstrap.servers = {bootstrap}")
            say(f"orders topic {INPUT_TOPIC} ({PARTITIONS} partitions)")
            say(f"topics {', '.join(loop_part.TOPICS)} (name:partitions) for the Spark job's sink")

            banner(
                f"2. another application: the repository's Kafka Streams app ({APP_ID!r}, "
                "its own JVM)"
            )
            say(f"interop/kafka-streams: reads {INPUT_TOPIC} exactly-once (v2), keeps a store")
            say(f"'totals' (customer -> sum of their orders) in RocksDB, logged to {CHANGELOG}")
            say("keys: UTF-8 customer ids; values: 8-byte big-endian longs; headers v/c: the")
            say(f"app's position in {INPUT_TOPIC} (Kafka Streams' position headers turned on)")
            with shop_app(root, bootstrap) as shop:
                say(f"orders go to {INPUT_TOPIC} in transactions:")
                first = shop.run_phase(1)
                banner("3. a Spark follower query materializes the changelog into a local store")
                with _spark_session(root) as spark:
                    follow_part.run_follow_part(spark, bootstrap, shop, first, root, problems)
                    loop_part.run_loop(spark, bootstrap, shop, root, problems)  # 6 to 8
            say("the Kafka Streams app is stopped")
        say("the broker process is stopped")

        banner("9. what to look at")
        follow_part.what_to_look_at(root)
        loop_part.what_to_look_at(root)
        say(
            f"- logs of the broker and the Kafka Streams app: {root / 'broker.log'}, "
            f"{root / 'app.log'}"
        )
    elapsed = time.monotonic() - started
    if problems:
        for problem in problems:
            print(f"demo FAILED: {problem}", file=sys.stderr, flush=True)
        return 1
    print(f"\ndemo OK ({elapsed:.0f} s)", flush=True)
    return 0


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


@contextmanager
def _spark_session(workdir: Path) -> Iterator[Any]:
    """The demo's local SparkSession, logging errors only and without progress bars;
    stopped on exit."""
    import spark_statestore
    from spark_statestore.connectors.spark.session import local_session

    started = time.monotonic()
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
        # Spark's own Kafka source reads the leader's input (loop_part).
        spark = local_session("spark-statestore-demo", kafka_source=True)
    finally:
        if submit_args is None:
            del os.environ["PYSPARK_SUBMIT_ARGS"]
    try:
        spark.sparkContext.setLogLevel("ERROR")
        # Editable installs hide the top-level pyspark_statestore module from Spark's
        # automatic registration; registering explicitly works for every install.
        spark_statestore.register(spark)
        say(f"Spark {spark.version} is up ({time.monotonic() - started:.0f} s)")
        yield spark
    finally:
        spark.stop()
        say("Spark is stopped")
