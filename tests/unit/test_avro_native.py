"""The compiled Avro path against the reference path (fastavro, value by value): for values
written by Apache Avro's own Python writer, its array equals the reference's exactly, and
for every batch it does not answer (a bad frame or payload, an unknown id, a resolution
failure, a schema feature it leaves alone) the reference path decodes the whole batch and
raises (or counts) exactly as it does alone."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import re
import uuid
from typing import Any
from unittest import mock

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_statestore.native import ENV
from spark_statestore.schemas import AvroSchema, AvroValueDecoder, encode_frame
from tests.unit.test_schemas_avro import EVERY_TYPE, lookup_of, record, schema, write

if os.environ.get(ENV, "auto").strip().lower() in ("0", "off", "false", "no"):
    pytest.skip(f"{ENV}=0: the pure-Python reference paths run", allow_module_level=True)
_extension = pytest.importorskip(
    "spark_statestore_native", reason="the compiled extension (native/) is not installed"
)
if not hasattr(_extension, "AvroColumnDecoder"):
    pytest.skip(
        "the installed extension predates the compiled Avro path: rebuild native/",
        allow_module_level=True,
    )

UTC = dt.timezone.utc
LINE = record({"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}, name="Line")


def locate(index: int) -> str:
    return f"offset {100 + index}"


def decoder(reader: AvroSchema, *writers: AvroSchema) -> AvroValueDecoder:
    return AvroValueDecoder(reader, lookup_of(*writers), subject="orders-value")


def fast(dec: AvroValueDecoder, values: list[bytes | None]) -> pa.Array:
    """The compiled path's array (the test fails when the batch falls back)."""
    refuse = AssertionError("the batch fell back to the reference path")
    with mock.patch.object(dec, "decode", side_effect=refuse):
        array, bad = dec.decode_array(
            pa.array(values, pa.binary()), locate=locate, permissive=False
        )
    assert bad == 0
    return array


def identical(got: pa.Array, want: pa.Array) -> bool:
    """The same type and values (NaN equal to NaN, -0.0 apart from 0.0)."""
    got.validate(full=True)
    return got.type == want.type and repr(got.to_pylist()) == repr(want.to_pylist())


def reference(dec: AvroValueDecoder, values: list[bytes | None], **options: Any) -> Any:
    return dec.decode(values, locate=locate, permissive=options.get("permissive", False))


def outcome(run: Any) -> Any:
    """What a decode gives: its (array, bad), or its error's type and text."""
    try:
        return run()
    except Exception as exc:  # compared as a value
        return type(exc), re.sub(r" at 0x[0-9a-f]+", "", str(exc))  # fastavro names its stream


def same_everywhere(
    dec: AvroValueDecoder, values: list[bytes | None], *, permissive: bool = False
) -> None:
    """decode_array gives what the reference path gives (an equal array and count, or the
    same error)."""
    array = pa.array(values, pa.binary())
    got = outcome(lambda: dec.decode_array(array, locate=locate, permissive=permissive))
    want = outcome(lambda: dec.decode(values, locate=locate, permissive=permissive))
    if isinstance(want, tuple) and isinstance(want[0], pa.Array):
        assert isinstance(got[0], pa.Array) and identical(got[0], want[0])
        assert got[1] == want[1], (got, want)
    else:
        assert got == want


def framed(body: Any, schema_id: int, *data: Any) -> list[bytes | None]:
    return [None if d is None else encode_frame(schema_id, write(body, d)) for d in data]


def check_same(reader: Any, writer: Any, *data: Any) -> pa.Array:
    """The compiled path answers for ``data`` (written with ``writer``), as the reference."""
    w, r = schema(writer, 1), schema(reader, 2)
    dec = decoder(r, w)
    values = framed(writer, 1, *data)
    got = fast(dec, values)
    want, _ = reference(dec, values)
    assert identical(got, want), (got.to_pylist(), want.to_pylist())
    return got


# -- types --------------------------------------------------------------------------------
def every_type_datum(**changes: Any) -> dict[str, Any]:
    line = {"sku": "a", "qty": 2}
    datum = {
        "flag": True, "i": -5, "l": 2**40, "f": 1.5, "d": -0.25, "b": b"\x00\xff", "s": "é",
        "day": dt.date(2026, 11, 28), "ms": dt.datetime(2026, 11, 28, 1, 2, 3, 4000, tzinfo=UTC),
        "us": dt.datetime(2026, 11, 28, 1, 2, 3, 4567, tzinfo=UTC), "local": 1_795_000_000_004,
        "tm": dt.time(1, 2, 3, 4000), "price": decimal.Decimal("-12.34"),
        "big": decimal.Decimal(-(10**37)), "id": str(uuid.UUID(int=7)), "color": "BLUE",
        "md5": b"abcd", "lines": [line, {"sku": "b", "qty": 0}], "tags": {"x": 1, "y": None},
        "note": None, "first": line, "wide": 7, "either": line,
    }  # fmt: skip
    return {**datum, **changes}


