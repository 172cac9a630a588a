"""Kafka Streams follows the changelog our sink writes with Avro values through a real schema
registry.

Our batch writer (``df.write.format("spark_statestore")``, ``txnAppId``/``txnVersion``)
writes a struct column as Avro with ``valueFormat avro`` (the registry serializers' frame:
magic byte, the 4-byte id Apicurio's Confluent-compatible API gave the schema, Avro binary).
The ``FollowerApp`` of ``interop/kafka-streams`` follows the changelogs with Apicurio
Registry's own Kafka serde for Avro generic records, in one JVM as read-only state stores
(``Topology#addReadOnlyStateStore``, KIP-813, read with IQv2) and in another as global tables
(read with IQv1: Kafka Streams 4.3 serves no IQv2 on global stores), and answers each value
as the JSON of its fields (timestamps in epoch milliseconds, decimals as plain strings).

* After upserts, a delete, an overwrite (the rows written become the whole content: the
  others are tombstoned) and more, both answer exactly the rows the sink wrote, field by
  field. Every frame carries the id the registry's Confluent-compatible API gave, which is
  Apicurio's content id: the id Apicurio's deserializer looks up by default
  (``apicurio.registry.use-id = contentId``). Apicurio gives a new content the id of the
  version that brings it, so the two ids differ only for the same schema under a second
  subject; the test registers it so, then deletes the first subject, leaving the frame's id a
  content id and no version's global id: read as a global id it would find nothing.
* Through a schema change (a field added with a default, registered by the sink's next
  write), the app, still running, reads every record with its own writer schema: the old
  records answer the old fields, the new ones the new field too.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from spark_statestore.connectors.kafka.local import LocalKafkaCluster
from spark_statestore.connectors.kafka.local.streams_app import StreamsFollower
from spark_statestore.connectors.local import LocalSchemaRegistry
from spark_statestore.position import Position
from tests.kafka_util import poll_until, settled_changelog

# The schema-registry tests run in the pytest process beside the main run (their own broker,
# Spark session and registry): CI's budget.
pytestmark = [pytest.mark.integration, pytest.mark.beside]

FORMAT = "spark_statestore"
APP = "avro-follow"
PARTITIONS = 2
ORDERS = "orders"
"""The store of the upsert / delete / overwrite test."""
EVOLVING = "evolving"
"""The store of the schema change test."""
UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
# Fresh schema content in the session's registry on every run and store (see
# the_frame_id_is_no_global_id).
NAMESPACE = f"io.sparkstatestore.tests.run{time.time_ns()}"
_txn = itertools.count(1)


def order_schema(store: str, *, region: bool = False) -> dict[str, Any]:
    """The value schema of ``store``: version 1, or version 2 with ``region`` added (default
    "none")."""
    fields: list[dict[str, Any]] = [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "price",
         "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "tags", "type": {"type": "map", "values": "long"}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ]  # fmt: skip
    if region:
        fields.append({"name": "region", "type": "string", "default": "none"})
    return {
        "type": "record",
        "name": "FollowedOrder",
        "namespace": f"{NAMESPACE}.{store}",
        "fields": fields,
    }


VALUE_TYPE = (
    "STRUCT<id: BIGINT, customer: STRING, placed: TIMESTAMP, price: DECIMAL(9,2), "
    "tags: MAP<STRING, BIGINT>, note: STRING>"
)
VALUE_TYPE_V2 = VALUE_TYPE[:-1] + ", region: STRING>"


def order(number: int, *, variant: int = 0) -> dict[str, Any]:
    """An order as the sink's value column takes it: extreme longs, quotes and a backslash in
    a string, a millisecond timestamp, negative, zero and large decimals, empty and full
    maps, a null and a non-null optional field."""
    longs = [0, -1, 2**62 + number, -(2**63), 2**63 - 1, 7 * number]
    prices = ["0.00", "-3.50", "1234567.89", f"{number}.25", "-9999999.99", "0.01"]
    return {
        "id": longs[(number + variant) % len(longs)],
        "customer": f'c{number % 3} "{variant}" \\ ü',
        "placed": dt.datetime(2026, 11, 28, 1, number % 60, variant % 60, 1000 * number, UTC),
        "price": Decimal(prices[(number + variant) % len(prices)]),
        "tags": {} if number % 4 == 0 else {"n": number, "v": -variant, "big": 2**40},
        "note": None if (number + variant) % 2 else f"note {number}/{variant}",
    }


def answered(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` as the app answers it: the fields of the record's writer schema, the
    timestamp in epoch milliseconds, the decimal as its plain string."""
    return {**value, "placed": epoch_ms(value["placed"]), "price": str(value["price"])}


