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
from tests.kafka_util import poll_until
from tests.unit.test_schemas_avro import V1, record, write

# The schema-registry tests run in the pytest process beside the main run (their own broker,
# Spark session and registry): CI's budget.
pytestmark = [pytest.mark.integration, pytest.mark.beside]

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
        ({"valueFormat": "string", "valueSchemaId": "1"}, "is for a registry valueFormat"),
        ({"valueFormat": "avro", "valueFraming": "none"}, "valueFraming none reads bare avro"),
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


# -- through a real schema registry ---------------------------------------------------------
V2 = record(
    {"name": "id", "type": "long"},
    {"name": "qty", "type": "int", "default": 1},
)


def serializer(
    registry_url: str, schema: dict[str, Any], *, keys: bool = False
) -> Callable[[str, dict[str, Any]], bytes]:
    """Values (``keys``: keys) as confluent-kafka's own AvroSerializer writes them (it
    registers the schema under ``<topic>-value``, ``<topic>-key``)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry_url, "timeout": 30})
    serialize = AvroSerializer(client, json.dumps(schema), conf={"auto.register.schemas": True})

    def write_value(topic: str, value: dict[str, Any]) -> bytes:
        field = MessageField.KEY if keys else MessageField.VALUE
        written = serialize(value, SerializationContext(topic, field))
        assert written is not None
        return written

    return write_value


def test_old_and_new_values_read_under_the_subjects_latest_schema(
    spark: Any,
    kafka_broker: Any,
    schema_registry: Any,
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    """The application added a field with a default and dropped an optional one: a query
    planned after that reads every value, old and new, as the latest version."""
    topic = make_topic(1, suffix="-changelog")
    bootstrap = kafka_broker.bootstrap_servers
    old = serializer(schema_registry.url, V1)
    new = serializer(schema_registry.url, V2)
    produce(
        bootstrap,
        topic,
        [
            (b"a", old(topic, {"id": 1, "note": "first"})),
            (b"b", old(topic, {"id": 2, "note": None})),
            (b"a", new(topic, {"id": 3, "qty": 7})),
        ],
    )
    registry = {"schemaRegistryUrl": schema_registry.url}
    feed = follow(
        spark,
        bootstrap,
        topic,
        tmp_path / "store",
        keyFormat="string",
        valueFormat="avro",
        **registry,
    )
    assert feed.schema["value"].dataType.simpleString() == "struct<id:bigint,qty:int>"
    rows = run_available_now(feed, tmp_path / "checkpoint")
    assert [(r["key"], r["value"].asDict()) for r in rows] == [
        ("a", {"id": 1, "qty": 1}),
        ("b", {"id": 2, "qty": 1}),
        ("a", {"id": 3, "qty": 7}),
    ]
    wait_for_owner_exit(tmp_path / "store")
    # Version 1 has no default for note, which version 2 dropped: a value written with
    # version 2 cannot be read as version 1 (Avro's rules), and the read names it all.
    pinned = (
        spark.read.format(FORMAT)
        .options(keyFormat="string", valueFormat="avro", valueSubject=f"{topic}-value")
        .options(valueSchemaVersion="1", **registry)
        .load(str(tmp_path / "store"))
    )
    with pytest.raises(Exception, match="cannot be read as the reader schema") as caught:
        pinned.collect()
    message = str(caught.value)
    from confluent_kafka.schema_registry import SchemaRegistryClient

    client = SchemaRegistryClient({"url": schema_registry.url, "timeout": 30})
    v1_id, v2_id = (client.get_version(f"{topic}-value", n).schema_id for n in (1, 2))
    for fragment in (
        "key b'a' (written from changelog partition 0 offset 2)",
        f"writer schema id {v2_id}",
        f"reader schema id {v1_id}",
        f"subject {topic}-value",
        "field note: the reader's field has no default",
    ):
        assert fragment in message, (fragment, message)


def test_a_registry_outage_does_not_stop_a_running_query_for_the_ids_it_knows(
    spark: Any, kafka_broker: Any, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """The subject's writer schemas travel in the plan: the registry may be gone when the
    tasks decode. An id the plan does not know needs the registry, and its outage stops
    the query naming the value and the registry, never decoding the value otherwise."""
    from spark_statestore.connectors.local import LocalSchemaRegistry

    topic = make_topic(1, suffix="-changelog")
    bootstrap = kafka_broker.bootstrap_servers
    rows: list[Any] = []
    with LocalSchemaRegistry() as registry:
        url = registry.url
        write_value = serializer(url, V1)
        produce(bootstrap, topic, [(b"a", write_value(topic, {"id": 1, "note": "x"}))])
        later = write_value(topic, {"id": 2, "note": None})
        other = serializer(url, ORDER)(f"{topic}-other", {"id": 9, "note": None, "lines": []})
        feed = follow(
            spark, bootstrap, topic, tmp_path / "store", keyFormat="string", valueFormat="avro",
            schemaRegistryUrl=url, **{"schemaRegistry.max.retries": "0"},
        )  # fmt: skip
        query = (
            feed.writeStream.foreachBatch(lambda df, _: rows.extend(df.collect()))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="100 milliseconds")
            .start()
        )
        try:
            delivered(rows, 1)
            registry.kill()
            produce(bootstrap, topic, [(b"b", later)])
            delivered(rows, 2)
            assert [(r["key"], r["value"].asDict()) for r in rows] == [
                ("a", {"id": 1, "note": "x"}),
                ("b", {"id": 2, "note": None}),
            ]
            produce(bootstrap, topic, [(b"c", other)])  # an id of another subject
            with pytest.raises(Exception, match="cannot reach the schema registry") as caught:
                query.awaitTermination(120)  # raises the query's failure
        finally:
            query.stop()
    message = str(caught.value)
    assert f"topic {topic} partition 0 offset 2" in message, message


def delivered(rows: list[Any], count: int) -> None:
    """Wait until a running query's foreachBatch has collected ``count`` rows."""
    poll_until(
        lambda: True if len(rows) >= count else None,
        timeout_s=120,
        interval_s=0.05,
        failure=lambda: f"{len(rows)} of {count} rows delivered",
    )


