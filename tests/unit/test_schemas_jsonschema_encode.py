"""Rows encoded as JSON Schema values for the sink: compact JSON the decoder reads back as the
same row (and confluent-kafka's JSONSerializer would frame alike), None properties written as
null or left out as the writer schema allows, values validated against it, and errors that
name the row, the JSON path and the schema.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_statestore.schemas import (
    JsonSchemaValueEncoder,
    SchemaError,
    ValueEncodeError,
    encode_frame,
)
from spark_statestore.schemas.jsonschema import JsonSchema, JsonSchemaValueDecoder
from tests.unit.test_schemas_jsonschema import INT, NULL, obj, schema

UTC = dt.timezone.utc
STRING = {"type": "string"}
EVERY_BODY = obj(
    id=INT,
    score={"type": "number"},
    ok={"type": "boolean"},
    name=STRING,
    day={"type": "string", "format": "date"},
    at={"type": "string", "format": "date-time"},
    color={"enum": ["RED", "BLUE"]},
    lines={"type": "array", "items": obj(sku=STRING, qty=INT)},
    counts={"type": "object", "additionalProperties": {"type": ["integer", "null"]}},
    note={"type": ["string", "null"]},
    extra={},
    shape={"type": "object"},
)
EVERY = schema(EVERY_BODY, 1)
EVERY_ROW = {
    "id": 7, "score": 2.5, "ok": True, "name": "é ✓", "day": dt.date(2026, 11, 28),
    "at": dt.datetime(2026, 11, 28, 1, 2, 3, tzinfo=UTC), "color": "BLUE",
    "lines": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": -2}],
    "counts": [("x", None), ("y", 2)], "note": None, "extra": '{"k":[1,2.5,null,"s"]}',
    "shape": '{"a":{}}',
}  # fmt: skip


def encode_one(encoder: JsonSchemaValueEncoder, value: Any) -> bytes:
    (raw,) = encoder.encode([value], locate=lambda i: f"row {i + 7}")
    assert raw is not None
    return raw


def payload(writer: JsonSchema, value: Any, **options: Any) -> Any:
    """The JSON a value is written as (the frame checked and cut off)."""
    raw = encode_one(JsonSchemaValueEncoder(writer, **options), value)
    assert raw[:5] == encode_frame(writer.schema_id or 0, b"")
    return json.loads(raw[5:])


def round_trip(writer: JsonSchema, value: Any) -> Any:
    """``value`` encoded, then decoded and made an Arrow value again."""
    encoder = JsonSchemaValueEncoder(writer)
    decoded = JsonSchemaValueDecoder(writer, lambda _: writer).decode_one(
        encode_one(encoder, value)
    )
    return pa.array([decoded], type=encoder.arrow_type).to_pylist()[0]


# -- the bytes ----------------------------------------------------------------------------
def test_every_type_is_written_as_compact_json_and_decodes_to_the_same_row() -> None:
    raw = encode_one(JsonSchemaValueEncoder(EVERY), EVERY_ROW)
    text = (
        '{"id":7,"score":2.5,"ok":true,"name":"é ✓","day":"2026-11-28",'
        '"at":"2026-11-28T01:02:03Z","color":"BLUE","lines":[{"sku":"a","qty":1},'
        '{"sku":"b","qty":-2}],"counts":{"x":null,"y":2},"note":null,'
        '"extra":{"k":[1,2.5,null,"s"]},"shape":{"a":{}}}'
    )
    assert raw == encode_frame(1, text.encode())
    assert round_trip(EVERY, EVERY_ROW) == EVERY_ROW


def test_confluent_kafkas_serializer_frames_the_same_json() -> None:
    """Its JSONSerializer (mock registry) registers the schema, validates the value and
    frames it with the id: the same frame, the same JSON (its separators differ)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient.new_client({"url": "mock://test-jsonschema-encode"})
    serialize = JSONSerializer(json.dumps(EVERY_BODY), client)
    document = {
        "id": 3, "score": 1.5, "name": "n", "day": "2020-01-02", "at": "2020-01-02T03:04:05.5Z",
        "lines": [{"sku": "s", "qty": 0}], "counts": {"a": 1, "b": None}, "note": None,
        "extra": [1, {"x": None}], "shape": {},
    }  # fmt: skip
    theirs = serialize(document, SerializationContext("orders", MessageField.VALUE))
    assert theirs is not None
    schema_id = client.get_latest_version("orders-value").schema_id
    writer = schema(EVERY_BODY, schema_id)
    row = JsonSchemaValueDecoder(writer, lambda _: writer).decode_one(theirs)
    row = pa.array([row], type=writer.arrow_type()).to_pylist()[0]  # what a sink is given
    ours = encode_one(JsonSchemaValueEncoder(writer), row)
    assert ours[:5] == theirs[:5]
    expected = {**document, "at": "2020-01-02T03:04:05.500000Z"}  # microseconds, in UTC
    assert json.loads(ours[5:]) == json.loads(theirs[5:]) | expected