def epoch_ms(moment: dt.datetime) -> int:
    assert moment.microsecond % 1000 == 0, "timestamp-millis keeps milliseconds"
    return (moment - EPOCH) // dt.timedelta(milliseconds=1)


class Sink:
    """Our batch writer into one store and its changelog, and what it was asked to write."""

    def __init__(
        self, spark: Any, bootstrap: str, registry: LocalSchemaRegistry, changelog: str, path: Path
    ) -> None:
        self.spark = spark
        self.bootstrap = bootstrap
        self.registry = registry
        self.changelog = changelog
        self.subject = f"{changelog}-value"
        self.path = path
        self.rows: dict[str, dict[str, Any]] = {}
        """What the store and the changelog hold: key -> value (the sink's column)."""

    def write(
        self,
        rows: list[tuple[str, dict[str, Any] | None]],
        *,
        schema: dict[str, Any],
        value_type: str = VALUE_TYPE,
        mode: str = "append",
    ) -> None:
        """One committed batch (``overwrite``: the rows become the whole content); a None
        value deletes the key."""
        frame = self.spark.createDataFrame(rows, f"key STRING, value {value_type}")
        frame.write.format(FORMAT).mode(mode).options(
            **{
                "kafka.bootstrap.servers": self.bootstrap,
                "changelog": self.changelog,
                "application.id": APP,
                "valueFormat": "avro",
                "valueSchema": json.dumps(schema),
                "schemaRegistryUrl": self.registry.url,
                "autoRegisterSchemas": "true",
                "txnAppId": f"{APP}-{Path(self.path).name}",
                "txnVersion": str(next(_txn)),
            }
        ).save(str(self.path))
        if mode == "overwrite":
            self.rows.clear()
        for key, value in rows:
            if value is None:
                self.rows.pop(key, None)
            else:
                self.rows[key] = value

    def expected(self) -> dict[str, dict[str, Any]]:
        """The rows as the app should answer them."""
        return {key: answered(value) for key, value in self.rows.items()}

    def last_offsets(self) -> Position:
        """The offset of each changelog partition's last committed record (after waiting
        for the commit's markers): what a follower has processed once it has all of it."""
        last: dict[int, int] = {}
        for record in settled_changelog(self.bootstrap, self.changelog):
            last[record.partition] = max(record.offset, last.get(record.partition, -1))
        return Position.from_map({self.changelog: last})


class Followers:
    """The two Kafka Streams followers of both stores' changelogs, started before any
    write (so they follow, rather than restore, what the sink commits)."""

    def __init__(self, readonly: StreamsFollower, global_tables: StreamsFollower) -> None:
        self.readonly = readonly
        self.global_tables = global_tables

    def read_only_rows(self, store: str, sink: Sink) -> dict[str, Any]:
        """IQv2 ``RangeQuery`` over every partition of the read-only store, bounded by the
        changelog's last records (Kafka Streams is asked again until its position is there):
        the rows by key."""
        answer = self.readonly.range(store, sink.last_offsets(), wait_s=60)
        assert answer["ok"], answer
        assert answer["partitions"] == list(range(PARTITIONS)), answer
        rows = {row["key"]: row["value"] for row in answer["rows"]}
        assert len(rows) == len(answer["rows"]), "a key answered twice"
        return rows

    def global_rows(self, store: str, expected: dict[str, Any]) -> dict[str, Any]:
        """IQv1 over the global table (it has no position to wait for) until it answers
        ``expected``, or its last answer after 60 s."""
        seen: dict[str, Any] = {}

        def reached() -> dict[str, Any] | None:
            answer = self.global_tables.all(store)
            assert answer["ok"], answer
            seen.clear()
            seen.update({row["key"]: row["value"] for row in answer["rows"]})
            assert len(seen) == len(answer["rows"]), "a key answered twice"
            return dict(seen) if seen == expected else None

        try:
            return poll_until(
                reached,
                timeout_s=60,
                interval_s=0.05,
                failure=lambda: f"the global table {store} did not reach the sink's rows",
            )
        except AssertionError:
            return dict(seen)  # compared by the caller, field by field

    def assert_both_answer(self, store: str, sink: Sink) -> dict[str, Any]:
        """Both followers answer exactly the sink's rows; returns the read-only answer."""
        expected = sink.expected()
        read_only = self.read_only_rows(store, sink)
        assert read_only == expected
        assert self.global_rows(store, expected) == expected
        return read_only


@pytest.fixture(scope="module")
def changelogs(kafka_broker: LocalKafkaCluster) -> dict[str, str]:
    """A changelog per store, named ``<application.id>-...`` (KIP-813), with its progress
    topic; not compacted (the tests read every record back)."""
    run = time.time_ns()
    names = {store: f"{APP}-{run}-{store}-changelog" for store in (ORDERS, EVOLVING)}
    for name in names.values():
        kafka_broker.create_topic(name, PARTITIONS, compacted=False)
        kafka_broker.create_topic(f"{name}-progress", 1)
    return names


