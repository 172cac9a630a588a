"""JSON Schema values decoded to a reader schema: the column types, refs and allOf, evolution
by property name, strict payloads, and errors that name the value, the schema ids, the
subject and the path.

The values are written by :func:`json.dumps` and framed as a registry serializer frames
them; one test takes its bytes from confluent-kafka's own JSONSerializer (with its mock
registry).
"""

from __future__ import annotations

import datetime as dt
import json
import pickle
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_statestore.schemas import (
    FrameError,
    SchemaDecodeError,
    SchemaError,
    SchemaNotFoundError,
    SchemaResolutionError,
    encode_frame,
)
from spark_statestore.schemas.jsonschema import JsonSchema, JsonSchemaValueDecoder
from tests.unit.test_schemas_avro import decode, lookup_of

UTC = dt.timezone.utc
TIMESTAMP = pa.timestamp("us", tz="UTC")


def obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def schema(
    body: Any, schema_id: int | None = None, references: tuple[tuple[str, str], ...] = ()
) -> JsonSchema:
    return JsonSchema.parse(
        json.dumps(body), what=f"schema {schema_id}", schema_id=schema_id, references=references
    )


def decoder(
    reader: JsonSchema, *writers: JsonSchema, validate: bool = True
) -> JsonSchemaValueDecoder:
    return JsonSchemaValueDecoder(
        reader, lookup_of(*writers), subject="orders-value", validate=validate
    )


def framed(schema_id: int, value: Any) -> bytes:
    return encode_frame(schema_id, json.dumps(value).encode())


def read_one(body: Any, value: Any) -> Any:
    """The row of ``value`` written and read with the schema ``body`` (validated)."""
    written = schema(body, 1)
    (row,), bad = decode(decoder(written, written), framed(1, value))
    assert bad == 0
    return row


# -- types --------------------------------------------------------------------------------
NULL = {"type": "null"}
INT = {"type": "integer"}


@pytest.mark.parametrize(
    ("body", "arrow"),
    [
        (obj(a=INT, b={"type": "string"}), pa.struct([("a", pa.int64()), ("b", pa.string())])),
        ({"properties": {"a": INT}}, pa.struct([("a", pa.int64())])),
        ({"type": "object", "additionalProperties": INT}, pa.map_(pa.string(), pa.int64())),
        ({"type": "object", "additionalProperties": {}}, pa.map_(pa.string(), pa.string())),
        ({"type": "object"}, pa.string()),
        ({"type": "object", "additionalProperties": True}, pa.string()),
        ({"type": "array", "items": INT}, pa.list_(pa.int64())),
        ({"type": "array", "items": [INT, INT]}, pa.string()),
        ({"type": "array"}, pa.string()),
        ({"type": "string"}, pa.string()),
        ({"type": "string", "format": "date"}, pa.date32()),
        ({"type": "string", "format": "date-time"}, TIMESTAMP),
        ({"type": "string", "format": "time"}, pa.string()),
        ({"type": "string", "format": "uuid"}, pa.string()),
        (INT, pa.int64()),
        ({"type": "number"}, pa.float64()),
        ({"type": ["integer", "number"]}, pa.float64()),
        ({"type": "boolean"}, pa.bool_()),
        ({"type": ["integer", "null"]}, pa.int64()),
        ({"oneOf": [NULL, INT]}, pa.int64()),
        ({"anyOf": [INT, NULL]}, pa.int64()),
        ({"oneOf": [INT]}, pa.int64()),
        ({"enum": ["RED", "BLUE", None]}, pa.string()),
        ({"const": "v1"}, pa.string()),
        ({"enum": [1, 2]}, pa.string()),
        ({"type": "integer", "enum": [1, 2]}, pa.int64()),
        ({}, pa.string()),
        (True, pa.string()),
        (NULL, pa.string()),
        ({"type": ["string", "integer"]}, pa.string()),
        ({"oneOf": [INT, {"type": "string"}]}, pa.string()),
        ({"not": INT}, pa.string()),
        (
            {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "array",
             "prefixItems": [INT]},
            pa.string(),
        ),
    ],
)  # fmt: skip
def test_each_row_of_the_mapping(body: Any, arrow: pa.DataType) -> None:
    assert schema(body).arrow_type() == arrow


