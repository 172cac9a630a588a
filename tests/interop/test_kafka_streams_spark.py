"""Against the real Kafka Streams application, through Spark SQL: the snapshot reader's and the
change feed's window and session columns equal Kafka Streams' own IQv2 answers.

The app (interop/kafka-streams) counts random orders per customer in tumbling windows of
100 ms (``counts``) and in sessions with a 30 ms gap (``sessions``: merged sessions are
deleted by tombstones). Once it has committed every order, our follower restores the two
changelogs, and ``spark.read`` with ``storeType`` ``window`` / ``session`` must return every
window (key, window_start, window_end, count) and every session (key, session_start,
session_end, count) Kafka Streams answers to ``WindowRangeQuery``, and nothing else; the
change feed (``spark.readStream``) of the same changelogs, folded by window, must too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_statestore.connectors.kafka.local import LocalKafkaCluster
from tests.interop.test_kafka_streams import (
    CUSTOMERS,
    _apps,
    orders,
    produce_orders,
    replica,
    start_app,
    wait_until_processed,
)

pytestmark = pytest.mark.integration

__all__ = ["orders"]  # the fixture, shared with the follower's interop tests

WINDOW_MS = 100
SESSION_GAP_MS = 30
FORMAT = "spark_statestore"

Windows = dict[tuple[str, int, int], int]


def read_sql(spark: Any, path: Path, view: str, store_type: str, columns: str, **extra: str) -> Any:
    """Rows of ``SELECT columns`` over a temporary view of the store at ``path``."""
    options = {"path": str(path), "keyFormat": "string", "valueFormat": "long"}
    options.update(storeType=store_type, **extra)
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW {view} USING {FORMAT} OPTIONS ("
        + ", ".join(f"{k} '{v}'" for k, v in options.items())
        + ")"
    )
    return spark.sql(f"SELECT {columns} FROM {view}").collect()


def feed_windows(
    spark: Any, bootstrap: str, changelog: str, path: Path, start: str, end: str, **extra: str
) -> Windows:
    """The change feed of ``changelog`` (Trigger.AvailableNow), folded by window."""
    rows: list[Any] = []
    query = (
        spark.readStream.format(FORMAT)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("changelog", changelog)
        .option("keyFormat", "string")
        .option("valueFormat", "long")
        .options(**extra)
        .load(str(path / "store"))
        .selectExpr(
            "key",
            "value",
            "partition",
            "offset",
            "op",
            f"unix_millis({start}) AS start",
            f"unix_millis({end}) AS end",
        )
        .writeStream.trigger(availableNow=True)
        .foreachBatch(lambda df, _: rows.extend(df.collect()))
        .option("checkpointLocation", str(path / "checkpoint"))
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    folded: Windows = {}
    for row in sorted(rows, key=lambda r: (r["partition"], r["offset"])):
        window = (row["key"], row["start"], row["end"])
        if row["op"] == "delete":
            folded.pop(window, None)
        else:
            folded[window] = row["value"]
    return folded


def test_spark_reads_window_and_session_stores_as_kafka_streams_answers(
    spark: Any, kafka_broker: LocalKafkaCluster, orders: str, tmp_path: Path
) -> None:
    """Every window and every session, with their bounds, equal Kafka Streams' answers
    through the snapshot reader and through the change feed; lookups by user key return
    exactly that customer's windows."""
    bootstrap = kafka_broker.bootstrap_servers
    settings = {"window-ms": WINDOW_MS, "session-gap-ms": SESSION_GAP_MS}
    app = start_app(
        bootstrap, orders, tmp_path / "state", f"interop-{next(_apps)}", False, **settings
    )
    try:
        ends = produce_orders(bootstrap, orders, 1500, seed=61)
        wait_until_processed(bootstrap, app, orders, ends)

        answer = app.query("windows", "counts")
        assert answer["ok"], answer
        theirs_windows = {(r["key"], r["start"], r["end"]): r["value"] for r in answer["rows"]}
        assert len(theirs_windows) > CUSTOMERS  # several windows per customer
        assert all(end - start == WINDOW_MS for _, start, end in theirs_windows)
        theirs_sessions: Windows = {}
        for customer in (f"c{i:03d}" for i in range(CUSTOMERS)):
            answer = app.query("sessions", "sessions", customer)
            assert answer["ok"], answer
            for row in answer["rows"]:
                theirs_sessions[(row["key"], row["start"], row["end"])] = row["value"]
        assert len(theirs_sessions) > CUSTOMERS
        assert any(end > start for _, start, end in theirs_sessions)  # merged sessions

        counts, sessions = tmp_path / "counts", tmp_path / "sessions"
        replica(bootstrap, app, "counts", counts)  # restored, then closed: the reader opens it
        replica(bootstrap, app, "sessions", sessions)
        window_columns = "key, unix_millis(window_start) AS s, unix_millis(window_end) AS e, value"
        rows = read_sql(spark, counts, "counts", "window", window_columns, windowSizeMs="100")
        assert len(rows) == len(theirs_windows)  # one row per window: none twice
        assert {(r["key"], r["s"], r["e"]): r["value"] for r in rows} == theirs_windows

        session_columns = (
            "key, unix_millis(session_start) AS s, unix_millis(session_end) AS e, value"
        )
        rows = read_sql(spark, sessions, "sessions", "session", session_columns)
        assert len(rows) == len(theirs_sessions)
        assert {(r["key"], r["s"], r["e"]): r["value"] for r in rows} == theirs_sessions

        # A lookup by user key: c001's windows only, though c0010 would share its prefix.
        rows = read_sql(
            spark, counts, "c001", "window", window_columns, windowSizeMs="100", keys='["c001"]'
        )
        assert {(r["key"], r["s"], r["e"]): r["value"] for r in rows} == {
            w: v for w, v in theirs_windows.items() if w[0] == "c001"
        }

        feed = feed_windows(
            spark,
            bootstrap,
            app.changelog("counts"),
            tmp_path / "counts-feed",
            "window_start",
            "window_end",
            storeType="window",
            windowSizeMs="100",
        )
        assert feed == theirs_windows
        feed = feed_windows(
            spark,
            bootstrap,
            app.changelog("sessions"),
            tmp_path / "sessions-feed",
            "session_start",
            "session_end",
            storeType="session",
        )
        assert feed == theirs_sessions
    finally:
        app.stop()