@pytest.fixture(scope="module")
def followers(
    kafka_broker: LocalKafkaCluster,
    schema_registry: LocalSchemaRegistry,
    changelogs: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Followers]:
    """``FollowerApp`` following both changelogs as read-only stores and as global tables."""
    root = tmp_path_factory.mktemp("avro-followers")
    run = time.time_ns()
    apps = [
        StreamsFollower(
            kafka_broker.bootstrap_servers,
            root / kind,
            follow={store: (topic, "avro") for store, topic in changelogs.items()},
            kind=kind,
            schema_registry_url=f"{schema_registry.base_url}/apis/registry/v3",
            application_id=f"{APP}-{run}-follower-{kind}",
        )
        for kind in ("readonly", "global")
    ]
    try:
        with ThreadPoolExecutor(2) as pool:  # two JVMs starting side by side
            for started in [pool.submit(app.start) for app in apps]:
                started.result()
        yield Followers(*apps)
    finally:
        for app in apps:
            app.stop()


def make_sink(
    spark: Any,
    kafka_broker: LocalKafkaCluster,
    schema_registry: LocalSchemaRegistry,
    changelogs: dict[str, str],
    store: str,
    tmp_path: Path,
) -> Sink:
    return Sink(
        spark,
        kafka_broker.bootstrap_servers,
        schema_registry,
        changelogs[store],
        tmp_path / store,
    )


# -- the registry's ids -------------------------------------------------------------------------
def registry_get(registry: LocalSchemaRegistry, path: str) -> bytes | None:
    """GET ``path`` of Apicurio's own API (``/apis/registry/v3``); None for a 404."""
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with direct.open(f"{registry.base_url}/apis/registry/v3{path}", timeout=30) as answer:
            body: bytes = answer.read()
            return body
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


def the_frame_id_is_no_global_id(sink: Sink, schema: dict[str, Any]) -> int:
    """Register ``schema`` first under another subject, then as version 1 of the sink's
    subject, then delete the other subject: the sink's subject's id for it (the id its
    frames will carry) is a content id, and the global id of that number, the other subject's
    version, is gone. Returns the id."""
    client = SchemaRegistryClient({"url": sink.registry.url, "timeout": 30})
    decoy = f"{sink.subject}-decoy"
    registered = Schema(json.dumps(schema), "AVRO")
    first = client.register_schema(decoy, registered)
    assert client.register_schema(sink.subject, registered) == first
    client.delete_subject(decoy)
    client.delete_subject(decoy, permanent=True)
    assert registry_get(sink.registry, f"/ids/globalIds/{first}") is None
    return int(first)


def frame_ids(sink: Sink) -> list[int]:
    """The schema id of every value frame of the changelog (tombstones have none)."""
    ids = []
    for record in settled_changelog(sink.bootstrap, sink.changelog):
        if record.value is not None:
            assert record.value[0] == 0, record  # the registry serializers' magic byte
            ids.append(int.from_bytes(record.value[1:5], "big"))
    return ids


def ccompat_id_is_content_id(sink: Sink, version: int, schema: dict[str, Any]) -> int:
    """``version`` of the sink's subject: its id in the Confluent-compatible API is its
    content id in Apicurio's own, whose content is ``schema``. Returns the id."""
    client = SchemaRegistryClient({"url": sink.registry.url, "timeout": 30})
    ccompat_id = client.get_version(sink.subject, version).schema_id
    metadata = registry_get(
        sink.registry, f"/groups/default/artifacts/{sink.subject}/versions/{version}"
    )
    assert metadata is not None, f"{sink.subject} version {version} is not in group default"
    assert ccompat_id == json.loads(metadata)["contentId"], metadata
    content = registry_get(sink.registry, f"/ids/contentIds/{ccompat_id}")
    assert content is not None and json.loads(content) == schema
    return int(ccompat_id)


