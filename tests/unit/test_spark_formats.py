"""keyFormat/valueFormat codecs: decoding batches of stored bytes, encoding filter literals."""

from __future__ import annotations

import datetime as dt
import json
import math
import pickle
import struct
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from spark_statestore.connectors.spark.ddl import parse_ddl
from spark_statestore.connectors.spark.errors import DecodeError, EncodeError, SparkSourceError
from spark_statestore.connectors.spark.formats import ColumnCodec, ValueFormat
from spark_statestore.connectors.spark.json_values import MAX_JSON_DEPTH
from spark_statestore.errors import OptionError, StateStoreError

UTC = dt.timezone.utc


def _locate(index: int) -> str:
    return f"topic orders-changelog partition 3 offset {1230 + index}"


def make_codec(
    fmt: str, schema: str | None = None, *, column: str = "value", time_zone: str = "UTC"
) -> ColumnCodec:
    parsed = parse_ddl(schema) if schema is not None else None
    return ColumnCodec.create(fmt, parsed, column=column, time_zone=time_zone)


def decode(
    codec: ColumnCodec, values: Sequence[bytes | None], *, permissive: bool = False
) -> tuple[list[Any], int]:
    array, bad = codec.decode(values, locate=_locate, permissive=permissive)
    assert array.type == codec.arrow_type
    assert len(array) == len(values)
    return array.to_pylist(), bad


def decode_error(codec: ColumnCodec, values: Sequence[bytes | None]) -> DecodeError:
    with pytest.raises(DecodeError) as caught:
        codec.decode(values, locate=_locate, permissive=False)
    return caught.value


# -- ValueFormat ----------------------------------------------------------------------------
@pytest.mark.parametrize("member", list(ValueFormat))
def test_parse_accepts_every_format_case_insensitively(member: ValueFormat) -> None:
    assert ValueFormat.parse("valueFormat", member.value) is member
    assert ValueFormat.parse("valueFormat", f" {member.value.upper()} ") is member


@pytest.mark.parametrize(
    ("text", "suggestion"), [("jsn", "json"), ("strnig", "string"), ("lng", "long")]
)
def test_misspelled_format_suggests_the_closest(text: str, suggestion: str) -> None:
    with pytest.raises(OptionError) as caught:
        ValueFormat.parse("keyFormat", text)
    message = str(caught.value)
    assert "keyFormat" in message
    assert repr(text) in message
    assert f"; did you mean {suggestion!r}? " in message
    valid = "binary, string, long, int, double, json, avro, protobuf, jsonschema"
    assert f"(valid values: {valid})" in message


def test_unrelated_format_lists_the_valid_ones_without_a_guess() -> None:
    with pytest.raises(OptionError, match=r"'thrift' \(valid values: binary") as caught:
        ValueFormat.parse("valueFormat", "thrift")
    assert "did you mean" not in str(caught.value)


# -- ColumnCodec.create and types -----------------------------------------------------------
def test_json_requires_a_schema_named_after_the_column() -> None:
    with pytest.raises(OptionError, match="option keySchema is required with keyFormat json"):
        ColumnCodec.create(ValueFormat.JSON, None, column="key")


def test_other_formats_refuse_a_schema() -> None:
    schema = parse_ddl("a INT")
    with pytest.raises(OptionError, match="valueSchema is only used with valueFormat json"):
        ColumnCodec.create(ValueFormat.LONG, schema, column="value")


def test_create_parses_format_text_naming_the_option() -> None:
    assert make_codec("LONG").format is ValueFormat.LONG
    with pytest.raises(OptionError, match="option 'valueFormat': unknown value 'longg'"):
        make_codec("longg")


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        (StructType([StructField("m", MapType(IntegerType(), LongType()))]), "MAP<STRING"),
        (StructType([StructField("a", ArrayType(LongType(), False))]), "cannot be written"),
        (StructType([StructField("a", LongType(), True, {"x": 1})]), "cannot be written"),
    ],
)
def test_json_schemas_json_cannot_fill_are_refused(schema: StructType, fragment: str) -> None:
    with pytest.raises(OptionError, match="option valueSchema") as caught:
        ColumnCodec.create("json", schema, column="value")
    assert fragment in str(caught.value)


