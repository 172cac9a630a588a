"""Against a real Kafka Streams application whose stores write through a real schema
registry: Spark reads its Avro keys and values as Kafka Streams answers them, and through a
schema change mid-stream.

The app (``RegistryApp`` in interop/kafka-streams) folds orders into ``orders-avro``, a
key-value store of Avro ``CustomerOrders`` records (strings, longs, an int, an optional
string, a ``timestamp-millis``, an array, a map, an enum, a ``decimal(9,2)``), and into
``avro-keyed``, keyed by an Avro ``CustomerKey`` record, through Apicurio Registry's Kafka
serde in the Confluent frame (magic byte, 4-byte schema id), registering its schemas itself.
The registry is Apicurio Registry (:class:`LocalSchemaRegistry`): the app talks to its own
API, confluent-kafka's deserializer and our reader to its Confluent-compatible one.

Kafka Streams serializes a store's keys and values with its changelog's name, so the
subjects are ``<application id>-<store>-changelog-value`` / ``-key``: the follower
source's defaults.
"""

from __future__ import annotations

import itertools
import json
import random
import struct
import time
from collections.abc import Iterator
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from spark_statestore.connectors.kafka.local import LocalKafkaCluster
from spark_statestore.connectors.kafka.local.streams_app import REGISTRY_APP, StreamsApp
from spark_statestore.connectors.local import LocalSchemaRegistry
from spark_statestore.connectors.schema_registry import RegistrySettings, registry_for
from spark_statestore.schemas import parse_frame
from tests.integration.test_spark_follower import FeedCollector, wait_for_owner_exit
from tests.interop.test_kafka_streams import wait_until_processed
from tests.kafka_util import settled_changelog, wait_until_settled

# The schema-registry tests run in the pytest process beside the main run (their own broker,
# Spark session and registry): CI's budget.
pytestmark = [pytest.mark.integration, pytest.mark.beside]

FORMAT = "spark_statestore"
PARTITIONS = 2
CUSTOMERS = 12
BUCKETS = 4
ORDERS_AVRO = "orders-avro"
AVRO_KEYED = "avro-keyed"
_apps = itertools.count()

Order = tuple[str, int | None, int]
"""An order as produced: customer, amount (None cancels), record timestamp (epoch ms)."""


# -- the app's rules, to predict its stores (RegistryApp's Javadoc) ---------------------------
class Model:
    """What ``RegistryApp`` keeps for a sequence of orders, each written with the schema
    version the app ran with: ``orders`` by customer (the writer's fields only) and
    ``buckets`` by ``(customer, bucket)``."""

    def __init__(self) -> None:
        self.orders: dict[str, dict[str, Any]] = {}
        self.buckets: dict[tuple[str, int], int] = {}

    def apply(self, orders: list[Order], version: int) -> None:
        for customer, amount, timestamp in orders:
            previous = self.orders.get(customer)
            if amount is None:
                if previous is None:
                    continue
                self.buckets.pop((customer, previous["last_amount"] % BUCKETS), None)
                if previous["status"] == "CLOSED":
                    del self.orders[customer]
                else:
                    closed = {f: previous.get(f, default) for f, default in _defaults(version)}
                    closed.update(status="CLOSED", updated=timestamp)
                    if version == 1:
                        closed["note"] = "cancelled"
                    self.orders[customer] = closed
                continue
            bucket = (customer, amount % BUCKETS)
            self.buckets[bucket] = self.buckets.get(bucket, 0) + amount
            total = amount + (previous["total"] if previous else 0)
            count = 1 + (previous["count"] if previous else 0)
            tags = dict(previous["tags"]) if previous else {}
            size = "small" if amount < 100 else "medium" if amount < 500 else "large"
            tags[size] = tags.get(size, 0) + 1
            record: dict[str, Any] = {
                "customer": customer,
                "total": total,
                "count": count,
                "last_amount": amount,
                "updated": timestamp,
                "amounts": [*(previous["amounts"] if previous else []), amount][-3:],
                "tags": tags,
                "status": "OPEN",
                "price": str((Decimal(total) / count).quantize(Decimal("0.01"), ROUND_HALF_EVEN)),
            }
            if version == 1:
                record["note"] = f"large order {amount}" if amount >= 900 else None
            else:
                record["region"] = "even" if amount % 2 == 0 else "odd"
            self.orders[customer] = record


