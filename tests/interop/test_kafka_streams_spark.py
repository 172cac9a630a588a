"""Against the real Kafka Streams application, through Spark SQL: the snapshot reader's and the
change feed's window and session columns, and the headers of a Kafka Streams 4.3
header-aware store, equal Kafka Streams' own answers.

The app (interop/kafka-streams) counts random orders per customer in tumbling windows of
100 ms (``counts``) and in sessions with a 30 ms gap (``sessions``: merged sessions are
deleted by tombstones). Once it has committed every order, our follower restores the two
changelogs, and ``spark.read`` with ``storeType`` ``window`` / ``session`` must return every
window (key, window_start, window_end, count) and every session (key, session_start,
session_end, count) Kafka Streams answers to ``WindowRangeQuery``, and nothing else; the
change feed (``spark.readStream``) of the same changelogs, folded by window, must too.

The app's header-aware variant (``HeadersApp``) keeps each customer's last order with the
order's headers in a ``TimestampedKeyValueStoreWithHeaders``, and per 100 ms window in a
``TimestampedWindowStoreWithHeaders``; Kafka Streams logs those headers on the changelog
records, and ``spark.read`` with ``includeHeaders`` must return, for every key (and window),
the value, timestamp and headers Kafka Streams reads from its own stores.
"""

from __future__ import annotations

import base64
import random
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from spark_statestore.connectors.kafka.local import LocalKafkaCluster
from spark_statestore.connectors.kafka.local.streams_app import (
    HEADERS_APP,
    StreamsApp,
    has_headers_stores,
)
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


def produce_orders_with_headers(
    bootstrap: str, topic: str, count: int, seed: int
) -> dict[int, int]:
    """Random orders (a tenth cancellations), most with random headers: repeated keys, null
    and empty values, none at all; returns the end offsets."""
    from tests.kafka_util import wait_until_settled

    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    now = int(time.time() * 1000)
    choices: list[tuple[str, bytes | None]] = [
        ("trace", b"t-%d" % rng.randrange(1000)),
        ("tenant", b"acme"),
        ("tenant", b"globex"),
        ("empty", b""),
        ("null", None),
        ("bin", bytes(range(256))),
    ]
    for i in range(count):
        customer = f"c{rng.randrange(CUSTOMERS):03d}"
        amount = None if rng.random() < 0.1 else struct.pack(">q", rng.randrange(1, 1000))
        headers = [rng.choice(choices) for _ in range(rng.choice([0, 0, 1, 2, 4]))]
        producer.produce(
            topic, key=customer.encode(), value=amount, timestamp=now + i, headers=headers
        )
    assert producer.flush(30) == 0
    return wait_until_settled(bootstrap, topic)


def answer_headers(headers: list[Any]) -> list[tuple[str, bytes | None]]:
    """Headers as the app answers them (values in base64)."""
    return [
        (h["key"], None if h["value"] is None else base64.b64decode(h["value"])) for h in headers
    ]


def spark_headers(headers: list[Any]) -> list[tuple[str, bytes | None]]:
    return [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in headers]


@pytest.mark.skipif(
    not has_headers_stores(),
    reason="Kafka Streams before 4.3 has no header-aware stores (its app build has no HeadersApp)",
)
@pytest.mark.parametrize("position_headers", [True, False], ids=["position-headers", "none"])
def test_spark_reads_the_headers_of_a_header_aware_store_as_kafka_streams_does(
    spark: Any,
    kafka_broker: LocalKafkaCluster,
    orders: str,
    tmp_path: Path,
    position_headers: bool,
) -> None:
    """Every key's value, timestamp and headers (order, repeats, nulls; the v/c position
    headers, when the app writes them, are not the record's) equal Kafka Streams' own store."""
    bootstrap = kafka_broker.bootstrap_servers
    app = StreamsApp(
        bootstrap,
        tmp_path / "state",
        application_id=f"interop-{next(_apps)}",
        input_topic=orders,
        position_headers=position_headers,
        settings={"session-timeout-ms": 6000, "commit-interval-ms": 100, "window-ms": WINDOW_MS},
        main_class=HEADERS_APP,
    ).start()
    try:
        ends = produce_orders_with_headers(bootstrap, orders, 800, seed=71)
        wait_until_processed(bootstrap, app, orders, ends)
        answer = app.query("headers", "headed")
        assert answer["ok"], answer
        theirs = {
            row["key"]: (
                row["value"],
                row["timestamp"],
                answer_headers(row["headers"]),
            )
            for row in answer["rows"]
        }
        assert len(theirs) > CUSTOMERS / 2
        assert any(headers for _, _, headers in theirs.values())
        assert any(not headers for _, _, headers in theirs.values())

        path = tmp_path / "headed"
        replica(bootstrap, app, "headed", path)
        rows = read_sql(
            spark,
            path,
            "headed",
            "keyValue",
            "key, value, unix_millis(timestamp) AS ts, headers",
            includeHeaders="true",
        )
        ours = {r["key"]: (r["value"], r["ts"], spark_headers(r["headers"])) for r in rows}
        assert ours == theirs

        # A header-aware window store: each customer's last order per window, with headers.
        answer = app.query("window-headers", "headed-windows")
        assert answer["ok"], answer
        theirs_windows = {
            (row["key"], row["start"], row["end"]): (
                row["value"],
                row["timestamp"],
                answer_headers(row["headers"]),
            )
            for row in answer["rows"]
        }
        assert len(theirs_windows) > len(theirs)
        path = tmp_path / "headed-windows"
        replica(bootstrap, app, "headed-windows", path)
        rows = read_sql(
            spark,
            path,
            "headed_windows",
            "window",
            "key, unix_millis(window_start) AS s, unix_millis(window_end) AS e, value, "
            "unix_millis(timestamp) AS ts, headers",
            windowSizeMs=str(WINDOW_MS),
            includeHeaders="true",
        )
        assert {
            (r["key"], r["s"], r["e"]): (r["value"], r["ts"], spark_headers(r["headers"]))
            for r in rows
        } == theirs_windows
    finally:
        app.stop()