def test_unknown_time_zone_is_refused() -> None:
    with pytest.raises(OptionError, match="unknown time zone 'Mars/Base'"):
        make_codec("json", "t TIMESTAMP", time_zone="Mars/Base")


@pytest.mark.parametrize(
    ("fmt", "ddl_type", "arrow_type", "order_preserving"),
    [
        ("binary", "BINARY", pa.binary(), True),
        ("string", "STRING", pa.string(), True),
        ("long", "BIGINT", pa.int64(), False),
        ("int", "INT", pa.int32(), False),
        ("double", "DOUBLE", pa.float64(), False),
    ],
)
def test_types_per_format(
    fmt: str, ddl_type: str, arrow_type: pa.DataType, order_preserving: bool
) -> None:
    codec = make_codec(fmt)
    assert codec.ddl_type() == ddl_type
    assert codec.arrow_type == arrow_type
    assert codec.order_preserving is order_preserving
    assert parse_ddl(f"key {ddl_type}").fields[0].dataType == codec.spark_type


def test_json_types_match_what_spark_checks_batches_against() -> None:
    codec = make_codec(
        "json",
        "id INT NOT NULL, price DECIMAL(10,2), ts TIMESTAMP, n TIMESTAMP_NTZ, d DATE, "
        "tags ARRAY<STRING>, m MAP<STRING, BIGINT>, s STRUCT<a: INT, b: BINARY>",
    )
    assert codec.order_preserving is False
    assert codec.ddl_type().startswith("STRUCT<`id`: INT NOT NULL, `price`: DECIMAL(10,2)")
    # A Python data source's batches must equal to_arrow_schema(schema, timezone="UTC"), the
    # schema being what Spark parses from the DDL string we give it.
    expected = to_arrow_schema(parse_ddl(f"value {codec.ddl_type()}"), timezone="UTC")
    assert expected.field("value").type == codec.arrow_type
    assert codec.arrow_type.field("ts").type == pa.timestamp("us", tz="UTC")
    assert codec.arrow_type.field("n").type == pa.timestamp("us")
    assert codec.arrow_type.field("price").type == pa.decimal128(10, 2)
    assert codec.arrow_type.field("id").nullable is False


def test_codec_pickles() -> None:
    codec = make_codec("json", "a INT, b ARRAY<STRING>", column="key")
    assert pickle.loads(pickle.dumps(codec)) == codec


# -- binary and string ----------------------------------------------------------------------
def test_binary_passes_bytes_and_nulls_through() -> None:
    values = [b"", b"\x00\xff", None, b"ab"]
    assert decode(make_codec("binary"), values) == ([b"", b"\x00\xff", None, b"ab"], 0)


def test_string_round_trip() -> None:
    texts = ["", "héllo", "日本", None]
    values = [t.encode() if t is not None else None for t in texts]
    assert decode(make_codec("string"), values) == (texts, 0)


def test_bad_utf8_fails_with_location_format_length_and_remedies() -> None:
    error = decode_error(make_codec("string", column="key"), [b"ok", None, b"a\xffb"])
    message = str(error)
    assert error.index == 2
    assert "topic orders-changelog partition 3 offset 1232" in message
    assert "as string" in message
    assert "invalid UTF-8 byte 0xff at byte 1" in message
    assert "3 bytes" in message
    assert "keyFormat binary" in message
    assert "PERMISSIVE" in message
    assert isinstance(error, SparkSourceError)
    assert isinstance(error, StateStoreError)
    assert isinstance(error, ValueError)


def test_bad_utf8_is_null_and_counted_when_permissive() -> None:
    values = [b"ok", b"\xc3\x28", None, b"\xed\xa0\x80", b"fine"]
    assert decode(make_codec("string"), values, permissive=True) == (
        ["ok", None, None, None, "fine"],
        2,
    )


# -- long, int, double ----------------------------------------------------------------------
_FIXED = {"long": (">q", 8), "int": (">i", 4), "double": (">d", 8)}