EVERY_TYPE = obj(
    id=INT,
    score={"type": "number"},
    ok={"type": "boolean"},
    name={"type": "string"},
    day={"type": "string", "format": "date"},
    at={"type": "string", "format": "date-time"},
    clock={"type": "string", "format": "time"},
    color={"enum": ["RED", "BLUE"]},
    lines={"type": "array", "items": obj(sku={"type": "string"}, qty=INT)},
    counts={"type": "object", "additionalProperties": {"type": ["integer", "null"]}},
    note={"type": ["string", "null"]},
    extra={},
    shape={"type": "object"},
)


def test_every_type_decodes_to_its_column() -> None:
    value = {
        "id": -(2**63), "score": 2, "ok": False, "name": "é😀", "day": "2024-02-29",
        "at": "2026-11-28T01:02:03.123456789+05:30", "clock": "10:00:00Z", "color": "BLUE",
        "lines": [{"sku": "a", "qty": 2}, {"qty": 1.0}], "counts": {"x": 1, "y": None},
        "note": None, "extra": {"z": [1, "two", None], "a": 1.5}, "shape": {"b": 1, "a": 2},
    }  # fmt: skip
    assert read_one(EVERY_TYPE, value) == {
        **value,
        "score": 2.0,
        "day": dt.date(2024, 2, 29),
        "at": dt.datetime(2026, 11, 27, 19, 32, 3, 123456, tzinfo=UTC),
        "lines": [{"sku": "a", "qty": 2}, {"sku": None, "qty": 1}],
        "counts": [("x", 1), ("y", None)],
        "extra": '{"z":[1,"two",null],"a":1.5}',  # compact, in the writer's key order
        "shape": '{"b":1,"a":2}',
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-28T01:02:03Z", dt.datetime(2026, 11, 28, 1, 2, 3, tzinfo=UTC)),
        ("2026-11-28t01:02:03.5z", dt.datetime(2026, 11, 28, 1, 2, 3, 500000, tzinfo=UTC)),
        ("2026-11-28T01:02:03-01:30", dt.datetime(2026, 11, 28, 2, 32, 3, tzinfo=UTC)),
        ("2026-11-28T01:02:03", None),  # RFC 3339 needs the offset
        ("2026-11-28 01:02:03Z", None),
        ("2016-12-31T23:59:60Z", None),  # a leap second: Spark's timestamps have none
        ("2026-11-28T01:02:03+24:00", None),
        ("0001-01-01T00:00:00+01:00", None),  # before year 1 in UTC
        ("\uff12\uff10\uff12\uff16-11-28T01:02:03Z", None),  # digits, but not ASCII
    ],
)
def test_date_times_are_rfc_3339_with_an_offset(text: str, expected: dt.datetime | None) -> None:
    body = obj(at={"type": "string", "format": "date-time"})
    if expected is not None:
        assert read_one(body, {"at": text}) == {"at": expected}
        return
    with pytest.raises(SchemaResolutionError, match=r"at \$\.at: .* is not a date-time string"):
        read_one(body, {"at": text})


@pytest.mark.parametrize("text", ["2026-02-30", "20261128", "2026-W48-6", "2026-11-28\n"])
def test_a_date_is_the_full_date_form_only(text: str) -> None:
    with pytest.raises(SchemaResolutionError, match=r"at \$\.day: .* is not a date string"):
        read_one(obj(day={"type": "string", "format": "date"}), {"day": text})


@pytest.mark.parametrize(
    "body",
    [
        {"type": ["integer", "null"]},
        {"type": ["null", "integer"]},
        {"oneOf": [NULL, INT]},
        {"anyOf": [INT, NULL]},
        {"oneOf": [{"$ref": "#/definitions/none"}, INT], "definitions": {"none": NULL}},
    ],
)
def test_each_nullable_form_reads_the_type_or_null(body: dict[str, Any]) -> None:
    wrapped = {**obj(n={k: v for k, v in body.items() if k != "definitions"})}
    if "definitions" in body:
        wrapped["definitions"] = body["definitions"]
    assert schema(wrapped).arrow_type() == pa.struct([("n", pa.int64())])
    assert read_one(wrapped, {"n": 5}) == {"n": 5}
    assert read_one(wrapped, {"n": None}) == {"n": None}