@pytest.mark.filterwarnings("ignore::avro.errors.IgnoredLogicalType")
def test_every_avro_type_decodes_to_the_reference_array() -> None:
    check_same(
        EVERY_TYPE,
        EVERY_TYPE,
        every_type_datum(),
        None,
        every_type_datum(either="s", first=None, note="n", tags={}, lines=[], wide=2**40),
        every_type_datum(either=12, day=dt.date(1, 1, 1), us=dt.datetime(9999, 12, 31, tzinfo=UTC)),
    )


NESTED = record(
    {"name": "lines", "type": {"type": "array", "items": LINE}},
    {"name": "by_sku", "type": {"type": "map", "values": {"type": "array", "items": "shop.Line"}}},
    {"name": "maybe", "type": ["null", {"type": "map", "values": "shop.Line"}]},
    {"name": "pick", "type": ["null", "boolean", "double", "bytes", "shop.Line",
                              {"type": "enum", "name": "Kind", "symbols": ["A", "B"]},
                              {"type": "array", "items": "int"}]},
    {"name": "when", "type": ["null", {"type": "int", "logicalType": "date"},
                              {"type": "string", "logicalType": "uuid"}]},
)  # fmt: skip


@pytest.mark.parametrize(
    "pick",
    [None, True, 2.5, b"\x01", {"sku": "z", "qty": -1}, "B", [1, 2, 3]],
)
def test_nested_types_and_general_unions_decode_to_the_reference_array(pick: Any) -> None:
    line = {"sku": "a", "qty": 1}
    datum = {
        "lines": [line, line],
        "by_sku": {"a": [line], "b": []},
        "maybe": {"k": line},
        "pick": pick,
        "when": str(uuid.UUID(int=99)),
    }
    check_same(NESTED, NESTED, datum, {**datum, "maybe": None, "when": dt.date(2020, 2, 29)})


def test_the_bench_schema_decodes_to_the_reference_array() -> None:
    from spark_statestore.bench.avro import AVRO_SCHEMA

    body = json.loads(json.dumps(AVRO_SCHEMA))
    data = [
        {"id": n, "customer": f"c-{n}", "amount": n * 0.25,
         "placed": dt.datetime.fromtimestamp(1_790_000_000 + n / 1000, UTC),
         "status": "OPEN" if n % 3 else "DONE", "note": None if n % 2 else "gift",
         "items": [f"sku-{n % 10}"] * (n % 3)}
        for n in range(50)
    ]  # fmt: skip
    check_same(body, body, *data)


def test_bare_values_decode_with_the_reader_schema() -> None:
    body = record({"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"]})
    dec = AvroValueDecoder(schema(body), None)
    values = [write(body, {"id": 1, "note": None}), None, write(body, {"id": 2, "note": "x"})]
    assert identical(fast(dec, values), reference(dec, values)[0])


# -- evolution ----------------------------------------------------------------------------
V1 = record(
    {"name": "id", "type": "int"},
    {"name": "note", "type": ["null", "string"]},
    {"name": "gone", "type": {"type": "array", "items": LINE}},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
    {"name": "amount", "type": "float"},
    {"name": "raw", "type": "string"},
)
V2 = record(
    {"name": "id", "type": "long"},
    {"name": "qty", "type": "int", "default": 1},
    {"name": "tags", "type": {"type": "map", "values": "string"}, "default": {"a": "b"}},
    {"name": "memo", "type": ["null", "string"], "default": None},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["B", "A", "Z"],
                              "default": "Z"}},
    {"name": "amount", "type": "double"},
    {"name": "raw", "type": "bytes"},
    {"name": "note", "type": ["null", "string", "long"]},
    {"name": "sub", "type": record({"name": "a", "type": "double"}, name="Sub"),
     "default": {"a": 2}},
)  # fmt: skip


def test_added_removed_promoted_and_reordered_fields_resolve_as_the_reference() -> None:
    base = {"id": 1, "note": None, "gone": [{"sku": "s", "qty": 1}], "kind": "C",
            "amount": 0.1, "raw": "é"}  # fmt: skip
    check_same(V2, V1, base, {**base, "note": "n", "kind": "B", "id": -(2**31)}, None)


