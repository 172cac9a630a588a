"""The demo's first half (sections 3 to 5): a Spark query follows the app's changelog.

3. A Spark follower query materializes the inventory app's changelog into a local store; its
   ``foreachBatch`` sink prints a line per micro-batch.
4. While it runs, Spark SQL queries the live store: a key lookup, a key range, an aggregate,
   the position and lag views.
5. The app writes more; the same SQL sees it, and a lookup bounded by the app's position
   (read your writes) answers.

Then the follower query is stopped; its store stays on disk for the second half
(:mod:`spark_statestore.demo.loop_part`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spark_statestore.demo.app import ABORTED_STOCK, CHANGELOG, PARTITIONS, AppState, expected_state
from spark_statestore.demo.output import (
    FORMAT,
    FeedPrinter,
    banner,
    create_view,
    run_sql,
    say,
    stop_query,
)
from spark_statestore.demo.processes import AppProcess
from spark_statestore.position import Position

__all__ = ["LOOKUP_KEY", "OWNED", "run_follow_part", "what_to_look_at"]

LOOKUP_KEY = "item-042"
RANGE = ("item-010", "item-015")
_STORE_DIR = "stock-store"
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


def run_follow_part(
    spark: Any, bootstrap: str, app: AppProcess, workdir: Path, problems: list[str]
) -> None:
    """Sections 3 to 5 (see the module docstring); appends what went wrong to ``problems``
    and stops the follower query (and waits for its store's owner to exit)."""
    store, checkpoint = workdir / _STORE_DIR, workdir / _CHECKPOINT_DIR
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


def what_to_look_at(root: Path) -> None:
    """The demo's closing notes about this part."""
    store = root / _STORE_DIR
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