def test_a_null_json_value_is_null_in_a_json_text_column_too() -> None:
    assert read_one(obj(any={}), {"any": None}) == {"any": None}
    assert read_one(obj(any={}), {"any": "text"}) == {"any": '"text"'}


# -- refs and allOf -----------------------------------------------------------------------
def test_internal_refs_resolve_in_definitions_and_defs() -> None:
    line = obj(sku={"type": "string"})
    draft7 = {**obj(first={"$ref": "#/definitions/line"}), "definitions": {"line": line}}
    draft2020 = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **obj(
            first={"$ref": "#/$defs/line"},
            more={"type": "array", "items": {"$ref": "#/$defs/line"}},
        ),
        "$defs": {"line": line},
    }
    assert read_one(draft7, {"first": {"sku": "a"}}) == {"first": {"sku": "a"}}
    assert read_one(draft2020, {"first": {"sku": "a"}, "more": [{"sku": "b"}]}) == {
        "first": {"sku": "a"},
        "more": [{"sku": "b"}],
    }


CUSTOMER = obj(name={"type": "string"}, since={"type": "string", "format": "date"})
ORDER = obj(id=INT, customer={"$ref": "customer.json"})


def test_a_registry_reference_resolves_by_its_name() -> None:
    references = (("customer.json", json.dumps(CUSTOMER)),)
    writer = schema(ORDER, 1, references)
    assert writer.arrow_type() == pa.struct(
        [
            ("id", pa.int64()),
            ("customer", pa.struct([("name", pa.string()), ("since", pa.date32())])),
        ]
    )
    customer = {"name": "ann", "since": "2020-01-02"}
    (row,), _ = decode(decoder(writer, writer), framed(1, {"id": 1, "customer": customer}))
    assert row == {"id": 1, "customer": {"name": "ann", "since": dt.date(2020, 1, 2)}}
    with pytest.raises(SchemaDecodeError, match=r"at \$\.customer\.name: 5 is not of type"):
        decode(decoder(writer, writer), framed(1, {"id": 1, "customer": {"name": 5}}))


def test_a_ref_that_does_not_resolve_is_refused_naming_it() -> None:
    with pytest.raises(
        SchemaError, match=r"schema 1: \$ref 'customer\.json' at \$\.customer does not"
    ):
        schema(ORDER, 1)
    hidden = {"not": {"$ref": "#/definitions/missing"}}  # no column follows it; validation would
    with pytest.raises(SchemaError, match=r"'#/definitions/missing' does not resolve"):
        schema(hidden)


def test_all_of_object_schemas_merge_into_one_struct() -> None:
    base = obj(id=INT, note={"type": "string"})
    body = {
        "type": "object",
        "allOf": [{"$ref": "#/definitions/base"}, obj(qty=INT, id=INT), {"required": ["id"]}],
        "definitions": {"base": base},
    }
    assert schema(body).arrow_type() == pa.struct(
        [("id", pa.int64()), ("note", pa.string()), ("qty", pa.int64())]
    )
    assert read_one(body, {"id": 1, "qty": 2}) == {"id": 1, "note": None, "qty": 2}


def test_all_of_with_conflicting_properties_is_json_text() -> None:
    body = {"allOf": [obj(id=INT), obj(id={"type": "string"})]}
    assert schema(body).arrow_type() == pa.string()


def test_a_ref_with_siblings_applies_both_from_draft_2019_on() -> None:
    defs = {"base": obj(id=INT)}
    later = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$defs": defs,
             "$ref": "#/$defs/base", "properties": {"qty": INT}}  # fmt: skip
    draft7 = {"definitions": defs, "$ref": "#/definitions/base", "properties": {"qty": INT}}
    assert schema(later).arrow_type() == pa.struct([("id", pa.int64()), ("qty", pa.int64())])
    assert schema(draft7).arrow_type() == pa.struct([("id", pa.int64())])  # siblings ignored