@pytest.mark.parametrize("fmt", ["long", "int", "double"])
def test_fixed_width_matches_kafka_serializers(fmt: str) -> None:
    code, _ = _FIXED[fmt]
    numbers = [0, 1, -1, 42, None, 7]
    values = [None if n is None else struct.pack(code, n) for n in numbers]
    assert decode(make_codec(fmt), values) == (numbers, 0)


def test_known_kafka_bytes() -> None:
    assert decode(make_codec("long"), [b"\x00" * 7 + b"\x2a"])[0] == [42]
    assert decode(make_codec("int"), [b"\xff\xff\xff\xfe"])[0] == [-2]
    assert decode(make_codec("double"), [bytes.fromhex("3ff8000000000000")])[0] == [1.5]


@pytest.mark.parametrize("fmt", ["long", "int", "double"])
def test_wrong_length_is_an_error(fmt: str) -> None:
    _, width = _FIXED[fmt]
    good = b"\x00" * width
    error = decode_error(make_codec(fmt), [good, None, b"\x01" * (width + 1)])
    message = str(error)
    assert error.index == 2
    assert f"as {fmt}" in message
    assert f"expected {width} bytes, got {width + 1}" in message
    assert "offset 1232" in message
    assert "valueFormat binary" in message


@pytest.mark.parametrize("fmt", ["long", "int", "double"])
def test_wrong_length_is_null_and_counted_when_permissive(fmt: str) -> None:
    code, width = _FIXED[fmt]
    values = [b"", struct.pack(code, 5), None, b"\x00" * (width - 1), struct.pack(code, 6)]
    assert decode(make_codec(fmt), values, permissive=True) == ([None, 5, None, None, 6], 2)


@pytest.mark.parametrize("fmt", ["binary", "string", "long", "int", "double", "json"])
def test_empty_and_all_null_batches(fmt: str) -> None:
    codec = make_codec(fmt, "a INT" if fmt == "json" else None)
    assert decode(codec, []) == ([], 0)
    assert decode(codec, [None, None]) == ([None, None], 0)


def test_double_specials() -> None:
    values = [struct.pack(">d", x) for x in (math.inf, -math.inf, -0.0, math.nan)]
    decoded, _ = decode(make_codec("double"), values)
    assert decoded[:2] == [math.inf, -math.inf]
    assert math.copysign(1.0, decoded[2]) == -1.0
    assert math.isnan(decoded[3])


_LONGS = st.integers(-(2**63), 2**63 - 1)
_INTS = st.integers(-(2**31), 2**31 - 1)
_DOUBLES = st.floats(allow_nan=False).filter(lambda x: x != 0.0)


@given(st.lists(st.none() | _LONGS, max_size=30))
def test_long_encode_decode_round_trip(numbers: list[int | None]) -> None:
    codec = make_codec("long")
    values = [None if n is None else codec.encode(n) for n in numbers]
    assert decode(codec, values) == (numbers, 0)


@given(st.lists(st.none() | _INTS, max_size=30))
def test_int_encode_decode_round_trip(numbers: list[int | None]) -> None:
    codec = make_codec("int")
    values = [None if n is None else codec.encode(n) for n in numbers]
    assert decode(codec, values) == (numbers, 0)


@given(st.lists(st.none() | _DOUBLES, max_size=30))
def test_double_encode_decode_round_trip(numbers: list[float | None]) -> None:
    codec = make_codec("double")
    values = [None if n is None else codec.encode(n) for n in numbers]
    assert decode(codec, values) == (numbers, 0)


@given(st.lists(st.none() | st.binary(max_size=10), max_size=30))
def test_permissive_long_nulls_exactly_the_wrong_lengths(values: list[bytes | None]) -> None:
    decoded, bad = decode(make_codec("long"), values, permissive=True)
    expected = [
        struct.unpack(">q", v)[0] if v is not None and len(v) == 8 else None for v in values
    ]
    assert decoded == expected
    assert bad == sum(1 for v in values if v is not None and len(v) != 8)


# -- json -----------------------------------------------------------------------------------
ORDER = (
    "id INT, name STRING, tags ARRAY<STRING>, price DECIMAL(10,2), m MAP<STRING,BIGINT>, "
    "s STRUCT<a: INT, b: STRING>"
)


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


