"""Against a real Kafka Streams application (interop/kafka-streams): our follower's replica
of its stores equals Kafka Streams' own IQv2 answers, key for key.

The app reads random orders (customer -> amount, some cancellations), exactly-once v2, with
position headers on or off, and keeps one store of each kind. Once it has committed every
order, our follower restores a store's changelog, and every key's (or window's, or
session's) value, timestamp and the store's position must equal what Kafka Streams answers
to ``RangeQuery``/``TimestampedRangeQuery``/``WindowRangeQuery``. A versioned store's
changelog must be refused.
"""

from __future__ import annotations

import itertools
import json
import random
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from spark_statestore.changelog import decode_session_key, decode_window_key
from spark_statestore.connectors.kafka import clients
from spark_statestore.connectors.kafka.follower.leader import KafkaLeaderProgress
from spark_statestore.connectors.kafka.follower.source import KafkaChangelogSource
from spark_statestore.connectors.kafka.local import LocalKafkaCluster
from spark_statestore.connectors.kafka.local.streams_app import StreamsApp
from spark_statestore.errors import FollowerError
from spark_statestore.follower import Follower
from spark_statestore.position import Position, PositionBound
from spark_statestore.store import Role, Store, StoreSpec
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
    """Until the app's consumer group has committed ``topic`` up to ``ends`` (exactly-once:
    the app's writes for those records committed in the same transactions); a partition whose
    end is 0 has nothing to commit."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(
        app.application_id, [TopicPartition(topic, p) for p in ends]
    )

    offsets: dict[int, int] = {}

    def committed() -> bool | None:
        result = admin.list_consumer_group_offsets([request])[app.application_id].result()
        offsets.update({tp.partition: tp.offset for tp in result.topic_partitions})
        done = all(end == 0 or offsets.get(p, -1) >= end for p, end in ends.items())
        return True if done else None

    def failure() -> str:
        dumped = app.dump_threads()  # where its threads wait, into its log
        return (
            f"{app.application_id} did not commit {topic} up to {ends} (committed: {offsets}); "
            f"{app.describe()}; "
            + (f"its stream threads:\n{stream_threads(app)}" if dumped else "no thread dump")
        )

    poll_until(committed, timeout_s=120, interval_s=0.1, failure=failure)


def stream_threads(app: StreamsApp, limit: int = 120) -> str:
    """The stacks of Kafka Streams' threads in the app's last thread dump (its log): a
    HotSpot dump gives each thread a paragraph that starts with its quoted name."""
    dump = app.log_path.read_text().rpartition("Full thread dump")[2]
    paragraphs = [p for p in dump.split("\n\n") if p.startswith('"') and "StreamThread" in p]
    return "\n".join("\n\n".join(paragraphs).splitlines()[:limit])


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
    """Our follower's replica of ``store``: its records by changelog key, and its position."""
    changelog = app.changelog(store)
    wait_until_settled(bootstrap, changelog)
    with caught_up_follower(path, bootstrap, changelog, PARTITIONS) as ours:
        snapshot = ours.snapshot()
        try:
            return {"records": list(snapshot.records()), "position": snapshot.position}
        finally:
            snapshot.close()


def key_value_replica(bootstrap: str, app: StreamsApp, store: str, path: Path) -> dict[str, Any]:
    """A key-value store's replica: ``{key: (value, timestamp)}`` and its position."""
    ours = replica(bootstrap, app, store, path)
    rows = {r.key.decode(): (long_value(r.value), r.timestamp) for r in ours["records"]}
    return {"rows": rows, "position": ours["position"]}


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
    ours = key_value_replica(bootstrap, app, "totals", root / "totals")
    assert len(kafka_streams["rows"]) == CUSTOMERS
    assert {k: v for k, (v, _) in ours["rows"].items()} == {
        k: v for k, (v, _) in kafka_streams["rows"].items()
    }
    assert kafka_streams["position"] != Position.empty()
    assert ours["position"] == (kafka_streams["position"] if headers else Position.empty())

    kafka_streams = theirs(app.query("trange", "latest"), timestamps=True)
    ours = key_value_replica(bootstrap, app, "latest", root / "latest")
    assert ours["rows"] == kafka_streams["rows"]
    assert ours["position"] == (kafka_streams["position"] if headers else Position.empty())


