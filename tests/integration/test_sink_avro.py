"""The sink writing typed values as Avro through a real schema registry: the changelog holds
what a registry serializer writes (confluent-kafka's own AvroDeserializer reads it), and the
store holds the same bytes (the snapshot reader reads them back as the same rows; the
follower's reading of registry-framed changelogs is test_spark_avro's)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.integration.test_spark_follower import FORMAT
from tests.kafka_util import settled_changelog
from tests.unit.test_schemas_avro import record

# The schema-registry tests run in the pytest process beside the main run (their own broker,
# Spark session and registry): CI's budget.
pytestmark = [pytest.mark.integration, pytest.mark.beside]

APP = "avro-sink"
ORDER = record(
    {"name": "id", "type": "long"},
    {"name": "customer", "type": "string"},
    {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
                               "scale": 2}},
    {"name": "tags", "type": {"type": "map", "values": "long"}},
    {"name": "note", "type": ["null", "string"], "default": None},
)  # fmt: skip
VALUE_TYPE = (
    "STRUCT<id: BIGINT, customer: STRING, placed: TIMESTAMP, price: DECIMAL(9,2), "
    "tags: MAP<STRING, BIGINT>, note: STRING>"
)
UTC = dt.timezone.utc


def orders_frame(spark: Any, rows: list[tuple[str, dict[str, Any] | None]]) -> Any:
    return spark.createDataFrame(rows, f"key STRING, value {VALUE_TYPE}")


def order(number: int) -> dict[str, Any]:
    return {
        "id": number,
        "customer": f"c{number % 3}",
        "placed": dt.datetime(2026, 11, 28, 1, number, tzinfo=UTC),
        "price": decimal.Decimal(f"{number}.25"),
        "tags": {"n": number},
        "note": None if number % 2 else "even",
    }


def test_the_sink_writes_avro_a_registry_deserializer_reads_and_a_follower_reads_back(
    spark: Any, kafka_broker: Any, schema_registry: Any, make_topic: Any, tmp_path: Path
) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    bootstrap = kafka_broker.bootstrap_servers
    changelog = f"{APP}-{make_topic(1)}-changelog"
    kafka_broker.create_topic(changelog, 2, compacted=False)
    kafka_broker.create_topic(f"{changelog}-progress", 1)
    store = tmp_path / "store"
    writer = {
        "kafka.bootstrap.servers": bootstrap,
        "changelog": changelog,
        "application.id": APP,
        "valueFormat": "avro",
        "valueSchema": json.dumps(ORDER),
        "schemaRegistryUrl": schema_registry.url,
    }
    frame = orders_frame(spark, [(f"k{n}", order(n)) for n in range(5)])
    # Not registered, and auto-registration is off unless asked for.
    with pytest.raises(Exception, match=f"is not registered under subject '{changelog}-value'"):
        frame.write.format(FORMAT).mode("append").options(**writer).save(str(store))
    writer["autoRegisterSchemas"] = "true"
    frame.write.format(FORMAT).mode("append").options(**writer).save(str(store))
    deletes = orders_frame(spark, [("k1", None), ("k2", {**order(7), "customer": "moved"})])
    deletes.write.format(FORMAT).mode("append").options(**writer).save(str(store))

    client = SchemaRegistryClient({"url": schema_registry.url, "timeout": 30})
    deserialize = AvroDeserializer(client)
    published = settled_changelog(bootstrap, changelog)
    assert len(published) == 7
    read: dict[str, Any] = {}
    for entry in sorted(published, key=lambda e: (e.partition, e.offset)):
        context = SerializationContext(changelog, MessageField.VALUE)
        value = None if entry.value is None else deserialize(entry.value, context)
        read[entry.key.decode()] = value
    expected = {f"k{n}": order(n) for n in range(5)}
    expected["k1"] = None
    expected["k2"] = {**order(7), "customer": "moved"}
    assert {k: v for k, v in read.items()} == expected

    # The store holds the same bytes: the snapshot reader reads the same rows.
    snapshot = (
        spark.read.format(FORMAT)
        .options(keyFormat="string", valueFormat="avro", schemaRegistryUrl=schema_registry.url)
        .option("valueSubject", f"{changelog}-value")
        .load(str(store))
    )
    stored = {r["key"]: r["value"].asDict(recursive=True) for r in snapshot.collect()}
    # Spark's collect() gives timestamps as naive datetimes in the session's time zone.
    zone = spark.conf.get("spark.sql.session.timeZone")
    assert stored == {
        k: {**v, "placed": v["placed"].astimezone(ZoneInfo(zone)).replace(tzinfo=None)}
        for k, v in expected.items()
        if v is not None
    }


def test_a_column_of_another_type_is_refused_before_the_write(
    spark: Any, schema_registry: Any, tmp_path: Path
) -> None:
    frame = spark.createDataFrame(
        [("k", (1, "x"))], "key STRING, value STRUCT<id: INT, customer: STRING>"
    )
    with pytest.raises(Exception, match="select or cast the column to that type") as caught:
        frame.write.format(FORMAT).mode("append").options(
            valueFormat="avro", valueSchema=json.dumps(ORDER), valueSchemaId="1"
        ).save(str(tmp_path / "store"))
    assert "struct<id:bigint,customer:string,placed:timestamp" in str(caught.value)
