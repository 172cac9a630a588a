"""Avro values decoded to a reader schema: types as Spark's from_avro maps them, Avro's
evolution rules, and errors that name the value, the schema ids, the subject and the field.

The bytes come from Apache Avro's own Python writer (``avro``), not from the decoder's
library (fastavro), framed as a registry serializer frames them.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import pickle
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import avro.io
import avro.schema
import pyarrow as pa
import pytest

from spark_statestore.schemas import (
    AvroSchema,
    AvroValueDecoder,
    FrameError,
    SchemaDecodeError,
    SchemaError,
    SchemaNotFoundError,
    SchemaResolutionError,
    ValueDecoder,
    encode_frame,
)
from spark_statestore.schemas.schema_text import SchemaText

UTC = dt.timezone.utc
SchemaT = TypeVar("SchemaT", bound=SchemaText[Any])


def write(schema: dict[str, Any], datum: Any) -> bytes:
    """``datum`` in Avro binary, written by Apache Avro's reference implementation."""
    out = io.BytesIO()
    avro.io.DatumWriter(avro.schema.parse(json.dumps(schema))).write(
        datum, avro.io.BinaryEncoder(out)
    )
    return out.getvalue()


def record(*fields: dict[str, Any], name: str = "Order") -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "shop", "fields": list(fields)}


def schema(body: dict[str, Any] | list[Any] | str, schema_id: int | None = None) -> AvroSchema:
    return AvroSchema.parse(json.dumps(body), what=f"schema {schema_id}", schema_id=schema_id)


def lookup_of(*writers: SchemaT) -> Callable[[int], SchemaT]:
    """A registry's lookup that knows ``writers``, by their schema ids (every format's)."""
    known = {w.schema_id: w for w in writers}

    def lookup(schema_id: int) -> SchemaT:
        if schema_id not in known:
            raise SchemaNotFoundError(f"schema id {schema_id} is not registered")
        return known[schema_id]

    return lookup


def decode(dec: ValueDecoder, *values: bytes | None, permissive: bool = False) -> Any:
    """``(rows, bad)`` of a batch of ``values`` (every format's decoder)."""
    array, bad = dec.decode(
        list(values), locate=lambda i: f"offset {100 + i}", permissive=permissive
    )
    return array.to_pylist(), bad


def decoder(reader: AvroSchema, *writers: AvroSchema) -> AvroValueDecoder:
    return AvroValueDecoder(reader, lookup_of(*writers), subject="orders-value")


# -- types --------------------------------------------------------------------------------
EVERY_TYPE = record(
    {"name": "flag", "type": "boolean"},
    {"name": "i", "type": "int"},
    {"name": "l", "type": "long"},
    {"name": "f", "type": "float"},
    {"name": "d", "type": "double"},
    {"name": "b", "type": "bytes"},
    {"name": "s", "type": "string"},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
    {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
                               "scale": 2}},
    {"name": "big", "type": {"type": "fixed", "name": "Big", "size": 16, "logicalType": "decimal",
                             "precision": 38, "scale": 0}},
    {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "BLUE"]}},
    {"name": "md5", "type": {"type": "fixed", "name": "Md5", "size": 4}},
    {"name": "lines", "type": {"type": "array", "items": record(
        {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}, name="Line")}},
    {"name": "tags", "type": {"type": "map", "values": ["null", "long"]}},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "first", "type": ["null", "Line"], "default": None},
    {"name": "wide", "type": ["int", "long"]},
    {"name": "either", "type": ["null", "string", "long", "Line"], "default": None},
)  # fmt: skip

