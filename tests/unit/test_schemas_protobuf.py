"""Protobuf values decoded to a reader message: types as Spark's from_protobuf maps them
(where that is lossless), Protobuf's evolution rules, and errors that name the value, the
schema ids, the subject and the field.

The schemas are compiled by protoc (grpcio-tools'); the bytes come from the protobuf
library's own writer (message classes made from those descriptors), framed as a registry
serializer frames them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import pickle
import struct
from typing import Any

import pyarrow as pa
import pytest
from google.protobuf import message_factory
from google.protobuf.message import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_statestore.schemas import (
    FrameError,
    RegistryError,
    SchemaDecodeError,
    SchemaError,
    SchemaNotFoundError,
    SchemaResolutionError,
    encode_frame,
)
from spark_statestore.schemas.protobuf import ProtobufSchema, ProtobufValueDecoder
from tests.unit.test_schemas_avro import decode, lookup_of

UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)


def schema(
    text: str, schema_id: int | None = None, references: tuple[tuple[str, str], ...] = ()
) -> ProtobufSchema:
    return ProtobufSchema.parse(
        text, what=f"schema {schema_id}", schema_id=schema_id, references=references
    )


def message_class(compiled: ProtobufSchema, name: str | None = None) -> Any:
    """The protobuf library's own message class of a compiled message (the writer)."""
    return message_factory.GetMessageClass(compiled.message(name))


def decoder(
    reader: ProtobufSchema, *writers: ProtobufSchema, message: str | None = None
) -> ProtobufValueDecoder:
    return ProtobufValueDecoder(
        reader, lookup_of(*writers), message=message, subject="orders-value"
    )


def framed(schema_id: int, value: Message, indexes: tuple[int, ...] = (0,)) -> bytes:
    return encode_frame(schema_id, value.SerializeToString(), indexes)


# -- types --------------------------------------------------------------------------------
EVERY_TYPE = """
syntax = "proto3";
package shop;
import "google/protobuf/any.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/empty.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

enum Color { RED = 0; BLUE = 1; }

message Every {
  bool flag = 1;
  int32 i32 = 2; sint32 s32 = 3; sfixed32 sf32 = 4; uint32 u32 = 5; fixed32 f32 = 6;
  int64 i64 = 7; sint64 s64 = 8; sfixed64 sf64 = 9; uint64 u64 = 10; fixed64 f64 = 11;
  float fl = 12; double db = 13; string text = 14; bytes raw = 15;
  Color color = 16;
  Line line = 17;
  repeated Line lines = 18;
  repeated sint64 numbers = 19;
  map<string, int32> counts = 20;
  map<uint64, Line> by_id = 21;
  optional string note = 22;
  oneof choice { string word = 23; int64 number = 24; Line picked = 25; }
  google.protobuf.Timestamp at = 26;
  google.protobuf.Duration took = 27;
  google.protobuf.DoubleValue w_double = 28;
  google.protobuf.FloatValue w_float = 29;
  google.protobuf.Int64Value w_int64 = 30;
  google.protobuf.UInt64Value w_uint64 = 31;
  google.protobuf.Int32Value w_int32 = 32;
  google.protobuf.UInt32Value w_uint32 = 33;
  google.protobuf.BoolValue w_bool = 34;
  google.protobuf.StringValue w_string = 35;
  google.protobuf.BytesValue w_bytes = 36;
  google.protobuf.Struct meta = 37;
  google.protobuf.Value loose = 38;
  google.protobuf.ListValue list = 39;
  google.protobuf.Any packed = 40;
  google.protobuf.Empty nothing = 41;
}

message Line { string sku = 1; int32 qty = 2; }
"""

