"""Avro values in Spark: the follower's change feed and SQL over the replica read typed
columns from values framed as registry serializers frame them (bytes written by Apache
Avro's own writer), and a value the query cannot read stops it naming where it is."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from spark_statestore.schemas import encode_frame
from tests.integration.test_spark_follower import FORMAT, follow, wait_for_owner_exit
from tests.unit.test_schemas_avro import V1, record, write

pytestmark = pytest.mark.integration

ORDER = record(
    {"name": "id", "type": "long"},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "lines", "type": {"type": "array", "items": record(
        {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}, name="Line")}},
)  # fmt: skip


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0)
    assert producer.flush(30) == 0


def orders(count: int) -> list[tuple[bytes, bytes | None]]:
    return [
        (
            f"order-{n}".encode(),
            encode_frame(
                5,
                write(
                    ORDER,
                    {
                        "id": n,
                        "note": None if n % 2 else f"n{n}",
                        "lines": [{"sku": f"s{i}", "qty": i} for i in range(n % 3)],
                    },
                ),
            ),
        )
        for n in range(count)
    ]


def run_available_now(query_df: Any, checkpoint: Path) -> list[Any]:
    rows: list[Any] = []
    query = (
        query_df.writeStream.foreachBatch(lambda df, _: rows.extend(df.collect()))
        .trigger(availableNow=True)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    query.awaitTermination(180)
    return rows


AVRO = {"keyFormat": "string", "valueFormat": "avro", "valueSchemaId": "5"}


def test_the_feed_and_sql_read_avro_values_by_field(
    spark: Any, kafka_broker: Any, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic(1, suffix="-changelog")
    bootstrap = kafka_broker.bootstrap_servers
    produce(bootstrap, topic, [*orders(6), (b"order-4", None)])
    path = tmp_path / "store"
    options = {**AVRO, "valueSchema": json.dumps(ORDER)}
    feed = follow(spark, bootstrap, topic, path, **options)
    assert feed.schema["value"].dataType.simpleString() == (
        "struct<id:bigint,note:string,lines:array<struct<sku:string,qty:int>>>"
    )
    rows = run_available_now(feed, tmp_path / "checkpoint")
    assert len(rows) == 7
    by_offset = {r["offset"]: r for r in rows}
    assert by_offset[1]["value"].asDict(recursive=True) == {
        "id": 1,
        "note": None,
        "lines": [{"sku": "s0", "qty": 0}],
    }
    assert by_offset[2]["value"]["note"] == "n2" and by_offset[3]["value"]["lines"] == []
    assert by_offset[6]["op"] == "delete" and by_offset[6]["value"] is None
    wait_for_owner_exit(path)

    schema_file = tmp_path / "order.avsc"
    schema_file.write_text(json.dumps(ORDER))
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW avro_orders USING {FORMAT} OPTIONS (path '{path}', "
        f"keyFormat 'string', valueFormat 'avro', valueSchemaFile '{schema_file}', "
        "valueSchemaId '5')"
    )
    found = spark.sql(
        "SELECT key, value.id, value.note, size(value.lines) AS lines FROM avro_orders "
        "WHERE value.id >= 2 ORDER BY value.id"
    ).collect()
    assert [tuple(r) for r in found] == [
        ("order-2", 2, "n2", 2),
        ("order-3", 3, None, 0),
        ("order-5", 5, None, 2),
    ]


def test_a_value_of_another_schema_id_stops_the_query_naming_it(
    spark: Any, kafka_broker: Any, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """Without a registry the given schema reads only its own id: a value written with
    another schema is never decoded with it (that would give wrong fields, not an error)."""
    topic = make_topic(1, suffix="-changelog")
    bootstrap = kafka_broker.bootstrap_servers
    produce(
        bootstrap,
        topic,
        [*orders(2), (b"other", encode_frame(6, write(V1, {"id": 1, "note": None})))],
    )
    feed = follow(
        spark, bootstrap, topic, tmp_path / "store", **AVRO, valueSchema=json.dumps(ORDER)
    )
    with pytest.raises(Exception, match="schema id 6") as caught:
        run_available_now(feed, tmp_path / "checkpoint")
    message = str(caught.value)
    assert f"topic {topic} partition 0 offset 2" in message, message
    assert "schema id 6 is not valueSchemaId (5)" in message, message


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"valueFormat": "avro"}, "give schemaRegistryUrl"),
        ({"valueFormat": "avro", "valueSchema": "{"}, "give schemaRegistryUrl"),
        ({"valueFormat": "avro", "valueSchema": "{", "valueSchemaId": "1"}, "not JSON"),
        ({"valueFormat": "string", "valueSchemaId": "1"}, "is for valueFormat avro"),
        ({"valueFormat": "avro", "valueFraming": "none"}, "valueFraming none reads bare Avro"),
        ({"valueFormat": "avro", "valueSubject": "x", "valueSchemaId": "1",
          "valueSchema": json.dumps(V1)}, "give schemaRegistryUrl too"),
        ({"valueFormat": "avro", "schemaRegistryUrl": "http://127.0.0.1:1",
          "schemaRegistry.no.such": "1"}, "Unrecognized properties: no.such"),
        ({"valueFormat": "avro", "valueSchemaFile": "/no/such.avsc", "valueSchemaId": "1"},
         "cannot read '/no/such.avsc'"),
    ],
)  # fmt: skip
def test_bad_avro_options_are_named(
    spark: Any, tmp_path: Path, options: dict[str, str], fragment: str
) -> None:
    with pytest.raises(Exception, match=fragment):
        follow(spark, "127.0.0.1:1", "t-changelog", tmp_path / "store", **options)
