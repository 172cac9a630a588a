"""The demo's second half: a Spark job leads a store, and a second Spark query follows it.

:func:`run_loop` runs inside the demo (:mod:`spark_statestore.demo.run`) once its first follower
query has stopped, with the broker, the Kafka Streams app and Spark still up:

6. The *leader* query (application ``shop-report``) reads the app's ``totals`` changelog with
   Spark's own Kafka source (``format("kafka")``, read_committed), sums the customers'
   totals per customer group (``cust-04`` = customers ``cust-040`` to ``cust-049``) and writes
   them in complete mode through the transactional sink into the store it leads,
   publishing every batch to its changelog ``shop-report-groups-changelog``. The *follower*
   query follows that changelog into another store. Spark SQL shows both stores side by side:
   same rows, same changelog coordinates, same position.
7. One more order. A read of the follower bounded by the changelog record in which Kafka
   Streams logged its effect (``positionBound``) fails with NOT_UP_TO_BOUND until the change
   has gone through the leader and its changelog into the follower; the same read with
   ``positionBoundTimeoutMs`` waits on the follower query's store server for the commit that
   reaches the bound, and answers with the new group total.
8. While both queries run, :func:`~spark_statestore.demo.route_part.run_routing` routes a
   key query over the two stores, found through their announcements.

Why complete mode through ``writeStream`` (and not ``foreachBatch`` with the batch writer):
the sink reads each batch's source offsets from Spark's offset log, where the Kafka source
logs them (``{"shop-app-totals-changelog": {"3": next offset}}``), so the leader's
position says exactly how far into the app's changelog its input records went. Complete mode
republishes every group with that position in each batch, so the follower's position
equals the leader's, even after a batch that only moved past a transaction marker. The batch
writer has no offset log: its position would come from the rows' own ``topic``/``partition``/
``offset``, one input record per aggregate row.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from spark_statestore.demo.app import (
    CHANGELOG,
    ORDER_CUSTOMER,
    ORDERED,
    PARTITIONS,
    Phase,
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
)
from spark_statestore.demo.route_part import TOKEN_FILE, run_routing, write_token_file
from spark_statestore.position import Position

__all__ = [
    "OWNED",
    "REPORT_APP",
    "REPORT_CHANGELOG",
    "TOPICS",
    "PhaseRunner",
    "category",
    "group_totals",
    "run_loop",
    "what_to_look_at",
]

REPORT_APP = "shop-report"
REPORT_CHANGELOG = f"{REPORT_APP}-groups-changelog"
_REPORT_PARTITIONS = 2
TOPICS = (f"{REPORT_CHANGELOG}:{_REPORT_PARTITIONS}", f"{REPORT_CHANGELOG}-progress:1")
"""The topics the broker must create for the leader's sink (``name:partitions``)."""

_LEADER_STORE = "groups-store"
_FOLLOWER_STORE = "groups-follower-store"
_LEADER_CHECKPOINT = "groups-checkpoint"
_FOLLOWER_CHECKPOINT = "groups-follower-checkpoint"
OWNED = (_LEADER_STORE, _FOLLOWER_STORE, _LEADER_CHECKPOINT, _FOLLOWER_CHECKPOINT, TOKEN_FILE)
"""What this part writes in the demo's work directory (removed when the demo starts)."""

_STRING_LONG = {"keyFormat": "string", "valueFormat": "long"}
_ANNOUNCE_MS = 500
_NOT_UP_TO_BOUND = re.compile(r"NOT_UP_TO_BOUND: [^\n]*")


class PhaseRunner(Protocol):
    """The Kafka Streams app as the demo drives it (:class:`~spark_statestore.demo.app.ShopApp`)."""

    def run_phase(self, phase: int) -> Phase:
        """Write ``phase``'s orders; returns once the app has logged them, with where."""
        ...


def category(key: str) -> str:
    """The group of a customer: ``cust-042`` -> ``cust-04``."""
    return key[:7]


def group_totals(totals: Mapping[str, int]) -> dict[str, int]:
    """The sum of the customers' totals per group."""
    groups: dict[str, int] = {}
    for key, value in totals.items():
        groups[category(key)] = groups.get(category(key), 0) + value
    return groups


@dataclass(frozen=True)
class _Paths:
    root: Path

    @property
    def leader_store(self) -> Path:
        return self.root / _LEADER_STORE

    @property
    def follower_store(self) -> Path:
        return self.root / _FOLLOWER_STORE

    @property
    def token_file(self) -> Path:
        return self.root / TOKEN_FILE