LINE = pa.struct([("sku", pa.string()), ("qty", pa.int32())])
U64 = pa.decimal128(20, 0)
EVERY_ARROW = pa.struct(
    [
        ("flag", pa.bool_()),
        ("i32", pa.int32()), ("s32", pa.int32()), ("sf32", pa.int32()),
        ("u32", pa.int64()), ("f32", pa.int64()),
        ("i64", pa.int64()), ("s64", pa.int64()), ("sf64", pa.int64()),
        ("u64", U64), ("f64", U64),
        ("fl", pa.float32()), ("db", pa.float64()), ("text", pa.string()), ("raw", pa.binary()),
        ("color", pa.string()),
        ("line", LINE),
        ("lines", pa.list_(LINE)),
        ("numbers", pa.list_(pa.int64())),
        ("counts", pa.map_(pa.string(), pa.int32())),
        ("by_id", pa.map_(U64, LINE)),
        ("note", pa.string()),
        ("word", pa.string()), ("number", pa.int64()), ("picked", LINE),
        ("at", pa.timestamp("us", tz="UTC")),
        ("took", pa.duration("us")),
        ("w_double", pa.float64()), ("w_float", pa.float32()), ("w_int64", pa.int64()),
        ("w_uint64", U64), ("w_int32", pa.int32()), ("w_uint32", pa.int64()),
        ("w_bool", pa.bool_()), ("w_string", pa.string()), ("w_bytes", pa.binary()),
        ("meta", pa.string()), ("loose", pa.string()), ("list", pa.string()),
        ("packed", pa.struct([("type_url", pa.string()), ("value", pa.binary())])),
        ("nothing", pa.struct([])),
    ]
)  # fmt: skip

UNSET_EVERY = {
    "flag": False, "i32": 0, "s32": 0, "sf32": 0, "u32": 0, "f32": 0, "i64": 0, "s64": 0,
    "sf64": 0, "u64": decimal.Decimal(0), "f64": decimal.Decimal(0), "fl": 0.0, "db": 0.0,
    "text": "", "raw": b"", "color": "RED", "line": None, "lines": [], "numbers": [],
    "counts": [], "by_id": [], "note": None, "word": None, "number": None, "picked": None,
    "at": None, "took": None, "w_double": None, "w_float": None, "w_int64": None,
    "w_uint64": None, "w_int32": None, "w_uint32": None, "w_bool": None, "w_string": None,
    "w_bytes": None, "meta": None, "loose": None, "list": None, "packed": None,
    "nothing": None,
}  # fmt: skip


def test_every_protobuf_type_maps_as_from_protobuf_does_where_lossless() -> None:
    assert schema(EVERY_TYPE).arrow_type() == EVERY_ARROW


def test_every_protobuf_type_decodes_to_its_column() -> None:
    writer = schema(EVERY_TYPE, 1)
    every, line = message_class(writer, "shop.Every"), message_class(writer, "shop.Line")
    value = every(
        flag=True, i32=-(2**31), s32=-5, sf32=7, u32=2**32 - 1, f32=2**32 - 2,
        i64=-(2**63), s64=-(2**40), sf64=2**62, u64=2**64 - 1, f64=2**63,
        fl=1.5, db=-0.25, text="é", raw=b"\x00\xff", color=1,
        line=line(sku="a", qty=2), lines=[line(sku="b"), line(qty=3)], numbers=[-1, 0, 2**50],
        counts={"x": 1}, by_id={2**64 - 1: line(sku="max")}, note="", picked=line(sku="p"),
    )  # fmt: skip
    value.at.FromDatetime(dt.datetime(2026, 11, 28, 1, 2, 3, 4567, tzinfo=UTC))
    value.took.FromTimedelta(dt.timedelta(days=-1, microseconds=5))
    value.w_double.value, value.w_float.value = 0.5, -2.5
    value.w_int64.value, value.w_uint64.value = -(2**40), 2**64 - 2
    value.w_int32.value, value.w_uint32.value = -7, 2**32 - 1
    value.w_bool.value, value.w_string.value, value.w_bytes.value = False, "", b"\x01"
    value.meta.update({"k": [1, "two", None, {"nested": True}]})
    value.loose.number_value = 3.5
    value.list.extend(["a", 2])
    value.packed.Pack(line(sku="in an any"))
    value.nothing.SetInParent()

    (row,), bad = decode(decoder(writer, writer), framed(1, value))
    assert bad == 0
    assert row == {
        "flag": True, "i32": -(2**31), "s32": -5, "sf32": 7, "u32": 2**32 - 1,
        "f32": 2**32 - 2, "i64": -(2**63), "s64": -(2**40), "sf64": 2**62,
        "u64": decimal.Decimal(2**64 - 1), "f64": decimal.Decimal(2**63), "fl": 1.5,
        "db": -0.25, "text": "é", "raw": b"\x00\xff", "color": "BLUE",
        "line": {"sku": "a", "qty": 2},
        "lines": [{"sku": "b", "qty": 0}, {"sku": "", "qty": 3}], "numbers": [-1, 0, 2**50],
        "counts": [("x", 1)], "by_id": [(decimal.Decimal(2**64 - 1), {"sku": "max", "qty": 0})],
        "note": "", "word": None, "number": None, "picked": {"sku": "p", "qty": 0},
        "at": dt.datetime(2026, 11, 28, 1, 2, 3, 4567, tzinfo=UTC),
        "took": dt.timedelta(days=-1, microseconds=5),
        "w_double": 0.5, "w_float": -2.5, "w_int64": -(2**40),
        "w_uint64": decimal.Decimal(2**64 - 2), "w_int32": -7, "w_uint32": 2**32 - 1,
        "w_bool": False, "w_string": "", "w_bytes": b"\x01",
        "meta": '{"k":[1.0,"two",null,{"nested":true}]}', "loose": "3.5", "list": '["a",2.0]',
        "packed": {"type_url": "type.googleapis.com/shop.Line",
                   "value": line(sku="in an any").SerializeToString()},
        "nothing": {},
    }  # fmt: skip


