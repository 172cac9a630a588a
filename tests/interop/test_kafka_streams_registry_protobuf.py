"""Against a real Kafka Streams application whose store holds Protobuf values written through
a real schema registry: Spark reads them as Kafka Streams answers them, field by field, and
through a schema change mid-stream.

``RegistryApp`` (interop/kafka-streams) folds orders into ``orders-proto``: per customer a
``sparkstatestore.interop.CustomerOrders`` message (strings, int64, int32, sint64, a
Timestamp, a repeated field, a map, an enum, a StringValue wrapper, a nested message with
uint32, double and bytes, a Duration, a proto3 ``optional`` and a oneof), serialized by
Apicurio Registry's Protobuf serde in the Confluent frame with message indexes. Version 2 of
its schema drops ``note`` (its number reserved) and adds ``region``. The app answers each
record read as its own running version's message (version 2 reads a version 1 record with
``region`` "" and no ``note``).
"""

from __future__ import annotations

import base64
import itertools
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from spark_statestore.connectors.kafka.local import LocalKafkaCluster
from spark_statestore.connectors.local import LocalSchemaRegistry
from spark_statestore.connectors.schema_registry import RegistrySettings, registry_for
from spark_statestore.schemas import parse_message_indexes
from tests.integration.test_spark_follower import FeedCollector
from tests.interop.test_kafka_streams import wait_until_processed
from tests.interop.test_kafka_streams_registry import (
    PARTITIONS,
    Order,
    produce,
    random_orders,
    records,
    sql_view,
    start_app,
)
from tests.interop.test_kafka_streams_registry import follow as follow_changelog
from tests.kafka_util import settled_changelog

pytestmark = [pytest.mark.integration, pytest.mark.beside]

ORDERS_PROTO = "orders-proto"
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_apps = itertools.count()


def plain(value: Any) -> Any:
    """A value read by Spark as the app's JSON (``ProtoJson``) writes it: Timestamps and
    Durations in microseconds, bytes as base64, messages (Spark Rows) as dicts."""
    if hasattr(value, "asDict"):
        return {name: plain(field) for name, field in value.asDict().items()}
    if isinstance(value, datetime):  # Spark's session time zone is UTC here
        aware = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
        return (aware - EPOCH) // timedelta(microseconds=1)
    if isinstance(value, timedelta):
        return value // timedelta(microseconds=1)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {name: plain(field) for name, field in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def folded(rows: list[Any]) -> dict[str, Any]:
    """Feed rows folded in changelog order: the last value of each key (deletes remove)."""
    out: dict[str, Any] = {}
    for row in sorted(rows, key=lambda r: (r["partition"], r["offset"])):
        if row["op"] == "delete":
            out.pop(row["key"], None)
        else:
            out[row["key"]] = plain(row["value"])
    return out


class Evolution:
    """The app's store written with version 1, then version 2, and a follower query started
    in between (still running), with what the app answered after each phase."""

    def __init__(self, changelog: str, path: Path, registry: LocalSchemaRegistry) -> None:
        self.changelog = changelog
        self.subject = f"{changelog}-value"
        self.path = path
        self.options = {
            "keyFormat": "string",
            "valueFormat": "protobuf",
            "schemaRegistryUrl": registry.url,
        }
        self.phase1: dict[str, Any] = {}
        """Kafka Streams' answers after version 1."""
        self.phase2: dict[str, Any] = {}
        """Kafka Streams' answers after version 2 (every record read as version 2)."""
        self.touched: set[str] = set()
        """The customers version 2 wrote."""
        self.before: dict[str, Any] = {}
        """The SQL view planned before version 2, as read then."""
        self.collector: FeedCollector
        self.query: Any = None