COMMON_FIELDS = (
    "customer", "total", "count", "last_amount", "updated", "amounts", "tags", "status", "price"
)  # fmt: skip
"""The fields of both value schemas."""


def _defaults(version: int) -> list[tuple[str, Any]]:
    """The fields of value schema ``version`` with their defaults (None where none)."""
    extra = ("note", None) if version == 1 else ("region", "none")
    return [*((f, None) for f in COMMON_FIELDS), extra]


def read_as(record: dict[str, Any], version: int) -> dict[str, Any]:
    """``record`` resolved to reader schema ``version`` by Avro's rules: fields the writer
    lacks take the reader's default, fields the reader lacks are dropped."""
    return {f: record.get(f, default) for f, default in _defaults(version)}


# -- producing and reading --------------------------------------------------------------------
def random_orders(count: int, seed: int, start: int) -> list[Order]:
    """``count`` random orders of ``CUSTOMERS`` customers (a tenth cancellations), amounts
    1..999, timestamps ``start``, ``start + 1``, ..."""
    rng = random.Random(seed)
    return [
        (
            f"c{rng.randrange(CUSTOMERS):03d}",
            None if rng.random() < 0.1 else rng.randrange(1, 1000),
            start + i,
        )
        for i in range(count)
    ]


def produce(bootstrap: str, topic: str, orders: list[Order]) -> dict[int, int]:
    """Produce ``orders`` (Kafka's LongSerializer values); returns the end offsets."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for customer, amount, timestamp in orders:
        value = None if amount is None else struct.pack(">q", amount)
        producer.produce(topic, key=customer.encode(), value=value, timestamp=timestamp)
    assert producer.flush(30) == 0
    return wait_until_settled(bootstrap, topic)


def plain(value: Any) -> Any:
    """A value read by Spark or fastavro as the app's JSON writes it: timestamps as epoch
    milliseconds, decimals as strings, records (Spark Rows) as dicts."""
    if hasattr(value, "asDict"):
        return {name: plain(field) for name, field in value.asDict().items()}
    if isinstance(value, datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        return {name: plain(field) for name, field in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def records(app: StreamsApp, store: str) -> list[dict[str, Any]]:
    """Every entry of ``store`` as Kafka Streams answers IQv2 ``RangeQuery``."""
    answer = app.query("records", store)
    assert answer["ok"], answer
    return list(answer["rows"])


def bucket_key(key: dict[str, Any]) -> tuple[str, int]:
    return key["customer"], key["bucket"]


def start_app(
    bootstrap: str,
    registry: LocalSchemaRegistry,
    orders: str,
    state: Path,
    app_id: str,
    version: int,
) -> StreamsApp:
    return StreamsApp(
        bootstrap,
        state,
        application_id=app_id,
        input_topic=orders,
        settings={
            "session-timeout-ms": 6000,
            "commit-interval-ms": 100,
            "schema-registry-url": f"{registry.base_url}/apis/registry/v3",
            "schema-version": version,
        },
        main_class=REGISTRY_APP,
    ).start()


def run_feed(spark: Any, bootstrap: str, changelog: str, path: Path, **options: str) -> list[Any]:
    """The change feed of ``changelog`` into a replica at ``path`` (Trigger.AvailableNow):
    every delivered row."""
    rows: list[Any] = []
    query = (
        follow(spark, bootstrap, changelog, path / "store", **options)
        .writeStream.trigger(availableNow=True)
        .foreachBatch(lambda df, _: rows.extend(df.collect()))
        .option("checkpointLocation", str(path / "checkpoint"))
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    wait_for_owner_exit(path / "store")
    return rows


def follow(spark: Any, bootstrap: str, changelog: str, path: Path, **options: str) -> Any:
    return (
        spark.readStream.format(FORMAT)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("changelog", changelog)
        .options(**options)
        .load(str(path))
    )


def sql_view(spark: Any, view: str, path: Path, **options: str) -> None:
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW {view} USING {FORMAT} OPTIONS (path '{path}', "
        + ", ".join(f"{name} '{value}'" for name, value in options.items())
        + ")"
    )


def folded(rows: list[Any]) -> dict[Any, Any]:
    """Feed rows folded in changelog order: the last value of each key (deletes remove)."""
    out: dict[Any, Any] = {}
    for row in sorted(rows, key=lambda r: (r["partition"], r["offset"])):
        key = plain(row["key"])
        key = bucket_key(key) if isinstance(key, dict) else key
        if row["op"] == "delete":
            out.pop(key, None)
        else:
            out[key] = plain(row["value"])
    return out


# -- one app run for the first tests ----------------------------------------------------------
class RunningApp:
    """The app, what its rules predict it holds, the registry and the subjects."""

    def __init__(self, app: StreamsApp, model: Model, registry: LocalSchemaRegistry) -> None:
        self.app = app
        self.model = model
        self.registry = registry
        self.value_subject = f"{app.changelog(ORDERS_AVRO)}-value"
        self.key_subject = f"{app.changelog(AVRO_KEYED)}-key"


@pytest.fixture(scope="module")
def running_app(
    kafka_broker: LocalKafkaCluster,
    schema_registry: LocalSchemaRegistry,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RunningApp]:
    """The app (schema version 1) having processed 600 random orders, still running."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = f"registry-orders-{time.time_ns()}"
    kafka_broker.create_topic(topic, PARTITIONS, compacted=False)
    state = tmp_path_factory.mktemp("registry-app") / "state"
    app = start_app(bootstrap, schema_registry, topic, state, f"registry-{next(_apps)}", 1)
    try:
        orders = random_orders(600, seed=37, start=int(time.time() * 1000))
        wait_until_processed(bootstrap, app, topic, produce(bootstrap, topic, orders))
        model = Model()
        model.apply(orders, version=1)
        yield RunningApp(app, model, schema_registry)
    finally:
        app.stop()