def test_unset_fields_follow_protobuf_presence() -> None:
    """Scalars without presence are their defaults; fields with presence (messages,
    wrappers, ``optional``, oneof members) are null; repeated fields and maps are empty."""
    writer = schema(EVERY_TYPE, 1)
    (row,), _ = decode(decoder(writer, writer), framed(1, message_class(writer)()))
    assert row == UNSET_EVERY


PROTO2 = """
syntax = "proto2";
package legacy;
enum Color { RED = 0; BLUE = 1; }
message Old {
  required int32 id = 1;
  optional string note = 2 [default = "n/a"];
  optional Color color = 3;
  repeated int32 xs = 4;
  optional group Extra = 5 { optional int64 amount = 6; }
}
"""


def test_proto2_optional_and_required_fields_are_null_when_unset() -> None:
    writer = schema(PROTO2, 1)
    old = message_class(writer)
    assert writer.arrow_type() == pa.struct(
        [("id", pa.int32()), ("note", pa.string()), ("color", pa.string()),
         ("xs", pa.list_(pa.int32())), ("extra", pa.struct([("amount", pa.int64())]))]
    )  # fmt: skip
    set_all = old(id=0, note="n/a", color=1, xs=[1, 2])
    set_all.extra.amount = 9
    unset = encode_frame(1, old().SerializePartialToString(), (0,))  # required id unset
    rows, _ = decode(decoder(writer, writer), unset, framed(1, set_all))
    assert rows == [
        {"id": None, "note": None, "color": None, "xs": [], "extra": None},
        {"id": 0, "note": "n/a", "color": "BLUE", "xs": [1, 2], "extra": {"amount": 9}},
    ]


def test_an_enum_number_the_reader_does_not_name_is_its_decimal_text() -> None:
    """An open (proto3) enum keeps a number it does not name; a closed (proto2) one keeps
    it among the unknown fields, so the field is unset."""
    writer = schema(EVERY_TYPE, 1)
    (row,), _ = decode(decoder(writer, writer), framed(1, message_class(writer)(color=7)))
    assert row["color"] == "7"
    legacy = schema(PROTO2, 2)
    raw = encode_frame(2, b"\x08\x01\x18\x07", (0,))  # id = 1, color = 7 (the wire, by hand)
    (row,), _ = decode(decoder(legacy, legacy), raw)
    assert (row["id"], row["color"]) == (1, None)


@pytest.mark.parametrize(
    ("member", "value", "expected"),
    [("word", "w", "w"), ("number", 0, 0), ("picked", {"sku": "s"}, {"sku": "s", "qty": 0})],
)
def test_a_oneof_fills_the_member_set_last_and_nulls_the_others(
    member: str, value: Any, expected: Any
) -> None:
    writer = schema(EVERY_TYPE, 1)
    written = message_class(writer)(word="first")
    if member == "picked":
        written.picked.sku = value["sku"]
    else:
        setattr(written, member, value)
    (row,), _ = decode(decoder(writer, writer), framed(1, written))
    assert {name: row[name] for name in ("word", "number", "picked")} == {
        "word": None,
        "number": None,
        "picked": None,
        member: expected,
    }