# -- the two queries --------------------------------------------------------------------------
def _start_leader(spark: Any, bootstrap: str, paths: _Paths) -> Any:
    from pyspark.sql import functions as F

    records = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", CHANGELOG)
        .option("startingOffsets", "earliest")
        # The app writes in transactions: never read what it aborts.
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    # Keys are UTF-8, values 8-byte big-endian longs (Kafka's LongSerializer), deletes null.
    changes = records.select(
        F.col("key").cast("string").alias("key"),
        F.conv(F.hex("value"), 16, 10).cast("bigint").alias("value"),
        "offset",
    )
    # The changelog carries new values only, so a group's sum needs each customer's latest
    # total: the aggregation keeps its group's changes and sums the latest one of each
    # customer (all changes of a key are in one changelog partition, so their offsets order
    # them). Its state grows with the changes; a per-key stateful operator would not, but Python's
    # (applyInPandasWithState, transformWithState) need pandas.
    by_group = changes.groupBy(F.substring("key", 1, 7).alias("customer_group")).agg(
        F.collect_list(F.struct("key", "offset", "value")).alias("changes")
    )
    latest = F.filter(
        "changes",
        lambda c: (
            ~F.exists("changes", lambda d: (d["key"] == c["key"]) & (d["offset"] > c["offset"]))
        ),
    )
    summed = F.aggregate(
        latest, F.lit(0).cast("bigint"), lambda total, c: total + F.coalesce(c["value"], F.lit(0))
    )
    # 8 bytes, big-endian, like Kafka's LongSerializer (ANSI Spark refuses CAST(x AS BINARY)).
    as_long = F.unhex(F.lpad(F.hex(summed), 16, "0"))
    report = by_group.select(F.col("customer_group").alias("key"), as_long.alias("value"))
    return (
        report.writeStream.format(FORMAT)
        .outputMode("complete")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("changelog", REPORT_CHANGELOG)
        .option("application.id", REPORT_APP)
        .option("checkpointLocation", str(paths.root / _LEADER_CHECKPOINT))
        # Its store server commits, serves and announces the leader store (section 8).
        .option("serve", "true")
        .option("serveTokenFile", str(paths.token_file))
        .option("announceIntervalMs", str(_ANNOUNCE_MS))
        .trigger(processingTime="1 second")
        # No .queryName(): Spark hands it to the sink as an option, which the sink refuses.
        .start(str(paths.leader_store))
    )


def _start_follower(spark: Any, bootstrap: str, paths: _Paths, feed: FeedPrinter) -> Any:
    stream = (
        spark.readStream.format(FORMAT)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("changelog", REPORT_CHANGELOG)
        .options(**_STRING_LONG)
        .option("serveTokenFile", str(paths.token_file))
        .option("announceIntervalMs", str(_ANNOUNCE_MS))
        .load(str(paths.follower_store))
    )
    return (
        stream.writeStream.foreachBatch(feed)
        .trigger(processingTime="1 second")
        .option("checkpointLocation", str(paths.root / _FOLLOWER_CHECKPOINT))
        .queryName("shop_report_follower")
        .start()
    )


def _describe(paths: _Paths) -> None:
    say(f'leader ({REPORT_APP!r}): spark.readStream.format("kafka")   -- Spark\'s own source')
    say(f'    .option("subscribe", "{CHANGELOG}")')
    say('    .option("kafka.isolation.level", "read_committed").load()')
    say("    .groupBy(substring(key, 1, 7) AS customer_group)   -- cust-04: cust-040 .. cust-049")
    say("    .agg(<the latest total of each customer, summed>)")
    say(f'    .writeStream.outputMode("complete").format("{FORMAT}")')
    say(f'    .option("changelog", "{REPORT_CHANGELOG}").option("application.id", "{REPORT_APP}")')
    say('    .option("serve", "true")   -- its store server commits, serves and announces it')
    say(f'    .start("{paths.leader_store}")')
    say("  its position: the sink merges each batch's source offsets from Spark's offset log,")
    say(f'  {{"{CHANGELOG}": {{"<partition>": <next offset>}}}}: how far into the app\'s')
    say("  changelog the sums are; each batch republishes every sum with it (complete mode)")
    say(f'follower: spark.readStream.format("{FORMAT}").option("changelog", "{REPORT_CHANGELOG}")')
    say(f'    .load("{paths.follower_store}").writeStream.foreachBatch(print_summary)')