def test_json_record() -> None:
    record = {
        "id": 7,
        "name": "pen",
        "tags": ["a", None],
        "price": 12.5,
        "m": {"x": 1, "y": None},
        "s": {"a": 1, "b": "z"},
        "unknown": [1, 2],
    }
    decoded, bad = decode(make_codec("json", ORDER), [_json(record), None, b"{}"])
    assert bad == 0
    assert decoded == [
        {
            "id": 7,
            "name": "pen",
            "tags": ["a", None],
            "price": Decimal("12.50"),
            "m": [("x", 1), ("y", None)],
            "s": {"a": 1, "b": "z"},
        },
        None,
        dict.fromkeys(["id", "name", "tags", "price", "m", "s"]),
    ]


def test_json_null_text_is_a_null_value_not_an_error() -> None:
    assert decode(make_codec("json", "a INT"), [b"null", b" null "]) == ([None, None], 0)


def test_json_string_field_keeps_any_value_as_its_text() -> None:
    codec = make_codec("json", "s STRING")
    values = [b'{"s": 12}', b'{"s": 1.50}', b'{"s": true}', b'{"s": {"a": [1, "x"]}}']
    decoded, _ = decode(codec, values)
    assert [row["s"] for row in decoded] == ["12", "1.50", "true", '{"a":[1,"x"]}']


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("12345678901234567.891", Decimal("12345678901234567.89")),
        ('"1,234.5"', Decimal("1234.50")),
        ("1.005", Decimal("1.01")),
        ("-1.005", Decimal("-1.01")),
        ("7", Decimal("7.00")),
        ("1e2", Decimal("100.00")),
    ],
)
def test_json_decimals_come_from_the_number_text(text: str, expected: Decimal) -> None:
    decoded, _ = decode(make_codec("json", "p DECIMAL(19,2)"), [f'{{"p": {text}}}'.encode()])
    assert decoded[0]["p"] == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('"2024-05-31T10:00:00Z"', dt.datetime(2024, 5, 31, 10, tzinfo=UTC)),
        ('"2024-05-31T12:00:00+02:00"', dt.datetime(2024, 5, 31, 10, tzinfo=UTC)),
        ('"2024-05-31 10:00:00.123456789"', dt.datetime(2024, 5, 31, 10, 0, 0, 123456, UTC)),
        ('"2024-05-31T10:00"', dt.datetime(2024, 5, 31, 10, tzinfo=UTC)),
        ('"2024-05-31"', dt.datetime(2024, 5, 31, tzinfo=UTC)),
        ('"2024-05-31T12:00:00 Europe/Paris"', dt.datetime(2024, 5, 31, 10, tzinfo=UTC)),
        ('"2024-05-31T07:00:00-0300"', dt.datetime(2024, 5, 31, 10, tzinfo=UTC)),
        ('"2024-05-31T10:00:00 UTC"', dt.datetime(2024, 5, 31, 10, tzinfo=UTC)),
        ("1717149600", dt.datetime(2024, 5, 31, 10, tzinfo=UTC)),
    ],
)
def test_json_timestamps(text: str, expected: dt.datetime) -> None:
    decoded, _ = decode(make_codec("json", "t TIMESTAMP"), [f'{{"t": {text}}}'.encode()])
    assert decoded[0]["t"] == expected


def test_json_naive_timestamps_are_read_in_the_codec_time_zone() -> None:
    codec = make_codec("json", "t TIMESTAMP", time_zone="America/New_York")
    decoded, _ = decode(codec, [b'{"t": "2024-01-15T05:00:00"}', b'{"t": "2024-01-15T05:00Z"}'])
    assert decoded == [
        {"t": dt.datetime(2024, 1, 15, 10, tzinfo=UTC)},
        {"t": dt.datetime(2024, 1, 15, 5, tzinfo=UTC)},
    ]


def test_json_timestamp_ntz_and_date() -> None:
    codec = make_codec("json", "n TIMESTAMP_NTZ, d DATE")
    decoded, _ = decode(codec, [b'{"n": "2024-05-31T10:00:00.5", "d": "2024-05-31"}'])
    assert decoded == [{"n": dt.datetime(2024, 5, 31, 10, 0, 0, 500000), "d": dt.date(2024, 5, 31)}]
    with pytest.raises(DecodeError, match="TIMESTAMP_NTZ"):
        codec.decode([b'{"n": "2024-05-31T10:00:00Z"}'], locate=_locate, permissive=False)