@pytest.mark.parametrize(
    ("seconds", "nanos", "micros"),
    [(0, 1_500, 1), (-1, 999_999_999, -1), (0, 999, 0), (-1, 0, -1_000_000)],
)
def test_timestamps_truncate_nanoseconds_toward_the_past(
    seconds: int, nanos: int, micros: int
) -> None:
    writer = schema(EVERY_TYPE, 1)
    value = message_class(writer)()
    value.at.seconds, value.at.nanos = seconds, nanos
    value.took.seconds, value.took.nanos = -seconds, -nanos  # a duration's signs agree
    (row,), _ = decode(decoder(writer, writer), framed(1, value))
    assert row["at"] == EPOCH + dt.timedelta(microseconds=micros)
    exact = -(seconds * 10**9 + nanos) / 1000
    assert row["took"] == dt.timedelta(microseconds=int(exact // 1))


@pytest.mark.parametrize("field", ["at", "took"])
def test_a_timestamp_or_duration_beyond_the_column_is_a_bad_value_naming_the_field(
    field: str,
) -> None:
    """Found by fuzzing: one value decoded alone was an int pyarrow refuses."""
    writer = schema(EVERY_TYPE, 1)
    value = message_class(writer)()
    getattr(value, field).seconds = 2**62
    with pytest.raises(SchemaDecodeError, match=f"field {field} .*cannot hold"):
        decode(decoder(writer, writer), framed(1, value))
    with pytest.raises(SchemaDecodeError, match=f"field {field} .*cannot hold"):
        decoder(writer, writer).decode_one(framed(1, value))


def test_a_struct_value_without_json_text_is_a_bad_value_naming_the_field() -> None:
    writer = schema(EVERY_TYPE, 1)
    value = message_class(writer)()
    value.loose.number_value = float("nan")
    with pytest.raises(SchemaDecodeError, match=r"field loose .*has no JSON text"):
        decode(decoder(writer, writer), framed(1, value))


def test_a_proto2_string_that_is_not_utf8_is_a_bad_value_naming_the_field() -> None:
    legacy = schema(PROTO2, 2)
    raw = encode_frame(2, b"\x08\x01\x12\x02\xff\xfe", (0,))  # note = b"\xff\xfe"
    with pytest.raises(SchemaDecodeError, match=r"field note holds 2 byte\(s\) that are not"):
        decode(decoder(legacy, legacy), raw)


NESTED = """
syntax = "proto3";
package shop;
message Order { int64 id = 1; }
message Basket {
  message Item { string sku = 1; int64 amount = 2; }
  map<string, int64> totals = 1;
  repeated Item items = 2;
}
"""


def test_a_nested_message_is_found_by_its_message_indexes() -> None:
    """[1, 0] is the first message nested in the second top-level one. A map's entry type
    is a nested message too, after those declared before its field (Confluent's
    serializers count it)."""
    writer = schema(NESTED, 1)
    assert writer.messages == ("shop.Order", "shop.Basket")
    assert writer.message_for([1, 1]).full_name == "shop.Basket.TotalsEntry"
    item = message_class(writer, "shop.Basket.Item")
    dec = decoder(writer, writer, message="shop.Basket.Item")
    rows, bad = decode(dec, framed(1, item(sku="a", amount=2), (1, 0)))
    assert (rows, bad) == ([{"sku": "a", "amount": 2}], 0)


def test_message_indexes_the_writer_schema_lacks_are_a_bad_value() -> None:
    writer = schema(NESTED, 1)
    item = message_class(writer, "shop.Basket.Item")
    dec = decoder(writer, writer, message="shop.Basket.Item")
    wrong = framed(1, item(sku="a"), (1, 5))
    with pytest.raises(SchemaDecodeError) as caught:
        decode(dec, wrong)
    message = str(caught.value)
    assert "message indexes [1, 5] name no message of schema id 1 (schema 1)" in message
    assert "message shop.Basket has 2 message(s)" in message and "offset 100" in message
    good = framed(1, item(sku="b"), (1, 0))
    assert decode(dec, wrong, good, permissive=True) == ([None, {"sku": "b", "amount": 0}], 1)


def test_the_first_message_written_as_an_explicit_index_list_reads_too() -> None:
    writer = schema(NESTED, 1)
    payload = message_class(writer)(id=4).SerializeToString()
    explicit = encode_frame(1, b"\x02\x00" + payload)  # count 1, index 0 (zig-zag varints)
    assert decode(decoder(writer, writer), explicit, framed(1, message_class(writer)(id=5))) == (
        [{"id": 4}, {"id": 5}],
        0,
    )


def test_an_unknown_reader_message_is_refused_with_the_closest_name() -> None:
    with pytest.raises(SchemaError, match=r"no message 'shop\.Bsket'; did you mean 'shop\.Basket'"):
        decoder(schema(NESTED, 1), message="shop.Bsket")


# -- evolution ----------------------------------------------------------------------------
V1 = """
syntax = "proto3";
package shop;
message Order {
  int64 id = 1;
  string note = 2;
  int32 qty = 3;
  Stats stats = 4;
  repeated int32 codes = 5;
}
message Stats { int32 count = 1; string max_amount = 2; }
"""
V2 = """
syntax = "proto3";
package shop;
message Order {
  int64 id = 1;
  int64 qty = 3;
  Stats stats = 4;
  string added = 6;
  Line line = 7;
}
message Stats { int64 count = 1; }
message Line { string sku = 1; }
"""


def test_old_and_new_values_read_under_the_latest_schema() -> None:
    """The application added fields, dropped one, and widened int32 to int64."""
    v1, v2 = schema(V1, 1), schema(V2, 2)
    old = message_class(v1)(id=1, note="dropped", qty=-3, codes=[1])
    old.stats.count, old.stats.max_amount = 5, "dropped too"
    new = message_class(v2)(id=2, qty=2**40, added="a")
    new.line.sku = "s"
    rows, bad = decode(decoder(v2, v1, v2), framed(1, old), framed(2, new), None)
    assert bad == 0
    assert rows == [
        {"id": 1, "qty": -3, "stats": {"count": 5}, "added": "", "line": None},
        {"id": 2, "qty": 2**40, "stats": None, "added": "a", "line": {"sku": "s"}},
        None,
    ]


def test_an_incompatible_writer_names_the_subject_ids_and_the_field_path() -> None:
    v3 = V1.replace("string max_amount = 2;", "int64 max_amount = 2;")
    v1, reader = schema(V1, 1), schema(v3, 3)
    value = message_class(v1)(id=1)
    value.stats.max_amount = "9"
    with pytest.raises(SchemaResolutionError) as caught:
        decode(decoder(reader, v1), framed(1, value))
    message = str(caught.value)
    for fragment in (
        "offset 100",
        "writer schema id 1 (subject orders-value), reader schema id 3",
        "reader schema (schema 3)",
        "field stats.max_amount (number 2): writer string, reader int64",
    ):
        assert fragment in message
    # the same writer id is refused again without a registry call or a new walk
    with pytest.raises(SchemaResolutionError, match=r"stats\.max_amount"):
        decode(decoder(reader, v1), framed(1, message_class(v1)(id=2)), permissive=False)


@pytest.mark.parametrize(
    ("reader_field", "fragment"),
    [
        ("string id = 1;", "field id (number 1): writer int64, reader string"),
        ("sint64 qty = 3;", "field qty (number 3): writer int32, reader sint64"),
        ("int32 codes = 5;", "field codes (number 5): writer repeated int32, reader int32"),
        ("Stats note = 2;", "field note (number 2): writer string, reader message shop.Stats"),
        ("repeated string note = 2;", None),  # singular to repeated: a list of the one value
        ("bytes note = 2;", None),
        ("uint64 qty = 3;", None),
    ],
)
def test_field_type_changes_follow_protobufs_wire_rules(
    reader_field: str, fragment: str | None
) -> None:
    name, number = reader_field.split()[-3], reader_field.split()[-1]
    writer_field = next(line for line in V1.splitlines() if line.endswith(f" {name} = {number}"))
    v1, reader = schema(V1, 1), schema(V1.replace(writer_field, f"  {reader_field}"), 4)
    value = framed(1, message_class(v1)(id=1, note="n", qty=2, codes=[3]))
    if fragment is None:
        (row,), _ = decode(decoder(reader, v1), value)
        assert row[name] in (["n"], b"n", decimal.Decimal(2))
    else:
        with pytest.raises(SchemaResolutionError) as caught:
            decode(decoder(reader, v1), value)
        assert fragment in str(caught.value)


def test_a_writer_message_of_another_name_reads_when_its_fields_fit() -> None:
    other = schema('syntax = "proto3"; package x; message Renamed { int64 id = 1; }', 5)
    unrelated = schema('syntax = "proto3"; package x; message Unrelated { bool b = 9; }', 6)
    v2 = schema(V2, 2)
    rows, _ = decode(decoder(v2, other), framed(5, message_class(other)(id=3)))
    assert rows[0]["id"] == 3
    with pytest.raises(SchemaResolutionError, match=r"x\.Unrelated shares no field number"):
        decode(decoder(v2, unrelated), framed(6, message_class(unrelated)(b=True)))


def test_a_writer_is_looked_up_once_per_schema_id() -> None:
    v1 = schema(V1, 1)
    calls: list[int] = []

    def lookup(schema_id: int) -> ProtobufSchema:
        calls.append(schema_id)
        return v1

    dec = ProtobufValueDecoder(v1, lookup)
    value = framed(1, message_class(v1)(id=1))
    decode(dec, value, value, value)
    assert calls == [1]
    assert schema(V1, 1).file is v1.file  # the same text is compiled once per process


# -- bad input ----------------------------------------------------------------------------
def test_an_unknown_schema_id_is_not_a_bad_value_even_when_permissive() -> None:
    v1 = schema(V1, 1)
    with pytest.raises(RegistryError, match=r"offset 100.*schema id 9") as caught:
        decode(decoder(v1, v1), framed(9, message_class(v1)(id=1)), permissive=True)
    assert isinstance(caught.value, SchemaNotFoundError)


@pytest.mark.parametrize(
    ("raw", "error", "fragment"),
    [
        (b"\x01\x00\x00\x00\x01\x00\x08\x01", FrameError, "magic byte 0x01"),
        (b"\x00\x00\x01", FrameError, "too short"),
        (b"\x00\x00\x00\x00\x01", FrameError, "ends inside the message index count"),
        (b"\x00\x00\x00\x00\x01\x04\x00", FrameError, "ends inside message index 1"),
        (encode_frame(1, b"\x0a\x05ab", (0,)), SchemaDecodeError,
         "4 payload byte(s) do not parse as message shop.Order of writer schema id 1"),
        (encode_frame(1, b"\x22\x02\x08", (0,)), SchemaDecodeError, "do not parse"),
    ],
)  # fmt: skip
def test_bad_bytes_fail_naming_the_value_or_become_counted_nulls(
    raw: bytes, error: type[Exception], fragment: str
) -> None:
    v1 = schema(V1, 1)
    with pytest.raises(error) as caught:
        decode(decoder(v1, v1), raw)
    assert fragment in str(caught.value) and "at offset 100" in str(caught.value)
    good = framed(1, message_class(v1)(id=5))
    rows, bad = decode(decoder(v1, v1), raw, good, None, permissive=True)
    assert (rows[0], rows[1]["id"], rows[2], bad) == (None, 5, None, 1)


def test_bare_protobuf_is_read_with_the_reader_message() -> None:
    v1 = schema(V1)
    bare = ProtobufValueDecoder(v1, None)
    payload = message_class(v1)(id=3, codes=[1, 2]).SerializeToString()
    array, bad = bare.decode([payload, b""], locate=str, permissive=False)
    assert [row["id"] for row in array.to_pylist()] == [3, 0] and bad == 0
    with pytest.raises(SchemaDecodeError, match="of the schema of schema None"):
        bare.decode([b"\x0a"], locate=str, permissive=False)


# -- schemas ------------------------------------------------------------------------------
def test_a_decoders_schema_pickles_as_its_text_and_decodes_again() -> None:
    original = schema(EVERY_TYPE, 4)
    dec = decoder(original, original)
    again = pickle.loads(pickle.dumps(dec.reader))
    assert again == original and again.arrow_type() == EVERY_ARROW
    value = framed(4, message_class(original)(i32=7))
    assert decode(decoder(again, again), value)[0][0]["i32"] == 7


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('syntax = "proto3";\nmessage A { int32 x = 1 }', 'schema.proto:2:25: Expected ";"'),
        ('syntax = "proto3";\nimport "shop/line.proto";\nmessage A { shop.Line x = 1; }',
         "shop/line.proto: File not found"),
        ('syntax = "proto3";\nmessage A { int32 x = 1; int64 y = 1; }',
         'Field number 1 has already been used in "A" by field "x"'),
    ],
)  # fmt: skip
def test_an_invalid_proto_file_fails_with_protocs_own_message(text: str, fragment: str) -> None:
    with pytest.raises(SchemaError) as caught:
        ProtobufSchema.parse(text, what="option valueSchema")
    assert fragment in str(caught.value)
    assert str(caught.value).startswith("option valueSchema is not a valid .proto file")


