"""Protobuf and JSON Schema values in Spark, through a real schema registry: the follower's
change feed and SQL over the replica read typed columns, old and new schema versions read
under the reader schema, and a value that cannot be read stops the query naming it.

JSON Schema values are written by confluent-kafka's own ``JSONSerializer`` (it registers the
schema). Protobuf values by the protobuf library (message classes of the compiled schema)
under a schema registered as ``.proto`` text, framed as the registry serdes frame them; the
interop tests add values written by a Kafka Streams app through Apicurio's Protobuf serde.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import message_factory

from spark_statestore.connectors.schema_registry import RegistrySettings, registry_for
from spark_statestore.schemas import encode_frame
from spark_statestore.schemas.protobuf import ProtobufSchema
from tests.integration.test_spark_avro import produce, run_available_now
from tests.integration.test_spark_follower import FORMAT, follow, wait_for_owner_exit

# The schema-registry tests run in the pytest process beside the main run (their own broker,
# Spark session and registry): CI's budget.
pytestmark = [pytest.mark.integration, pytest.mark.beside]

ORDER_V1 = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "placed": {"type": "string", "format": "date-time"},
        "lines": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
            },
        },
        "note": {"type": ["string", "null"]},
    },
    "required": ["id"],
}
ORDER_V2 = {  # a property added with a default, note dropped
    **ORDER_V1,
    "properties": {
        **{k: v for k, v in ORDER_V1["properties"].items() if k != "note"},  # type: ignore[attr-defined]
        "channel": {"type": "string", "default": "web"},
    },
}


def json_serializer(url: str, schema: dict[str, Any]) -> Callable[[str, dict[str, Any]], bytes]:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": url, "timeout": 30})
    serialize = JSONSerializer(json.dumps(schema), client, conf={"auto.register.schemas": True})

    def write(topic: str, value: dict[str, Any]) -> bytes:
        written = serialize(value, SerializationContext(topic, MessageField.VALUE))
        assert written is not None
        return written

    return write


def tail(bootstrap: str, topic: str, registry_url: str, fmt: str) -> str:
    """``spark-statestore tail``'s output for ``topic``'s values in ``fmt``."""
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    command = [
        sys.executable, "-m", "spark_statestore.cli", "tail", "--bootstrap-servers", bootstrap,
        "--changelog", topic, "--value-format", fmt, "--schema-registry-url", registry_url,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_json_schema_values_read_by_field_through_a_schema_change(
    spark: Any,
    kafka_broker: Any,
    schema_registry: Any,
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    topic = make_topic(1, suffix="-changelog")
    bootstrap = kafka_broker.bootstrap_servers
    old = json_serializer(schema_registry.url, ORDER_V1)
    new = json_serializer(schema_registry.url, ORDER_V2)
    produce(
        bootstrap,
        topic,
        [
            (b"a", old(topic, {"id": 1, "placed": "2026-11-28T10:00:00Z", "note": "first",
                               "lines": [{"sku": "s1", "qty": 2}]})),
            (b"b", old(topic, {"id": 2, "note": None})),
            (b"c", new(topic, {"id": 3, "channel": "shop"})),
        ],
    )  # fmt: skip
    registry = {"schemaRegistryUrl": schema_registry.url}
    store = tmp_path / "store"
    feed = follow(spark, bootstrap, topic, store, keyFormat="string",
                  valueFormat="jsonschema", **registry)  # fmt: skip
    assert feed.schema["value"].dataType.simpleString() == (
        "struct<id:bigint,placed:timestamp,lines:array<struct<sku:string,qty:bigint>>,"
        "channel:string>"
    )
    rows = run_available_now(feed, tmp_path / "checkpoint")
    values = {r["key"]: r["value"].asDict(recursive=True) for r in rows}
    assert values["a"]["lines"] == [{"sku": "s1", "qty": 2}] and values["a"]["channel"] == "web"
    assert values["a"]["placed"].isoformat().startswith("2026-11-28T10:00:00")
    assert values["b"] == {"id": 2, "placed": None, "lines": None, "channel": "web"}
    assert values["c"] == {"id": 3, "placed": None, "lines": None, "channel": "shop"}
    wait_for_owner_exit(store)
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW json_orders USING {FORMAT} OPTIONS (path '{store}', "
        f"keyFormat 'string', valueFormat 'jsonschema', schemaRegistryUrl "
        f"'{schema_registry.url}', valueSubject '{topic}-value', valueSchemaVersion '1')"
    )
    found = spark.sql("SELECT key, value.id, value.note FROM json_orders ORDER BY key").collect()
    # Read as version 1: note is there (null where the value had none), channel is not.
    assert [tuple(r) for r in found] == [("a", 1, "first"), ("b", 2, None), ("c", 3, None)]

    # enrich looks values up by key, read as the reader schema.
    import spark_statestore

    keys = spark.createDataFrame([("a",), ("c",), ("zz",)], "key STRING")
    enriched = spark_statestore.enrich(
        keys, str(store), key_column="key", key_format="string", value_format="jsonschema",
        schema_registry_url=schema_registry.url, value_subject=f"{topic}-value",
    )  # fmt: skip
    found = {r["key"]: r["value"] and r["value"]["channel"] for r in enriched.collect()}
    assert found == {"a": "web", "c": "shop", "zz": None}

    # tail shows each value as written, with its own writer schema.
    lines = tail(bootstrap, topic, schema_registry.url, "jsonschema").splitlines()
    assert json.loads(lines[2].split(" value=")[1].split(" ts=")[0]) == {"id": 3, "channel": "shop"}

    # A value that is not JSON stops the query, naming where it is and its schema id.
    bad_id = registry_for(RegistrySettings(schema_registry.url)).version(f"{topic}-value", 2)
    produce(bootstrap, topic, [(b"d", encode_frame(bad_id.schema_id, b"{not json"))])
    query = follow(spark, bootstrap, topic, tmp_path / "store2", keyFormat="string",
                   valueFormat="jsonschema", **registry)  # fmt: skip
    with pytest.raises(Exception, match="is not one JSON value in UTF-8") as caught:
        run_available_now(query, tmp_path / "checkpoint2")
        raise AssertionError("the query read a value that is not JSON")
    message = str(caught.value)
    assert f"topic {topic} partition 0 offset 3" in message, message
    assert f"schema id {bad_id.schema_id}" in message, message


ORDER_PROTO_V1 = """
syntax = "proto3";
package shop.v1;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