@pytest.mark.parametrize(
    ("at", "text"),
    [
        (dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "2026-01-02T03:04:05Z"),
        (dt.datetime(2026, 1, 2, 3, 4, 5, 60, tzinfo=UTC), "2026-01-02T03:04:05.000060Z"),
        (dt.datetime(2026, 1, 2, 3, 4, 5), "2026-01-02T03:04:05Z"),  # naive: UTC, as pyarrow
        (
            dt.datetime(2026, 1, 2, 0, 30, tzinfo=dt.timezone(dt.timedelta(hours=5))),
            "2026-01-01T19:30:00Z",
        ),
        (dt.datetime(1, 1, 1, tzinfo=UTC), "0001-01-01T00:00:00Z"),
    ],
)
def test_a_timestamp_is_rfc_3339_in_utc_with_microseconds_when_not_zero(
    at: dt.datetime, text: str
) -> None:
    assert payload(EVERY, {"at": at})["at"] == text
    assert round_trip(EVERY, {"at": at})["at"] == at.replace(tzinfo=at.tzinfo or UTC)


def test_bare_json_is_the_payload_alone_and_framing_needs_an_id() -> None:
    bare = JsonSchemaValueEncoder(schema(INT), framed=False)
    assert bare.encode([5, None, -1], locate=str) == [b"5", None, b"-1"]
    with pytest.raises(SchemaError, match="schema None has no registry id to frame keys"):
        JsonSchemaValueEncoder(schema(INT), column="key")


def test_decimals_are_json_numbers() -> None:
    body = obj(n=INT, x={"type": "number"})
    assert payload(schema(body, 1), {"n": decimal.Decimal(5), "x": decimal.Decimal("2.5")}) == {
        "n": 5,
        "x": 2.5,
    }


# -- None ---------------------------------------------------------------------------------
NONES = obj(
    plain=STRING,
    typed={"type": ["string", "null"]},
    one_of={"oneOf": [NULL, STRING]},
    any_of={"anyOf": [STRING, NULL]},
    by_ref={"$ref": "#/definitions/maybe"},
    defaulted={"type": "integer", "default": 5},
    inner={"oneOf": [NULL, obj(ok={"type": "boolean"}, why=STRING)]},
    tags={"type": "array", "items": {"type": ["string", "null"]}},
    counts={"type": "object", "additionalProperties": {"type": ["integer", "null"]}},
)
NONES["definitions"] = {"maybe": {"type": ["integer", "null"]}}


def test_a_none_property_is_null_where_the_schema_allows_null_else_left_out() -> None:
    """Left out, a reader reads the property's default: the one normalization."""
    writer = schema(NONES, 1)
    row = {
        "plain": None, "typed": None, "one_of": None, "any_of": None, "by_ref": None,
        "defaulted": None, "inner": {"ok": None, "why": "w"}, "tags": ["a", None],
        "counts": [("k", None)],
    }  # fmt: skip
    assert payload(writer, row) == {
        "typed": None, "one_of": None, "any_of": None, "by_ref": None,
        "inner": {"why": "w"}, "tags": ["a", None], "counts": {"k": None},
    }  # fmt: skip
    assert round_trip(writer, row) == {**row, "defaulted": 5}
    assert payload(writer, {}) == dict.fromkeys(("typed", "one_of", "any_of", "by_ref", "inner"))