def test_an_id_the_registry_does_not_have_stops_the_query_naming_it(
    spark: Any,
    kafka_broker: Any,
    schema_registry: Any,
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    topic = make_topic(1, suffix="-changelog")
    bootstrap = kafka_broker.bootstrap_servers
    good = serializer(schema_registry.url, V1)(topic, {"id": 1, "note": None})
    produce(bootstrap, topic, [(b"a", good), (b"b", encode_frame(987654, b"\x02"))])
    feed = follow(
        spark, bootstrap, topic, tmp_path / "store", valueFormat="avro",
        schemaRegistryUrl=schema_registry.url,
    )  # fmt: skip
    with pytest.raises(Exception, match="has no schema id 987654") as caught:
        run_available_now(feed, tmp_path / "checkpoint")
    assert f"topic {topic} partition 0 offset 1" in str(caught.value)


def test_tail_prints_avro_values_as_json_and_names_one_it_cannot_read(
    kafka_broker: Any, schema_registry: Any, make_topic: Callable[..., str]
) -> None:
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    topic = make_topic(1, suffix="-changelog")
    bootstrap = kafka_broker.bootstrap_servers
    write_value = serializer(schema_registry.url, V1)
    produce(bootstrap, topic, [(b"a", write_value(topic, {"id": 7, "note": "é"})), (b"b", None)])
    command = [
        sys.executable, "-m", "spark_statestore.cli", "tail", "--bootstrap-servers", bootstrap,
        "--changelog", topic, "--value-format", "avro", "--schema-registry-url",
        schema_registry.url,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert 'key=a value={"id":7,"note":"é"}' in first
    assert "key=b value=null" in second

    produce(bootstrap, topic, [(b"c", b"\x01not-a-frame")])
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert f"the value at topic {topic} partition 0 offset 2: magic byte 0x01" in done.stderr


def test_enrich_looks_avro_values_up_by_key(
    spark: Any,
    kafka_broker: Any,
    schema_registry: Any,
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    import spark_statestore

    topic = make_topic(1, suffix="-changelog")
    bootstrap = kafka_broker.bootstrap_servers
    old, new = serializer(schema_registry.url, V1), serializer(schema_registry.url, V2)
    produce(
        bootstrap,
        topic,
        [(b"a", old(topic, {"id": 1, "note": "x"})), (b"b", new(topic, {"id": 2, "qty": 4}))],
    )
    store = tmp_path / "store"
    feed = follow(spark, bootstrap, topic, store, valueFormat="avro",
                  schemaRegistryUrl=schema_registry.url)  # fmt: skip
    assert len(run_available_now(feed, tmp_path / "checkpoint")) == 2
    wait_for_owner_exit(store)
    orders = spark.createDataFrame([("a",), ("b",), ("zz",)], "key STRING")
    enriched = spark_statestore.enrich(
        orders,
        str(store),
        key_column="key",
        key_format="string",
        value_format="avro",
        schema_registry_url=schema_registry.url,
        value_subject=f"{topic}-value",
        value_column="order",
    )
    assert enriched.schema["order"].dataType.simpleString() == "struct<id:bigint,qty:int>"
    found = {
        r["key"]: None if r["order"] is None else r["order"].asDict() for r in enriched.collect()
    }
    assert found == {"a": {"id": 1, "qty": 1}, "b": {"id": 2, "qty": 4}, "zz": None}
    with pytest.raises(Exception, match="option valueSubject is required"):
        spark_statestore.enrich(
            orders, str(store), key_column="key", value_format="avro",
            schema_registry_url=schema_registry.url,
        )  # fmt: skip


# -- Avro keys: lookups by the logical key --------------------------------------------------
KEY_V1 = record({"name": "customer", "type": "string"}, name="CustomerKey")
KEY_V2 = record(
    {"name": "customer", "type": "string"},
    {"name": "region", "type": "string", "default": "none"},
    name="CustomerKey",
)


def test_keys_look_avro_keys_up_under_every_schema_id_they_are_stored_under(
    spark: Any,
    kafka_broker: Any,
    schema_registry: Any,
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    """The application's key schema gained a field with a default: keys written before and
    after are stored under two ids, with other bytes for one logical key. A lookup finds a
    key under either id (both, when the store holds it under both), and a lookup with a
    reader schema that cannot fix a stored id's bytes fails rather than answer "absent"."""
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    topic = make_topic(1, suffix="-changelog")
    bootstrap = kafka_broker.bootstrap_servers
    old = serializer(schema_registry.url, KEY_V1, keys=True)
    new = serializer(schema_registry.url, KEY_V2, keys=True)
    produce(
        bootstrap,
        topic,
        [
            (old(topic, {"customer": "a"}), b"1"),
            (old(topic, {"customer": "b"}), b"2"),
            (new(topic, {"customer": "b", "region": "none"}), b"3"),
            (new(topic, {"customer": "c", "region": "west"}), b"4"),
        ],
    )
    store = tmp_path / "store"
    registry = {"schemaRegistryUrl": schema_registry.url, "keySubject": f"{topic}-key"}
    feed = follow(spark, bootstrap, topic, store, keyFormat="avro", valueFormat="string",
                  **registry)  # fmt: skip
    assert len(run_available_now(feed, tmp_path / "checkpoint")) == 4
    wait_for_owner_exit(store)

    def lookup(keys: list[dict[str, Any]], **options: str) -> list[tuple[dict[str, Any], str]]:
        df = (
            spark.read.format(FORMAT)
            .options(keyFormat="avro", valueFormat="string", **registry, **options)
            .option("keys", json.dumps(keys))
            .load(str(store))
        )
        rows = [(r["key"].asDict(), r["value"]) for r in df.collect()]
        return sorted(rows, key=lambda row: (json.dumps(row[0], sort_keys=True), row[1]))

    a, b = {"customer": "a", "region": "none"}, {"customer": "b", "region": "none"}
    c, d = {"customer": "c", "region": "west"}, {"customer": "d", "region": "none"}
    assert lookup([a]) == [(a, "1")]  # stored under version 1's id
    assert lookup([c]) == [(c, "4")]  # under version 2's
    assert lookup([b]) == [(b, "2"), (b, "3")]  # under both: both entries, as a scan shows
    assert lookup([a, c, d, {"customer": "c", "region": "none"}]) == [(a, "1"), (c, "4")]
    # The same reads through SQL, with read-your-writes' bound.
    position = spark.read.format(FORMAT).option("view", "position").load(str(store)).collect()
    bound = json.dumps({topic: {str(r["partition"]): r["offset"] for r in position}})
    assert lookup([c], positionBound=bound) == [(c, "4")]

    # Read as version 1, a key of version 2 has a region the lookup cannot give.
    with pytest.raises(Exception, match="lookup's keys are encoded") as caught:
        lookup([{"customer": "a"}], keySchemaVersion="1")
    from confluent_kafka.schema_registry import SchemaRegistryClient

    client = SchemaRegistryClient({"url": schema_registry.url, "timeout": 30})
    v1_id, v2_id = (client.get_version(f"{topic}-key", n).schema_id for n in (1, 2))
    message = str(caught.value)
    assert f"schema id {v2_id} (e.g. key " in message, message
    assert f"encoded under schema id(s) {v1_id} only" in message, message
    with pytest.raises(Exception, match="not a key of the key column"):
        lookup([{"customer": 5}])

    # enrich looks each row's Avro key up the same way (a key under two ids fails the task).
    import spark_statestore

    key_type = "STRUCT<customer: STRING, region: STRING>"
    orders = spark.createDataFrame([(a,), (c,), (d,), (None,)], f"k {key_type}")
    enriched = spark_statestore.enrich(
        orders, str(store), key_column="k", key_format="avro", value_format="string",
        schema_registry_url=schema_registry.url, key_subject=f"{topic}-key",
    )  # fmt: skip
    found = sorted((json.dumps(r["k"] and r["k"].asDict()), r["value"]) for r in enriched.collect())
    assert found == sorted(
        [(json.dumps(a), "1"), (json.dumps(c), "4"), (json.dumps(d), None), ("null", None)]
    )
    both = spark_statestore.enrich(
        spark.createDataFrame([(b,)], f"k {key_type}"), str(store), key_column="k",
        key_format="avro", schema_registry_url=schema_registry.url, key_subject=f"{topic}-key",
    )  # fmt: skip
    with pytest.raises(Exception, match=f"holds under schema ids {v1_id}, {v2_id}: two entries"):
        both.collect()
    pinned = spark_statestore.enrich(
        spark.createDataFrame([({"customer": "a"},)], "k STRUCT<customer: STRING>"),
        str(store), key_column="k", key_format="avro", schema_registry_url=schema_registry.url,
        key_subject=f"{topic}-key", key_schema_version="1",
    )  # fmt: skip
    with pytest.raises(Exception, match=f"schema id {v2_id} \\(e.g. key "):
        pinned.collect()

    # The CLI's query decodes and encodes keys as the reader does (subjects by the store's
    # changelog), and prints Avro keys as JSON.
    def query(*flags: str) -> subprocess.CompletedProcess[str]:
        command = [
            sys.executable, "-m", "spark_statestore.cli", "query", str(store), "--json",
            "--key-format", "avro", "--schema-registry-url", schema_registry.url, *flags,
        ]  # fmt: skip
        return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)

    done = query("--key", json.dumps(b), "--key", json.dumps(c))
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert sorted((json.dumps(r["key"], sort_keys=True), r["value"]) for r in rows) == [
        (json.dumps(b, sort_keys=True), "2"),
        (json.dumps(b, sort_keys=True), "3"),
        (json.dumps(c, sort_keys=True), "4"),
    ]
    done = query("--key", '{"customer": "a"}', "--format-option", "keySchemaVersion=1")
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert f"schema id {v2_id} (e.g. key " in done.stderr, done.stderr
    done = query("--all")
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 4, done.stderr


def test_a_window_store_keeps_its_window_columns_with_avro_user_keys_and_values(
    spark: Any,
    kafka_broker: Any,
    schema_registry: Any,
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    """Only the user key and the value change: the window store's stored key is the Avro
    user key (its frame included) followed by the window start and sequence number."""
    from spark_statestore.changelog import encode_window_key

    topic = make_topic(1, suffix="-changelog")
    bootstrap = kafka_broker.bootstrap_servers
    key = serializer(schema_registry.url, KEY_V1, keys=True)
    value = serializer(schema_registry.url, V2)
    produce(
        bootstrap,
        topic,
        [
            (encode_window_key(key(topic, {"customer": "a"}), 60_000), value(topic, {"id": 1})),
            (encode_window_key(key(topic, {"customer": "a"}), 120_000), value(topic, {"id": 2})),
            (encode_window_key(key(topic, {"customer": "b"}), 60_000), value(topic, {"id": 3})),
        ],
    )
    options = {
        "keyFormat": "avro", "valueFormat": "avro", "storeType": "window",
        "windowSizeMs": "60000", "schemaRegistryUrl": schema_registry.url,
    }  # fmt: skip
    store = tmp_path / "store"
    rows = run_available_now(follow(spark, bootstrap, topic, store, **options), tmp_path / "cp")
    seen = sorted(
        (r["key"]["customer"], r["window_start"].timestamp(), r["value"]["id"]) for r in rows
    )
    assert seen == [("a", 60.0, 1), ("a", 120.0, 2), ("b", 60.0, 3)]
    wait_for_owner_exit(store)
    table = (
        spark.read.format(FORMAT)
        .options(**options, keySubject=f"{topic}-key", valueSubject=f"{topic}-value")
        .load(str(store))
    )
    found = table.where("key.customer = 'a'").select("window_end", "value.qty").collect()
    assert sorted((r["window_end"].timestamp(), r["qty"]) for r in found) == [
        (120.0, 1),
        (180.0, 1),
    ]