EVERY_ARROW = pa.struct(
    [
        ("flag", pa.bool_()), ("i", pa.int32()), ("l", pa.int64()), ("f", pa.float32()),
        ("d", pa.float64()), ("b", pa.binary()), ("s", pa.string()), ("day", pa.date32()),
        ("ms", pa.timestamp("us", tz="UTC")), ("us", pa.timestamp("us", tz="UTC")),
        ("local", pa.timestamp("us")), ("tm", pa.int32()), ("price", pa.decimal128(9, 2)),
        ("big", pa.decimal128(38, 0)), ("id", pa.string()), ("color", pa.string()),
        ("md5", pa.binary()),
        ("lines", pa.list_(pa.struct([("sku", pa.string()), ("qty", pa.int32())]))),
        ("tags", pa.map_(pa.string(), pa.int64())), ("note", pa.string()),
        ("first", pa.struct([("sku", pa.string()), ("qty", pa.int32())])), ("wide", pa.int64()),
        ("either", pa.struct([
            ("member0", pa.string()), ("member1", pa.int64()),
            ("member2", pa.struct([("sku", pa.string()), ("qty", pa.int32())])),
        ])),
    ]
)  # fmt: skip


def test_every_avro_type_maps_as_from_avro_does() -> None:
    assert schema(EVERY_TYPE).arrow_type() == EVERY_ARROW


def test_every_avro_type_decodes_to_its_column() -> None:
    line = {"sku": "a", "qty": 2}
    datum = {
        "flag": True, "i": -5, "l": 2**40, "f": 1.5, "d": -0.25, "b": b"\x00\xff", "s": "é",
        "day": dt.date(2026, 11, 28),
        "ms": dt.datetime(2026, 11, 28, 1, 2, 3, 4000, tzinfo=UTC),
        "us": dt.datetime(2026, 11, 28, 1, 2, 3, 4567, tzinfo=UTC),
        "local": 1_795_000_000_004,  # (Apache Avro's Python writer takes no naive datetime)
        "tm": dt.time(1, 2, 3, 4000), "price": decimal.Decimal("-12.34"),
        "big": decimal.Decimal(10**37), "id": str(uuid.UUID(int=7)), "color": "BLUE",
        "md5": b"abcd", "lines": [line, {"sku": "b", "qty": 0}], "tags": {"x": 1, "y": None},
        "note": None, "first": line, "wide": 7, "either": line,
    }  # fmt: skip
    writer = schema(EVERY_TYPE, 1)
    (row,), bad = decode(decoder(writer, writer), encode_frame(1, write(EVERY_TYPE, datum)))
    assert bad == 0
    expected = {
        **datum,
        "tm": 3723004,
        "local": dt.datetime(2026, 11, 18, 11, 6, 40, 4000),
        "tags": [("x", 1), ("y", None)],
        "either": {"member0": None, "member1": None, "member2": line},
    }
    assert row == expected


@pytest.mark.parametrize(("value", "member"), [("text", "member0"), (9, "member1"), (None, None)])
def test_a_general_union_fills_the_member_of_its_branch(value: Any, member: str | None) -> None:
    body = record({"name": "u", "type": ["null", "string", "long"]})
    writer = schema(body, 1)
    (row,), _ = decode(decoder(writer, writer), encode_frame(1, write(body, {"u": value})))
    expected = None if member is None else {"member0": None, "member1": None, member: value}
    assert row == {"u": expected}


def test_a_recursive_type_is_refused_naming_it() -> None:
    node = record({"name": "next", "type": ["null", "shop.Node"]}, name="Node")
    with pytest.raises(SchemaError, match=r"'shop\.Node' contains itself"):
        schema(node)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{", "not JSON"),
        ('{"type": "no-such-type"}', "not a valid Avro schema"),
        ('{"type": "bytes", "logicalType": "decimal", "precision": 39}', "1 to 38 digits"),
    ],
)
def test_a_bad_schema_fails_naming_where_it_came_from(text: str, fragment: str) -> None:
    with pytest.raises(SchemaError, match=fragment) as caught:
        AvroSchema.parse(text, what="option valueSchema")
    assert "option valueSchema" in str(caught.value)


def test_a_schema_pickles_as_its_text() -> None:
    original = schema(EVERY_TYPE, 4)
    again = pickle.loads(pickle.dumps(original))
    assert again == original and again.arrow_type() == EVERY_ARROW