# -- the tests ----------------------------------------------------------------------------------
def test_kafka_streams_follows_upserts_deletes_and_an_overwrite_field_by_field(
    spark: Any,
    kafka_broker: LocalKafkaCluster,
    schema_registry: LocalSchemaRegistry,
    changelogs: dict[str, str],
    followers: Followers,
    tmp_path: Path,
) -> None:
    sink = make_sink(spark, kafka_broker, schema_registry, changelogs, ORDERS, tmp_path)
    schema = order_schema(ORDERS)
    # Before anything is written: the frames will carry an id that only a content id
    # lookup finds.
    frame_id = the_frame_id_is_no_global_id(sink, schema)

    sink.write([(f"k{n:02d}", order(n)) for n in range(12)], schema=schema)
    first = followers.assert_both_answer(ORDERS, sink)
    assert len(first) == 12
    # Spot checks of the JSON the comparison relies on.
    assert [first[f"k0{n}"]["id"] for n in (2, 3, 4)] == [2**62 + 2, -(2**63), 2**63 - 1]
    assert first["k05"]["tags"] == {"big": 2**40, "n": 5, "v": 0}
    assert first["k04"]["tags"] == {}
    assert [first[f"k0{n}"]["price"] for n in range(6)] == [
        "0.00", "-3.50", "1234567.89", "3.25", "-9999999.99", "0.01"
    ]  # fmt: skip
    assert {first["k01"]["note"], first["k02"]["note"]} == {None, "note 2/0"}
    assert first["k01"]["customer"] == 'c1 "0" \\ ü'
    assert first["k05"]["placed"] == 1795827900005  # 2026-11-28T01:05:00.005Z

    sink.write(
        [
            ("k01", order(1, variant=1)),
            ("k02", order(2, variant=2)),
            ("k03", None),
            ("k12", order(12, variant=3)),
        ],
        schema=schema,
    )
    followers.assert_both_answer(ORDERS, sink)

    # The written rows become the whole content: the others are tombstoned.
    sink.write(
        [("k00", order(0, variant=4)), ("k04", order(4)), ("k12", order(12)), ("k20", order(20))],
        schema=schema,
        mode="overwrite",
    )
    assert sorted(sink.rows) == ["k00", "k04", "k12", "k20"]
    followers.assert_both_answer(ORDERS, sink)

    sink.write([("k04", None), ("k21", order(21, variant=5))], schema=schema)
    last = followers.assert_both_answer(ORDERS, sink)
    assert sorted(last) == ["k00", "k12", "k20", "k21"]

    # Every frame carries the content id (the only way to the schema: see above), and
    # the sink registered nothing more.
    assert ccompat_id_is_content_id(sink, 1, schema) == frame_id
    assert Counter(frame_ids(sink)) == {frame_id: 12 + 3 + 4 + 1}
    client = SchemaRegistryClient({"url": schema_registry.url, "timeout": 30})
    assert client.get_versions(sink.subject) == [1]


def test_kafka_streams_reads_old_and_new_records_each_with_its_writer_schema(
    spark: Any,
    kafka_broker: LocalKafkaCluster,
    schema_registry: LocalSchemaRegistry,
    changelogs: dict[str, str],
    followers: Followers,
    tmp_path: Path,
) -> None:
    sink = make_sink(spark, kafka_broker, schema_registry, changelogs, EVOLVING, tmp_path)
    v1, v2 = order_schema(EVOLVING), order_schema(EVOLVING, region=True)

    sink.write([(f"e{n:02d}", order(n)) for n in range(6)], schema=v1)
    before = followers.assert_both_answer(EVOLVING, sink)
    assert all("region" not in value for value in before.values())

    # Version 2 (region added, with a default) is registered by this write, while the app
    # keeps running.
    sink.write(
        [
            ("e01", {**order(1, variant=7), "region": "north"}),
            ("e02", None),
            ("e06", {**order(6, variant=8), "region": "south"}),
        ],
        schema=v2,
        value_type=VALUE_TYPE_V2,
    )
    client = SchemaRegistryClient({"url": schema_registry.url, "timeout": 30})
    assert client.get_versions(sink.subject) == [1, 2]
    v1_id = ccompat_id_is_content_id(sink, 1, v1)
    v2_id = ccompat_id_is_content_id(sink, 2, v2)
    assert v1_id != v2_id
    assert Counter(frame_ids(sink)) == {v1_id: 6, v2_id: 2}

    # Apicurio's deserializer reads a record with the schema its frame names, as writer and
    # as reader (no reader schema of the app's own): a record written with version 1 answers
    # version 1's fields (no region, not even its default), one written with version 2 has
    # region. sink.expected() holds each row with the fields it was written with.
    after = followers.assert_both_answer(EVOLVING, sink)
    assert sorted(after) == ["e00", "e01", "e03", "e04", "e05", "e06"]
    for old in ("e00", "e03", "e04", "e05"):
        assert "region" not in after[old] and after[old] == before[old]
    assert after["e01"]["region"] == "north" and after["e06"]["region"] == "south"
    assert after["e01"]["id"] == order(1, variant=7)["id"]
    assert set(after["e06"]) == {f["name"] for f in v2["fields"]}
    assert set(after["e00"]) == {f["name"] for f in v1["fields"]}
