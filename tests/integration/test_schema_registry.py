"""Against a real schema registry (Apicurio Registry, :class:`LocalSchemaRegistry`), with
confluent-kafka's own client and serializers talking to its Confluent-compatible API:
Avro, Protobuf and JSON Schema subjects, versions, ids, compatibility, the wire format, and
what a SIGKILL and restart keep (nothing in memory; everything with a ``data_dir``)."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from confluent_kafka.schema_registry import RegisteredSchema, Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError as ClientError
from confluent_kafka.serialization import MessageField, SerializationContext

from spark_statestore.connectors.local import LocalSchemaRegistry
from spark_statestore.connectors.local.schema_registry import (
    APICURIO_VERSION,
    ENV_APP,
    LocalRegistryError,
)
from tests.conftest import REPO_ROOT

# The schema-registry tests run in the pytest process beside the main run (their own broker,
# Spark session and registry): CI's budget.
pytestmark = [pytest.mark.integration, pytest.mark.beside]

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "io.sparkstatestore.test",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "amount", "type": "long"},
    ],
}
ORDER_V2 = {  # v1 plus a field with a default: BACKWARD compatible
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"], {"name": "currency", "type": "string", "default": "EUR"}],
}
ORDER_BREAKING = {  # v2 plus a field without a default: v3 readers cannot read v2 data
    **ORDER_V2,
    "fields": [*ORDER_V2["fields"], {"name": "customer", "type": "string"}],
}
SHIPMENT_PROTO = """syntax = "proto3";
package io.sparkstatestore.test;

message Shipment {
  string order_id = 1;
  int64 weight_grams = 2;
  repeated string parcels = 3;
}
"""
CUSTOMER_JSON_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Customer",
    "type": "object",
    "properties": {"id": {"type": "string"}, "name": {"type": "string"}},
    "required": ["id"],
}


def avro(schema: dict[str, object]) -> Schema:
    return Schema(json.dumps(schema), "AVRO")


@pytest.fixture(scope="module")
def client(schema_registry: LocalSchemaRegistry) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": schema_registry.url, "timeout": 30})


@pytest.fixture(scope="module")
def orders(client: SchemaRegistryClient) -> tuple[int, int]:
    """``orders-value`` with ``ORDER_V1`` and ``ORDER_V2`` registered: their ids."""
    v1_id = client.register_schema("orders-value", avro(ORDER_V1))
    v2_id = client.register_schema("orders-value", avro(ORDER_V2))
    return v1_id, v2_id


def test_the_url_is_the_confluent_compatible_api(schema_registry: LocalSchemaRegistry) -> None:
    assert schema_registry.url == f"{schema_registry.base_url}/apis/ccompat/v7"
    assert schema_registry.is_running()
    assert "apicurio-registry-app " + APICURIO_VERSION in schema_registry.log_tail(100_000)


def test_avro_schema_registered_fetched_by_id_and_evolved(
    schema_registry: LocalSchemaRegistry, client: SchemaRegistryClient, orders: tuple[int, int]
) -> None:
    v1_id, v2_id = orders
    assert v1_id != v2_id
    # A fresh client: nothing answered from the registering client's cache.
    fresh = SchemaRegistryClient({"url": schema_registry.url, "timeout": 30})
    fetched = fresh.get_schema(v1_id)
    assert fetched.schema_type == "AVRO"
    assert json.loads(fetched.schema_str) == ORDER_V1
    assert json.loads(fresh.get_schema(v2_id).schema_str) == ORDER_V2
    latest = fresh.get_latest_version("orders-value")
    assert (latest.subject, latest.version, latest.schema_id) == ("orders-value", 2, v2_id)
    first = fresh.get_version("orders-value", 1)
    assert (first.version, first.schema_id) == (1, v1_id)
    # Registering a schema the subject has already is idempotent: its id, no new version.
    assert fresh.register_schema("orders-value", avro(ORDER_V1)) == v1_id
    assert fresh.get_latest_version("orders-value").version == 2


def test_backward_compatibility_refuses_a_field_without_default(
    client: SchemaRegistryClient, orders: tuple[int, int]
) -> None:
    client.set_compatibility("orders-value", "BACKWARD")
    assert client.get_compatibility("orders-value") == "BACKWARD"
    assert client.test_compatibility("orders-value", avro(ORDER_BREAKING)) is False
    with pytest.raises(ClientError) as refused:
        client.register_schema("orders-value", avro(ORDER_BREAKING))
    assert refused.value.http_status_code == 409, refused.value
    assert client.get_latest_version("orders-value").version == 2


def test_confluent_avro_serializer_writes_the_wire_format_with_the_registry_id(
    client: SchemaRegistryClient, orders: tuple[int, int]
) -> None:
    _, v2_id = orders
    serializer = AvroSerializer(client, json.dumps(ORDER_V2), conf={"auto.register.schemas": False})
    context = SerializationContext("orders", MessageField.VALUE)
    value = {"order_id": "o-1", "amount": 1250, "currency": "USD"}
    data = serializer(value, context)
    assert data is not None
    assert data[0] == 0 and int.from_bytes(data[1:5], "big") == v2_id
    assert AvroDeserializer(client)(data, context) == value


def test_protobuf_schema_registered_and_read_back(
    schema_registry: LocalSchemaRegistry, client: SchemaRegistryClient
) -> None:
    schema_id = client.register_schema("shipments-value", Schema(SHIPMENT_PROTO, "PROTOBUF"))
    fresh = SchemaRegistryClient({"url": schema_registry.url, "timeout": 30})
    fetched = fresh.get_schema(schema_id)
    assert fetched.schema_type == "PROTOBUF"
    assert _words(fetched.schema_str) == _words(SHIPMENT_PROTO)
    latest = fresh.get_latest_version("shipments-value")
    assert (latest.version, latest.schema_id, latest.schema.schema_type) == (
        1,
        schema_id,
        "PROTOBUF",
    )


def test_json_schema_registered_and_read_back(
    schema_registry: LocalSchemaRegistry, client: SchemaRegistryClient
) -> None:
    schema = Schema(json.dumps(CUSTOMER_JSON_SCHEMA), "JSON")
    schema_id = client.register_schema("customers-value", schema)
    fresh = SchemaRegistryClient({"url": schema_registry.url, "timeout": 30})
    latest = fresh.get_latest_version("customers-value")
    assert (latest.version, latest.schema_id, latest.schema.schema_type) == (1, schema_id, "JSON")
    assert json.loads(fresh.get_schema(schema_id).schema_str) == CUSTOMER_JSON_SCHEMA
    assert set(fresh.get_subjects()) >= {"customers-value", "shipments-value"}


@pytest.fixture
def own_registry() -> Iterator[LocalSchemaRegistry]:
    """A registry of the test's own, in memory, to kill."""
    with LocalSchemaRegistry() as registry:
        yield registry