@pytest.fixture(scope="module")
def evolution(
    spark: Any,
    kafka_broker: LocalKafkaCluster,
    schema_registry: LocalSchemaRegistry,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Evolution]:
    """The app writes version 1; a follower query starts (its reader: version 1, the latest
    then) and SQL over its store is planned; the app restarts writing version 2 and
    processes more orders; the query has delivered every change of the changelog."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = f"registry-proto-{time.time_ns()}"
    kafka_broker.create_topic(topic, PARTITIONS, compacted=False)
    root = tmp_path_factory.mktemp("registry-proto")
    state = root / "kafka-streams-state"
    app_id = f"registry-proto-{next(_apps)}"
    now = int(time.time() * 1000)
    first: list[Order] = [
        *random_orders(250, seed=41, start=now),
        ("c100", 950, now + 1000),  # note "large order 950"; untouched by version 2
        ("c101", 11, now + 1001),  # odd: channel unset
        ("c102", 20, now + 1002),
        ("c102", None, now + 1003),  # CLOSED: note "cancelled", the oneof's other member
    ]
    second: list[Order] = [
        *random_orders(100, seed=42, start=now + 2000),
        ("c101", 964, now + 3000),  # rewritten with version 2: region "even", no note
        ("c102", None, now + 3001),  # a cancel of a CLOSED customer: deleted
    ]
    app = start_app(bootstrap, schema_registry, topic, state, app_id, 1)
    try:
        wait_until_processed(bootstrap, app, topic, produce(bootstrap, topic, first))
        phase1 = {r["key"]: r["value"] for r in records(app, ORDERS_PROTO)}
    finally:
        app.stop()
    run = Evolution(app.changelog(ORDERS_PROTO), root / "store", schema_registry)
    run.phase1 = phase1
    run.touched = {customer for customer, _, _ in second}
    registry = registry_for(RegistrySettings(schema_registry.url))
    assert registry.version(run.subject, None).version == 1

    run.collector = FeedCollector(spark, run.path)
    run.query = (
        follow_changelog(spark, bootstrap, run.changelog, run.path, **run.options)
        .writeStream.foreachBatch(run.collector)
        .option("checkpointLocation", str(root / "checkpoint"))
        .start()
    )
    try:
        run.collector.wait_for(len(settled_changelog(bootstrap, run.changelog)))
        sql_view(spark, "proto_before_v2", run.path, valueSubject=run.subject, **run.options)
        run.before = {
            r["key"]: plain(r["value"])
            for r in spark.sql("SELECT key, value FROM proto_before_v2").collect()
        }
        app = start_app(bootstrap, schema_registry, topic, state, app_id, 2)
        try:
            wait_until_processed(bootstrap, app, topic, produce(bootstrap, topic, second))
            run.phase2 = {r["key"]: r["value"] for r in records(app, ORDERS_PROTO)}
        finally:
            app.stop()
        run.collector.wait_for(len(settled_changelog(bootstrap, run.changelog)))
        yield run
    finally:
        run.query.stop()


def test_values_are_framed_with_message_indexes_under_two_registered_protobuf_ids(
    kafka_broker: LocalKafkaCluster, evolution: Evolution
) -> None:
    registry = registry_for(RegistrySettings(evolution.options["schemaRegistryUrl"]))
    ids = {registry.version(evolution.subject, n).schema_id for n in (1, 2)}
    assert registry.versions(evolution.subject) == [1, 2]
    assert registry.version(evolution.subject, 2).schema_type.upper() == "PROTOBUF"
    framed = set()
    for change in settled_changelog(kafka_broker.bootstrap_servers, evolution.changelog):
        if change.value is not None:
            frame = parse_message_indexes(change.value)
            assert frame.message_indexes == (0,), change
            framed.add(frame.schema_id)
    assert framed == ids


def test_sql_planned_with_version_1_reads_as_kafka_streams_answered(
    spark: Any, evolution: Evolution
) -> None:
    """Field by field, every well-known type, the map, the enum, the nested message, the
    proto3 optional and the oneof included."""
    assert evolution.before == evolution.phase1
    c102 = evolution.before["c102"]
    assert c102["status"] == "CLOSED" and c102["note"] == "cancelled"
    assert c102["last_positive"] is None and c102["last_cancel_reason"] == "cancel"
    assert evolution.before["c101"]["channel"] is None  # an odd amount: unset
    assert evolution.before["c100"]["note"] == "large order 950"
    assert evolution.before["c100"]["stats"]["max_amount"] == 950


def test_a_running_query_reads_version_2_records_with_its_version_1_reader(
    evolution: Evolution,
) -> None:
    """Protobuf's rules by field number: ``region`` (unknown to version 1) is skipped,
    ``note`` (not written by version 2) is unset: null."""
    assert evolution.query.exception() is None
    expected = {}
    for key, value in evolution.phase2.items():
        if key not in evolution.touched:
            expected[key] = evolution.phase1[key]  # still its version 1 bytes
        else:
            expected[key] = {**{k: v for k, v in value.items() if k != "region"}, "note": None}
    feed = folded(evolution.collector.rows)
    assert feed == expected
    assert "c102" not in feed and feed["c101"]["note"] is None
    assert feed["c101"]["amounts"] == [11, 964]


def test_sql_planned_after_version_2_reads_old_and_new_records_as_kafka_streams_does(
    spark: Any, evolution: Evolution
) -> None:
    """Read as version 2, as the version 2 app reads them: old records with ``region`` "",
    none with ``note``."""
    sql_view(spark, "proto_after_v2", evolution.path, valueSubject=evolution.subject,
             **evolution.options)  # fmt: skip
    frame = spark.sql("SELECT key, value FROM proto_after_v2")
    assert frame.schema["value"].dataType.simpleString() == (
        "struct<customer:string,total:bigint,count:int,last_amount:bigint,"
        "updated:timestamp,amounts:array<bigint>,tags:map<string,bigint>,status:string,"
        "stats:struct<mean:double,max_amount:bigint,digest:binary>,"
        "since_first:interval day to second,channel:string,region:string,"
        "last_positive:bigint,last_cancel_reason:string>"
    )
    found = {r["key"]: plain(r["value"]) for r in frame.collect()}
    assert found == evolution.phase2
    assert found["c100"]["region"] == "" and found["c101"]["region"] == "even"
    large = spark.sql(
        "SELECT key FROM proto_after_v2 WHERE value.tags['large'] > 0 AND value.status = 'OPEN'"
    ).collect()
    assert {r["key"] for r in large} == {
        k for k, v in found.items() if v["tags"].get("large", 0) > 0 and v["status"] == "OPEN"
    }
