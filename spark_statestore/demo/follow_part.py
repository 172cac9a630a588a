"""The demo's first half (sections 3 to 5): a Spark query follows the Kafka Streams app's changelog.

3. A Spark follower query materializes ``shop-app-totals-changelog``, written by the real
   Kafka Streams app (:mod:`spark_statestore.demo.app`), into a local store; its
   ``foreachBatch`` sink prints a line per micro-batch.
4. While it runs, Spark SQL queries the live store: a key lookup, a key range, an aggregate,
   the position and lag views; then the app's own IQv2 answers (``RangeQuery``,
   ``KeyQuery``) are set beside the replica's rows and positions: equal, key for key.
5. More orders arrive; the same SQL sees their effect, and a lookup bounded by the orders'
   position (read your writes) answers with the app's new total.

Then the follower query is stopped; its store stays on disk for the second half
(:mod:`spark_statestore.demo.loop_part`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spark_statestore.demo.app import (
    ABORTED_AMOUNT,
    CHANGELOG,
    PARTITIONS,
    STORE,
    Phase,
    ShopApp,
    expected_totals,
)
from spark_statestore.demo.output import (
    FORMAT,
    FeedPrinter,
    banner,
    create_view,
    run_sql,
    say,
    stop_query,
    table,
)
from spark_statestore.position import Position

__all__ = ["LOOKUP_KEY", "OWNED", "run_follow_part", "what_to_look_at"]

LOOKUP_KEY = "cust-042"
RANGE = ("cust-010", "cust-015")
_STORE_DIR = "totals-store"
_CHECKPOINT_DIR = "follower-checkpoint"
OWNED = (_STORE_DIR, _CHECKPOINT_DIR)
"""What this part writes in the demo's work directory (removed when the demo starts)."""


# -- Spark SQL against the live store -----------------------------------------------------
class _LiveSql:
    """Runs SQL against temporary views of the store, each created just before its query."""

    def __init__(self, spark: Any, store: Path) -> None:
        self._spark = spark
        self._store = store

    def query(
        self,
        sql: str,
        view: str = "data",
        name: str | None = None,
        *,
        show: bool = True,
        **options: str,
    ) -> list[Any]:
        if name is None:
            name = "totals" if view == "data" else f"totals_{view}"
        create_view(
            self._spark,
            name,
            self._store,
            keyFormat="string",
            valueFormat="long",
            view=view,
            **options,
        )
        if not show:
            rows: list[Any] = self._spark.sql(sql).collect()
            return rows
        return run_sql(self._spark, sql)


def _lookup(sql: _LiveSql, *, show: bool = True, **options: str) -> list[Any]:
    # The key is an option of the view (one LevelDB get): PySpark 4.x would replay a pushed
    # WHERE key = ... for the view's later queries, so the reader never pushes filters there.
    return sql.query(
        "SELECT key, value AS total, partition, offset, "
        "date_format(timestamp, 'HH:mm:ss.SSS') AS written_at FROM totals_item",
        name="totals_item",
        keys=json.dumps([LOOKUP_KEY]),
        show=show,
        **options,
    )


def _position_rows(sql: _LiveSql, *, show: bool = True) -> Position:
    rows = sql.query(
        "SELECT topic, partition, offset FROM totals_position ORDER BY partition",
        view="position",
        show=show,
    )
    offsets: dict[str, dict[int, int]] = {}
    for row in rows:
        offsets.setdefault(row["topic"], {})[row["partition"]] = row["offset"]
    return Position.from_map(offsets)