def test_the_app_answers_what_its_rules_predict(running_app: RunningApp) -> None:
    """The app itself: IQv2 answers every field as the rules of its Javadoc say (the other
    tests compare with its answers; this one shows they mean something)."""
    theirs = {row["key"]: row["value"] for row in records(running_app.app, ORDERS_AVRO)}
    assert theirs == running_app.model.orders
    assert {"OPEN", "CLOSED"} <= {r["status"] for r in theirs.values()}
    assert any(r["note"] == "cancelled" for r in theirs.values())
    assert any(r["note"] and r["note"].startswith("large order") for r in theirs.values())
    assert any(r["note"] is None for r in theirs.values())
    assert any(r["count"] > 3 and len(r["amounts"]) == 3 for r in theirs.values())
    keyed = {bucket_key(r["key"]): r["value"] for r in records(running_app.app, AVRO_KEYED)}
    assert keyed == running_app.model.buckets


def test_changelog_values_are_confluent_framed_with_registered_ids(
    kafka_broker: LocalKafkaCluster, running_app: RunningApp
) -> None:
    """Every value of the ``orders-avro`` changelog (and key of ``avro-keyed``) is framed
    with the id the Confluent-compatible API gives the subject's schema, and confluent-kafka's
    own ``AvroDeserializer`` reads them: folded, they equal Kafka Streams' answers."""
    app = running_app.app
    client = SchemaRegistryClient({"url": running_app.registry.url, "timeout": 30})
    subjects = client.get_subjects()
    assert running_app.value_subject in subjects, subjects
    assert running_app.key_subject in subjects, subjects
    value_id = client.get_latest_version(running_app.value_subject).schema_id
    key_id = client.get_latest_version(running_app.key_subject).schema_id
    assert value_id is not None and key_id is not None
    assert len(client.get_versions(running_app.value_subject)) == 1
    registered = json.loads(str(client.get_schema(value_id).schema_str))
    assert registered["name"] == "CustomerOrders"
    assert registered["namespace"] == "io.sparkstatestore.interop"

    deserializer = AvroDeserializer(client)
    changelog = app.changelog(ORDERS_AVRO)
    context = SerializationContext(changelog, MessageField.VALUE)
    values: dict[str, Any] = {}
    changes = settled_changelog(kafka_broker.bootstrap_servers, changelog)
    assert len(changes) > len(running_app.model.orders)
    assert any(change.value is None for change in changes)  # deletes: tombstones
    for change in changes:
        if change.value is None:
            values.pop(change.key.decode(), None)
            continue
        assert change.value[0] == 0, change
        assert parse_frame(change.value).schema_id == value_id
        assert int.from_bytes(change.value[1:5], "big") == value_id
        values[change.key.decode()] = plain(deserializer(change.value, context))
    assert values == {row["key"]: row["value"] for row in records(app, ORDERS_AVRO)}

    keyed = app.changelog(AVRO_KEYED)
    key_context = SerializationContext(keyed, MessageField.KEY)
    sums: dict[tuple[str, int], int] = {}
    for change in settled_changelog(kafka_broker.bootstrap_servers, keyed):
        assert change.key[0] == 0 and int.from_bytes(change.key[1:5], "big") == key_id
        key = bucket_key(deserializer(change.key, key_context))
        if change.value is None:
            sums.pop(key, None)
        else:
            sums[key] = struct.unpack(">q", change.value)[0]
    assert sums == {bucket_key(r["key"]): r["value"] for r in records(app, AVRO_KEYED)}


