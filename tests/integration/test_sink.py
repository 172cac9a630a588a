"""The transactional sink in a local Spark: exactly once per micro-batch, complete mode, the
idempotent batch writer, and refused input."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from spark_statestore.store import Role, Store, StoreSpec
from tests.integration.test_spark_follower import wait_for_owner_exit
from tests.kafka_util import caught_up_follower, settled_changelog

pytestmark = pytest.mark.integration

FORMAT = "spark_statestore"
SCHEMA = "key STRING, value STRING, topic STRING, partition INT, offset BIGINT"


def write_input(directory: Path, name: str, rows: list[dict[str, Any]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    temporary = directory / f".{name}.tmp"
    temporary.write_text("".join(json.dumps(row) + "\n" for row in rows))
    temporary.rename(directory / name)  # the file source must never see a half-written file


def row(key: str, value: str | None, offset: int, partition: int = 0) -> dict[str, Any]:
    return {"key": key, "value": value, "topic": "orders", "partition": partition, "offset": offset}


def store_content(path: Path) -> dict[bytes, bytes]:
    wait_for_owner_exit(path)
    with Store.open(path) as store, store.snapshot() as snapshot:
        return dict(snapshot.items())


def start_sink(
    spark: Any, source: Path, store: Path, checkpoint: Path, mode: str = "append"
) -> Any:
    stream = spark.readStream.schema(SCHEMA).json(str(source))
    return (
        stream.writeStream.format(FORMAT)
        .outputMode(mode)
        .option("checkpointLocation", str(checkpoint))
        .start(str(store))
    )


def changelog_writer(
    spark: Any, source: Path, checkpoint: Path, bootstrap: str, changelog: str, app_id: str
) -> Any:
    """The sink of ``source``'s JSON rows, publishing to ``changelog`` (not started)."""
    return (
        spark.readStream.schema(SCHEMA)
        .json(str(source))
        .writeStream.format(FORMAT)
        .option("checkpointLocation", str(checkpoint))
        .option("kafka.bootstrap.servers", bootstrap)
        .option("changelog", changelog)
        .option("application.id", app_id)
    )


def test_each_micro_batch_is_committed_once(spark: Any, tmp_path: Path) -> None:
    source, store, checkpoint = tmp_path / "in", tmp_path / "store", tmp_path / "cp"
    write_input(source, "1.json", [row("a", "1", 0), row("b", "2", 1), row("c", "3", 2)])
    query = start_sink(spark, source, store, checkpoint)
    try:
        query.processAllAvailable()
        write_input(source, "2.json", [row("a", "10", 3), row("b", None, 4, partition=1)])
        query.processAllAvailable()
    finally:
        query.stop()
    assert store_content(store) == {b"a": b"10", b"c": b"3"}
    with Store.open(store) as opened:
        metadata = opened.metadata
    assert metadata.commit_record is not None and metadata.commit_record.batch_id == 1
    assert metadata.position.to_map() == {"orders": {0: 3, 1: 4}}
    assert metadata.commit_record.source_offsets  # read from Spark's offset log
    seq = metadata.commit_seq

    # Spark crashed after the store commit but before its commit log: it replays batch 1.
    os.unlink(checkpoint / "commits" / "1")
    (checkpoint / "commits" / ".1.crc").unlink(missing_ok=True)
    query = start_sink(spark, source, store, checkpoint)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    with Store.open(store) as opened:
        assert opened.metadata.commit_seq == seq  # the replay changed nothing
    assert store_content(store) == {b"a": b"10", b"c": b"3"}
    assert not [p for p in (store / "_staging").rglob("*.arrow")]  # staging cleaned up