def _input_end(bootstrap: str) -> Position:
    """Where the leader's position ends up once it has read all of the app's changelog.

    Spark's Kafka source logs the next offset past a transaction's commit marker (the last
    stable offset), so the position is the end offset - 1 (the marker), not the last
    record's offset.
    """
    from spark_statestore.connectors.kafka.follower.source import KafkaChangelogSource

    source = KafkaChangelogSource(bootstrap, CHANGELOG)
    try:
        ends = source.end_offsets(list(range(PARTITIONS)))
    finally:
        source.close()
    return Position.from_map({CHANGELOG: {p: end - 1 for p, end in ends.items() if end > 0}})


# -- Spark SQL on the two stores --------------------------------------------------------------
def _compare(
    spark: Any, paths: _Paths, expected: Mapping[str, int], target: Position, problems: list[str]
) -> None:
    """Show the leader and the follower side by side; check rows and positions agree."""
    say("-- the leader's store and the follower's, side by side (rows: changelog partition@offset)")
    create_view(spark, "groups_leader", paths.leader_store, **_STRING_LONG)
    create_view(spark, "groups_follower", paths.follower_store, **_STRING_LONG)
    rows = run_sql(
        spark,
        "SELECT key AS customer_group, l.value AS leader_total, f.value AS follower_total, "
        "concat(l.partition, '@', l.offset) AS leader_row, "
        "concat(f.partition, '@', f.offset) AS follower_row "
        "FROM groups_leader l FULL JOIN groups_follower f USING (key) ORDER BY key",
    )
    got = {r["customer_group"]: (r["leader_total"], r["follower_total"]) for r in rows}
    want = {key: (total, total) for key, total in expected.items()}
    if got != want:
        problems.append(f"leader/follower sums {got} != the app's totals per group {want}")
    if any(r["leader_row"] != r["follower_row"] for r in rows):
        problems.append("the follower's rows are not at the leader's changelog offsets")
    else:
        say(f"same {len(rows)} rows, the same changelog records; sums = the app's totals")

    say()
    say(f"-- their positions: how far into {CHANGELOG} the totals are")
    create_view(spark, "groups_leader_position", paths.leader_store, view="position")
    # The follower's store takes a batch's position once it has applied the whole batch,
    # which may be just after the feed delivered its changes: wait for it (a bounded read).
    create_view(
        spark,
        "groups_follower_position",
        paths.follower_store,
        view="position",
        positionBound=target.to_json(),
        positionBoundTimeoutMs="60000",
    )
    rows = run_sql(
        spark,
        "SELECT topic, partition, l.offset AS leader, f.offset AS follower "
        "FROM groups_leader_position l FULL JOIN groups_follower_position f "
        "USING (topic, partition) ORDER BY topic, partition",
    )
    leader = Position.from_map(_offsets(rows, "leader"))
    follower = Position.from_map(_offsets(rows, "follower"))
    if leader != follower or leader != target:
        problems.append(f"positions: leader {leader}, follower {follower}, expected {target}")
    else:
        say(f"equal, and at the end of the app's changelog: {target}")


def _offsets(rows: Sequence[Any], column: str) -> dict[str, dict[int, int]]:
    offsets: dict[str, dict[int, int]] = {}
    for row in rows:
        if row[column] is not None:
            offsets.setdefault(row["topic"], {})[row["partition"]] = row[column]
    return offsets


def _bounded_read(
    spark: Any, store: Path, bound: Position, key: str, wait_ms: int = 0
) -> int | None:
    """Read ``key``'s total from ``store`` bounded by ``bound`` (waiting up to ``wait_ms``
    for the store to reach it); None when refused."""
    from pyspark.errors import PySparkException

    create_view(
        spark,
        "groups_bounded",
        store,
        positionBound=bound.to_json(),
        positionBoundTimeoutMs=str(wait_ms),
        keys=json.dumps([key]),
        **_STRING_LONG,
    )
    sql = "SELECT key AS customer_group, value AS total FROM groups_bounded"
    try:
        rows = run_sql(spark, sql)
    except PySparkException as exc:
        # The reader's StaleSnapshotError reaches us as Spark's exception around its text;
        # its NOT_UP_TO_BOUND line is the part meant for the user.
        refused = _NOT_UP_TO_BOUND.search(str(exc))
        if refused is None:
            raise
        say(f"  refused: {refused.group(0)}")
        return None
    return int(rows[0]["total"]) if rows else -1


