"""The sink writing typed values as Protobuf and JSON Schema through a real schema registry:
the changelog holds what the registry serializers write (the protobuf library and
confluent-kafka's own ``JSONDeserializer`` read it), and the store holds the same bytes (the
snapshot reader reads them back as the same rows)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import message_factory

from spark_statestore.schemas import parse_message_indexes
from spark_statestore.schemas.protobuf import ProtobufSchema
from tests.integration.test_spark_follower import FORMAT
from tests.integration.test_spark_registry_formats import ORDER_PROTO_V1, ORDER_V1
from tests.kafka_util import settled_changelog

pytestmark = [pytest.mark.integration, pytest.mark.beside]

APP = "typed-sink"
UTC = dt.timezone.utc
PROTO_TYPE = (
    "STRUCT<id: BIGINT, placed: TIMESTAMP, lines: ARRAY<STRUCT<sku: STRING, qty: INT>>, "
    "note: STRING, status: STRING, tags: MAP<STRING, BIGINT>>"
)
JSON_TYPE = (
    "STRUCT<id: BIGINT, placed: TIMESTAMP, lines: ARRAY<STRUCT<sku: STRING, qty: BIGINT>>, "
    "note: STRING>"
)


def proto_order(number: int) -> dict[str, Any]:
    return {
        "id": number,
        "placed": dt.datetime(2026, 11, 28, 1, number, tzinfo=UTC),
        "lines": [{"sku": f"s{i}", "qty": i} for i in range(number % 3)],
        "note": None if number % 2 else "even",
        "status": "CLOSED" if number == 3 else "OPEN",
        "tags": {"n": number},
    }


def sink_options(bootstrap: str, changelog: str, registry_url: str, **formats: str) -> Any:
    return {
        "kafka.bootstrap.servers": bootstrap,
        "changelog": changelog,
        "application.id": APP,
        "schemaRegistryUrl": registry_url,
        "autoRegisterSchemas": "true",
        **formats,
    }


def new_changelog(kafka_broker: Any, make_topic: Any) -> str:
    changelog = f"{APP}-{make_topic(1)}-changelog"
    kafka_broker.create_topic(changelog, 2, compacted=False)
    kafka_broker.create_topic(f"{changelog}-progress", 1)
    return changelog


def naive(value: dict[str, Any], zone: str) -> dict[str, Any]:
    """``value`` as Spark's collect() gives it: timestamps naive in the session's zone."""
    from zoneinfo import ZoneInfo

    placed = value["placed"].astimezone(ZoneInfo(zone)).replace(tzinfo=None)
    return {**value, "placed": placed}


def test_the_sink_writes_protobuf_the_protobuf_library_reads_and_a_reader_reads_back(
    spark: Any, kafka_broker: Any, schema_registry: Any, make_topic: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    changelog = new_changelog(kafka_broker, make_topic)
    store = tmp_path / "store"
    writer = sink_options(
        bootstrap, changelog, schema_registry.url,
        valueFormat="protobuf", valueSchema=ORDER_PROTO_V1,
    )  # fmt: skip
    rows = [(f"k{n}", proto_order(n)) for n in range(5)]
    frame = spark.createDataFrame(rows, f"key STRING, value {PROTO_TYPE}")
    frame.write.format(FORMAT).mode("append").options(**writer).save(str(store))
    spark.createDataFrame([("k1", None)], f"key STRING, value {PROTO_TYPE}").write.format(
        FORMAT
    ).mode("append").options(**writer).save(str(store))

    compiled = ProtobufSchema.parse(ORDER_PROTO_V1, what="the test's schema")
    order_class = message_factory.GetMessageClass(compiled.message())
    read: dict[str, Any] = {}
    for entry in sorted(settled_changelog(bootstrap, changelog), key=lambda e: e.offset):
        if entry.value is None:
            read[entry.key.decode()] = None
            continue
        frame_ = parse_message_indexes(entry.value)
        assert frame_.message_indexes == (0,) and entry.value[5] == 0  # Confluent's [0]
        message = order_class.FromString(entry.value[frame_.payload_offset :])
        read[entry.key.decode()] = message
    assert read["k1"] is None
    three = read["k3"]
    assert three.id == 3 and three.status == order_class.Status.Value("CLOSED")
    assert [(line.sku, line.qty) for line in read["k2"].lines] == [("s0", 0), ("s1", 1)]
    assert not three.HasField("note") and read["k2"].note.value == "even"
    assert three.placed.ToDatetime(tzinfo=UTC) == proto_order(3)["placed"]
    assert dict(three.tags) == {"n": 3}

    snapshot = (
        spark.read.format(FORMAT)
        .options(keyFormat="string", valueFormat="protobuf", schemaRegistryUrl=schema_registry.url)
        .option("valueSubject", f"{changelog}-value")
        .load(str(store))
    )
    stored = {r["key"]: r["value"].asDict(recursive=True) for r in snapshot.collect()}
    zone = spark.conf.get("spark.sql.session.timeZone")
    assert stored == {k: naive(v, zone) for k, v in rows if k != "k1"}


def test_the_sink_writes_json_schema_a_registry_deserializer_reads(
    spark: Any, kafka_broker: Any, schema_registry: Any, make_topic: Any, tmp_path: Path
) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    bootstrap = kafka_broker.bootstrap_servers
    changelog = new_changelog(kafka_broker, make_topic)
    store = tmp_path / "store"
    writer = sink_options(
        bootstrap, changelog, schema_registry.url,
        valueFormat="jsonschema", valueSchema=json.dumps(ORDER_V1),
    )  # fmt: skip
    placed = dt.datetime(2026, 11, 28, 10, 0, 0, 250000, tzinfo=UTC)
    rows = [
        ("a", {"id": 1, "placed": placed, "lines": [{"sku": "s1", "qty": 2}], "note": "x"}),
        ("b", {"id": 2, "placed": None, "lines": None, "note": None}),
    ]
    frame = spark.createDataFrame(rows, f"key STRING, value {JSON_TYPE}")
    frame.write.format(FORMAT).mode("append").options(**writer).save(str(store))

    client = SchemaRegistryClient({"url": schema_registry.url, "timeout": 30})
    deserialize = JSONDeserializer(None, schema_registry_client=client)
    context = SerializationContext(changelog, MessageField.VALUE)
    read = {
        e.key.decode(): deserialize(e.value, context)
        for e in settled_changelog(bootstrap, changelog)
    }
    assert read == {
        "a": {"id": 1, "placed": "2026-11-28T10:00:00.250000Z", "lines": [{"sku": "s1",
              "qty": 2}], "note": "x"},
        "b": {"id": 2, "note": None},
    }  # fmt: skip

    # A row its writer schema refuses (id is required) stops the write, naming the row.
    empty = {"id": None, "placed": None, "lines": None, "note": None}
    bad = spark.createDataFrame([("c", empty)], f"key STRING, value {JSON_TYPE}")
    with pytest.raises(Exception, match="row 0 of this task's input"):
        bad.write.format(FORMAT).mode("append").options(**writer).save(str(store))