def test_referenced_files_are_compiled_with_the_schema() -> None:
    line = 'syntax = "proto3"; package shop; message Line { string sku = 1; }'
    text = 'syntax = "proto3";\nimport "shop/line.proto";\nmessage A { shop.Line x = 1; }'
    with_refs = schema(text, 8, references=(("shop/line.proto", line),))
    a = message_class(with_refs)()
    a.x.sku = "s"
    assert decode(decoder(with_refs, with_refs), framed(8, a))[0] == [{"x": {"sku": "s"}}]
    with pytest.raises(SchemaError, match=r"'\.\./line\.proto' is not a relative import path"):
        schema(text, 8, references=(("../line.proto", line),))


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ("message Node { int32 v = 1; Node next = 2; }", "t.Node.next → t.Node"),
        (
            "message Tree { map<string, Node> kids = 1; }\n"
            "message Node { repeated Tree subtrees = 1; }",
            "t.Tree.kids{} → t.Node.subtrees → t.Tree",
        ),
    ],
)
def test_a_recursive_message_type_is_refused_naming_its_path(body: str, path: str) -> None:
    recursive = schema(f'syntax = "proto3"; package t;\n{body}', 3)
    with pytest.raises(SchemaError, match="contains itself") as caught:
        decoder(recursive, recursive)
    assert path in str(caught.value) and "schema 3" in str(caught.value)