def test_a_recursive_type_is_refused_naming_the_path() -> None:
    nullable_node = {"oneOf": [NULL, {"$ref": "#/definitions/node"}]}
    node = {
        **obj(children={"type": "array", "items": {"$ref": "#/definitions/node"}}),
        "definitions": {"node": obj(value=INT, next=nullable_node)},
    }
    with pytest.raises(SchemaError) as caught:
        schema(node)
    assert (
        "'#/definitions/node' at $.children[*].next refers back to a schema that contains it"
        in str(caught.value)
    )


def test_a_recursion_inside_json_text_is_read_as_text() -> None:
    subtrees = {"type": "array", "items": {"$ref": "#/definitions/t"}}
    tree = {
        "definitions": {"t": {"oneOf": [INT, subtrees]}},
        **obj(tree={"$ref": "#/definitions/t"}),
    }
    assert read_one(tree, {"tree": [1, [2, [3]]]}) == {"tree": "[1,[2,[3]]]"}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{", "not JSON"),
        ("[1]", "a schema is an object or a boolean"),
        ('{"type": "integr"}', "is not a valid JSON Schema (draft-07) at $.type"),
        ('{"type": "string", "pattern": "("}', "is not a valid JSON Schema"),
        ('{"$schema": "http://example.com/mine", "type": "string"}', "no JSON Schema draft"),
        ('{"type": "object", "properties": {"a": {"type": "integer", "default": "one"}}}',
         "the default of $.a does not fit"),
        ('{"type": "object", "properties": {"a": {}}, "properties": {}}', "appears twice"),
    ],
)  # fmt: skip
def test_an_invalid_schema_is_refused_naming_where_it_came_from(text: str, fragment: str) -> None:
    with pytest.raises(SchemaError) as caught:
        JsonSchema.parse(text, what="option valueSchema")
    assert fragment in str(caught.value) and "option valueSchema" in str(caught.value)


def test_a_schema_pickles_as_its_texts() -> None:
    original = schema(ORDER, 4, (("customer.json", json.dumps(CUSTOMER)),))
    again = pickle.loads(pickle.dumps(original))
    assert again == original
    assert set(original.__getstate__()) == {"text", "what", "schema_id", "references"}
    assert again.arrow_type() == original.arrow_type()
    assert decoder(again, again).decode_one(framed(4, {"id": 2})) == {"id": 2, "customer": None}


# -- evolution ----------------------------------------------------------------------------
V1 = obj(id=INT, note={"type": "string"}, stats=obj(mean={"type": "number"}))
V2 = obj(id=INT, qty={"type": ["integer", "null"], "default": 1}, region={"type": "string"},
         stats=obj(mean={"type": "number"}))  # fmt: skip


def test_old_and_new_values_read_under_the_latest_schema() -> None:
    """The reader added properties (one with a default) and dropped one the writer has."""
    v1, v2 = schema(V1, 1), schema(V2, 2)
    rows, bad = decode(
        decoder(v2, v1, v2),
        framed(1, {"id": 1, "note": "old", "stats": {"mean": 0.5}}),
        framed(2, {"id": 2, "qty": 5, "region": "eu"}),
        framed(2, {"id": 3, "qty": None}),  # null as written, not the default
        None,
    )
    assert bad == 0
    assert rows == [
        {"id": 1, "qty": 1, "region": None, "stats": {"mean": 0.5}},
        {"id": 2, "qty": 5, "region": "eu", "stats": None},
        {"id": 3, "qty": None, "region": None, "stats": None},
        None,
    ]