def _query_live_store(sql: _LiveSql, phase: Phase, problems: list[str]) -> int:
    """Run the demo's queries; returns the changelog offset of the looked-up key's row."""
    expected = expected_totals(1)
    say(f"-- a key lookup: a view with keys '[\"{LOOKUP_KEY}\"]' (one LevelDB get, not a scan)")
    rows = _lookup(sql)
    if [r["total"] for r in rows] != [expected[LOOKUP_KEY]]:
        problems.append(f"lookup of {LOOKUP_KEY} returned {rows}")
    lookup_offset = int(rows[0]["offset"]) if rows else -1

    say()
    say(f"-- a key range: keyFrom '{RANGE[0]}', keyTo '{RANGE[1]}'")
    rows = sql.query(
        "SELECT key, value AS total, partition, offset FROM totals_range ORDER BY key",
        name="totals_range",
        keyFrom=RANGE[0],
        keyTo=RANGE[1],
    )
    wanted = sorted(k for k in expected if RANGE[0] <= k <= RANGE[1])
    if [(r["key"], r["total"]) for r in rows] != [(k, expected[k]) for k in wanted]:
        problems.append(f"range {RANGE} returned {rows}, expected {wanted}")

    say()
    say(f"-- an aggregate over the whole store (no total includes the aborted {ABORTED_AMOUNT})")
    rows = sql.query(
        "SELECT count(*) AS customers, sum(value) AS all_orders, min(value) AS min_total, "
        f"max(value) AS max_total, count_if(value >= {ABORTED_AMOUNT}) AS aborted_counted "
        "FROM totals"
    )
    got = (
        (rows[0]["customers"], rows[0]["all_orders"], rows[0]["aborted_counted"]) if rows else None
    )
    want = (len(expected), sum(expected.values()), 0)
    if got != want:
        problems.append(f"aggregate (customers, sum, aborted) = {got}, expected {want}")

    say()
    say("-- the store's position: the app's input offsets, merged from the c headers")
    position = _position_rows(sql)
    if position != phase.orders:
        problems.append(f"position view {position} != the orders' position {phase.orders}")

    say()
    say("-- the lag view: per changelog partition, applied offset vs end offset")
    rows = sql.query(
        "SELECT partition, current_offset, end_offset, lag FROM totals_lag ORDER BY partition",
        view="lag",
    )
    if any(r["lag"] != 0 for r in rows) or len(rows) != PARTITIONS:
        problems.append(f"lag view: {rows}")
    return lookup_offset


def _compare_with_the_app(sql: _LiveSql, shop: ShopApp, phase: int, problems: list[str]) -> None:
    """Set the app's own IQv2 answers beside the replica's rows and position."""
    say(f"-- Kafka Streams' own answer: IQv2 RangeQuery on its {STORE!r} store (in its JVM)")
    answer = shop.app.query("range", STORE)
    if not answer.get("ok"):
        problems.append(f"the app refused the RangeQuery: {answer}")
        return
    theirs = {str(r["key"]): int(r["value"]) for r in answer.get("rows", [])}
    their_position = Position.from_dict(answer.get("position") or {})
    rows = sql.query("SELECT key, value FROM totals", show=False)
    ours = {r["key"]: r["value"] for r in rows}
    our_position = _position_rows(sql, show=False)
    table(
        ["", "customers", "sum of totals", "position"],
        [
            ["Kafka Streams", len(theirs), sum(theirs.values()), their_position.to_json()],
            ["our replica", len(ours), sum(ours.values()), our_position.to_json()],
        ],
    )
    differ = sorted(k for k in theirs.keys() | ours.keys() if theirs.get(k) != ours.get(k))
    if differ or their_position != our_position or theirs != expected_totals(phase):
        problems.append(
            f"the replica differs from the app: keys {differ[:10]}, positions {our_position} "
            f"vs {their_position}"
        )
    else:
        say(f"equal key for key ({len(ours)} customers) and at the same position")

    say()
    say(f"-- KeyQuery {LOOKUP_KEY!r} in Kafka Streams vs the replica's lookup")
    answer = shop.app.query("key", STORE, LOOKUP_KEY)
    theirs_one = [r["value"] for r in answer.get("rows", [])]
    ours_one = [r["total"] for r in _lookup(sql, show=False)]
    table(
        ["", "key", "total"],
        [["Kafka Streams", LOOKUP_KEY, *theirs_one], ["our replica", LOOKUP_KEY, *ours_one]],
    )
    if theirs_one != ours_one:
        problems.append(f"KeyQuery {LOOKUP_KEY}: Kafka Streams {theirs_one}, replica {ours_one}")


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
        .queryName("totals_follower")
        .start()
    )


