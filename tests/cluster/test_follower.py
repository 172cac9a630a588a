"""The follower source and the snapshot reader's views on a cluster, each compared with what
was produced to the changelog. The feed's ranges are read by executors on other hosts (from
Kafka); the store, the stream reader and the views' planning stay on the driver."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.changelog import INPUT, ChangelogLog, Produced, random_changes
from tests.integration.test_spark_follower import FeedCollector, wait_for_owner_exit

pytestmark = pytest.mark.cluster

FORMAT = "spark_statestore"


def follow(spark: Any, log: ChangelogLog, path: Path, **options: str) -> Any:
    reader = (
        spark.readStream.format(FORMAT)
        .option("kafka.bootstrap.servers", log.bootstrap)
        .option("changelog", log.topic)
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load(str(path))


@contextlib.contextmanager
def live_follower(
    spark: Any, log: ChangelogLog, path: Path, checkpoint: Path, **options: str
) -> Iterator[Any]:
    """A follower query of ``log`` into the store at ``path`` (its feed dropped), caught up
    with everything produced so far; stopped on exit."""
    query = (
        follow(spark, log, path, **options)
        .writeStream.foreachBatch(lambda df, _: None)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        query.processAllAvailable()
        yield query
    finally:
        query.stop()


def feed_until_caught_up(spark: Any, log: ChangelogLog, path: Path, checkpoint: Path) -> list[Any]:
    """One Trigger.AvailableNow run of the follower query into foreachBatch: its rows (the
    collector also checks that the store held every batch's changes before it was
    delivered)."""
    collector = FeedCollector(spark, path)
    query = (
        follow(spark, log, path)
        .writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(180), "the AvailableNow follower query did not end"
        assert query.exception() is None
    finally:
        query.stop()
    collector.assert_store_was_ahead()
    return collector.rows


def as_produced(row: Any) -> Produced:
    assert row["topic"] is not None and row["op"] in ("upsert", "delete")
    position = row["position"]
    (input_offset,) = position[INPUT].values()
    value = None if row["value"] is None else bytes(row["value"])
    assert (value is None) == (row["op"] == "delete")
    return Produced(bytes(row["key"]), value, row["partition"], row["offset"], input_offset)


def test_the_change_feed_is_what_was_produced_to_the_changelog(
    spark: Any, make_changelog: Any, tmp_path: Path
) -> None:
    log = make_changelog(1, 40)
    store, checkpoint = tmp_path / "store", tmp_path / "checkpoint"
    rows = feed_until_caught_up(spark, log, store, checkpoint)
    key = lambda r: (r.partition, r.offset)  # noqa: E731
    assert sorted(map(as_produced, rows), key=key) == sorted(log.records, key=key)
    assert {r["topic"] for r in rows} == {log.topic}

    # The same checkpoint (the driver's) goes on where it stopped: the new records, once.
    wait_for_owner_exit(store)
    second = log.produce(random_changes(2, 15))
    rows = feed_until_caught_up(spark, log, store, checkpoint)
    assert sorted(map(as_produced, rows), key=key) == sorted(second, key=key)


def views(spark: Any, path: Path, log: ChangelogLog) -> dict[str, Any]:
    """The position, lag and metadata views, each read once the store has reached the
    position of everything produced (a follower grants its position a moment after it has
    applied the records: read-your-writes, not a sleep)."""
    bound = json.dumps({INPUT: {str(p): o for p, o in log.position[INPUT].items()}})

    def view(name: str) -> list[Any]:
        reader = spark.read.format(FORMAT).option("view", name)
        reader = reader.option("kafka.bootstrap.servers", log.bootstrap)
        reader = reader.option("positionBound", bound).option("positionBoundTimeoutMs", "60000")
        return reader.load(str(path)).collect()

    (metadata,) = view("metadata")
    return {
        "position": {(r["topic"], r["partition"], r["offset"]) for r in view("position")},
        "lag": sorted(tuple(r) for r in view("lag")),
        "metadata": metadata,
    }


def test_the_snapshot_views_of_a_live_and_of_a_stopped_follower(
    spark: Any, make_changelog: Any, tmp_path: Path
) -> None:
    log = make_changelog(3)
    store, checkpoint = tmp_path / "store", tmp_path / "checkpoint"
    position = {(INPUT, p, o) for p, o in log.position[INPUT].items()}
    ends = log.ends
    caught_up = sorted((p, end, end, 0) for p, end in ends.items())
    with live_follower(spark, log, store, checkpoint) as query:
        live = views(spark, store, log)
        assert live["position"] == position
        assert live["lag"] == caught_up
        meta = live["metadata"]
        assert (meta["name"], meta["role"], meta["changelog_topic"], meta["partitions"]) == (
            store.name,
            "follower",
            log.topic,
            log.partitions,
        )
        assert json.loads(meta["position"]) == {
            INPUT: {str(p): o for p, o in log.position[INPUT].items()}
        }
        assert dict(meta["changelog_offsets"]) == ends
        assert meta["owner_pid"] > 0 and meta["flight_location"]
        assert query.exception() is None
    wait_for_owner_exit(store)
    stopped = views(spark, store, log)
    assert stopped["position"] == position
    assert stopped["lag"] == caught_up
    assert stopped["metadata"]["owner_pid"] is None
    assert dict(stopped["metadata"]["changelog_offsets"]) == ends