def test_a_type_conflict_names_the_path_the_ids_the_subject_and_the_reader() -> None:
    writer = schema(obj(stats=obj(mean={"type": "string"})), 1)
    with pytest.raises(SchemaResolutionError) as caught:
        decode(decoder(schema(V1, 3), writer), framed(1, {"stats": {"mean": "high"}}))
    message = str(caught.value)
    for fragment in (
        "offset 100", "writer schema id 1", "orders-value", "reader schema (schema 3, schema id 3)",
        "at $.stats.mean: a string ('high') where the reader has a number (float64)",
        "evolve the schema compatibly",
    ):  # fmt: skip
        assert fragment in message


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (1.5, "$.n: 1.5 is not an integer"),
        (2**63, "$.n: 9223372036854775808 is beyond int64's range"),
        (1e300, "$.n: 1e+300 is beyond int64's range"),
        ("7", "$.n: a string ('7') where the reader has an integer (int64)"),
        (True, "$.n: a boolean (true) where the reader has an integer"),
    ],
)
def test_a_number_the_integer_column_cannot_hold_is_a_misfit(value: Any, fragment: str) -> None:
    writer = schema(obj(n={}), 1)
    reader = schema(obj(n=INT), 2)
    with pytest.raises(SchemaResolutionError) as caught:
        decode(decoder(reader, writer), framed(1, {"n": value}))
    assert fragment in str(caught.value)
    assert decode(decoder(reader, writer), framed(1, {"n": 4.0})) == ([{"n": 4}], 0)


def test_a_path_names_odd_keys_and_indexes_as_jsonschema_does() -> None:
    writer = schema(obj(m={"type": "object", "additionalProperties": {}}), 1)
    lists = {"type": "array", "items": INT}
    reader = schema(obj(m={"type": "object", "additionalProperties": lists}), 2)
    with pytest.raises(SchemaResolutionError, match=r"at \$\.m\['a b'\]\[1\]: a string"):
        decode(decoder(reader, writer), framed(1, {"m": {"ok": [1], "a b": [1, "2"]}}))


# -- validation ---------------------------------------------------------------------------
def test_a_value_is_validated_against_its_writer_schema_not_the_readers() -> None:
    writer = schema(obj(qty={"type": "integer", "maximum": 10}), 1)
    reader = schema(obj(qty=INT), 2)
    raw = framed(1, {"qty": 11})
    with pytest.raises(SchemaDecodeError) as caught:
        decode(decoder(reader, writer), raw)
    assert "does not validate against writer schema id 1 (subject orders-value) at $.qty: " \
           "11 is greater than the maximum of 10" in str(caught.value)  # fmt: skip
    assert decode(decoder(reader, writer, validate=False), raw) == ([{"qty": 11}], 0)
    strict_reader = schema(obj(qty={"type": "integer", "maximum": 1}), 3)
    assert decode(decoder(strict_reader, schema(obj(qty=INT), 1)), raw) == ([{"qty": 11}], 0)


def test_bare_json_is_validated_against_the_reader() -> None:
    reader = schema(obj(qty={"type": "integer", "minimum": 0}))
    bare = JsonSchemaValueDecoder(reader, None)
    array, bad = bare.decode([b' {"qty": 3} ', b'{"qty": -1}'], locate=str, permissive=True)
    assert (array.to_pylist(), bad) == ([{"qty": 3}, None], 1)
    with pytest.raises(
        SchemaDecodeError, match=r"does not validate against schema None at \$\.qty"
    ):
        bare.decode_one(b'{"qty": -1}')


# -- bad input ----------------------------------------------------------------------------
def test_an_unknown_schema_id_is_not_a_bad_value_even_when_permissive() -> None:
    v1 = schema(V1, 1)
    for validate in (True, False):
        with pytest.raises(SchemaNotFoundError, match="schema id 9"):
            decode(decoder(v1, v1, validate=validate), framed(9, {"id": 1}), permissive=True)