def test_values_of_several_writer_schemas_in_one_batch_keep_their_order() -> None:
    v1, v2 = schema(V1, 1), schema(V2, 2)
    dec = decoder(v2, v1, v2)
    base = {"id": 1, "note": "x", "gone": [], "kind": "A", "amount": 1.5, "raw": "r"}
    new = {"id": 7, "qty": 3, "tags": {}, "memo": "m", "kind": "Z", "amount": 2.0, "raw": b"\x00",
           "note": 5, "sub": {"a": 1.0}}  # fmt: skip
    values = [*framed(V1, 1, base), None, *framed(V2, 2, new), *framed(V1, 1, base), None]
    assert identical(fast(dec, values), reference(dec, values)[0])


@pytest.mark.parametrize(
    ("writer", "reader", "value"),
    [
        ("int", "double", 2**31 - 1),
        ("int", "float", 2**25 + 1),
        ("float", "double", 1.1),
        ("string", ["null", "string"], "x"),
        ("int", ["null", "string", "long"], 5),
        ("int", ["int", "long"], 5),
        (["null", "int"], ["null", "long"], 5),
        (["string", "null"], ["null", "string"], "y"),
        (["int", "long"], "long", 2**40),
    ],
)
def test_promotions_and_union_resolutions_match_the_reference(
    writer: Any, reader: Any, value: Any
) -> None:
    check_same(record({"name": "x", "type": reader}), record({"name": "x", "type": writer}),
               {"x": value})  # fmt: skip


@pytest.mark.parametrize(
    ("writer", "reader", "value"),
    [
        ("long", "float", 2**60 + 2**37 + 1),  # fastavro rounds through a double
        ("int", ["float", "double"], 2**25 + 1),
        ({"type": "string", "logicalType": "uuid"}, "string", str(uuid.UUID(int=3))),
        (["null", "string"], "string", "z"),
        ({"type": "long", "logicalType": "timestamp-millis"},
         {"type": "long", "logicalType": "timestamp-micros"}, dt.datetime(2020, 1, 1, tzinfo=UTC)),
    ],
)  # fmt: skip
def test_resolutions_it_leaves_alone_still_decode_as_the_reference(
    writer: Any, reader: Any, value: Any
) -> None:
    w, r = (
        schema(record({"name": "x", "type": writer}), 1),
        schema(record({"name": "x", "type": reader}), 2),
    )
    dec = decoder(r, w)
    values = framed(record({"name": "x", "type": writer}), 1, {"x": value})
    with mock.patch.object(dec, "decode", wraps=dec.decode) as reference_path:
        same_everywhere(dec, values)
    assert reference_path.called


# -- bad input ----------------------------------------------------------------------------
SMALL = record(
    {"name": "id", "type": "long"},
    {"name": "note", "type": ["null", "string"]},
    {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["A", "B"]}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "tags", "type": {"type": "map", "values": "int"}},
    {"name": "price",
     "type": {"type": "bytes", "logicalType": "decimal", "precision": 3, "scale": 0}},
)  # fmt: skip


def small_payload(
    note: bytes = b"\x00",
    kind: bytes = b"\x02",
    day: bytes = b"\x04",
    tags: bytes = b"\x00",
    price: bytes = b"\x02\x05",
) -> bytes:
    return b"\x06" + note + kind + day + tags + price  # id 3


@pytest.mark.parametrize(
    "raw",
    [
        b"\x01\x00\x00\x00\x01\x02",  # wrong magic
        b"\x00\x00\x01",  # too short for a frame
        encode_frame(9, small_payload()),  # an id the registry does not know
        encode_frame(1, small_payload()[:-1]),  # truncated
        encode_frame(1, small_payload() + b"\x00"),  # bytes left after the value
        encode_frame(1, small_payload(note=b"\x04")),  # union index 2 of [null, string]
        encode_frame(1, small_payload(note=b"\x03\x02a")),  # union index -2
        encode_frame(1, small_payload(note=b"\x02\x02\xff")),  # not UTF-8
        encode_frame(1, small_payload(kind=b"\x08")),  # enum index 4 of 2 symbols
        encode_frame(1, small_payload(day=b"\xfe\xff\xff\xff\x0f")),  # year 2**31 days away
        encode_frame(1, small_payload(tags=b"\x04\x02a\x02\x02a\x04\x00")),  # a repeated key
        encode_frame(1, small_payload(price=b"\x04\x27\x10")),  # 10000: wider than 3 digits
        encode_frame(1, b""),
    ],
)
@pytest.mark.parametrize("permissive", [False, True])
def test_bad_values_fall_back_and_fail_or_count_as_the_reference(
    raw: bytes, permissive: bool
) -> None:
    v1 = schema(SMALL, 1)
    good = encode_frame(1, small_payload())
    dec = decoder(v1, v1)
    with mock.patch.object(dec, "decode", wraps=dec.decode) as reference_path:
        same_everywhere(dec, [good, raw, None], permissive=permissive)
    assert reference_path.called