def test_a_required_property_that_refuses_null_is_refused_when_none() -> None:
    body = {**obj(id=INT, note=STRING), "required": ["id"]}
    assert payload(schema(body, 1), {"id": 1, "note": None}) == {"id": 1}
    with pytest.raises(ValueEncodeError, match=r"row 7 does not validate .* at \$: 'id' is a req"):
        payload(schema(body, 1), {"id": None, "note": "n"})


def test_a_none_item_the_schema_refuses_is_refused() -> None:
    writer = schema(obj(tags={"type": "array", "items": STRING}), 1)
    with pytest.raises(ValueEncodeError, match=r"at \$\.tags\[1\]: None is not of type 'string'"):
        payload(writer, {"tags": ["a", None]})


# -- validation ---------------------------------------------------------------------------
def test_a_value_the_schema_refuses_is_refused_unless_validation_is_off() -> None:
    body = {**obj(id={"type": "integer", "minimum": 0}, note=STRING), "required": ["id"]}
    writer = schema(body, 4)
    with pytest.raises(ValueEncodeError) as caught:
        encode_one(JsonSchemaValueEncoder(writer), {"id": -1})
    assert str(caught.value).startswith(
        "the value of row 7 does not validate against schema 4 at $.id: -1 is less than the "
        "minimum of 0"
    )
    assert payload(writer, {"id": -1, "note": None}, validate=False) == {"id": -1}


# -- JSON-text columns --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [('{"a": [1, 2.0]}', {"a": [1, 2.0]}), (b'"\xc3\xa9"', "é"), ("null", None), ("1e2", 100.0)],
)
def test_a_json_text_column_writes_the_json_its_text_holds(text: Any, expected: Any) -> None:
    assert payload(schema(obj(extra={}), 1), {"extra": text}) == {"extra": expected}