@pytest.mark.parametrize(
    ("raw", "error", "fragment"),
    [
        (b"\x01\x00\x00\x00\x01{}", FrameError, "magic byte 0x01"),
        (b"\x00\x00\x01", FrameError, "too short"),
        (encode_frame(1, b""), SchemaDecodeError, "0-byte payload read with writer schema id 1"),
        (encode_frame(1, b'{"id": 1}\xff'), SchemaDecodeError, "invalid start byte at payload"),
        (encode_frame(1, b'{"id": 1} {}'), SchemaDecodeError, "Extra data"),
        (encode_frame(1, b'{"id": NaN}'), SchemaDecodeError, "NaN is not a JSON number"),
        (encode_frame(1, b'{"id": -Infinity}'), SchemaDecodeError, "-Infinity is not a JSON"),
        (encode_frame(1, b'{"id": 1, "id": 2}'), SchemaDecodeError, "'id' appears twice"),
        (encode_frame(1, b'{"note": "\\udc00"}'), SchemaDecodeError, "lone surrogate"),
        (encode_frame(1, b"\xef\xbb\xbf{}"), SchemaDecodeError, "Expecting value"),  # a BOM
        (encode_frame(1, b"[" * 100_000), SchemaDecodeError, "nested too deeply"),
        (encode_frame(1, b"9" * 5000), SchemaDecodeError, "not one JSON value"),
    ],
)  # fmt: skip
def test_bad_bytes_fail_naming_the_value_or_become_counted_nulls(
    raw: bytes, error: type[Exception], fragment: str
) -> None:
    v1 = schema(V1, 1)
    with pytest.raises(error) as caught:
        decode(decoder(v1, v1), raw)
    assert fragment in str(caught.value) and "at offset 100" in str(caught.value)
    good = framed(1, {"id": 5})
    assert decode(decoder(v1, v1), raw, good, None, permissive=True) == (
        [None, {"id": 5, "note": None, "stats": None}, None],
        1,
    )


def test_permissive_counts_each_kind_of_bad_value_as_a_null() -> None:
    v1 = schema(V1, 1)
    rows, bad = decode(
        decoder(v1, v1),
        framed(1, {"id": "x"}),  # refused by its writer schema
        encode_frame(1, b"{"),  # not JSON
        framed(1, {"id": 2**64}),  # beyond the column
        framed(1, {"id": 1}),
        permissive=True,
    )
    assert (rows, bad) == ([None, None, None, {"id": 1, "note": None, "stats": None}], 3)


# -- a serializer that is not ours --------------------------------------------------------
def test_values_confluent_kafkas_json_serializer_wrote_with_a_reference() -> None:
    from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient.new_client({"url": "mock://test-jsonschema"})
    client.register_schema("customer", Schema(json.dumps(CUSTOMER), "JSON"))
    order = Schema(json.dumps(ORDER), "JSON", [SchemaReference("customer.json", "customer", 1)])
    serialize = JSONSerializer(order, client)
    context = SerializationContext("orders", MessageField.VALUE)
    raw = serialize({"id": 7, "customer": {"name": "ann", "since": "2020-01-02"}}, context)

    def text(registered: Schema) -> str:
        assert registered.schema_str is not None
        return registered.schema_str

    def lookup(schema_id: int) -> JsonSchema:  # what a registry adapter does
        registered = client.get_schema(schema_id)
        references = []
        for ref in registered.references or ():
            assert ref.name and ref.subject and ref.version
            references.append((ref.name, text(client.get_version(ref.subject, ref.version).schema)))
        return JsonSchema.parse(
            text(registered),
            what=f"schema id {schema_id}",
            schema_id=schema_id,
            references=tuple(references),
        )

    latest = client.get_latest_version("orders-value").schema_id
    assert latest is not None
    reader = lookup(latest)
    dec = JsonSchemaValueDecoder(reader, lookup, subject="orders-value")
    array, bad = dec.decode([raw], locate=str, permissive=False)
    assert (array.to_pylist(), bad) == (
        [{"id": 7, "customer": {"name": "ann", "since": dt.date(2020, 1, 2)}}],
        0,
    )