def _register_and_kill(registry: LocalSchemaRegistry) -> RegisteredSchema:
    client = SchemaRegistryClient({"url": registry.url, "timeout": 30})
    schema_id = client.register_schema("orders-value", avro(ORDER_V1))
    before = client.get_latest_version("orders-value")
    assert before.schema_id == schema_id
    registry.kill()
    assert not registry.is_running()
    with pytest.raises(ConnectionRefusedError):  # nothing listens while it is down
        address = urlsplit(registry.base_url)
        socket.create_connection((str(address.hostname), int(address.port or 0)), timeout=5)
    registry.restart()
    assert registry.is_running()
    return before


def test_in_memory_registry_forgets_everything_at_a_restart(
    own_registry: LocalSchemaRegistry,
) -> None:
    _register_and_kill(own_registry)
    after = SchemaRegistryClient({"url": own_registry.url, "timeout": 30})
    assert after.get_subjects() == []
    with pytest.raises(ClientError) as missing:
        after.get_latest_version("orders-value")
    assert missing.value.http_status_code == 404
    # It works again, from an empty registry.
    assert after.register_schema("orders-value", avro(ORDER_V2)) >= 0
    assert after.get_latest_version("orders-value").version == 1


def test_registry_with_a_data_dir_keeps_its_schemas_across_a_sigkill(tmp_path: Path) -> None:
    with LocalSchemaRegistry(data_dir=tmp_path / "registry") as registry:
        before = _register_and_kill(registry)
        after = SchemaRegistryClient({"url": registry.url, "timeout": 30})
        latest = after.get_latest_version("orders-value")
        assert (latest.version, latest.schema_id) == (before.version, before.schema_id)
        assert json.loads(after.get_schema(before.schema_id).schema_str) == ORDER_V1
    assert (tmp_path / "registry" / "registry.log").is_file()  # kept, like the H2 file
    assert list((tmp_path / "registry" / "h2").glob("registry*.db"))


def test_config_reaches_the_registry_global_compatibility() -> None:
    backward = {"apicurio.rules.global.compatibility": "BACKWARD"}
    with LocalSchemaRegistry(config=backward) as registry:
        client = SchemaRegistryClient({"url": registry.url, "timeout": 30})
        assert client.get_compatibility() == "BACKWARD"
        client.register_schema("orders-value", avro(ORDER_V2))
        assert client.test_compatibility("orders-value", avro(ORDER_BREAKING)) is False


def test_missing_build_names_the_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_APP, str(tmp_path))
    with pytest.raises(LocalRegistryError, match=r"make setup"):
        LocalSchemaRegistry().start()


def test_the_pom_unpacks_the_version_the_harness_expects() -> None:
    pom = (REPO_ROOT / "interop" / "schema-registry" / "pom.xml").read_text()
    assert f"<apicurio.version>{APICURIO_VERSION}</apicurio.version>" in pom


def _words(text: str) -> list[str]:
    """A .proto's tokens, whatever whitespace the registry prints it with."""
    return re.findall(r"[A-Za-z0-9_.]+|[^\sA-Za-z0-9_.]", text)
