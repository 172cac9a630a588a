"""Avro keys encoded for lookups: every byte form of a logical key, and the ids covered."""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa
import pytest

from spark_statestore.connectors.spark.avro_keys import avro_lookup_keys
from spark_statestore.connectors.spark.option_table import Framing
from spark_statestore.connectors.spark.registry_column import RegistryColumn
from spark_statestore.errors import OptionError
from spark_statestore.schemas import AvroSchema, encode_frame
from tests.unit.test_schemas_avro import record, write

V1 = record({"name": "customer", "type": "string"}, name="CustomerKey")
V2 = record(
    {"name": "customer", "type": "string"},
    {"name": "region", "type": "string", "default": "none"},
    name="CustomerKey",
)
V3 = record(  # version 2 without region: a later drop
    {"name": "customer", "type": "string"},
    {"name": "shard", "type": ["null", "int"], "default": None},
    name="CustomerKey",
)


def schema(text: dict[str, Any], schema_id: int | None = None) -> AvroSchema:
    return AvroSchema.parse(json.dumps(text), what=f"schema {schema_id}", schema_id=schema_id)


def column(reader: AvroSchema, *writers: AvroSchema) -> RegistryColumn:
    framing = Framing.REGISTRY if writers else Framing.NONE
    return RegistryColumn("key", reader, framing, "t-key", None, {w.schema_id: w for w in writers})


def test_a_key_is_encoded_under_each_id_whose_bytes_it_fixes() -> None:
    v1, v2 = schema(V1, 1), schema(V2, 2)
    keys, ids = avro_lookup_keys(
        column(v2, v1, v2),
        [{"customer": "a", "region": "none"}, {"customer": "b", "region": "west"}],
        v2.arrow_type(),
    )
    assert ids == frozenset({1, 2})
    assert sorted(keys) == sorted(
        [
            encode_frame(1, write(V1, {"customer": "a"})),
            encode_frame(2, write(V2, {"customer": "a", "region": "none"})),
            # b in region west cannot be a version 1 key (it would read as region none)
            encode_frame(2, write(V2, {"customer": "b", "region": "west"})),
        ]
    )


def test_an_id_with_a_field_the_reader_lacks_is_not_covered() -> None:
    v1, v2, v3 = schema(V1, 1), schema(V2, 2), schema(V3, 3)
    keys, ids = avro_lookup_keys(column(v1, v1, v2, v3), [{"customer": "a"}], v1.arrow_type())
    assert ids == frozenset({1})  # 2 has region, 3 has shard: the key does not fix them
    assert keys == [encode_frame(1, write(V1, {"customer": "a"}))]


def test_bare_avro_keys_have_one_form_and_no_ids() -> None:
    v1 = schema(V1)
    keys, ids = avro_lookup_keys(column(v1), [{"customer": "a"}], v1.arrow_type())
    assert (keys, ids) == ([write(V1, {"customer": "a"})], None)


@pytest.mark.parametrize(
    ("field", "named"),
    [
        ({"type": "map", "values": "long"}, "map at key.tags"),
        ("double", "double at key.tags"),
        (["null", "float"], "float at key.tags"),
        ({"type": "array", "items": "float"}, "float at key.tags[]"),
    ],
)
def test_key_schemas_with_several_byte_forms_per_value_are_refused(field: Any, named: str) -> None:
    text = record({"name": "customer", "type": "string"}, {"name": "tags", "type": field})
    reader = schema(text, 1)
    with pytest.raises(OptionError, match=re.escape(f"has a {named}, which has several byte")):
        avro_lookup_keys(column(reader, reader), [], reader.arrow_type())


def test_a_key_that_is_not_a_value_of_the_key_column_is_named() -> None:
    v1 = schema(V1, 1)
    with pytest.raises(OptionError, match=r"option 'keys': \{\"customer\": 5\} is not a key"):
        avro_lookup_keys(column(v1, v1), [{"customer": 5}], v1.arrow_type())
    assert pa.array([{"customer": "x"}], v1.arrow_type()).to_pylist() == [{"customer": "x"}]
