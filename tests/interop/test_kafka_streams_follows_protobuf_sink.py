"""Kafka Streams follows the changelog our sink writes with Protobuf values through a real
schema registry.

Our batch writer writes a struct column as Protobuf with ``valueFormat protobuf`` (the
registry serializers' frame with message indexes, the id Apicurio's Confluent-compatible API
gave the ``.proto`` schema the sink registered). ``FollowerApp`` (interop/kafka-streams)
follows the changelog as a read-only state store with Apicurio Registry's Protobuf serde
(``DynamicMessage`` of the writer's schema) and answers each value as the JSON of its fields;
after upserts and a delete it answers exactly the rows the sink wrote, field by field.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import pytest

from spark_statestore.connectors.kafka.local import LocalKafkaCluster
from spark_statestore.connectors.kafka.local.streams_app import StreamsFollower
from spark_statestore.connectors.local import LocalSchemaRegistry
from spark_statestore.position import Position
from tests.integration.test_sink_registry_formats import PROTO_TYPE, proto_order
from tests.integration.test_spark_registry_formats import ORDER_PROTO_V1
from tests.kafka_util import settled_changelog

pytestmark = [pytest.mark.integration, pytest.mark.beside]

FORMAT = "spark_statestore"
APP = "proto-follow"
PARTITIONS = 2
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def answered(value: dict[str, Any]) -> dict[str, Any]:
    """A row as ``ProtoJson`` answers it: Timestamps in microseconds, every field of the
    message (proto3 scalars with their defaults, unset wrappers null)."""
    return {
        "id": value["id"],
        "placed": (value["placed"] - EPOCH) // dt.timedelta(microseconds=1),
        "lines": [dict(line) for line in value["lines"]],
        "note": value["note"],
        "status": value["status"],
        "tags": dict(value["tags"]),
    }


def test_kafka_streams_follows_the_sinks_protobuf_changelog_field_by_field(
    spark: Any,
    kafka_broker: LocalKafkaCluster,
    schema_registry: LocalSchemaRegistry,
    tmp_path: Path,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    changelog = f"{APP}-{time.time_ns()}-orders-changelog"
    kafka_broker.create_topic(changelog, PARTITIONS, compacted=False)
    kafka_broker.create_topic(f"{changelog}-progress", 1)
    follower = StreamsFollower(
        bootstrap,
        tmp_path / "follower",
        follow={"orders": (changelog, "protobuf")},
        kind="readonly",
        schema_registry_url=f"{schema_registry.base_url}/apis/registry/v3",
        application_id=f"{APP}-{time.time_ns()}-follower",
    ).start()
    try:
        written: dict[str, dict[str, Any]] = {}

        def write(rows: list[tuple[str, dict[str, Any] | None]]) -> None:
            frame = spark.createDataFrame(rows, f"key STRING, value {PROTO_TYPE}")
            frame.write.format(FORMAT).mode("append").options(
                **{
                    "kafka.bootstrap.servers": bootstrap,
                    "changelog": changelog,
                    "application.id": APP,
                    "valueFormat": "protobuf",
                    "valueSchema": ORDER_PROTO_V1,
                    "schemaRegistryUrl": schema_registry.url,
                    "autoRegisterSchemas": "true",
                }
            ).save(str(tmp_path / "store"))
            for key, value in rows:
                if value is None:
                    written.pop(key, None)
                else:
                    written[key] = value

        def answers() -> dict[str, Any]:
            last: dict[int, int] = {}
            for record in settled_changelog(bootstrap, changelog):
                last[record.partition] = max(record.offset, last.get(record.partition, -1))
            answer = follower.range("orders", Position.from_map({changelog: last}), wait_s=60)
            assert answer["ok"], answer
            return {row["key"]: row["value"] for row in answer["rows"]}

        write([(f"k{n}", proto_order(n)) for n in range(6)])
        first = answers()
        assert first == {key: answered(value) for key, value in written.items()}
        assert first["k1"]["note"] is None and first["k2"]["note"] == "even"
        assert first["k3"]["status"] == "CLOSED" and first["k2"]["lines"][1] == {
            "sku": "s1",
            "qty": 1,
        }
        write([("k1", None), ("k2", {**proto_order(2), "status": "CLOSED", "tags": {}})])
        assert answers() == {key: answered(value) for key, value in written.items()}
    finally:
        follower.stop()