def test_json_other_types() -> None:
    codec = make_codec("json", "b BOOLEAN, x DOUBLE, f FLOAT, y BINARY, t TINYINT, l BIGINT")
    record = b'{"b": false, "x": 3, "f": 0.5, "y": "AAH/", "t": -128, "l": 9223372036854775807}'
    decoded, _ = decode(codec, [record, b'{"x": "-Infinity"}', b'{"x": NaN}'])
    assert decoded[0] == {
        "b": False,
        "x": 3.0,
        "f": 0.5,
        "y": b"\x00\x01\xff",
        "t": -128,
        "l": 2**63 - 1,
    }
    assert decoded[1]["x"] == -math.inf
    assert math.isnan(decoded[2]["x"])


@pytest.mark.parametrize(
    ("schema", "record", "fragment"),
    [
        ("id INT", '{"id": "abc"}', "field id: expected INT (an integer from -2147483648"),
        ("id INT", '{"id": 1.5}', "got number 1.5"),
        ("id INT", '{"id": true}', "got true"),
        ("id INT", '{"id": 2147483648}', "expected INT"),
        ("b BOOLEAN", '{"b": 1}', "expected BOOLEAN"),
        ("x DOUBLE", '{"x": "1.5"}', "expected a number"),
        ("p DECIMAL(4,2)", '{"p": 123.4}', "at most 2 digits before the point"),
        ("p DECIMAL(4,2)", '{"p": "abc"}', "expected DECIMAL(4,2)"),
        ("d DATE", '{"d": "31/05/2024"}', "expected DATE"),
        ("t TIMESTAMP", '{"t": "yesterday"}', "expected TIMESTAMP"),
        ("t TIMESTAMP", '{"t": "2024-02-30T00:00:00"}', "expected TIMESTAMP"),
        ("y BINARY", '{"y": "not base64!"}', "expected BINARY"),
        ("tags ARRAY<INT>", '{"tags": [1, "x"]}', "field tags[1]: expected INT"),
        ("tags ARRAY<INT>", '{"tags": {"a": 1}}', "expected an array, got an object"),
        ("m MAP<STRING, INT>", '{"m": {"k": "v"}}', 'field m["k"]: expected INT'),
        ("s STRUCT<a: STRUCT<b: INT>>", '{"s": {"a": {"b": []}}}', "field s.a.b: expected INT"),
        ("s STRUCT<a: INT>", '{"s": 5}', "field s: expected a JSON object"),
        ("id INT NOT NULL", '{"other": 1}', "field id: missing or null, but the schema"),
        ("id INT", "[1, 2]", "expected a JSON object, got an array"),
        ("id INT", '{"id": 1', "invalid JSON"),
        ("id INT", '{"id": 1} x', "invalid JSON"),
    ],
)
def test_json_bad_records_fail_with_the_field_and_the_reason(
    schema: str, record: str, fragment: str
) -> None:
    codec = make_codec("json", schema)
    good = b"{}" if "NOT NULL" not in schema else b'{"id": 1}'
    error = decode_error(codec, [good, record.encode()])
    message = str(error)
    assert error.index == 1
    assert fragment in message
    assert "offset 1231 as json" in message
    assert f"{len(record.encode())} bytes" in message
    assert "valueFormat binary" in message


def test_json_invalid_utf8() -> None:
    error = decode_error(make_codec("json", "a STRING"), [b'{"a": "\xff"}'])
    assert "invalid UTF-8 at byte 7" in str(error)


def test_json_bad_records_are_null_and_counted_when_permissive() -> None:
    codec = make_codec("json", ORDER)
    values = [
        b'{"id": 1}',
        b'{"id": "abc"}',
        None,
        b"not json",
        b'{"s": {"a": 1.5}}',
        b'{"id": 2, "price": 3}',
    ]
    decoded, bad = decode(codec, values, permissive=True)
    assert bad == 3
    assert [row and row["id"] for row in decoded] == [1, None, None, None, None, 2]
    assert decoded[5]["price"] == Decimal("3.00")


