"""The other direction: a real Kafka Streams application follows the changelog our Spark
sink writes, and answers what our leader store answers.

Two Spark streaming queries write the same batches of upserts and deletes (keys with input
record metadata, so the leader has a position) into two stores through
``writeStream.format("spark_statestore")``, one with string values and one with longs
(8 bytes big-endian, Kafka's ``LongSerializer``), each publishing its changelog. The
``FollowerApp`` of ``interop/kafka-streams`` follows both changelogs twice: in one JVM as
read-only state stores (``Topology#addReadOnlyStateStore``, KIP-813), in another as global
tables (``StreamsBuilder#globalTable``). After every batch:

* the leader's position (the batch's input offsets, what its progress record names) is turned
  into changelog offsets with :func:`changelog_bound` (equal to the offsets our store
  committed), and Kafka Streams' IQv2 ``RangeQuery`` bounded by
  ``PositionBound.at(those offsets)`` must equal our store's ``RangeQuery``, key for key,
  deletes included;
* the same input position used as the bound itself is not reached by Kafka Streams: its
  read-only stores keep positions in the topic they follow (checked once);
* the global tables (IQv1: Kafka Streams answers IQv2 on a global store with
  ``UNKNOWN_QUERY_TYPE``, checked) reach our store's contents.

Then Kafka Streams restores the read-only stores from scratch (state wiped, its consistency
option on): the same rows, and as position exactly our leader's, merged from the ``c``
headers, without the followed topic's offsets (a changelog bound is not met) until it
processes the next batch, whose records add their offsets but not their headers.
"""

from __future__ import annotations

import itertools
import json
import random
import shutil
import struct
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from spark_statestore.connectors.kafka.local import LocalKafkaCluster
from spark_statestore.connectors.kafka.local.streams_app import StreamsFollower
from spark_statestore.connectors.kafka.sink.bound import (
    changelog_bound,
    changelog_bound_from_progress,
)
from spark_statestore.connectors.kafka.sink.progress import read_progress
from spark_statestore.position import Position, PositionBound
from spark_statestore.query import RangeQuery, StateQueryRequest
from spark_statestore.store import Store
from tests.integration.test_spark_follower import wait_for_owner_exit
from tests.kafka_util import poll_until, wait_until_settled

pytestmark = pytest.mark.integration

FORMAT = "spark_statestore"
PARTITIONS = 4
KEYS = 30
INPUT_SCHEMA = "key STRING, amount BIGINT, topic STRING, partition INT, offset BIGINT"
_runs = itertools.count()