def run_follow_part(
    spark: Any, bootstrap: str, shop: ShopApp, first: Phase, workdir: Path, problems: list[str]
) -> None:
    """Sections 3 to 5 (see the module docstring), after the app has logged phase 1
    (``first``); appends what went wrong to ``problems`` and stops the follower query (and
    waits for its store's owner to exit)."""
    store, checkpoint = workdir / _STORE_DIR, workdir / _CHECKPOINT_DIR
    say(f'spark.readStream.format("{FORMAT}")')
    say(f'    .option("kafka.bootstrap.servers", ...).option("changelog", "{CHANGELOG}")')
    say('    .option("keyFormat", "string").option("valueFormat", "long")')
    say(f'    .load("{store}")')
    say('    .writeStream.foreachBatch(print_summary).trigger(processingTime="1 second")')
    feed = FeedPrinter("follower")
    query = _follow(spark, bootstrap, store, checkpoint, feed)
    try:
        feed.wait_for_position(first.orders, query)
        say(f"the replica has every change of phase 1 (position {first.orders.to_json()})")

        banner("4. Spark SQL on the live store while the query runs, beside Kafka Streams' IQv2")
        sql = _LiveSql(spark, store)
        before = _query_live_store(sql, first, problems)
        say()
        _compare_with_the_app(sql, shop, 1, problems)

        banner("5. more orders while the query keeps running")
        second = shop.run_phase(2)
        feed.wait_for_position(second.orders, query)
        say(f"the replica has every change of phase 2 (position {second.orders.to_json()})")
        say()
        say(
            f"-- the same lookup, bounded by the orders' position {second.orders.to_json()} "
            "(read your writes)"
        )
        rows = _lookup(sql, positionBound=second.orders.to_json())
        if [r["total"] for r in rows] != [expected_totals(2)[LOOKUP_KEY]] or not (
            rows and rows[0]["offset"] > before
        ):
            problems.append(f"second lookup of {LOOKUP_KEY} returned {rows}")
        say()
        say("-- the position moved on with the new orders")
        if _position_rows(sql) != second.orders:
            problems.append("the position view did not reach the orders' position")
        say()
        _compare_with_the_app(sql, shop, 2, problems)
        aborted = [v for v in feed.values if v is not None and v >= ABORTED_AMOUNT]
        if aborted:
            problems.append(f"totals with the aborted orders reached the feed: {aborted}")
    finally:
        stop_query(query, [store], problems)
    say("the follower query is stopped (its store stays on disk)")


def what_to_look_at(root: Path) -> None:
    """The demo's closing notes about this part."""
    store = root / _STORE_DIR
    say(f"- the follower store is kept at {store} (as of phase 2); read it again with")
    say(f'    spark.read.format("{FORMAT}").option("keyFormat", "string")')
    say(f'        .option("valueFormat", "long").load("{store}")')
    say(
        f"- its rows and position equal Kafka Streams' own IQv2 answers: the changelog was "
        f"written by the real app (Kafka Streams' RocksDB stores: {root / 'kafka-streams-state'})"
    )
    say(
        f"- the aborted orders ({LOOKUP_KEY} and cust-007, {ABORTED_AMOUNT} each) never "
        "counted: not in the change feed, not in any total, not in the app's answers"
    )
    say(
        "- the position is the merge of the c headers of the applied records: per orders "
        "partition, the offset of the last order the app had processed"
    )
    say(
        "- every row carries its changelog partition and offset; "
        f"{LOOKUP_KEY}'s offset moved when the app logged its new total"
    )