def test_a_good_payload_of_the_bad_value_tests_decodes_on_the_compiled_path() -> None:
    v1 = schema(SMALL, 1)
    dec = decoder(v1, v1)
    values = [encode_frame(1, small_payload()), None]
    assert identical(fast(dec, values), reference(dec, values)[0])


def test_a_writer_that_does_not_resolve_falls_back_to_the_resolution_error() -> None:
    w = record({"name": "id", "type": "string"})
    dec = decoder(schema(record({"name": "id", "type": "long"}), 2), schema(w, 1))
    same_everywhere(dec, framed(w, 1, {"id": "x"}))
    same_everywhere(dec, framed(w, 1, {"id": "x"}), permissive=True)


# -- any value, any corruption ------------------------------------------------------------
PROPERTY = record(
    {"name": "i", "type": "int"}, {"name": "l", "type": "long"},
    {"name": "f", "type": "float"}, {"name": "d", "type": "double"},
    {"name": "s", "type": "string"}, {"name": "b", "type": "bytes"},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "dec",
     "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}},
    {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X", "Y", "Z"]}},
    {"name": "opt", "type": ["null", LINE]},
    {"name": "arr", "type": {"type": "array", "items": ["null", "long"]}},
    {"name": "m", "type": {"type": "map", "values": "double"}},
    {"name": "u", "type": ["null", "string", "long", "boolean"]},
)  # fmt: skip

texts = st.text(max_size=8)
lines = st.fixed_dictionaries({"sku": texts, "qty": st.integers(-(2**31), 2**31 - 1)})
property_values = st.fixed_dictionaries(
    {
        "i": st.integers(-(2**31), 2**31 - 1),
        "l": st.integers(-(2**63), 2**63 - 1),
        "f": st.floats(width=32),
        "d": st.floats(),
        "s": texts,
        "b": st.binary(max_size=8),
        "day": st.dates(),
        "ts": st.datetimes(timezones=st.just(UTC)),
        "dec": st.decimals(min_value=-(10**9) + 1, max_value=10**9 - 1, places=3),
        "id": st.uuids().map(str),
        "e": st.sampled_from(["X", "Y", "Z"]),
        "opt": st.none() | lines,
        "arr": st.lists(st.none() | st.integers(-(2**63), 2**63 - 1), max_size=3),
        "m": st.dictionaries(texts, st.floats(), max_size=3),
        "u": st.none() | texts | st.integers(-(2**63), 2**63 - 1) | st.booleans(),
    }
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.lists(property_values, min_size=1, max_size=4), nulls=st.lists(st.booleans()))
def test_any_values_decode_to_the_reference_array(
    data: list[dict[str, Any]], nulls: list[bool]
) -> None:
    v1 = schema(PROPERTY, 1)
    dec = decoder(v1, v1)
    values = framed(PROPERTY, 1, *data)
    if nulls:
        values = [None if nulls[i % len(nulls)] else v for i, v in enumerate(values)]
    assert identical(fast(dec, values), reference(dec, values)[0])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    datum=property_values,
    cut=st.integers(0, 200),
    flip=st.integers(0, 400),
    byte=st.integers(0, 255),
    tail=st.binary(max_size=3),
    permissive=st.booleans(),
)
def test_any_corrupted_value_gives_what_the_reference_gives(
    datum: dict[str, Any], cut: int, flip: int, byte: int, tail: bytes, permissive: bool
) -> None:
    v1 = schema(PROPERTY, 1)
    raw = bytearray(encode_frame(1, write(PROPERTY, datum)))
    raw[flip % len(raw)] = byte
    corrupted = bytes(raw[: max(5, len(raw) - cut % 8)]) + tail
    same_everywhere(decoder(v1, v1), [corrupted, None], permissive=permissive)