# -- properties ---------------------------------------------------------------------------
FUZZ = obj(
    id=INT,
    score={"type": "number"},
    day={"type": "string", "format": "date"},
    at={"type": "string", "format": "date-time"},
    tags={"type": "array", "items": {"type": "string"}},
    counts={"type": "object", "additionalProperties": {"type": ["integer", "null"]}},
    extra={},
    inner={"oneOf": [NULL, obj(ok={"type": "boolean"})]},
)
FUZZ_SCHEMA = schema(FUZZ, 1)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64) | JSON_VALUES.map(lambda v: json.dumps(v).encode()))
def test_any_bytes_after_a_frame_decode_or_raise_a_schema_error(payload: bytes) -> None:
    dec = decoder(FUZZ_SCHEMA, FUZZ_SCHEMA)
    try:
        row = dec.decode_one(encode_frame(1, payload))
    except SchemaError:
        return
    pa.array([row], type=dec.arrow_type)  # what the decoder returns, its column holds


OFFSETS = st.integers(-(23 * 60 + 59), 23 * 60 + 59).map(
    lambda minutes: dt.timezone(dt.timedelta(minutes=minutes))
)
MOMENTS = st.datetimes(dt.datetime(2, 1, 1), dt.datetime(9998, 12, 31), timezones=OFFSETS)
FITTING = st.fixed_dictionaries(
    {"id": st.integers(-(2**63), 2**63 - 1)},
    optional={
        "score": st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**60), 2**60),
        "day": st.dates(),
        "at": MOMENTS,
        "tags": st.lists(st.text(), max_size=3),
        "counts": st.dictionaries(st.text(), st.integers(-(2**63), 2**63 - 1) | st.none()),
        "extra": JSON_VALUES,
        "inner": st.none() | st.fixed_dictionaries({}, optional={"ok": st.booleans()}),
        "unknown": JSON_VALUES,  # a property the schema does not have: ignored
    },
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(FITTING, st.booleans())
def test_any_value_fitting_the_schema_decodes_to_the_expected_row(
    value: dict[str, Any], ascii_only: bool
) -> None:
    written = {
        **value,
        **({"day": value["day"].isoformat()} if "day" in value else {}),
        **({"at": value["at"].isoformat()} if "at" in value else {}),
    }
    raw = encode_frame(1, json.dumps(written, ensure_ascii=ascii_only).encode())
    array, bad = decoder(FUZZ_SCHEMA, FUZZ_SCHEMA).decode([raw], locate=str, permissive=False)
    (row,) = array.to_pylist()
    assert bad == 0
    extra = row.pop("extra")
    assert (json.loads(extra) if extra is not None else None) == value.get("extra")
    assert row == {
        "id": value["id"],
        "score": float(value["score"]) if "score" in value else None,
        "day": value.get("day"),
        "at": value["at"].astimezone(UTC) if "at" in value else None,
        "tags": value.get("tags"),
        "counts": list(value["counts"].items()) if "counts" in value else None,
        "inner": {"ok": value["inner"].get("ok")} if value.get("inner") is not None else None,
    }


SCHEMA_KEYS = st.sampled_from(
    ["type", "properties", "additionalProperties", "items", "prefixItems", "enum", "const",
     "oneOf", "anyOf", "allOf", "$ref", "format", "default", "definitions", "$defs", "not", "a"]
)  # fmt: skip
SCHEMA_LEAVES = st.sampled_from(
    ["object", "array", "string", "integer", "number", "boolean", "null", "date", "date-time",
     "#", "#/definitions/a", "#/$defs/a", "customer.json", None, True, False, 1, 1.5]
)  # fmt: skip
SCHEMA_LIKE = st.recursive(
    SCHEMA_LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(SCHEMA_KEYS, inner, max_size=4),
    max_leaves=15,
)


@settings(max_examples=300, deadline=None)
@given(SCHEMA_LIKE, JSON_VALUES)
def test_any_schema_document_parses_or_raises_a_schema_error(body: Any, value: Any) -> None:
    """Whatever a registry holds: a schema is refused with a SchemaError, or its values
    decode (or are refused with one) to what its column holds."""
    try:
        reader = schema(body, 1, (("customer.json", json.dumps(CUSTOMER)),))
    except SchemaError:
        return
    bare = JsonSchemaValueDecoder(reader, None)
    try:
        row = bare.decode_one(json.dumps(value).encode())
    except SchemaError:
        return
    pa.array([row], type=bare.arrow_type)