# -- errors -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({"id": "1"}, r"at \$\.id: str '1' where the schema has an integer"),
        ({"id": True}, r"at \$\.id: bool True where the schema has an integer"),
        ({"id": 1.0}, r"at \$\.id: float 1\.0 where the schema has an integer"),
        ({"id": 2**63}, r"at \$\.id: 9223372036854775808 is beyond int64's range"),
        ({"id": decimal.Decimal("1.5")}, r"at \$\.id: Decimal Decimal\('1\.5'\) where the sch"),
        ({"score": float("nan")}, r"at \$\.score: nan is no JSON number"),
        ({"score": float("inf")}, r"at \$\.score: inf is no JSON number"),
        ({"score": 10**400}, r"at \$\.score: 1000.* is no JSON number"),
        ({"ok": 1}, r"at \$\.ok: int 1 where the schema has a boolean"),
        ({"name": b"n"}, r"at \$\.name: bytes b'n' where the schema has a string"),
        ({"name": "\ud800"}, r"at \$\.name: the text is not Unicode"),
        ({"day": dt.datetime(2026, 1, 1)}, r"at \$\.day: datetime .* where the schema has a date"),
        ({"day": "2026-01-01"}, r"at \$\.day: str '2026-01-01' where the schema has a date"),
        ({"at": dt.date(2026, 1, 1)}, r"at \$\.at: date .* where the schema has a date-time"),
        (
            {"at": dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))},
            r"at \$\.at: 0001-01-01 00:00:00\+01:00 is before year 1 or after 9999 in UTC",
        ),
        ({"color": "GREEN"}, r"validate .* at \$\.color: 'GREEN' is not one of \['RED', 'BLUE'\]"),
        ({"lines": [{"sku": 1}]}, r"at \$\.lines\[0\]\.sku: int 1 where the schema has a string"),
        ({"lines": {"sku": "a"}}, r"at \$\.lines: dict .* where the schema has an array"),
        (
            {"lines": [{"skus": "a"}]},
            r"at \$\.lines\[0\]: .*no property 'skus'; did you mean 'sku'",
        ),
        ({"counts": [(1, 2)]}, r"at \$\.counts: a map's key is a str .*, not int 1"),
        ({"counts": [("a", 1), ("a", 2)]}, r"at \$\.counts: the key 'a' is given twice"),
        ({"counts": ["a"]}, r"at \$\.counts: a map takes \(key, value\) pairs, not str 'a'"),
        ({"counts": 5}, r"at \$\.counts: int 5 where the schema has a map"),
        ({"counts": [("a b", "1")]}, r"at \$\.counts\['a b'\]: str '1' where the schema has an"),
        ({"extra": "{"}, r"at \$\.extra: '\{' is not JSON text"),
        ({"extra": "NaN"}, r"at \$\.extra: 'NaN' is not JSON text: NaN is not a JSON number"),
        (
            {"extra": '{"a":1,"a":2}'},
            r"at \$\.extra: .* is not JSON text: the key 'a' appears twice in an object",
        ),
        ({"extra": b"\xff"}, r"at \$\.extra: the JSON text is not UTF-8"),
        ({"extra": {"a": 1}}, r"at \$\.extra: dict .* where the schema's column is JSON text"),
        ({"extra": '"\\ud800"'}, r"row 8 holds text that is not Unicode"),
        ({"nope": 1}, r"at \$: the schema has no property 'nope'"),
        ([1], r"at \$: list \[1\] where the schema has an object"),
    ],
)
def test_a_value_that_does_not_fit_names_the_row_the_path_and_the_schema(
    value: Any, fragment: str
) -> None:
    with pytest.raises(ValueEncodeError, match=fragment) as caught:
        JsonSchemaValueEncoder(EVERY).encode([None, value], locate=lambda i: f"row {i + 7}")
    assert str(caught.value).startswith("the value of row 8 ")
    assert "schema 1" in str(caught.value) or "Unicode" in str(caught.value)


# -- properties ---------------------------------------------------------------------------
FUZZ = schema(
    obj(
        id=INT,
        score={"type": "number"},
        day={"type": "string", "format": "date"},
        at={"type": "string", "format": "date-time"},
        tags={"type": "array", "items": STRING},
        counts={"type": "object", "additionalProperties": {"type": ["integer", "null"]}},
        extra={},
        inner={"oneOf": [NULL, obj(ok={"type": "boolean"})]},
        note=STRING,
        maybe={"type": ["string", "null"]},
    ),
    9,
)
JSON_VALUES = st.recursive(
    st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=6)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)  # fmt: skip
texts = st.text(max_size=8)
FUZZ_ROWS = st.fixed_dictionaries(
    {
        "id": st.none() | st.integers(-(2**63), 2**63 - 1),
        "score": st.none() | st.floats(allow_nan=False, allow_infinity=False),
        "day": st.none() | st.dates(),
        "at": st.none() | st.datetimes(timezones=st.just(UTC)),
        "tags": st.none() | st.lists(texts, max_size=3),
        "counts": st.none()
        | st.dictionaries(texts, st.none() | st.integers(-(2**63), 2**63 - 1), max_size=3).map(
            lambda d: list(d.items())
        ),
        "extra": st.none()
        | JSON_VALUES.map(lambda v: json.dumps(v, separators=(",", ":"), ensure_ascii=False)),
        "inner": st.none() | st.fixed_dictionaries({"ok": st.none() | st.booleans()}),
        "note": st.none() | texts,
        "maybe": st.none() | texts,
    }
)


@settings(max_examples=200, deadline=None)
@given(FUZZ_ROWS)
def test_arbitrary_rows_round_trip(row: dict[str, Any]) -> None:
    assert round_trip(FUZZ, row) == row
