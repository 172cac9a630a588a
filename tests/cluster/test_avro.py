"""Avro and Protobuf values on a cluster: the feed's ranges and the snapshot's scan are decoded
by executors on other hosts, with the writer schemas the driver planned with and, for an id
the plan does not know, the schema registry, which they reach on the cluster's bridge."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.integration.test_spark_avro import V2, run_available_now, serializer
from tests.integration.test_spark_follower import wait_for_owner_exit
from tests.unit.test_schemas_avro import V1, record

pytestmark = pytest.mark.cluster

FORMAT = "spark_statestore"
# Another application's record of the same name: registered under another subject, so only
# the registry (not the plan) knows its id; it resolves to V2 (qty takes its default).
OTHER = record({"name": "id", "type": "long"}, {"name": "sku", "type": "string"})


@pytest.fixture(scope="module")
def registry(spark_cluster: Any) -> Iterator[Any]:
    """A schema registry on the cluster's bridge, which every executor reaches."""
    from spark_statestore.connectors.local import LocalSchemaRegistry

    with LocalSchemaRegistry(host=spark_cluster.address) as started:
        yield started


def test_the_feed_and_sql_decode_avro_on_executors_of_other_hosts(
    spark: Any, kafka_broker: Any, registry: Any, make_topic: Any, tmp_path: Path
) -> None:
    topic = make_topic(2, suffix="-changelog")
    old, new = serializer(registry.url, V1), serializer(registry.url, V2)
    other = serializer(registry.url, OTHER)(f"{topic}-other", {"id": 9, "sku": "x"})
    values = [
        (b"a", old(topic, {"id": 1, "note": "first"})),
        (b"b", new(topic, {"id": 2, "qty": 5})),
        (b"c", other),
        (b"a", new(topic, {"id": 3, "qty": 7})),
        (b"d", old(topic, {"id": 4, "note": None})),
        (b"d", None),
    ]
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    for number, (key, value) in enumerate(values):
        producer.produce(topic, key=key, value=value, partition=number % 2)
    assert producer.flush(30) == 0
    path = tmp_path / "store"
    feed = (
        spark.readStream.format(FORMAT)
        .option("kafka.bootstrap.servers", kafka_broker.bootstrap_servers)
        .option("changelog", topic)
        .options(keyFormat="string", valueFormat="avro", schemaRegistryUrl=registry.url)
        .load(str(path))
    )
    rows = run_available_now(feed, tmp_path / "checkpoint")
    seen = sorted(
        (r["partition"], r["offset"], r["key"], None if r["value"] is None else r["value"].asDict())
        for r in rows
    )
    assert seen == [
        (0, 0, "a", {"id": 1, "qty": 1}),
        (0, 1, "c", {"id": 9, "qty": 1}),
        (0, 2, "d", {"id": 4, "qty": 1}),
        (1, 0, "b", {"id": 2, "qty": 5}),
        (1, 1, "a", {"id": 3, "qty": 7}),
        (1, 2, "d", None),
    ]
    wait_for_owner_exit(path)
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW cluster_avro USING {FORMAT} OPTIONS (path '{path}', "
        f"keyFormat 'string', valueFormat 'avro', schemaRegistryUrl '{registry.url}', "
        f"valueSubject '{topic}-value')"
    )
    found = spark.sql("SELECT key, value.id, value.qty FROM cluster_avro ORDER BY key").collect()
    assert [tuple(r) for r in found] == [("a", 3, 7), ("b", 2, 5), ("c", 9, 1)]
    assert json.loads(
        spark.sql("SELECT to_json(value) FROM cluster_avro WHERE key = 'c'").first()[0]
    ) == {"id": 9, "qty": 1}


def test_the_feed_and_sql_decode_protobuf_on_executors_of_other_hosts(
    spark: Any, kafka_broker: Any, registry: Any, make_topic: Any, tmp_path: Path
) -> None:
    """Executors compile the registry's ``.proto`` text themselves (protoc from
    grpcio-tools) and read both versions' values as the planned reader message."""
    from google.protobuf import message_factory

    from spark_statestore.connectors.schema_registry import RegistrySettings, registry_for
    from spark_statestore.schemas import encode_frame
    from spark_statestore.schemas.protobuf import ProtobufSchema
    from tests.integration.test_spark_registry_formats import ORDER_PROTO_V1, ORDER_PROTO_V2

    topic = make_topic(2, suffix="-changelog")
    client = registry_for(RegistrySettings(registry.url))
    framed = []
    for text, fields in ((ORDER_PROTO_V1, {"id": 1}), (ORDER_PROTO_V2, {"id": 2, "channel": "x"})):
        schema_id = client.register(f"{topic}-value", text, "PROTOBUF")
        compiled = ProtobufSchema.parse(text, what="test", schema_id=schema_id)
        message = message_factory.GetMessageClass(compiled.message())(**fields)
        framed.append(encode_frame(schema_id, message.SerializeToString(), (0,)))
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    for number, value in enumerate(framed):
        producer.produce(topic, key=f"k{number}".encode(), value=value, partition=number % 2)
    assert producer.flush(30) == 0
    path = tmp_path / "store"
    feed = (
        spark.readStream.format(FORMAT)
        .option("kafka.bootstrap.servers", kafka_broker.bootstrap_servers)
        .option("changelog", topic)
        .options(keyFormat="string", valueFormat="protobuf", schemaRegistryUrl=registry.url)
        .load(str(path))
    )
    rows = run_available_now(feed, tmp_path / "checkpoint")
    assert sorted((r["key"], r["value"]["id"], r["value"]["channel"]) for r in rows) == [
        ("k0", 1, ""),
        ("k1", 2, "x"),
    ]
    wait_for_owner_exit(path)
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW cluster_proto USING {FORMAT} OPTIONS (path '{path}', "
        f"keyFormat 'string', valueFormat 'protobuf', schemaRegistryUrl '{registry.url}', "
        f"valueSubject '{topic}-value', valueSchemaVersion '1')"
    )
    found = spark.sql("SELECT key, value.id, value.note FROM cluster_proto ORDER BY key").collect()
    assert [tuple(r) for r in found] == [("k0", 1, None), ("k1", 2, None)]