# -- properties ---------------------------------------------------------------------------
SMALL = """
syntax = "proto3";
package prop;
import "google/protobuf/timestamp.proto";
enum Color { RED = 0; GREEN = 1; BLUE = 2; }
message Small {
  int32 i = 1; uint64 u = 2; sint64 s = 3; double d = 4; float f = 5; bool b = 6;
  string t = 7; bytes y = 8; Color c = 9;
  optional int64 maybe = 10;
  repeated string tags = 11;
  map<string, sint32> counts = 12;
  Line line = 13;
  oneof pick { string word = 14; Line item = 15; }
  repeated Line lines = 16;
  google.protobuf.Timestamp at = 17;
}
message Line { string sku = 1; fixed32 qty = 2; }
"""
COLORS = ("RED", "GREEN", "BLUE")
texts = st.text(max_size=8)
lines = st.fixed_dictionaries({}, optional={"sku": texts, "qty": st.integers(0, 2**32 - 1)})
SMALL_FIELDS = {
    "i": st.integers(-(2**31), 2**31 - 1),
    "u": st.integers(0, 2**64 - 1),
    "s": st.integers(-(2**63), 2**63 - 1),
    "d": st.floats(allow_nan=False),
    "f": st.floats(width=32, allow_nan=False),
    "b": st.booleans(),
    "t": texts,
    "y": st.binary(max_size=8),
    "c": st.sampled_from(range(len(COLORS))),
    "maybe": st.integers(-(2**63), 2**63 - 1),
    "tags": st.lists(texts, max_size=3),
    "counts": st.dictionaries(texts, st.integers(-(2**31), 2**31 - 1), max_size=3),
    "line": lines,
    "lines": st.lists(lines, max_size=3),
    "at": st.fixed_dictionaries(
        {"seconds": st.integers(-62135596800, 253402300799), "nanos": st.integers(0, 10**9 - 1)}
    ),
}
small_values = st.tuples(
    st.fixed_dictionaries({}, optional=SMALL_FIELDS),
    st.one_of(st.none(), st.tuples(st.just("word"), texts), st.tuples(st.just("item"), lines)),
)