def test_spark_replicas_read_avro_keys_and_values_as_kafka_streams_answers(
    spark: Any, kafka_broker: LocalKafkaCluster, running_app: RunningApp, tmp_path: Path
) -> None:
    """The change feed (Trigger.AvailableNow) of each changelog, folded, and SQL over the
    replica it leaves equal Kafka Streams' answers field by field."""
    app, registry = running_app.app, running_app.registry
    bootstrap = kafka_broker.bootstrap_servers
    theirs = {row["key"]: row["value"] for row in records(app, ORDERS_AVRO)}
    avro = {"valueFormat": "avro", "schemaRegistryUrl": registry.url}

    rows = run_feed(
        spark,
        bootstrap,
        app.changelog(ORDERS_AVRO),
        tmp_path / "orders",
        keyFormat="string",
        **avro,
    )
    assert folded(rows) == theirs
    path = tmp_path / "orders" / "store"
    sql_view(
        spark,
        "orders_avro",
        path,
        keyFormat="string",
        valueSubject=running_app.value_subject,
        **avro,
    )
    found = spark.sql("SELECT key, value FROM orders_avro").collect()
    assert len(found) == len(theirs)
    assert {r["key"]: plain(r["value"]) for r in found} == theirs
    # Fields as columns, typed as Spark's from_avro types them.
    assert spark.sql("SELECT value.* FROM orders_avro").schema.simpleString() == (
        "struct<customer:string,total:bigint,count:int,last_amount:bigint,note:string,"
        "updated:timestamp,amounts:array<bigint>,tags:map<string,bigint>,status:string,"
        "price:decimal(9,2)>"
    )
    large = spark.sql(
        "SELECT key FROM orders_avro WHERE value.tags['large'] > 0 AND value.status = 'OPEN'"
    ).collect()
    assert {r["key"] for r in large} == {
        k for k, v in theirs.items() if v["tags"].get("large", 0) > 0 and v["status"] == "OPEN"
    }

    keyed = {bucket_key(r["key"]): r["value"] for r in records(app, AVRO_KEYED)}
    key_options = {"keyFormat": "avro", "valueFormat": "long", "schemaRegistryUrl": registry.url}
    rows = run_feed(spark, bootstrap, app.changelog(AVRO_KEYED), tmp_path / "keyed", **key_options)
    assert folded(rows) == keyed
    sql_view(
        spark, "avro_keyed", tmp_path / "keyed" / "store", keySubject=running_app.key_subject,
        **key_options,
    )  # fmt: skip
    found = spark.sql("SELECT key, value FROM avro_keyed").collect()
    assert {(r["key"]["customer"], r["key"]["bucket"]): r["value"] for r in found} == keyed
    one = next(iter(keyed))
    found = spark.sql(
        f"SELECT value FROM avro_keyed WHERE key.customer = '{one[0]}' AND key.bucket = {one[1]}"
    ).collect()
    assert [r["value"] for r in found] == [keyed[one]]


