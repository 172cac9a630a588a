"""Against a real Kafka Streams application (interop/kafka-streams): our follower's replica
of its stores equals Kafka Streams' own IQv2 answers, key for key.

The app reads random orders (customer -> amount, some cancellations), exactly-once v2 with
position headers on, and keeps a key-value store (``totals``) and a timestamped one
(``latest``). Once it has committed every order, our follower restores each store's
changelog, and every key's value, timestamp and the store's position must equal what Kafka
Streams answers to ``RangeQuery``/``TimestampedRangeQuery``.
"""

from __future__ import annotations

import itertools
import random
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from spark_statestore.connectors.kafka.local import LocalKafkaCluster
from spark_statestore.connectors.kafka.local.streams_app import StreamsApp
from spark_statestore.position import Position
from tests.kafka_util import caught_up_follower, poll_until, wait_until_settled

pytestmark = pytest.mark.integration

PARTITIONS = 4
CUSTOMERS = 40
_apps = itertools.count()


@pytest.fixture
def orders(make_topic: Callable[..., str]) -> str:
    return make_topic(partitions=PARTITIONS, suffix="-orders")


def start_app(
    bootstrap: str, orders: str, state: Path, app_id: str, headers: bool, **settings: int
) -> StreamsApp:
    return StreamsApp(
        bootstrap,
        state,
        application_id=app_id,
        input_topic=orders,
        position_headers=headers,
        # The broker's smallest session: a restart need not wait out the killed member.
        settings={"session-timeout-ms": 6000, "commit-interval-ms": 100, **settings},
    ).start()


def produce_orders(bootstrap: str, topic: str, count: int, seed: int) -> dict[int, int]:
    """``count`` random orders (a tenth of them cancellations); returns the end offsets."""
    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    now = int(time.time() * 1000)
    for i in range(count):
        customer = f"c{rng.randrange(CUSTOMERS):03d}"
        amount = None if rng.random() < 0.1 else struct.pack(">q", rng.randrange(1, 1000))
        producer.produce(topic, key=customer.encode(), value=amount, timestamp=now + i)
    assert producer.flush(30) == 0
    return wait_until_settled(bootstrap, topic)


def wait_until_processed(bootstrap: str, app: StreamsApp, topic: str, ends: dict[int, int]) -> None:
    """Until the app's consumer group has committed every order (exactly-once: its changelog
    writes committed in the same transactions)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(
        app.application_id, [TopicPartition(topic, p) for p in ends]
    )

    def committed() -> bool | None:
        result = admin.list_consumer_group_offsets([request])[app.application_id].result()
        offsets = {tp.partition: tp.offset for tp in result.topic_partitions}
        return True if all(offsets.get(p, -1) >= end for p, end in ends.items()) else None

    poll_until(
        committed,
        timeout_s=120,
        interval_s=0.1,
        failure=lambda: f"{app.application_id} did not commit {topic} up to {ends}",
    )


def open_transaction(bootstrap: str, topic: str) -> bool | None:
    """True when a partition of ``topic`` holds records of a transaction not yet decided
    (its log end is past its last stable offset)."""
    ends = {}
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "t", "isolation.level": isolation}
        )
        try:
            ends[isolation] = [
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(PARTITIONS)
            ]
        finally:
            consumer.close()
    return True if ends["read_uncommitted"] != ends["read_committed"] else None


def long_value(data: bytes | None) -> int | None:
    return None if data is None else struct.unpack(">q", data)[0]


def replica(bootstrap: str, app: StreamsApp, store: str, path: Path) -> dict[str, Any]:
    """Our follower's replica of ``store``: rows by key, and its position."""
    changelog = app.changelog(store)
    wait_until_settled(bootstrap, changelog)
    with caught_up_follower(path, bootstrap, changelog, PARTITIONS) as ours:
        snapshot = ours.snapshot()
        try:
            rows = {
                record.key.decode(): (long_value(record.value), record.timestamp)
                for record in snapshot.records()
            }
            return {"rows": rows, "position": snapshot.position}
        finally:
            snapshot.close()


def theirs(answer: dict[str, Any], *, timestamps: bool) -> dict[str, Any]:
    assert answer["ok"], answer
    rows = {
        row["key"]: (row["value"], row["timestamp"] if timestamps else None)
        for row in answer["rows"]
    }
    return {"rows": rows, "position": Position.from_dict(answer["position"])}


def compare(bootstrap: str, app: StreamsApp, root: Path, *, headers: bool) -> None:
    """Our replicas of ``totals`` and ``latest`` against Kafka Streams' answers."""
    kafka_streams = theirs(app.query("range", "totals"), timestamps=False)
    ours = replica(bootstrap, app, "totals", root / "totals")
    assert len(kafka_streams["rows"]) == CUSTOMERS
    assert {k: v for k, (v, _) in ours["rows"].items()} == {
        k: v for k, (v, _) in kafka_streams["rows"].items()
    }
    assert kafka_streams["position"] != Position.empty()
    assert ours["position"] == (kafka_streams["position"] if headers else Position.empty())

    kafka_streams = theirs(app.query("trange", "latest"), timestamps=True)
    ours = replica(bootstrap, app, "latest", root / "latest")
    assert ours["rows"] == kafka_streams["rows"]
    assert ours["position"] == (kafka_streams["position"] if headers else Position.empty())


@pytest.mark.parametrize("headers", [True, False], ids=["position-headers", "no-headers"])
def test_key_value_and_timestamped_stores_equal_kafka_streams_answers(
    kafka_broker: LocalKafkaCluster, orders: str, tmp_path: Path, headers: bool
) -> None:
    """Through a SIGKILL of the app with changes in its open transaction (aborted when it
    comes back, its state restored from the changelogs) and restarts of our followers:
    values, timestamps and, with position headers, positions equal Kafka Streams' after
    each phase. Without headers our
    replicas know no position (Kafka Streams writes none), though Kafka Streams has one."""
    bootstrap = kafka_broker.bootstrap_servers
    app_id = f"interop-{next(_apps)}"
    state = tmp_path / "kafka-streams-state"
    app = start_app(bootstrap, orders, state, app_id, headers)
    try:
        ends = produce_orders(bootstrap, orders, 1500, seed=14)
        wait_until_processed(bootstrap, app, orders, ends)
        compare(bootstrap, app, tmp_path, headers=headers)
    finally:
        app.stop()
    # An instance that commits every 9 s (under its 10 s transaction timeout) and logs every
    # update at once (no cache):
    # kill it once its open transaction holds changes.
    settings = {"commit-interval-ms": 9000, "cache-max-bytes": 0}
    app = start_app(bootstrap, orders, state, app_id, headers, **settings)
    try:
        produce_orders(bootstrap, orders, 1500, seed=15)
        poll_until(
            lambda: open_transaction(bootstrap, app.changelog("totals")),
            timeout_s=60,
            interval_s=0.05,
            failure=lambda: "the app never had an open transaction on its changelog",
        )
        app.kill()  # the open transaction is aborted when the app comes back
    finally:
        app.stop()
    app = start_app(bootstrap, orders, state, app_id, headers)
    try:
        ends = produce_orders(bootstrap, orders, 500, seed=16)
        wait_until_processed(bootstrap, app, orders, ends)
        compare(bootstrap, app, tmp_path, headers=headers)
    finally:
        app.stop()