def _read_your_writes(
    spark: Any,
    app: PhaseRunner,
    paths: _Paths,
    problems: list[str],
) -> None:
    key = category(ORDER_CUSTOMER)
    before, after = (group_totals(expected_totals(n))[key] for n in (2, 3))
    written = app.run_phase(3).written
    entries = list(written)
    if len(entries) != 1:
        problems.append(f"the app reported {written} for its one-record phase 3")
        return
    _, partition, offset = entries[0]
    written_at = time.monotonic()
    say(
        f"{ORDER_CUSTOMER} orders {ORDERED}: Kafka Streams logged the new total at record "
        f"{CHANGELOG} partition {partition} offset {offset}"
    )
    say()
    say(f"-- {key}'s total on the follower, bounded by that record: positionBound {written}")
    total = _bounded_read(spark, paths.follower_store, written, key)
    if total is not None:
        say("the order had already gone through the leader into the follower")
        if total != after:
            problems.append(f"the bounded read returned {total} for {key}, expected {after}")
    say()
    say("-- the same read, now waiting for the follower: positionBoundTimeoutMs 60000")
    say("   (the follower query's store server answers at the commit that reaches the bound)")
    total = _bounded_read(spark, paths.follower_store, written, key, wait_ms=60_000)
    say(f"answered {time.monotonic() - written_at:.1f} s after the write")
    if total is None or total != after:
        problems.append(f"the bounded read after catching up returned {total}, expected {after}")
    else:
        say(f"bounded read OK: {key} went from {before} to {total}")


def run_loop(
    spark: Any, bootstrap: str, app: PhaseRunner, workdir: Path, problems: list[str]
) -> None:
    """Sections 6 to 8 of the demo (see the module docstring); appends what went wrong to
    ``problems`` and stops both queries (and waits for their stores' owners to exit)."""
    paths = _Paths(workdir)
    banner("6. closing the loop: a Spark job leads a store of its own, another query follows it")
    _describe(paths)
    write_token_file(paths.root)
    leader = _start_leader(spark, bootstrap, paths)
    try:
        feed = FeedPrinter("groups follower")
        follower = _start_follower(spark, bootstrap, paths, feed)
        try:
            target = _input_end(bootstrap)
            feed.wait_for_position(target, follower, leader)
            say(f"the follower has the sums up to the end of the app's changelog {target}")
            say()
            _compare(spark, paths, group_totals(expected_totals(2)), target, problems)

            banner("7. read your writes across the loop: a bound from the app's next write")
            _read_your_writes(spark, app, paths, problems)
            target = _input_end(bootstrap)
            feed.wait_for_position(target, follower, leader)
            say()
            _compare(spark, paths, group_totals(expected_totals(3)), target, problems)

            banner("8. one store, two replicas, one router: found through Kafka, with failover")
            run_routing(
                bootstrap,
                REPORT_CHANGELOG,
                category(ORDER_CUSTOMER),
                paths.token_file,
                lambda: _stop_leader(leader, paths),
                problems,
            )
        finally:
            stop_query(follower, [paths.follower_store], problems)
    finally:
        _stop_leader(leader, paths)
        stop_query(leader, [paths.leader_store], problems)
    say("the leader and follower queries are stopped")


def _stop_leader(leader: Any, paths: _Paths) -> None:
    """Stop the leader query, then its sink's store server (which outlives the query)."""
    from spark_statestore.connectors.spark.leader.remote import stop_sink_server

    leader.stop()
    stop_sink_server(str(paths.leader_store))


def what_to_look_at(root: Path) -> None:
    """The demo's closing notes about this part."""
    paths = _Paths(root)
    say(
        f"- the Spark job's store {paths.leader_store} (it leads it, publishing to "
        f"{REPORT_CHANGELOG}) and its follower {paths.follower_store} hold the same totals "
        f"at the same position: how far into {CHANGELOG} they are"
    )
    say(
        "- a read bounded by a record of the app's changelog (positionBound) is refused with "
        "NOT_UP_TO_BOUND until that record has gone through the leader into the follower; "
        "with positionBoundTimeoutMs it waits for it instead"
    )
    say(
        f"- the leader's store server and the follower announce themselves on "
        f"{REPORT_CHANGELOG}-replicas; a Router sent the key query to the leader, and to the "
        "follower once the leader was gone (spark-statestore lag --changelog lists them)"
    )