# -- what arrow-avro alone would answer differently ---------------------------------------
LINE_V2 = record(
    {"name": "sku", "type": "string"}, {"name": "qty", "type": "long"},
    {"name": "extra", "type": "string", "default": "-"}, name="Line",
)  # fmt: skip


def test_a_named_type_used_twice_resolves_each_use_with_the_writers_definition() -> None:
    """arrow-avro reads a writer's second use of a named type with the reader's definition;
    both schemas are handed over with every use defined in place."""
    writer = record({"name": "lines", "type": {"type": "array", "items": LINE}},
                    {"name": "first", "type": ["null", "shop.Line"]})  # fmt: skip
    reader = record({"name": "lines", "type": {"type": "array", "items": LINE_V2}},
                    {"name": "first", "type": ["null", "shop.Line"]})  # fmt: skip
    line = {"sku": "a", "qty": 3}
    check_same(reader, writer, {"lines": [line], "first": line}, {"lines": [], "first": None})


@pytest.mark.parametrize(
    ("body", "payload"),
    [
        # index 2 of a [null, string] inside an array, and inside a map
        ({"type": "array", "items": ["null", "string"]}, b"\x02\x04\x02a\x00"),
        ({"type": "map", "values": ["string", "null"]}, b"\x02\x02k\x04\x00"),
        # a dropped field (the reader has only "x") that is not UTF-8: fastavro's skip checks it
        (None, b"\x02\x02\xff"),
        # time-millis outside the day
        ({"type": "int", "logicalType": "time-millis"}, b"\x80\xb8\xc9\x52"),
        # a UUID that is not one
        ({"type": "string", "logicalType": "uuid"}, b"\x08nope"),
    ],
)
def test_values_arrow_avro_alone_would_answer_fall_back(body: Any, payload: bytes) -> None:
    if body is None:
        writer = record({"name": "x", "type": "int"}, {"name": "gone", "type": "string"})
        reader = record({"name": "x", "type": "int"})
    else:
        writer = reader = record({"name": "x", "type": body})
    dec = decoder(schema(reader, 2), schema(writer, 1))
    with mock.patch.object(dec, "decode", wraps=dec.decode) as reference_path:
        same_everywhere(dec, [encode_frame(1, payload)])
    assert reference_path.called


@pytest.mark.parametrize(
    "text",
    ["12345678123456781234567812345678", "{12345678-1234-5678-1234-567812345678}",
     "urn:uuid:ABCDEF78-1234-5678-1234-567812345678", "1234-5678-1234-5678-1234-5678-1234-5678"],
)  # fmt: skip
def test_uuid_text_in_any_form_python_reads_gives_its_canonical_text(text: str) -> None:
    body = record({"name": "x", "type": {"type": "string", "logicalType": "uuid"}})
    dec = decoder(schema(body, 2), schema(body, 1))
    same_everywhere(dec, [encode_frame(1, b"%c%s" % (len(text) * 2, text.encode()))])


def test_the_spark_column_type_is_the_reference_arrays_type() -> None:
    """The feed and the scan decode to the type Spark expects (ColumnCodec.arrow_type)."""
    from pyspark.sql.pandas.types import from_arrow_type, to_arrow_type

    w = schema(NESTED, 1)
    dec = decoder(w, w)
    target = to_arrow_type(from_arrow_type(w.arrow_type()), timezone="UTC")
    datum = {"lines": [], "by_sku": {}, "maybe": None, "pick": "A", "when": None}
    values = framed(NESTED, 1, datum, None)
    with mock.patch.object(dec, "decode", side_effect=AssertionError("fell back")):
        got, _ = dec.decode_array(
            pa.array(values, pa.binary()), locate=locate, permissive=False, arrow_type=target
        )
    want, _ = dec.decode(values, locate=locate, permissive=False, arrow_type=target)
    assert identical(got, want)


@pytest.mark.parametrize("kind", ["sliced", "large_binary"])
def test_sliced_and_large_binary_arrays_decode_as_their_values(kind: str) -> None:
    v1 = schema(SMALL, 1)
    dec = decoder(v1, v1)
    values = [encode_frame(1, small_payload(note=b"\x02\x02%c" % c)) for c in b"abcd"]
    array = pa.array([None, *values], pa.binary())[1:] if kind == "sliced" else None
    array = pa.array(values, pa.large_binary()) if array is None else array
    with mock.patch.object(dec, "decode", side_effect=AssertionError("fell back")):
        got, _ = dec.decode_array(array, locate=locate, permissive=False)
    assert identical(got, reference(dec, values)[0])