def write_batch(directory: Path, index: int, rows: list[dict[str, Any]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    temporary = directory / f".{index}.tmp"
    temporary.write_text("".join(json.dumps(row) + "\n" for row in rows))
    temporary.rename(directory / f"{index}.json")  # never a half-written file for Spark


def random_batches(seed: int, count: int, size: int) -> list[list[dict[str, Any]]]:
    """Batches of orders (upserts, a fifth of them deletes) over ``KEYS`` customers, with
    input record metadata: orders partition ``i % 2`` at increasing offsets."""
    rng = random.Random(seed)
    next_offset = {0: 0, 1: 0}
    batches = []
    for _ in range(count):
        rows = []
        for i in range(size):
            partition = i % 2
            amount = None if rng.random() < 0.2 else rng.randrange(-(2**40), 2**40)
            rows.append(
                {
                    "key": f"c{rng.randrange(KEYS):02d}",
                    "amount": amount,
                    "topic": "orders",
                    "partition": partition,
                    "offset": next_offset[partition],
                }
            )
            next_offset[partition] += 1
        batches.append(rows)
    return batches


def input_position(rows: list[dict[str, Any]]) -> Position:
    """The input offsets of a batch's rows (the last one per partition): what the writer of
    the input knows, and what the leader's position (and its ``c`` headers) reach."""
    return Position.from_map({"orders": {r["partition"]: r["offset"] for r in rows}})


def start_sink(
    spark: Any,
    source: Path,
    store: Path,
    changelog: str,
    app_id: str,
    bootstrap: str,
    *,
    longs: bool,
) -> Any:
    from pyspark.sql import functions as F

    rows = spark.readStream.schema(INPUT_SCHEMA).json(str(source))
    if longs:
        # Kafka's LongSerializer: 8 bytes big-endian, two's complement (hex() of a negative
        # long already has 16 digits).
        value = F.unhex(F.lpad(F.hex(F.col("amount")), 16, "0"))
    else:
        value = F.col("amount").cast("string")
    return (
        rows.select("key", value.alias("value"), "topic", "partition", "offset")
        .writeStream.format(FORMAT)
        .option("checkpointLocation", str(store.with_name(store.name + "-checkpoint")))
        .option("kafka.bootstrap.servers", bootstrap)
        .option("changelog", changelog)
        .option("application.id", app_id)
        .start(str(store))
    )


def leader_answer(path: Path, *, longs: bool) -> dict[str, Any]:
    """Our leader store's ``RangeQuery`` over every partition: rows, position and the
    changelog offsets it committed."""
    wait_for_owner_exit(path)
    with Store.open(path) as store:
        result = store.query(
            StateQueryRequest.in_store(path.name).with_query(RangeQuery.with_no_bounds())
        )
        rows: dict[tuple[int, str], Any] = {}
        for partition, answer in result.partition_results.items():
            assert answer.is_success, (partition, answer.failure_message)
            for key, value in answer.result:
                decoded = struct.unpack(">q", value)[0] if longs else value.decode()
                rows[partition, key.decode()] = decoded
        return {
            "rows": rows,
            "position": result.position,
            "changelog_offsets": dict(store.metadata.changelog_offsets),
        }


def kafka_streams_rows(answer: dict[str, Any]) -> dict[tuple[int, str], Any]:
    """An IQv2 answer's rows by (store partition, key)."""
    assert answer["ok"], answer
    rows = {(row["partition"], row["key"]): row["value"] for row in answer["rows"]}
    assert len(rows) == len(answer["rows"]), "a key answered twice"
    return rows


def global_table_rows(answer: dict[str, Any]) -> dict[str, Any]:
    """An IQv1 answer's rows by key (a global table has no partitions)."""
    assert answer["ok"], answer
    rows = {row["key"]: row["value"] for row in answer["rows"]}
    assert len(rows) == len(answer["rows"]), "a key answered twice"
    return rows


def test_kafka_streams_follows_the_sinks_changelog(
    spark: Any, kafka_broker: LocalKafkaCluster, make_topic: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    app_id = f"sink-app-{next(_runs)}"
    stores = {"strings": False, "longs": True}  # store name -> long values
    changelogs = {}
    for name in stores:
        # Not compacted: the test compares offsets record for record (Kafka Streams does
        # not require compaction of a topic it follows, it only recommends it).
        changelogs[name] = f"{app_id}-{make_topic(partitions=1)}-{name}-changelog"
        kafka_broker.create_topic(changelogs[name], PARTITIONS, compacted=False)
        kafka_broker.create_topic(f"{changelogs[name]}-progress", 1)
    follow = {
        name: (changelogs[name], "long" if longs else "string") for name, longs in stores.items()
    }
    followers = {
        kind: StreamsFollower(
            bootstrap,
            tmp_path / f"kafka-streams-{kind}",
            follow=follow,
            kind=kind,
            application_id=f"{app_id}-follower-{kind}",
        )
        for kind in ("readonly", "global")
    }
    source = tmp_path / "input"
    source.mkdir()
    queries = {}
    try:
        with ThreadPoolExecutor(2) as pool:  # two JVMs starting side by side
            for started in [pool.submit(f.start) for f in followers.values()]:
                started.result()
        queries = {
            name: start_sink(
                spark, source, tmp_path / name, changelogs[name], app_id, bootstrap, longs=longs
            )
            for name, longs in stores.items()
        }
        readonly, global_tables = followers["readonly"], followers["global"]

        # Kafka Streams 4.3 serves no IQv2 on global stores (KAFKA-13523).
        answer = global_tables.range("strings")
        assert (answer["ok"], answer["failure"], answer["partition"]) == (
            False,
            "UNKNOWN_QUERY_TYPE",
            None,
        ), answer

        ends_seen: list[dict[str, Position]] = []
        batches = random_batches(seed=14, count=4, size=40)
        for index, rows in enumerate(batches):
            write_batch(source, index, rows)
            for query in queries.values():
                query.processAllAvailable()
            written = input_position(rows)  # what the writer of the input knows
            ends: dict[str, Position] = {}
            for name, longs in stores.items():
                ours = leader_answer(tmp_path / name, longs=longs)
                assert ours["position"].dominates(written)
                # The leader's commits as changelog offsets (each partition's last record).
                ends[name] = Position.from_map(
                    {changelogs[name]: {p: end - 1 for p, end in ours["changelog_offsets"].items()}}
                )
                wait_until_settled(bootstrap, changelogs[name])  # the commit's markers are in
                bound = changelog_bound(bootstrap, changelogs[name], written)
                assert bound == ends[name]
                # Per partition: Kafka Streams' task n reads changelog partition n, and our
                # store's partition n holds the keys the sink published there (murmur2).
                theirs = readonly.range(name, bound, wait_s=30)
                assert kafka_streams_rows(theirs) == ours["rows"], f"batch {index}, {name}"
                assert theirs["partitions"] == list(range(PARTITIONS))
                assert PositionBound.at(bound).permits(Position.from_dict(theirs["position"]))

                if index == 0:
                    # Its position is in the topic it follows, not in our c headers.
                    assert Position.from_dict(theirs["position"]).topics() == {changelogs[name]}
                    refused = readonly.range(name, written, wait_s=0)
                    assert (refused["ok"], refused["failure"]) == (False, "NOT_UP_TO_BOUND")

                leader_rows = {key: value for (_, key), value in ours["rows"].items()}
                poll_until(
                    lambda name=name, leader_rows=leader_rows: (
                        True if global_table_rows(global_tables.all(name)) == leader_rows else None
                    ),
                    timeout_s=30,
                    interval_s=0.05,  # IQv1 has no position to wait for
                    failure=lambda name=name: f"the global table {name} did not reach the leader",
                )
            ends_seen.append(ends)

        # Every batch's input position maps to the changelog offsets the leader had then.
        for name in stores:
            records = read_progress(bootstrap, changelogs[name])
            for index, rows in enumerate(batches):
                bound = changelog_bound_from_progress(
                    changelogs[name], records, input_position(rows)
                )
                assert bound == ends_seen[index][name], f"batch {index}"

        # Kafka Streams restores a wiped read-only store from the topic it follows (up to its
        # committed offsets). Only then are our c headers part of its position (with its
        # consistency option on, ChangelogRecordDeserializationHelper merges them), and only
        # they: the followed topic's offsets come back with the next record processed.
        readonly.stop()
        shutil.rmtree(tmp_path / "kafka-streams-readonly")
        readonly = followers["readonly"] = StreamsFollower(
            bootstrap,
            tmp_path / "kafka-streams-readonly",
            follow=follow,
            kind="readonly",
            application_id=f"{app_id}-follower-readonly",
            position_headers=True,
        )
        readonly.start()  # RUNNING: a stream thread runs once its active tasks are restored
        restored_at: dict[str, Position] = {}
        for name, longs in stores.items():
            ours = leader_answer(tmp_path / name, longs=longs)
            restored = readonly.range(name)
            assert kafka_streams_rows(restored) == ours["rows"]
            assert restored["partitions"] == list(range(PARTITIONS))
            restored_at[name] = Position.from_dict(restored["position"])
            assert restored_at[name] == ours["position"]
            refused = readonly.range(name, ends_seen[-1][name], wait_s=0)
            assert (refused["ok"], refused["failure"]) == (False, "NOT_UP_TO_BOUND")

        rows = random_batches(seed=15, count=1, size=40)[0]
        for row in rows:  # after the input offsets of the first batches
            row["offset"] += len(batches) * 20
        write_batch(source, len(batches), rows)
        for query in queries.values():
            query.processAllAvailable()
        written = input_position(rows)
        for name, longs in stores.items():
            ours = leader_answer(tmp_path / name, longs=longs)
            wait_until_settled(bootstrap, changelogs[name])
            bound = changelog_bound(bootstrap, changelogs[name], written)
            assert bound.partition_offsets(changelogs[name]).keys() == set(range(PARTITIONS))
            theirs = readonly.range(name, bound, wait_s=30)
            assert kafka_streams_rows(theirs) == ours["rows"]
            # Processing takes the records' own offsets; their c headers are not merged.
            assert Position.from_dict(theirs["position"]) == restored_at[name].merge(bound)
            assert not Position.from_dict(theirs["position"]).dominates(ours["position"])
    finally:
        for query in queries.values():
            query.stop()
        for follower in followers.values():
            follower.stop()