def test_an_app_waited_on_in_vain_dumps_its_threads_into_its_log(
    kafka_broker: LocalKafkaCluster, orders: str, tmp_path: Path
) -> None:
    """What a test's failure message offers when the app does not get somewhere: the app's
    states and errors, and its threads' stacks in its log (SIGQUIT), the app running on."""
    bootstrap = kafka_broker.bootstrap_servers
    app = start_app(bootstrap, orders, tmp_path / "state", f"interop-{next(_apps)}", True)
    try:
        assert app.describe().endswith(f"-> RUNNING; errors: none; log {app.log_path})")
        assert app.dump_threads()
        log = app.log_path.read_text()
        assert "Full thread dump" in log
        assert "StreamThread" in log  # Kafka Streams' own threads, where a stuck app waits
        assert stream_threads(app).startswith('"')  # what a failure message shows of them
        ends = produce_orders(bootstrap, orders, 100, seed=3)
        wait_until_processed(bootstrap, app, orders, ends)  # the dump did not stop it
    finally:
        app.stop()
    assert not app.dump_threads()  # nothing to dump once it has exited


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


def test_window_and_session_stores_equal_kafka_streams_answers(
    kafka_broker: LocalKafkaCluster, orders: str, tmp_path: Path
) -> None:
    """Tumbling-window counts and session counts (sessions merge, and the merged ones are
    deleted by tombstones): every window and session our follower holds, decoded from Kafka
    Streams' key layouts, equals its ``WindowRangeQuery`` answers, and so does the position."""
    bootstrap = kafka_broker.bootstrap_servers
    settings = {"window-ms": 100, "session-gap-ms": 30}
    app = start_app(
        bootstrap, orders, tmp_path / "state", f"interop-{next(_apps)}", True, **settings
    )
    try:
        ends = produce_orders(bootstrap, orders, 1500, seed=21)
        wait_until_processed(bootstrap, app, orders, ends)

        answer = app.query("windows", "counts")
        assert answer["ok"], answer
        theirs_windows = {(r["key"], r["start"]): r["value"] for r in answer["rows"]}
        ours = replica(bootstrap, app, "counts", tmp_path / "counts")
        ours_windows = {}
        for record in ours["records"]:
            windowed = decode_window_key(record.key)
            ours_windows[(windowed.key.decode(), windowed.window_start)] = long_value(record.value)
        assert len(theirs_windows) > CUSTOMERS  # several windows per customer
        assert ours_windows == theirs_windows
        # WindowKeyQuery: one customer's windows starting in a range.
        for customer in sorted({key for key, _ in ours_windows})[:8]:
            starts = sorted(start for key, start in ours_windows if key == customer)
            low, high = starts[0], starts[len(starts) // 2]
            answer = app.query("wkey", "counts", customer, args=[low, high])
            assert answer["ok"], answer
            assert {(r["key"], r["start"]): r["value"] for r in answer["rows"]} == {
                (key, start): count
                for (key, start), count in ours_windows.items()
                if key == customer and low <= start <= high
            }
        assert ours["position"] == Position.from_dict(answer["position"])

        ours = replica(bootstrap, app, "sessions", tmp_path / "sessions")
        ours_sessions = {}
        for record in ours["records"]:
            session = decode_session_key(record.key)
            ours_sessions[(session.key.decode(), session.window_start, session.window_end)] = (
                long_value(record.value)
            )
        theirs_sessions = {}
        position = Position.empty()
        for customer in (f"c{i:03d}" for i in range(CUSTOMERS)):
            answer = app.query("sessions", "sessions", customer)
            assert answer["ok"], answer
            position = position.merge(Position.from_dict(answer["position"]))
            for row in answer["rows"]:
                theirs_sessions[(row["key"], row["start"], row["end"])] = row["value"]
        assert len(theirs_sessions) > CUSTOMERS  # several sessions per customer
        assert ours_sessions == theirs_sessions
        assert ours["position"] == position
    finally:
        app.stop()


def test_a_versioned_store_changelog_is_refused_as_a_key_value_store(
    kafka_broker: LocalKafkaCluster, orders: str, tmp_path: Path
) -> None:
    """Kafka Streams marks a versioned store's changelog with min.compaction.lag.ms =
    history retention + 1 day; folded last-write-wins its out-of-order versions and
    'deleted as of' tombstones would give wrong current values, so the follower refuses it
    (naming the store kind) while it follows the app's other changelogs."""
    bootstrap = kafka_broker.bootstrap_servers
    app_id = f"interop-{next(_apps)}"
    settings = {"history-retention-ms": 3_600_000}
    app = start_app(bootstrap, orders, tmp_path / "state", app_id, True, **settings)
    try:
        ends = produce_orders(bootstrap, orders, 200, seed=31)
        wait_until_processed(bootstrap, app, orders, ends)
        versions = app.changelog("versions")
        lag = clients.topic_config(bootstrap, None, versions, 30)["min.compaction.lag.ms"]
        assert int(lag) == 3_600_000 + 86_400_000

        spec = StoreSpec(Role.FOLLOWER, versions, PARTITIONS)
        with Store.open(tmp_path / "versions", spec) as store:
            source = KafkaChangelogSource(bootstrap, versions)
            try:
                with pytest.raises(FollowerError, match="versioned store"):
                    Follower(store, source)
            finally:
                source.close()
            snapshot = store.snapshot()
            try:
                assert snapshot.count() == 0  # nothing was applied
            finally:
                snapshot.close()

        totals = KafkaChangelogSource(bootstrap, app.changelog("totals"))
        try:
            assert totals.versioned_store_retention_ms() is None
        finally:
            totals.close()
    finally:
        app.stop()


def produce_order(producer: Producer, topic: str, customer: str, amount: int) -> Any:
    """Produce one order and return its delivered message (its partition and offset)."""
    delivered: list[Any] = []
    producer.produce(
        topic,
        key=customer.encode(),
        value=struct.pack(">q", amount),
        on_delivery=lambda error, message: delivered.append((error, message)),
    )
    assert producer.flush(30) == 0 and delivered[0][0] is None
    return delivered[0][1]


@pytest.mark.parametrize(
    "trials",
    [
        # 60 in CI (200 until the query network's trust tests needed CI's time; the
        # shapes' headers-off read-your-writes tests cover the same rule through topologies)
        pytest.param(60, id="ci"),
        pytest.param(200, id="soak", marks=pytest.mark.soak),
    ],
)
def test_read_your_writes_without_position_headers(
    kafka_broker: LocalKafkaCluster, orders: str, tmp_path: Path, trials: int
) -> None:
    """An unmodified app (no position headers), exactly-once: the follower takes its position
    from the app's committed consumer-group offsets and its changelog's ends. In each of
    the random trials an order is produced and the replica is read once its position reaches
    that order's offset: the customer's total always includes the order, never a stale one."""
    bootstrap = kafka_broker.bootstrap_servers
    app = start_app(bootstrap, orders, tmp_path / "state", f"interop-{next(_apps)}", False)
    changelog = app.changelog("totals")
    source = KafkaChangelogSource(bootstrap, changelog)
    leader = KafkaLeaderProgress(bootstrap, app.application_id, changelog, PARTITIONS)
    store = Store.open(tmp_path / "totals", StoreSpec(Role.FOLLOWER, changelog, PARTITIONS))
    follower = Follower(store, source, leader=leader)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    rng = random.Random(41)
    totals: dict[str, int] = {}
    try:
        follower.start()
        assert follower.wait_running(60)
        for trial in range(trials):
            customer = f"c{rng.randrange(CUSTOMERS):03d}"
            amount = rng.randrange(1, 1000)
            message = produce_order(producer, orders, customer, amount)
            totals[customer] = totals.get(customer, 0) + amount
            bound = PositionBound.at(
                Position.from_map({orders: {message.partition(): message.offset()}})
            )
            metadata = store.wait_for_commit(lambda m, b=bound: b.permits(m.position), 60)
            assert bound.permits(metadata.position), f"trial {trial}: never reached {bound}"
            assert follower.error is None
            assert long_value(store.get(customer.encode())) == totals[customer], (
                f"trial {trial}: {customer}'s total is stale at position {metadata.position}"
            )
        assert store.metadata.position.topics() == {orders}  # from the group, not headers
    finally:
        follower.stop()
        leader.close()
        store.close()
        app.stop()


def test_spark_reads_its_writes_against_an_unmodified_app(
    spark: Any, kafka_broker: LocalKafkaCluster, orders: str, tmp_path: Path
) -> None:
    """The user's story: a Spark follower query of an unmodified app's changelog with
    ``leaderApplicationId``, and reads bounded by the offset of an order just produced
    (``positionBound`` with ``positionBoundTimeoutMs``) that see the order's effect."""
    from tests.integration.test_spark_follower import FORMAT, wait_for_owner_exit

    bootstrap = kafka_broker.bootstrap_servers
    app = start_app(bootstrap, orders, tmp_path / "state", f"interop-{next(_apps)}", False)
    path = tmp_path / "totals"
    query = (
        spark.readStream.format(FORMAT)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("changelog", app.changelog("totals"))
        .option("leaderApplicationId", app.application_id)
        .load(str(path))
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    rng = random.Random(51)
    totals: dict[str, int] = {}
    try:
        for _ in range(5):
            customer = f"c{rng.randrange(CUSTOMERS):03d}"
            amount = rng.randrange(1, 1000)
            message = produce_order(producer, orders, customer, amount)
            totals[customer] = totals.get(customer, 0) + amount
            bound = {orders: {str(message.partition()): message.offset()}}
            rows = (
                spark.read.format(FORMAT)
                .option("keyFormat", "string")
                .option("valueFormat", "long")
                .option("keys", json.dumps([customer]))
                .option("positionBound", json.dumps(bound))
                .option("positionBoundTimeoutMs", "60000")
                .load(str(path))
                .collect()
            )
            assert [(r["key"], r["value"]) for r in rows] == [(customer, totals[customer])]
        assert query.exception() is None
    finally:
        query.stop()
        app.stop()
    wait_for_owner_exit(path)