def expected_small(fields: dict[str, Any], pick: tuple[str, Any] | None) -> dict[str, Any]:
    """The row the mapping promises, from the values alone (not from the decoder)."""

    def line(value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else {"sku": value.get("sku", ""), "qty": value.get("qty", 0)}

    at = fields.get("at")
    row = {
        "i": fields.get("i", 0), "u": decimal.Decimal(fields.get("u", 0)), "s": fields.get("s", 0),
        "d": fields.get("d", 0.0), "f": fields.get("f", 0.0), "b": fields.get("b", False),
        "t": fields.get("t", ""), "y": fields.get("y", b""), "c": COLORS[fields.get("c", 0)],
        "maybe": fields.get("maybe"), "tags": fields.get("tags", []),
        "counts": fields.get("counts", {}), "line": line(fields.get("line")),
        "word": None, "item": None, "lines": [line(v) for v in fields.get("lines", [])],
        "at": None if at is None else EPOCH + dt.timedelta(
            microseconds=(at["seconds"] * 10**9 + at["nanos"]) // 1000
        ),
    }  # fmt: skip
    if pick is not None:
        row[pick[0]] = line(pick[1]) if pick[0] == "item" else pick[1]
    return row


SMALL_SCHEMA = schema(SMALL, 1)


@settings(max_examples=150, deadline=None)
@given(small_values)
def test_arbitrary_messages_round_trip(value: tuple[dict[str, Any], Any]) -> None:
    fields, pick = value
    written = message_class(SMALL_SCHEMA)(**fields)
    if pick is not None:
        if pick[0] == "word":
            written.word = pick[1]
        else:
            written.item.SetInParent()
            written.item.MergeFrom(message_class(SMALL_SCHEMA, "prop.Line")(**pick[1]))
    (row,), bad = decode(decoder(SMALL_SCHEMA, SMALL_SCHEMA), framed(1, written))
    expected = expected_small(fields, pick)
    assert bad == 0 and dict(row.pop("counts")) == expected.pop("counts")
    assert row == expected


FUZZ_SCHEMAS = {"proto3": schema(EVERY_TYPE, 1), "proto2": schema(PROTO2, 1)}


def fuzz_sample(kind: str) -> bytes:
    """A valid payload with a value in most fields, for mutations to reach every converter."""
    compiled = FUZZ_SCHEMAS[kind]
    if kind == "proto2":
        old = message_class(compiled)(id=1, note="note", color=1, xs=[1, 2])
        old.extra.amount = 3
        payload: bytes = old.SerializeToString()
        return payload
    line = message_class(compiled, "shop.Line")
    every = message_class(compiled)(
        text="text", u64=2**64 - 1, color=1, line=line(sku="s"), counts={"k": 1},
        by_id={1: line(qty=1)}, note="n", word="w", lines=[line(sku="x")],
    )  # fmt: skip
    every.at.seconds, every.took.nanos = 10**9, -5
    every.w_string.value, every.w_uint64.value = "wrapped", 2**63
    every.meta.update({"a": 1.5})
    every.loose.string_value = "v"
    every.packed.type_url = "t"
    payload = every.SerializeToString()
    return payload


def mutated(kind: str) -> st.SearchStrategy[bytes]:
    sample = fuzz_sample(kind)
    return st.builds(
        lambda at, cut, patch: b"\x00" + sample[:at] + patch + sample[at + cut :],
        st.integers(0, len(sample)),
        st.integers(0, 3),
        st.binary(max_size=3),
    )


@pytest.mark.parametrize("kind", sorted(FUZZ_SCHEMAS))
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_arbitrary_bytes_after_a_frame_only_raise_schema_errors(
    kind: str, data: st.DataObject
) -> None:
    tail = data.draw(
        st.one_of(
            st.binary(max_size=48),  # any message indexes, any payload
            st.binary(max_size=48).map(lambda payload: b"\x00" + payload),  # indexes [0]
            mutated(kind),  # a valid value, with bytes changed
        )
    )
    compiled = FUZZ_SCHEMAS[kind]
    raw = struct.pack(">bi", 0, 1) + tail
    with contextlib.suppress(SchemaError):  # anything else fails the test
        decode(decoder(compiled, compiled), raw)
    rows, bad = decode(decoder(compiled, compiled), raw, permissive=True)
    assert len(rows) == 1 and bad == (rows[0] is None)