_RECORDS = st.fixed_dictionaries(
    {
        "id": st.none() | _INTS,
        "name": st.none() | st.text(max_size=8),
        "price": st.none() | st.decimals(-(10**8) + 1, 10**8 - 1, places=2),
        "tags": st.none() | st.lists(st.none() | st.text(max_size=4), max_size=3),
    }
)


def _record_text(record: dict[str, Any]) -> bytes:
    # Decimals are written as JSON numbers, with their exact text.
    items = (
        f"{json.dumps(k)}: {v if isinstance(v, Decimal) else json.dumps(v)}"
        for k, v in record.items()
    )
    return ("{" + ", ".join(items) + "}").encode()


@given(st.lists(st.none() | _RECORDS, max_size=10))
def test_json_round_trip(records: list[dict[str, Any] | None]) -> None:
    codec = make_codec("json", "id INT, name STRING, price DECIMAL(10,2), tags ARRAY<STRING>")
    values = [None if r is None else _record_text(r) for r in records]
    assert decode(codec, values) == (records, 0)


# -- encode ---------------------------------------------------------------------------------
def test_encode_per_format() -> None:
    assert make_codec("binary").encode(b"\x00k") == b"\x00k"
    assert make_codec("binary").encode(bytearray(b"k")) == b"k"
    assert make_codec("string").encode("clé") == "clé".encode()
    assert make_codec("long").encode(42) == b"\x00" * 7 + b"\x2a"
    assert make_codec("int").encode(-2) == b"\xff\xff\xff\xfe"
    assert make_codec("double").encode(1.5) == bytes.fromhex("3ff8000000000000")
    assert make_codec("double").encode(2) == struct.pack(">d", 2.0)


@pytest.mark.parametrize(
    ("fmt", "value", "fragment"),
    [
        ("binary", "text", "cannot encode str"),
        ("string", b"bytes", "cannot encode bytes"),
        ("string", "\ud800", "UTF-8"),
        ("long", 2**63, "out of range"),
        ("long", -(2**63) - 1, "out of range"),
        ("int", 2**31, "out of range"),
        ("int", True, "cannot encode bool"),
        ("long", 1.0, "cannot encode float"),
        ("double", 0.0, "not pushable"),
        ("double", -0.0, "not pushable"),
        ("double", math.nan, "not pushable"),
        ("double", 10**400, "out of range"),
        ("double", "1.5", "cannot encode str"),
    ],
)
def test_encode_refuses_what_it_cannot_push(fmt: str, value: object, fragment: str) -> None:
    with pytest.raises(EncodeError, match=fragment):
        make_codec(fmt).encode(value)


def test_json_is_never_pushable() -> None:
    with pytest.raises(EncodeError, match="not pushable"):
        make_codec("json", "a INT").encode({"a": 1})


def test_string_and_binary_byte_order_is_value_order() -> None:
    codec = make_codec("string")
    words = ["", "a", "ab", "b", "é", "日本", "\U0001f600", "z"]
    # Spark orders strings by their UTF-8 bytes, which is code point order.
    assert [codec.encode(w) for w in sorted(words)] == sorted(codec.encode(w) for w in words)


def test_spark_types_for_decoded_columns() -> None:
    assert make_codec("binary").spark_type == BinaryType()
    assert make_codec("string").spark_type == StringType()
    assert make_codec("long").spark_type == LongType()
    assert make_codec("int").spark_type == IntegerType()
    assert make_codec("double").spark_type == DoubleType()
    assert make_codec("json", "a INT").spark_type == parse_ddl("a INT")


def test_json_rows_arrow_refuses_are_found_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # The converters normally hand Arrow only values it accepts; if one slips through, the
    # batch must still not fail as a whole.
    from spark_statestore.connectors.spark import formats

    def lenient(schema: StructType, zone: dt.tzinfo) -> Callable[[Any], Any]:
        return lambda value: {"a": value.get("a")}

    monkeypatch.setattr(formats, "struct_converter", lenient)
    codec = make_codec("json", "a INT")
    values = [b'{"a": 1}', b'{"a": "x"}', b'{"a": 2}']
    assert decode(codec, values, permissive=True) == ([{"a": 1}, None, {"a": 2}], 1)
    error = decode_error(codec, values)
    assert error.index == 1
    assert "not convertible" in str(error)