def test_complete_mode_replaces_the_store_with_the_aggregate(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    source, store = tmp_path / "in", tmp_path / "store"
    write_input(source, "1.json", [row("a", "1", 0), row("b", "1", 1), row("a", "1", 2)])
    counts = (
        spark.readStream.schema(SCHEMA)
        .json(str(source))
        .groupBy("key")
        .agg(F.count("*").cast("string").alias("value"))
    )
    query = (
        counts.writeStream.format(FORMAT)
        .outputMode("complete")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .start(str(store))
    )
    try:
        query.processAllAvailable()
        write_input(source, "2.json", [row("c", "1", 3)])
        query.processAllAvailable()
    finally:
        query.stop()
    assert store_content(store) == {b"a": b"2", b"b": b"1", b"c": b"1"}


def test_update_mode_aggregation_through_the_idempotent_batch_writer(
    spark: Any, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    source, store = tmp_path / "in", tmp_path / "store"
    write_input(source, "1.json", [row("a", "1", 0), row("b", "1", 1)])
    calls: list[int] = []

    def upsert(df: Any, batch_id: int) -> None:
        for _ in range(2):  # a retried foreachBatch writes the same version twice
            (
                df.write.format(FORMAT)
                .mode("append")
                .option("txnAppId", "counts")
                .option("txnVersion", batch_id)
                .save(str(store))
            )
        calls.append(batch_id)

    counts = (
        spark.readStream.schema(SCHEMA)
        .json(str(source))
        .groupBy("key")
        .agg(F.count("*").cast("string").alias("value"))
    )
    query = (
        counts.writeStream.outputMode("update")
        .foreachBatch(upsert)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .start()
    )
    try:
        query.processAllAvailable()
        write_input(source, "2.json", [row("a", "1", 2)])
        query.processAllAvailable()
    finally:
        query.stop()
    assert calls == [0, 1]
    assert store_content(store) == {b"a": b"2", b"b": b"1"}
    with Store.open(store) as opened:
        record = opened.metadata.commit_record
        assert record is not None and (record.query_id, record.batch_id) == ("counts", 1)
        assert opened.metadata.commit_seq == 2  # two versions, each once


def test_bad_input_and_foreign_stores_are_refused(spark: Any, tmp_path: Path) -> None:
    source = tmp_path / "in"
    write_input(source, "1.json", [row("a", "1", 0)])
    stream = spark.readStream.schema(SCHEMA + ", extra INT").json(str(source))
    with pytest.raises(Exception, match="column 'extra' is not something"):
        stream.writeStream.format(FORMAT).option("checkpointLocation", str(tmp_path / "cp1")).start(
            str(tmp_path / "s1")
        ).processAllAvailable()
    stream = spark.readStream.schema("k STRING, value STRING").json(str(source))
    with pytest.raises(Exception, match="needs a 'key' column"):
        stream.writeStream.format(FORMAT).option("checkpointLocation", str(tmp_path / "cp2")).start(
            str(tmp_path / "s2")
        ).processAllAvailable()
    assert not (tmp_path / "s1" / "db").exists() and not (tmp_path / "s2" / "db").exists()
    # A follower store refuses sink writes (KIP-813).
    follower = tmp_path / "follower"
    Store.open(follower, StoreSpec(Role.FOLLOWER, "app-s-changelog", 1)).close()
    query = start_sink(spark, source, follower, tmp_path / "cp3")
    with pytest.raises(Exception, match="follower store"):
        query.processAllAvailable()
    query.stop()
    with pytest.raises(Exception, match="txnAppId' and 'txnVersion' go together"):
        spark.createDataFrame([("a", "1")], "key STRING, value STRING").write.format(FORMAT).option(
            "txnAppId", "x"
        ).mode("append").save(str(tmp_path / "s4"))
    shutil.rmtree(tmp_path / "s4", ignore_errors=True)


def test_the_sink_publishes_a_changelog_that_a_follower_converges_to(
    spark: Any, kafka_broker: Any, make_topic: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    changelog = f"orders-app-{make_topic(partitions=1)}-changelog"
    kafka_broker.create_topic(changelog, 4, compacted=False)  # read back record for record
    kafka_broker.create_topic(f"{changelog}-progress", 1)
    source, store, checkpoint = tmp_path / "in", tmp_path / "store", tmp_path / "cp"

    def start() -> Any:
        writer = changelog_writer(spark, source, checkpoint, bootstrap, changelog, "orders-app")
        return writer.start(str(store))

    write_input(source, "1.json", [row(f"k{i}", str(i), i) for i in range(20)])
    query = start()
    try:
        query.processAllAvailable()
        write_input(source, "2.json", [row("k1", None, 20), row("k2", "changed", 21)])
        query.processAllAvailable()
    finally:
        query.stop()
    leader = store_content(store)
    assert leader[b"k2"] == b"changed" and b"k1" not in leader and len(leader) == 19
    # Each batch is in the changelog exactly once.
    assert len(settled_changelog(bootstrap, changelog)) == 22

    with caught_up_follower(tmp_path / "replica", bootstrap, changelog, 4) as replica:
        with replica.snapshot() as snapshot:
            assert dict(snapshot.items()) == leader
        with Store.open(store) as opened:
            assert replica.metadata.position == opened.metadata.position
            assert opened.metadata.position.to_map() == {"orders": {0: 21}}

    # KIP-813: another application's changelog is refused unless explicitly allowed.
    with pytest.raises(Exception, match=r"does not belong to application\.id 'other-app'"):
        (
            spark.readStream.schema(SCHEMA)
            .json(str(source))
            .writeStream.format(FORMAT)
            .option("checkpointLocation", str(tmp_path / "cp-other"))
            .option("kafka.bootstrap.servers", bootstrap)
            .option("changelog", changelog)
            .option("application.id", "other-app")
            .start(str(tmp_path / "other"))
            .processAllAvailable()
        )


def test_the_batch_writer_overwrites_when_asked(spark: Any, tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    first = spark.createDataFrame([("a", "1"), ("b", "2")], "key STRING, value STRING")
    first.write.format(FORMAT).mode("append").save(store)
    second = spark.createDataFrame([("b", "3"), ("c", "4")], "key STRING, value STRING")
    second.write.format(FORMAT).mode("overwrite").save(store)
    assert store_content(tmp_path / "store") == {b"b": b"3", b"c": b"4"}


def test_timestamps_agree_in_the_leader_the_changelog_and_a_follower(
    spark: Any, kafka_broker: Any, make_topic: Any, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    bootstrap = kafka_broker.bootstrap_servers
    changelog = f"stamps-app-{make_topic(partitions=1)}-changelog"
    kafka_broker.create_topic(changelog, 2, compacted=False)
    kafka_broker.create_topic(f"{changelog}-progress", 1)
    store = tmp_path / "store"
    # Spark timestamps have microseconds (current_timestamp() too); 0 is 1970-01-01T00:00:00Z.
    micros = "2024-05-31 12:00:00.123456"
    rows = spark.createDataFrame(
        [("micros", "1"), ("now", "2"), ("zero", "3"), ("none", "4")], "key STRING, value STRING"
    ).select(
        "key",
        "value",
        F.when(F.col("key") == "micros", F.to_timestamp(F.lit(micros)))
        .when(F.col("key") == "now", F.current_timestamp())
        .when(F.col("key") == "zero", F.timestamp_millis(F.lit(0)))
        .alias("timestamp"),
    )
    before_ms = int(time.time() * 1000)
    (
        rows.write.format(FORMAT)
        .mode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("changelog", changelog)
        .option("application.id", "stamps-app")
        .option("txnAppId", "stamps")
        .option("txnVersion", 0)
        .save(str(store))
    )
    after_ms = int(time.time() * 1000)

    published = {r.key: r.timestamp for r in settled_changelog(bootstrap, changelog)}
    wait_for_owner_exit(store)
    with Store.open(store) as leader, leader.snapshot() as snapshot:
        stored = {key: snapshot.get_record(key).timestamp for key in published}  # type: ignore[union-attr]
    with (
        caught_up_follower(tmp_path / "replica", bootstrap, changelog, 2) as replica,
        replica.snapshot() as snapshot,
    ):
        followed = {key: snapshot.get_record(key).timestamp for key in published}  # type: ignore[union-attr]

    assert stored == published == followed
    # Truncated to milliseconds, as Kafka's record timestamps are.
    assert published[b"micros"] == 1_717_156_800_123
    assert before_ms - 60_000 <= published[b"now"] <= after_ms
    # librdkafka publishes timestamp 0 as "now": a 0 gets the batch's commit time, as a row
    # without a timestamp does, so the changelog and both stores hold the same stamp.
    assert published[b"zero"] == published[b"none"]
    assert before_ms <= published[b"none"] <= after_ms