message Order {
  int64 id = 1;
  google.protobuf.Timestamp placed = 2;
  repeated Line lines = 3;
  google.protobuf.StringValue note = 4;
  Status status = 5;
  map<string, int64> tags = 6;
  message Line { string sku = 1; int32 qty = 2; }
  enum Status { OPEN = 0; CLOSED = 1; }
}
"""
ORDER_PROTO_V2 = ORDER_PROTO_V1.replace(
    "  google.protobuf.StringValue note = 4;\n", "  reserved 4;\n  string channel = 7;\n"
)


def test_protobuf_values_read_by_field_through_a_schema_change(
    spark: Any,
    kafka_broker: Any,
    schema_registry: Any,
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    topic = make_topic(1, suffix="-changelog")
    bootstrap = kafka_broker.bootstrap_servers
    subject = f"{topic}-value"
    registry = registry_for(RegistrySettings(schema_registry.url))
    written = []
    for text in (ORDER_PROTO_V1, ORDER_PROTO_V2):
        schema_id = registry.register(subject, text, "PROTOBUF")
        compiled = ProtobufSchema.parse(text, what="test", schema_id=schema_id)
        written.append((schema_id, message_factory.GetMessageClass(compiled.message())))
    (v1_id, v1), (v2_id, v2) = written
    first = v1(id=1, lines=[v1.Line(sku="s1", qty=2)], status=v1.Status.Value("CLOSED"))
    first.placed.FromSeconds(1_764_324_000)
    first.note.value = "first"
    first.tags["big"] = 3
    later = v2(id=2, channel="shop")
    produce(
        bootstrap,
        topic,
        [
            (b"a", encode_frame(v1_id, first.SerializeToString(), (0,))),
            (b"b", encode_frame(v2_id, later.SerializeToString(), (0,))),
        ],
    )
    store = tmp_path / "store"
    feed = follow(spark, bootstrap, topic, store, keyFormat="string", valueFormat="protobuf",
                  schemaRegistryUrl=schema_registry.url)  # fmt: skip
    assert feed.schema["value"].dataType.simpleString() == (
        "struct<id:bigint,placed:timestamp,lines:array<struct<sku:string,qty:int>>,"
        "channel:string,status:string,tags:map<string,bigint>>"
    )
    rows = run_available_now(feed, tmp_path / "checkpoint")
    values = {r["key"]: r["value"].asDict(recursive=True) for r in rows}
    assert values["a"]["lines"] == [{"sku": "s1", "qty": 2}]
    assert values["a"]["status"] == "CLOSED" and values["a"]["tags"] == {"big": 3}
    assert values["a"]["channel"] == "" and values["a"]["placed"].timestamp() == 1_764_324_000
    assert values["b"] == {"id": 2, "placed": None, "lines": [], "status": "OPEN", "tags": {},
                           "channel": "shop"}  # fmt: skip
    wait_for_owner_exit(store)
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW proto_orders USING {FORMAT} OPTIONS (path '{store}', "
        f"keyFormat 'string', valueFormat 'protobuf', schemaRegistryUrl "
        f"'{schema_registry.url}', valueSubject '{subject}', valueSchemaVersion '1')"
    )
    found = spark.sql("SELECT key, value.id, value.note FROM proto_orders ORDER BY key").collect()
    assert [tuple(r) for r in found] == [("a", 1, "first"), ("b", 2, None)]

    lines = tail(bootstrap, topic, schema_registry.url, "protobuf").splitlines()
    shown = json.loads(lines[0].split(" value=")[1].split(" ts=")[0])
    assert shown["id"] == "1" and shown["note"] == "first" and shown["status"] == "CLOSED"

    # A writer whose field has another wire type cannot be read as the reader: named.
    clash = ORDER_PROTO_V1.replace("int64 id = 1;", "string id = 1;")
    clash_id = registry.register(f"{topic}-other", clash, "PROTOBUF")
    clash_class = message_factory.GetMessageClass(
        ProtobufSchema.parse(clash, what="test", schema_id=clash_id).message()
    )
    bad = encode_frame(clash_id, clash_class(id="x").SerializeToString(), (0,))
    produce(bootstrap, topic, [(b"c", bad)])
    with pytest.raises(Exception, match="cannot be read as") as caught:
        feed = follow(spark, bootstrap, topic, tmp_path / "store2", keyFormat="string",
                      valueFormat="protobuf", schemaRegistryUrl=schema_registry.url)  # fmt: skip
        run_available_now(feed, tmp_path / "checkpoint2")
        raise AssertionError("the query read a value of an incompatible writer")
    message = str(caught.value)
    assert f"topic {topic} partition 0 offset 2" in message, message
    assert f"writer schema id {clash_id}" in message or f"schema id {clash_id}" in message, message


def test_a_registry_behind_tls_and_basic_auth_is_read_with_the_clients_settings(
    spark: Any, kafka_broker: Any, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """The registry serves HTTPS only (a self-signed certificate) and asks every call for
    basic auth: the follower reads with ``schemaRegistry.ssl.ca.location`` and
    ``schemaRegistry.basic.auth.user.info``; a wrong password and a missing CA stop the
    query naming what to check."""
    from spark_statestore.connectors.local import LocalSchemaRegistry
    from spark_statestore.serve.certificates import self_signed_certificate
    from tests.integration.test_spark_avro import V1

    cert, key = self_signed_certificate(["127.0.0.1"], common_name="registry")
    (tmp_path / "cert.pem").write_bytes(cert)
    (tmp_path / "key.pem").write_bytes(key)
    topic = make_topic(1, suffix="-changelog")
    bootstrap = kafka_broker.bootstrap_servers
    secured = LocalSchemaRegistry(
        tls_cert_file=tmp_path / "cert.pem", tls_key_file=tmp_path / "key.pem",
        users={"alice": "s3cret"},
    )  # fmt: skip
    with secured as registry:
        assert registry.url.startswith("https://")
        settings = {
            "schemaRegistry.ssl.ca.location": str(tmp_path / "cert.pem"),
            "schemaRegistry.basic.auth.user.info": "alice:s3cret",
        }
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.schema_registry.avro import AvroSerializer
        from confluent_kafka.serialization import MessageField, SerializationContext

        client = SchemaRegistryClient(
            {
                "url": registry.url,
                "timeout": 30,
                **{k.split(".", 1)[1]: v for k, v in settings.items()},
            }
        )
        serialize = AvroSerializer(client, json.dumps(V1), conf={"auto.register.schemas": True})
        value = serialize({"id": 1, "note": "x"}, SerializationContext(topic, MessageField.VALUE))
        produce(bootstrap, topic, [(b"a", value)])

        def read(name: str, **options: str) -> list[Any]:
            feed = follow(
                spark, bootstrap, topic, tmp_path / name, keyFormat="string",
                valueFormat="avro", schemaRegistryUrl=registry.url, **options,
            )  # fmt: skip
            return run_available_now(feed, tmp_path / f"{name}-checkpoint")

        rows = read("store", **settings)
        assert [(r["key"], r["value"].asDict()) for r in rows] == [("a", {"id": 1, "note": "x"})]
        wrong = {**settings, "schemaRegistry.basic.auth.user.info": "alice:wrong"}
        with pytest.raises(Exception, match="refused the credentials"):
            read("wrong", **wrong)
        no_ca = {"schemaRegistry.basic.auth.user.info": "alice:s3cret"}
        with pytest.raises(Exception, match="cannot reach the schema registry") as caught:
            read("no-ca", **no_ca)
        assert "schemaRegistry.ssl" in str(caught.value)
        assert "s3cret" not in str(caught.value)