def _nested(depth: int, inner: bytes = b"1") -> bytes:
    """``{"s": [[...]]}`` nested ``depth`` levels deep (the object is the first level)."""
    return b'{"s": ' + b"[" * (depth - 1) + inner + b"]" * (depth - 1) + b"}"


def test_json_nested_at_most_max_depth_levels_decodes() -> None:
    codec = make_codec("json", "s STRING")
    decoded, bad = decode(codec, [_nested(MAX_JSON_DEPTH)])
    depth = MAX_JSON_DEPTH - 1
    assert (decoded, bad) == ([{"s": "[" * depth + "1" + "]" * depth}], 0)


def test_json_nested_deeper_than_max_depth_is_null_and_counted_or_named() -> None:
    # Any depth, from where Python's recursion limit is near (the value decodes but its
    # STRING text does not re-encode) to far beyond it: never a RecursionError.
    codec = make_codec("json", "s STRING")
    values = [_nested(depth) for depth in range(MAX_JSON_DEPTH + 1, 1_200)]
    values += [_nested(100_000), b"[" * 100_000, b'{"s": ' + b'{"a": ' * 50_000]
    decoded, bad = decode(codec, values, permissive=True)
    assert (decoded, bad) == ([None] * len(values), len(values))
    error = decode_error(codec, [b"{}", _nested(MAX_JSON_DEPTH + 1)])
    assert error.index == 1
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in str(error)
    assert "offset 1231 as json" in str(error)


def test_json_brackets_inside_strings_are_not_nesting() -> None:
    codec = make_codec("json", "s STRING")
    text = "[" * 2_000 + "{" * 2_000
    assert decode(codec, [json.dumps({"s": text}).encode()]) == ([{"s": text}], 0)
    escaped = json.dumps({"s": '\\"' + "[" * 2_000}).encode()  # an escaped quote, then text
    assert decode(codec, [escaped]) == ([{"s": '\\"' + "[" * 2_000}], 0)


def test_json_lone_surrogate_escapes_are_stored_as_spark_stores_them() -> None:
    # Spark's from_json gives 'a?b', {'k?': 1} and '{"x":"\\uD800"}' for this record: a lone
    # surrogate is not UTF-8, so Java's String.getBytes writes '?', and Jackson escapes it.
    codec = make_codec("json", "s STRING, m MAP<STRING, INT>, t STRING")
    record = rb'{"s": "a\ud800b", "m": {"k\udc00": 1}, "t": {"x": "\ud800"}}'
    assert decode(codec, [record]) == ([{"s": "a?b", "m": [("k?", 1)], "t": '{"x":"\\uD800"}'}], 0)
    paired = rb'{"s": "\ud83d\ude00"}'  # a valid pair is one character
    assert decode(codec, [paired]) == ([{"s": "\U0001f600", "m": None, "t": None}], 0)


def test_json_errors_about_lone_surrogates_are_utf8_text() -> None:
    error = decode_error(make_codec("json", "i INT, m MAP<STRING, INT>"), [rb'{"i": "\ud800"}'])
    assert 'got string "\\uD800"' in str(error)
    error = decode_error(make_codec("json", "m MAP<STRING, INT>"), [rb'{"m": {"\udc00": "x"}}'])
    assert 'field m["\\uDC00"]' in str(error)
    str(error).encode("utf-8")  # Spark sends the message to the JVM as UTF-8


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


json_documents = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab\u00e9'),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(alphabet='[]{}"\\:,'), children, max_size=3)
    ),
    max_leaves=20,
)


@given(json_documents, st.integers(0, 6), st.booleans())
def test_json_depth_counts_nesting_not_brackets_in_strings(
    document: Any, limit: int, ascii_only: bool
) -> None:
    from spark_statestore.connectors.spark.json_values import exceeds_json_depth

    text = json.dumps(document, ensure_ascii=ascii_only).encode()
    assert exceeds_json_depth(text, limit) == (_depth(document) > limit)