# -- evolution ----------------------------------------------------------------------------
V1 = record({"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"]})
V2 = record({"name": "id", "type": "long"}, {"name": "qty", "type": "int", "default": 1})


def test_old_and_new_records_read_under_the_latest_schema() -> None:
    """An application added a field with a default and dropped an optional one."""
    v1, v2 = schema(V1, 1), schema(V2, 2)
    rows, bad = decode(
        decoder(v2, v1, v2),
        encode_frame(1, write(V1, {"id": 1, "note": "old"})),
        encode_frame(2, write(V2, {"id": 2, "qty": 5})),
        None,
    )
    assert (rows, bad) == ([{"id": 1, "qty": 1}, {"id": 2, "qty": 5}, None], 0)


def test_an_unresolvable_writer_names_the_subject_both_ids_and_the_field() -> None:
    v3 = record({"name": "id", "type": "string"}, {"name": "qty", "type": "int"})
    with pytest.raises(SchemaResolutionError) as caught:
        decode(
            decoder(schema(v3, 3), schema(V1, 1)),
            encode_frame(1, write(V1, {"id": 1, "note": None})),
        )
    message = str(caught.value)
    for fragment in ("offset 100", "writer schema id 1", "orders-value", "reader schema id 3"):
        assert fragment in message
    assert "field id: writer long, reader string" in message


def test_a_reader_field_without_default_missing_in_the_writer_is_named() -> None:
    v3 = record({"name": "id", "type": "long"}, {"name": "qty", "type": "int"})
    with pytest.raises(SchemaResolutionError, match="field qty: the reader's field has no default"):
        decode(
            decoder(schema(v3, 3), schema(V1, 1)),
            encode_frame(1, write(V1, {"id": 1, "note": None})),
        )


# -- bad input ----------------------------------------------------------------------------
def test_an_unknown_schema_id_is_not_a_bad_value_even_when_permissive() -> None:
    v1 = schema(V1, 1)
    with pytest.raises(SchemaNotFoundError, match="schema id 9"):
        decode(
            decoder(v1, v1), encode_frame(9, write(V1, {"id": 1, "note": None})), permissive=True
        )


@pytest.mark.parametrize(
    ("raw", "error", "fragment"),
    [
        (b"\x01\x00\x00\x00\x01\x02", FrameError, "magic byte 0x01"),
        (b"\x00\x00\x01", FrameError, "too short"),
        (encode_frame(1, b""), SchemaDecodeError, "do not decode with writer schema id 1"),
        (encode_frame(1, write(V1, {"id": 1, "note": None}) + b"\x00"), SchemaDecodeError,
         "1 byte(s) are left"),
    ],
)  # fmt: skip
def test_bad_bytes_fail_naming_the_value_or_become_counted_nulls(
    raw: bytes, error: type[Exception], fragment: str
) -> None:
    v1 = schema(V1, 1)
    with pytest.raises(error) as caught:
        decode(decoder(v1, v1), raw)
    assert fragment in str(caught.value) and "at offset 100" in str(caught.value)
    good = encode_frame(1, write(V1, {"id": 5, "note": "x"}))
    assert decode(decoder(v1, v1), raw, good, permissive=True) == (
        [None, {"id": 5, "note": "x"}],
        1,
    )


def test_a_decimal_wider_than_its_column_is_a_bad_value() -> None:
    body = record(
        {
            "name": "p",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 3, "scale": 0},
        }
    )
    v1 = schema(body, 1)
    wide = encode_frame(
        1, write({**body, "fields": [{"name": "p", "type": "bytes"}]}, {"p": b"\x7f\xff\xff"})
    )
    with pytest.raises(SchemaDecodeError, match="cannot hold"):
        decode(decoder(v1, v1), wide)


def test_bare_avro_is_read_with_the_given_schema() -> None:
    v1 = schema(V1)
    bare = AvroValueDecoder(v1, None)
    array, bad = bare.decode([write(V1, {"id": 3, "note": None})], locate=str, permissive=False)
    assert (array.to_pylist(), bad) == ([{"id": 3, "note": None}], 0)