# -- a schema change mid-stream ----------------------------------------------------------------
class Evolution:
    """The app's stores written with version 1, then version 2, and a follower query
    started in between (still running)."""

    def __init__(self, changelog: str, path: Path, registry: LocalSchemaRegistry) -> None:
        self.changelog = changelog
        self.subject = f"{changelog}-value"
        self.path = path
        self.registry = registry
        self.avro = {
            "keyFormat": "string",
            "valueFormat": "avro",
            "schemaRegistryUrl": registry.url,
        }
        self.model = Model()
        self.before: dict[str, Any] = {}
        """The SQL view planned before version 2, as read then."""
        self.theirs: dict[str, Any] = {}
        """Kafka Streams' answers after version 2."""
        self.collector: FeedCollector
        self.query: Any = None


@pytest.fixture(scope="module")
def evolution(
    spark: Any,
    kafka_broker: LocalKafkaCluster,
    schema_registry: LocalSchemaRegistry,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Evolution]:
    """The app writes version 1; a follower query starts (its reader schema: version 1, the
    latest then) and SQL over its store is planned; the app restarts writing version 2
    (``note`` dropped, ``region`` added with a default) and processes more orders; the query
    has delivered every change of the changelog."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = f"registry-evolution-{time.time_ns()}"
    kafka_broker.create_topic(topic, PARTITIONS, compacted=False)
    root = tmp_path_factory.mktemp("registry-evolution")
    state = root / "kafka-streams-state"
    app_id = f"registry-{next(_apps)}"
    now = int(time.time() * 1000)
    first = [
        *random_orders(200, seed=38, start=now),
        ("c100", 950, now + 1000),  # note "large order 950"; untouched by version 2
        ("c101", 10, now + 1001),
        ("c102", 20, now + 1002),
        ("c102", None, now + 1003),  # CLOSED, note "cancelled"
    ]
    second = [
        *random_orders(100, seed=39, start=now + 2000),
        ("c101", 964, now + 3000),  # rewritten with version 2: region "even", no note
        ("c102", None, now + 3001),  # a cancel of a CLOSED customer: deleted
    ]
    app = start_app(bootstrap, schema_registry, topic, state, app_id, 1)
    try:
        wait_until_processed(bootstrap, app, topic, produce(bootstrap, topic, first))
    finally:
        app.stop()
    run = Evolution(app.changelog(ORDERS_AVRO), root / "store", schema_registry)
    run.model.apply(first, version=1)
    # As a process planning a query reads the subject: this one planned with version 1.
    assert (
        registry_for(RegistrySettings(schema_registry.url)).version(run.subject, None).version == 1
    )

    run.collector = FeedCollector(spark, run.path)
    run.query = (
        follow(spark, bootstrap, run.changelog, run.path, **run.avro)
        .writeStream.foreachBatch(run.collector)
        .option("checkpointLocation", str(root / "checkpoint"))
        .start()
    )
    try:
        run.collector.wait_for(len(settled_changelog(bootstrap, run.changelog)))
        sql_view(spark, "before_v2", run.path, valueSubject=run.subject, **run.avro)
        run.before = {
            r["key"]: plain(r["value"])
            for r in spark.sql("SELECT key, value FROM before_v2").collect()
        }
        app = start_app(bootstrap, schema_registry, topic, state, app_id, 2)
        try:
            wait_until_processed(bootstrap, app, topic, produce(bootstrap, topic, second))
            run.theirs = {r["key"]: r["value"] for r in records(app, ORDERS_AVRO)}
        finally:
            app.stop()
        run.model.apply(second, version=2)
        run.collector.wait_for(len(settled_changelog(bootstrap, run.changelog)))
        yield run
    finally:
        run.query.stop()


def test_the_app_writes_version_2_after_its_restart(evolution: Evolution) -> None:
    """Kafka Streams reads each record with its writer schema: version 1 or 2."""
    client = SchemaRegistryClient({"url": evolution.registry.url, "timeout": 30})
    assert client.get_versions(evolution.subject) == [1, 2]
    latest = json.loads(str(client.get_latest_version(evolution.subject).schema.schema_str))
    assert [f["name"] for f in latest["fields"]][-1] == "region"
    assert evolution.theirs == evolution.model.orders
    assert evolution.theirs["c100"]["note"] == "large order 950"
    assert "region" not in evolution.theirs["c100"]
    assert evolution.theirs["c101"]["region"] == "even"
    assert "note" not in evolution.theirs["c101"]


def test_a_running_query_reads_a_new_version_with_the_reader_schema_it_started_with(
    evolution: Evolution,
) -> None:
    """Records written with version 2 resolve to version 1, the running query's reader
    schema: ``note`` takes its default (null), ``region`` is dropped."""
    v1 = {k: read_as(v, 1) for k, v in evolution.model.orders.items()}
    assert evolution.query.exception() is None
    feed = folded(evolution.collector.rows)
    assert feed == v1
    assert feed["c100"]["note"] == "large order 950"
    assert feed["c101"]["note"] is None and feed["c101"]["last_amount"] == 964
    assert feed["c101"]["amounts"] == [10, 964]
    assert "c102" not in feed
    assert all("region" not in v for v in feed.values())
    # SQL planned before version 2 read version 1 records then.
    assert evolution.before["c102"]["note"] == "cancelled"
    assert evolution.before["c101"]["amounts"] == [10]


def read_after_v2(spark: Any, evolution: Evolution, view: str, **options: str) -> dict[str, Any]:
    """SQL over the live store, planned now (after version 2 was registered)."""
    sql_view(
        spark, view, evolution.path, valueSubject=evolution.subject, **evolution.avro, **options
    )
    return {
        r["key"]: plain(r["value"]) for r in spark.sql(f"SELECT key, value FROM {view}").collect()
    }


def assert_read_as_version_2(found: dict[str, Any], evolution: Evolution) -> None:
    assert sorted(found["c100"]) == sorted(f for f, _ in _defaults(2))  # the columns
    assert found == {k: read_as(v, 2) for k, v in evolution.model.orders.items()}
    assert found["c100"]["region"] == "none" and found["c100"]["total"] == 950
    assert found["c101"]["region"] == "even" and found["c101"]["amounts"] == [10, 964]
    assert all("note" not in v for v in found.values())


def test_a_reader_planned_after_version_2_reads_old_and_new_records_as_version_2(
    spark: Any, evolution: Evolution
) -> None:
    """Planned after version 2 was registered (by a planning worker Spark may have used
    for version 1 before), the reader schema is version 2: old records read with ``region``
    "none", none with ``note``."""
    assert_read_as_version_2(read_after_v2(spark, evolution, "after_v2"), evolution)


def test_latest_is_read_again_for_each_plan(evolution: Evolution) -> None:
    """In this process, which read the subject's latest version before version 2 (the
    fixture): a plan now reads version 2. (confluent-kafka's client keeps the latest
    version for good unless told otherwise; every plan read version 1 here before.)"""
    found = registry_for(RegistrySettings(evolution.registry.url)).version(evolution.subject, None)
    assert found.version == 2
