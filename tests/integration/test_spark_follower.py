"""The follower source and the snapshot reader in a local Spark against a real Kafka broker."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_statestore.changelog import partition_for_key
from spark_statestore.store import Store
from spark_statestore.store.ownership import read_owner, wait_for_release
from tests.integration.test_follower import INPUT, ChangelogWriter, random_changes

pytestmark = pytest.mark.integration

FORMAT = "spark_statestore"


def wait_for_owner_exit(path: Path, timeout_s: float = 60) -> None:
    """Wait until the process that owns the store (a stopped query's reader, or a sink's
    commit process closing it) has given it up or exited.

    Spark kills the reader process when a query ends, but not synchronously with
    ``stop()`` / ``awaitTermination()``; a commit process (which Spark keeps for the next
    batch) closes the store on a thread of its own after the commit.
    """
    owner = read_owner(str(path))
    if owner is None:
        return
    assert wait_for_release(str(path), owner.pid, timeout_s), (
        f"the owner of {path} (pid {owner.pid}) did not give it up in {timeout_s} s"
    )


class FeedCollector:
    """A foreachBatch sink that records every delivered row and what the store held then."""

    def __init__(self, spark: Any, path: Path) -> None:
        self.spark = spark
        self.path = path
        self.rows: list[Any] = []
        self.batch_checks: list[tuple[dict[int, int], dict[int, int]]] = []
        self._changed = threading.Condition()

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = df.collect()
        if rows:
            # The store must already hold every change the batch delivers.
            meta = self.spark.read.format(FORMAT).option("view", "metadata").load(str(self.path))
            applied = {int(p): int(o) for p, o in meta.collect()[0]["changelog_offsets"].items()}
            delivered: dict[int, int] = {}
            for row in rows:
                delivered[row["partition"]] = max(
                    delivered.get(row["partition"], -1), row["offset"]
                )
            self.batch_checks.append((delivered, applied))
        with self._changed:
            self.rows.extend(rows)
            self._changed.notify_all()

    def wait_for(self, count: int, timeout_s: float = 120) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.rows) >= count, timeout_s), (
                f"only {len(self.rows)} of {count} rows were delivered"
            )

    def assert_store_was_ahead(self) -> None:
        assert self.batch_checks
        for delivered, applied in self.batch_checks:
            for partition, last_offset in delivered.items():
                assert applied[partition] > last_offset


@pytest.fixture
def writer(kafka_broker: Any, make_topic: Callable[..., str]) -> Iterator[ChangelogWriter]:
    topic = make_topic(partitions=3, suffix="-changelog")
    w = ChangelogWriter(kafka_broker.bootstrap_servers, topic, 3)
    yield w
    w.producer.flush(10)


def follow(spark: Any, bootstrap: str, topic: str, path: Path, **options: str) -> Any:
    reader = (
        spark.readStream.format(FORMAT)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("changelog", topic)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(path))


def snapshot_content(spark: Any, path: Path) -> dict[bytes, bytes]:
    rows = spark.read.format(FORMAT).load(str(path)).select("key", "value").collect()
    return {bytes(r["key"]): bytes(r["value"]) for r in rows}


def test_live_follower_query(
    spark: Any, kafka_broker: Any, writer: ChangelogWriter, tmp_path: Path
) -> None:
    rng = random.Random(3)
    first = [random_changes(rng, 25) for _ in range(4)]
    for changes in first:
        writer.transaction(changes)
    writer.transaction([(b"k001", b"ABORTED")], abort=True)
    path, checkpoint = tmp_path / "store", tmp_path / "checkpoint"
    collector = FeedCollector(spark, path)
    stream = follow(spark, kafka_broker.bootstrap_servers, writer.topic, path)
    query = (
        stream.writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        collector.wait_for(100)
        # Produced after the stream started: visible to a snapshot read of the live store.
        later = [random_changes(rng, 10), [(b"live", b"yes"), (b"k002", None)]]
        writer.transaction([(b"k003", b"ABORTED")], abort=True)
        for changes in later:
            writer.transaction(changes)
        collector.wait_for(112)
        spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW live USING {FORMAT} OPTIONS (path '{path}')")
        content = {
            bytes(r["key"]): bytes(r["value"])
            for r in spark.sql("SELECT key, value FROM live").collect()
        }
        assert content == writer.model
        assert b"ABORTED" not in content.values()
        position = spark.read.format(FORMAT).option("view", "position").load(str(path))
        assert {(r["topic"], r["partition"], r["offset"]) for r in position.collect()} == {
            (INPUT, p, o) for p, o in writer.position.items()
        }
        lag = spark.read.format(FORMAT).option("view", "lag").load(str(path)).collect()
        assert sorted(r["partition"] for r in lag) == [0, 1, 2]
        assert all(r["lag"] == 0 for r in lag)
        # Point lookup through SQL, with the row's changelog coordinates.
        row = spark.sql("SELECT * FROM live WHERE key = X'6C697665'").collect()
        assert len(row) == 1 and bytes(row[0]["value"]) == b"yes"
        assert row[0]["partition"] == partition_for_key(b"live", 3)
        meta = spark.read.format(FORMAT).option("view", "metadata").load(str(path)).collect()
        assert meta[0]["name"] == path.name and meta[0]["role"] == "follower"
        assert meta[0]["changelog_topic"] == writer.topic and meta[0]["partitions"] == 3
        assert meta[0]["flight_location"].startswith("grpc") and meta[0]["owner_pid"] > 0
        assert query.exception() is None
    finally:
        query.stop()
    collector.assert_store_was_ahead()
    # The feed: every committed change exactly once, aborted ones never, deletes as deletes.
    delivered = sorted(collector.rows, key=lambda r: (r["partition"], r["offset"]))
    assert len(delivered) == 112
    assert not [r for r in delivered if r["value"] == b"ABORTED"]
    assert {r["op"] for r in delivered} == {"upsert", "delete"}
    assert all((r["value"] is None) == (r["op"] == "delete") for r in delivered)
    assert all(r["position"] is not None and INPUT in r["position"] for r in delivered)

    # Restart with the same checkpoint: nothing re-delivered, nothing skipped.
    more = random_changes(rng, 15)
    writer.transaction(more)
    restarted = FeedCollector(spark, path)
    query = (
        follow(spark, kafka_broker.bootstrap_servers, writer.topic, path)
        .writeStream.foreachBatch(restarted)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        restarted.wait_for(15)
        query.processAllAvailable()
    finally:
        query.stop()
    assert [
        (bytes(r["key"]), r["value"]) for r in sorted(restarted.rows, key=lambda r: r["offset"])
    ] and len(restarted.rows) == 15
    wait_for_owner_exit(path)
    assert snapshot_content(spark, path) == writer.model  # read with no live owner
    meta = spark.read.format(FORMAT).option("view", "metadata").load(str(path)).collect()
    assert meta[0]["name"] == path.name and meta[0]["changelog_topic"] == writer.topic
    assert json.loads(meta[0]["position"]) == {
        INPUT: {str(p): o for p, o in writer.position.items()}
    }
    # Stale reads are refused clearly (no live owner now: the reader opens the store).
    ahead = json.dumps({INPUT: {"0": 10**9}})
    with pytest.raises(Exception, match="NOT_UP_TO_BOUND"):
        spark.read.format(FORMAT).option("positionBound", ahead).load(str(path)).collect()
    reached = json.dumps({INPUT: {str(p): o for p, o in writer.position.items()}})
    bounded = spark.read.format(FORMAT).option("positionBound", reached).load(str(path))
    assert bounded.count() == len(writer.model)
    with pytest.raises(Exception, match="maxLag"):  # no follower, no Kafka to ask
        spark.read.format(FORMAT).option("maxLag", "0").load(str(path)).collect()
    caught_up = (
        spark.read.format(FORMAT)
        .option("maxLag", "0")
        .option("kafka.bootstrap.servers", kafka_broker.bootstrap_servers)
        .load(str(path))
    )
    assert caught_up.count() == len(writer.model)
    wait_for_owner_exit(path)
    with Store.open(path) as store:
        assert store.metadata.position.to_map() == writer.expected_position()


def test_available_now_with_max_offsets_per_trigger(
    spark: Any, kafka_broker: Any, writer: ChangelogWriter, tmp_path: Path
) -> None:
    rng = random.Random(9)
    for _ in range(6):
        writer.transaction(random_changes(rng, 20))
    path = tmp_path / "store"
    batches: list[int] = []

    def sink(df: Any, batch_id: int) -> None:
        batches.append(df.count())

    query = (
        follow(
            spark,
            kafka_broker.bootstrap_servers,
            writer.topic,
            path,
            maxOffsetsPerTrigger="25",
            valueFormat="string",
            keyFormat="string",
        )
        .writeStream.foreachBatch(sink)
        .trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    assert sum(batches) == 120
    # Transaction markers take offsets too: a batch of 25 offsets holds at most 25 records.
    assert max(batches) <= 25 and len(batches) >= 5
    assert snapshot_content(spark, path) == writer.model


def test_bad_options_are_named(
    spark: Any, kafka_broker: Any, writer: ChangelogWriter, tmp_path: Path
) -> None:
    path = str(tmp_path / "store")
    with pytest.raises(Exception, match="did you mean 'startingOffsets'"):
        follow(
            spark, kafka_broker.bootstrap_servers, writer.topic, tmp_path, startingOffset="latest"
        )
    message = run_failing_query(spark, spark.readStream.format(FORMAT).load(path), tmp_path / "c")
    assert "'changelog' is required" in message
    with pytest.raises(Exception, match=r"kafka\.bootstrap\.servers"):
        spark.readStream.format(FORMAT).option("changelog", writer.topic).load(path)
    with pytest.raises(Exception, match="valueFormat"):
        follow(spark, kafka_broker.bootstrap_servers, writer.topic, tmp_path, valueFormat="strin")
    with pytest.raises(Exception, match=r"option 'serveTokenFile': cannot read .*/missing"):
        follow(
            spark,
            kafka_broker.bootstrap_servers,
            writer.topic,
            tmp_path,
            serveTokenFile=str(tmp_path / "missing"),
        )
    with pytest.raises(Exception, match="positionBound"):
        spark.read.format(FORMAT).option("positionBound", "{oops").load(path).collect()
    with pytest.raises(Exception, match="view"):
        spark.read.format(FORMAT).option("view", "lags").load(path).collect()


def run_failing_query(spark: Any, stream: Any, checkpoint: Path) -> str:
    """The error text of a follower query that must fail (at start or while running)."""
    try:
        query = (
            stream.writeStream.foreachBatch(lambda df, batch_id: df.collect())
            .option("checkpointLocation", str(checkpoint))
            .start()
        )
    except Exception as exc:  # analysis errors carry our message too
        return str(exc)
    try:
        query.awaitTermination(120)
    except Exception as exc:  # a StreamingQueryException with our message
        return str(exc)
    finally:
        query.stop()
    raise AssertionError("the query did not fail")


def test_bad_input_fails_clearly_and_leaves_the_store_alone(
    spark: Any,
    kafka_broker: Any,
    writer: ChangelogWriter,
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    from confluent_kafka import Producer

    bootstrap = kafka_broker.bootstrap_servers
    message = run_failing_query(
        spark, follow(spark, bootstrap, "no-such-changelog", tmp_path / "a"), tmp_path / "c1"
    )
    assert "no-such-changelog" in message and "does not exist" in message

    # A store of another topic.
    writer.transaction([(b"a", b"1")])
    other = make_topic(partitions=3, suffix="-changelog")
    store_path = tmp_path / "store"
    query = (
        follow(spark, bootstrap, writer.topic, store_path)
        .writeStream.trigger(availableNow=True)
        .foreachBatch(lambda df, batch_id: None)
        .option("checkpointLocation", str(tmp_path / "c2"))
        .start()
    )
    query.awaitTermination(120)
    wait_for_owner_exit(store_path)
    with Store.open(store_path) as store:
        before = store.metadata
    message = run_failing_query(spark, follow(spark, bootstrap, other, store_path), tmp_path / "c3")
    assert "belongs to changelog topic" in message and str(store_path) in message

    # Undecodable values: FAILFAST names the record; PERMISSIVE gives null.
    topic = make_topic(partitions=1, suffix="-changelog")
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, key=b"n", value=b"\x00" * 8)
    producer.produce(topic, key=b"bad", value=b"abc")
    producer.flush(10)
    message = run_failing_query(
        spark,
        follow(
            spark, bootstrap, topic, tmp_path / "s4", valueFormat="long", onMissingPosition="skip"
        ),
        tmp_path / "c4",
    )
    assert "partition 0 offset 1" in message and topic in message
    rows: list[Any] = []
    query = (
        follow(
            spark,
            bootstrap,
            topic,
            tmp_path / "s5",
            valueFormat="long",
            mode="PERMISSIVE",
            onMissingPosition="skip",
        )
        .writeStream.trigger(availableNow=True)
        .foreachBatch(lambda df, batch_id: rows.extend(df.collect()))
        .option("checkpointLocation", str(tmp_path / "c5"))
        .start()
    )
    query.awaitTermination(120)
    assert sorted((bytes(r["key"]), r["value"]) for r in rows) == [(b"bad", None), (b"n", 0)]

    # A truncated position header.
    topic = make_topic(partitions=1, suffix="-changelog")
    producer.produce(topic, key=b"k", value=b"v", headers=[("v", b"\x00"), ("c", b"\x00\x00\x00")])
    producer.flush(10)
    message = run_failing_query(
        spark, follow(spark, bootstrap, topic, tmp_path / "s6"), tmp_path / "c6"
    )
    assert topic in message and "offset 0" in message
    wait_for_owner_exit(tmp_path / "s6")
    with Store.open(tmp_path / "s6") as store:
        assert store.metadata.changelog_offsets == {}  # nothing applied past the bad record

    wait_for_owner_exit(store_path)
    with Store.open(store_path) as store:
        assert store.metadata == before


def test_a_store_owned_by_another_process_is_refused(
    spark: Any, kafka_broker: Any, writer: ChangelogWriter, tmp_path: Path
) -> None:
    import subprocess
    import sys

    writer.transaction([(b"a", b"1")])
    path = tmp_path / "store"
    code = (
        "import sys\n"
        "from spark_statestore.store import Role, Store, StoreSpec\n"
        f"spec = StoreSpec(Role.FOLLOWER, {writer.topic!r}, 3)\n"
        f"s = Store.open({str(path)!r}, spec, purpose='holding it')\n"
        "print('ready', flush=True)\n"
        "sys.stdin.read()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        message = run_failing_query(
            spark, follow(spark, kafka_broker.bootstrap_servers, writer.topic, path), tmp_path / "c"
        )
        assert f"pid {child.pid}" in message and "holding it" in message
    finally:
        child.communicate("", timeout=30)
    # The store was left alone: still the child's, with no commit from the query.
    with Store.open(path) as store:
        assert store.metadata.commit_seq == 0 and store.metadata.changelog_offsets == {}


def test_window_keys_and_headers_become_columns(
    spark: Any, kafka_broker: Any, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    from datetime import datetime, timezone

    from confluent_kafka import Producer

    from spark_statestore.changelog.keys import encode_window_key

    topic = make_topic(partitions=1, suffix="-changelog")
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    start_ms = 1_700_000_000_000
    producer.produce(
        topic,
        key=encode_window_key(b"user-1", start_ms, 0),
        value=b"\x00\x00\x00\x00\x00\x00\x00\x05",
        headers=[("trace", b"abc")],
    )
    producer.flush(10)
    rows: list[Any] = []
    query = (
        follow(
            spark,
            kafka_broker.bootstrap_servers,
            topic,
            tmp_path / "store",
            storeType="window",
            keyFormat="string",
            valueFormat="long",
            includeHeaders="true",
        )
        .writeStream.trigger(availableNow=True)
        .foreachBatch(lambda df, batch_id: rows.extend(df.collect()))
        .option("checkpointLocation", str(tmp_path / "cp"))
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    [row] = rows
    assert row["key"] == "user-1" and row["value"] == 5
    assert row["window_start"].replace(tzinfo=timezone.utc) == datetime.fromtimestamp(
        start_ms / 1000, tz=timezone.utc
    )
    assert [(h["key"], bytes(h["value"])) for h in row["headers"]] == [("trace", b"abc")]
    assert row["position"] is None and row["op"] == "upsert"


def test_a_bounded_read_waits_for_the_follower_to_apply_the_write(
    spark: Any, kafka_broker: Any, writer: ChangelogWriter, tmp_path: Path
) -> None:
    """Read-your-writes: a read bounded by a write the follower has not applied yet waits
    (``positionBoundTimeoutMs``) on the owner for the commit that brings it, then sees it."""
    from spark_statestore.serve import connect_to_owner

    writer.transaction([(b"first", b"1")])
    path = tmp_path / "store"
    collector = FeedCollector(spark, path)
    query = (
        follow(spark, kafka_broker.bootstrap_servers, writer.topic, path)
        .writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        collector.wait_for(1)
        awaited = partition_for_key(b"awaited", 3)
        bound = json.dumps({INPUT: {str(awaited): writer.input_offset + 1}})
        seen: list[Any] = []
        errors: list[BaseException] = []

        def bounded_read() -> None:
            try:
                df = (
                    spark.read.format(FORMAT)
                    .option("positionBound", bound)
                    .option("positionBoundTimeoutMs", "120000")
                    .load(str(path))
                )
                seen.extend(df.collect())
            except BaseException as exc:  # reported by the test thread
                errors.append(exc)

        reader = threading.Thread(target=bounded_read)
        reader.start()
        client = connect_to_owner(str(path))
        assert client is not None
        with client:
            # The write is produced only once the read is waiting on the owner for it.
            while client.stats()["waiting"] == 0:
                assert reader.is_alive(), errors
                time.sleep(0.05)  # polling another process's state, not waiting for time
            writer.transaction([(b"awaited", b"yes")])
            reader.join(120)
        assert not reader.is_alive() and not errors, errors
        assert {bytes(r["key"]): bytes(r["value"]) for r in seen} == writer.model
        ahead = json.dumps({INPUT: {"0": 10**9}})
        with pytest.raises(Exception, match=r"NOT_UP_TO_BOUND.*after waiting 0\.2 s"):
            (
                spark.read.format(FORMAT)
                .option("positionBound", ahead)
                .option("positionBoundTimeoutMs", "200")
                .load(str(path))
                .collect()
            )
    finally:
        query.stop()
    wait_for_owner_exit(path)


def test_follower_queries_sharing_a_token_file_answer_routed_queries(
    spark: Any, kafka_broker: Any, writer: ChangelogWriter, tmp_path: Path
) -> None:
    """Two follower queries of one changelog (partitions 0-1 and 2), given one
    ``serveTokenFile``: ``query --changelog`` routes to both with that token and gets every
    key right; a router with another token is refused, and says so."""
    from tests.integration.test_cli import cli

    writer.transaction([(b"key-%02d" % n, b"value-%02d" % n) for n in range(30)])
    token = tmp_path / "token"
    token.write_text("the-followers-shared-token\n")
    bootstrap = kafka_broker.bootstrap_servers
    queries, collectors = [], []
    try:
        for name, partitions in (("low", "0,1"), ("high", "2")):
            path = tmp_path / name
            collector = FeedCollector(spark, path)
            stream = follow(
                spark,
                bootstrap,
                writer.topic,
                path,
                partitions=partitions,
                serveTokenFile=str(token),
            )
            query = (
                stream.writeStream.foreachBatch(collector)
                .option("checkpointLocation", str(tmp_path / f"{name}-checkpoint"))
                .start()
            )
            queries.append(query)
            held = [int(p) for p in partitions.split(",")]
            count = sum(partition_for_key(key, 3) in held for key in writer.model)
            collectors.append((collector, count))
        for collector, count in collectors:
            collector.wait_for(count)  # the store has applied every row its feed delivers
        routed = ["query", "--changelog", writer.topic, "--bootstrap-servers", bootstrap]
        every = cli(*routed, "--token-file", str(token), "--all", "--json")
        assert every.returncode == 0, every.stderr
        rows = [json.loads(line) for line in every.stdout.splitlines()]
        assert {r["key"].encode(): r["value"].encode() for r in rows} == writer.model
        assert len(rows) == len(writer.model) == 30
        one = cli(*routed, "--token-file", str(token), "--key", "key-07", "--json")
        assert json.loads(one.stdout)["value"] == "value-07", one.stderr

        (tmp_path / "wrong").write_text("not-the-token-of-the-followers\n")
        refused = cli(*routed, "--token-file", str(tmp_path / "wrong"), "--key", "key-07")
        assert refused.returncode != 0 and refused.stdout == ""
        assert "refused this client's credentials" in refused.stderr, refused.stderr
        assert all(query.exception() is None for query in queries)
    finally:
        for query in queries:
            query.stop()
    for name in ("low", "high"):
        wait_for_owner_exit(tmp_path / name)