# -- encoding (the sink) ------------------------------------------------------------------
def test_rows_of_every_type_round_trip_and_apache_avro_reads_them() -> None:
    """What the decoder gives for a column, the encoder writes back to the same bytes
    (Apache Avro's reader, an independent implementation, reads them as written)."""
    from spark_statestore.schemas import AvroValueEncoder

    writer = schema(EVERY_TYPE, 1)
    line = {"sku": "a", "qty": 2}
    datum = {
        "flag": False, "i": 1, "l": -(2**40), "f": 0.5, "d": 2.25, "b": b"", "s": "x",
        "day": dt.date(2020, 2, 29), "ms": dt.datetime(2026, 1, 1, tzinfo=UTC),
        "us": dt.datetime(2026, 1, 1, 0, 0, 0, 1, tzinfo=UTC), "local": 5, "tm": dt.time(0, 0, 1),
        "price": decimal.Decimal("1.50"), "big": decimal.Decimal(-1), "id": str(uuid.UUID(int=1)),
        "color": "RED", "md5": b"\x00\x01\x02\x03", "lines": [line], "tags": {"x": None},
        "note": "n", "first": None, "wide": 2**40, "either": 12,
    }  # fmt: skip
    raw = encode_frame(1, write(EVERY_TYPE, datum))
    (row,), _ = decode(decoder(writer, writer), raw)
    encoded = AvroValueEncoder(writer).encode([row, None], locate=str)
    assert encoded == [raw, None]
    reader = avro.io.DatumReader(avro.schema.parse(json.dumps(EVERY_TYPE)))
    back = reader.read(avro.io.BinaryDecoder(io.BytesIO(encoded[0][5:])))  # type: ignore[index]
    assert back["either"] == 12 and back["tags"] == {"x": None} and back["lines"] == [line]


def test_a_row_that_does_not_fit_names_the_row_and_the_field() -> None:
    from spark_statestore.schemas import AvroEncodeError, AvroValueEncoder

    encoder = AvroValueEncoder(schema(V1, 1))
    with pytest.raises(AvroEncodeError) as caught:
        encoder.encode([{"id": "seven", "note": None}], locate=lambda i: f"row {i} of task 3")
    assert "row 0 of task 3" in str(caught.value) and "id" in str(caught.value)


def test_a_union_member_struct_writes_its_branch() -> None:
    from spark_statestore.schemas import AvroValueEncoder

    writer = schema(
        record({"name": "l", "type": record({"name": "sku", "type": "string"}, name="Line")},
               {"name": "u", "type": ["null", "string", "long", "shop.Line"]}), 1)  # fmt: skip
    rows = [
        {"l": {"sku": "a"}, "u": {"member0": "s", "member1": None, "member2": None}},
        {"l": {"sku": "a"}, "u": {"member0": None, "member1": None, "member2": {"sku": "b"}}},
    ]
    encoded = AvroValueEncoder(writer).encode(rows, locate=str)
    decoded, _ = decode(decoder(writer, writer), *encoded)
    assert decoded == rows


def test_a_union_with_a_record_defined_inline_is_a_member_struct() -> None:
    """A branch defined in the union itself is a dict in the parsed schema: telling the
    union's shape from its branches crashed on it (unhashable dict) before."""
    from spark_statestore.schemas import AvroValueEncoder

    inline = record({"name": "a", "type": "int"}, name="Inline")
    body = record({"name": "u", "type": ["null", "string", inline]})
    writer = schema(body, 1)
    assert writer.arrow_type() == pa.struct(
        [("u", pa.struct([("member0", pa.string()), ("member1", pa.struct([("a", pa.int32())]))]))]
    )
    raw = encode_frame(1, write(body, {"u": {"a": 5}}))
    (row,), _ = decode(decoder(writer, writer), raw)
    assert row == {"u": {"member0": None, "member1": {"a": 5}}}
    assert AvroValueEncoder(writer).encode([row], locate=str) == [raw]
