"""Rows encoded as Protobuf values for the sink: the bytes the protobuf library's own
serializer writes (and confluent-kafka's ProtobufSerializer frames), read back by the
decoder as the same row, and errors that name the row, the field path and the schema.
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import pyarrow as pa
import pytest
from google.protobuf.message import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_statestore.schemas import (
    ProtobufValueEncoder,
    SchemaError,
    ValueEncodeError,
    encode_frame,
    parse_message_indexes,
)
from spark_statestore.schemas.protobuf import ProtobufSchema, ProtobufValueDecoder
from tests.unit.test_schemas_protobuf import (
    EVERY_TYPE,
    NESTED,
    PROTO2,
    SMALL,
    UNSET_EVERY,
    message_class,
    schema,
)

UTC = dt.timezone.utc
EVERY = schema(EVERY_TYPE, 1)


def encode_one(encoder: ProtobufValueEncoder, value: Any) -> bytes:
    (raw,) = encoder.encode([value], locate=lambda i: f"row {i + 7}")
    assert raw is not None
    return raw


def round_trip(writer: ProtobufSchema, value: Any, message: str | None = None) -> Any:
    """``value`` encoded, then decoded and made an Arrow value again (what a sink's row
    becomes in a reader's column)."""
    encoder = ProtobufValueEncoder(writer, message=message)
    decoder = ProtobufValueDecoder(writer, lambda _: writer, message=message)
    decoded = decoder.decode_one(encode_one(encoder, value))
    return pa.array([decoded], type=encoder.arrow_type).to_pylist()[0]


def deterministic(schema_id: int, value: Message, indexes: tuple[int, ...] = (0,)) -> bytes:
    """What the protobuf library serializes, framed as Confluent's serializer frames it."""
    return encode_frame(schema_id, value.SerializeToString(deterministic=True), indexes)


def every_message() -> Message:
    """A message with every field type set, by the protobuf library's own API."""
    every, line = message_class(EVERY, "shop.Every"), message_class(EVERY, "shop.Line")
    value = every(
        flag=True, i32=-(2**31), s32=-5, sf32=7, u32=2**32 - 1, f32=2**32 - 2,
        i64=-(2**63), s64=-(2**40), sf64=2**62, u64=2**64 - 1, f64=2**63,
        fl=1.5, db=-0.25, text="é", raw=b"\x00\xff", color=1,
        line=line(sku="a", qty=2), lines=[line(sku="b"), line(qty=3)], numbers=[-1, 0, 2**50],
        counts={"x": 1, "a": -2}, by_id={2**64 - 1: line(sku="max"), 0: line()}, note="",
        picked=line(sku="p"),
    )  # fmt: skip
    value.at.FromDatetime(dt.datetime(1969, 12, 31, 23, 59, 59, 4567, tzinfo=UTC))
    value.took.FromTimedelta(dt.timedelta(days=-1, microseconds=5))
    value.w_double.value, value.w_float.value = 0.5, -2.5
    value.w_int64.value, value.w_uint64.value = -(2**40), 2**64 - 2
    value.w_int32.value, value.w_uint32.value = 0, 2**32 - 1
    value.w_bool.value, value.w_string.value, value.w_bytes.value = False, "", b"\x01"
    value.meta.update({"k": [1, "two", None, {"nested": True}]})
    value.loose.number_value = 3.5
    value.list.extend(["a", 2])
    value.packed.Pack(line(sku="in an any"))
    value.nothing.SetInParent()
    return value


# -- the bytes ----------------------------------------------------------------------------
def test_every_type_encodes_to_the_librarys_bytes_and_decodes_to_the_same_row() -> None:
    written = deterministic(1, every_message())
    row = ProtobufValueDecoder(EVERY, lambda _: EVERY).decode_one(written)
    row = pa.array([row], type=EVERY.arrow_type()).to_pylist()[0]  # what a sink is given
    raw = encode_one(ProtobufValueEncoder(EVERY), row)
    assert raw == written
    assert round_trip(EVERY, row) == row


def test_confluent_kafkas_serializer_writes_the_same_bytes() -> None:
    """Its ProtobufSerializer (mock registry) registers the schema and frames the message
    with its ids and message indexes, here [1, 0] and [0]."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient.new_client({"url": "mock://test-protobuf-encode"})
    nested = schema(NESTED)
    cases = [  # the message as the library builds it, the row as a sink is given it
        (nested, "shop.Basket.Item", {"sku": "a", "amount": 3}, {"sku": "a", "amount": 3}),
        (
            nested,
            "shop.Basket",
            {"totals": {"t": 9}, "items": [{"sku": "b"}]},
            {"totals": [("t", 9)], "items": [{"sku": "b", "amount": 0}]},
        ),
        (EVERY, "shop.Line", {"qty": -1}, {"sku": "", "qty": -1}),
    ]
    for number, (compiled, name, fields, row) in enumerate(cases):
        cls = message_class(compiled, name)
        serialize = ProtobufSerializer(cls, client, {"use.deprecated.format": False})
        topic = f"topic-{number}"
        theirs = serialize(cls(**fields), SerializationContext(topic, MessageField.VALUE))
        schema_id = client.get_latest_version(f"{topic}-value").schema_id
        assert schema_id is not None
        writer = schema(compiled.text, schema_id)
        assert encode_one(ProtobufValueEncoder(writer, message=name), row) == theirs


def test_the_frame_names_the_message_by_its_indexes() -> None:
    """[0] is the single byte 0; a map's entry type counts among the nested messages."""
    writer = schema(NESTED + "message Last { map<string, int32> m = 1; message In {} }", 5)
    for name, indexes in [
        ("shop.Order", (0,)), ("shop.Basket", (1,)), ("shop.Basket.Item", (1, 0)),
        ("shop.Last", (2,)), ("shop.Last.In", (2, 1)),
    ]:  # fmt: skip
        encoder = ProtobufValueEncoder(writer, message=name)
        assert encoder.message_indexes == indexes
        frame = parse_message_indexes(encode_one(encoder, {}))
        assert frame.schema_id == 5 and writer.message_for(frame.message_indexes or ()) == (
            encoder.message
        )
    assert (
        encode_one(ProtobufValueEncoder(writer), {"id": 1}) == b"\x00\x00\x00\x00\x05\x00\x08\x01"
    )


def test_bare_protobuf_is_the_payload_alone_and_framing_needs_an_id() -> None:
    bare = ProtobufValueEncoder(schema(NESTED), framed=False)
    assert bare.encode([{"id": 1}, None], locate=str) == [b"\x08\x01", None]
    with pytest.raises(SchemaError, match="schema None has no registry id to frame keys"):
        ProtobufValueEncoder(schema(NESTED), column="key")


def test_a_message_of_an_imported_file_has_no_indexes_in_the_schema() -> None:
    line = 'syntax = "proto3";\npackage shop;\nmessage Line { string sku = 1; }\n'
    order = 'syntax = "proto3";\npackage shop;\nimport "line.proto";\nmessage Order { Line l = 1; }'
    writer = schema(order, 3, references=(("line.proto", line),))
    assert (
        encode_one(ProtobufValueEncoder(writer), {"l": {"sku": "x"}})[5:]
        == b"\x00\x0a\x03\x0a\x01x"
    )
    with pytest.raises(SchemaError, match=r"message shop\.Line is not defined in schema 3 itself"):
        ProtobufValueEncoder(writer, message="shop.Line")


# -- None and presence --------------------------------------------------------------------
def test_none_is_unset_a_default_or_empty_as_protobufs_presence_reads_it() -> None:
    """The one normalization: a proto3 scalar without presence reads back as its default."""
    nothing = dict.fromkeys(UNSET_EVERY)
    assert encode_one(ProtobufValueEncoder(EVERY), nothing) == b"\x00\x00\x00\x00\x01\x00"
    assert encode_one(ProtobufValueEncoder(EVERY), {}) == b"\x00\x00\x00\x00\x01\x00"
    assert round_trip(EVERY, nothing) == UNSET_EVERY
    assert round_trip(EVERY, UNSET_EVERY) == UNSET_EVERY


@pytest.mark.parametrize(
    ("field", "value"),
    [("note", ""), ("number", 0), ("w_int32", 0), ("w_bool", False), ("line", {}),
     ("nothing", {}), ("at", dt.datetime(1970, 1, 1, tzinfo=UTC)), ("took", dt.timedelta(0))],
)  # fmt: skip
def test_a_field_with_presence_set_to_its_default_stays_set(field: str, value: Any) -> None:
    expected = {"line": {"sku": "", "qty": 0}}.get(field, value)
    assert round_trip(EVERY, {field: value})[field] == expected


def test_proto2_fields_are_null_when_none_and_required_ones_are_refused() -> None:
    legacy = schema(PROTO2, 2)
    full = {"id": 0, "note": "n/a", "color": "BLUE", "xs": [1, 2], "extra": {"amount": 9}}
    assert round_trip(legacy, full) == full
    assert round_trip(legacy, {"id": 1}) == {
        "id": 1, "note": None, "color": None, "xs": [], "extra": None
    }  # fmt: skip
    with pytest.raises(ValueEncodeError, match=r"row 7 .*required field\(s\) id are null"):
        encode_one(ProtobufValueEncoder(legacy), {"note": "x"})


# -- values -------------------------------------------------------------------------------
def test_an_enum_takes_names_and_the_decimal_text_of_an_open_enums_numbers() -> None:
    assert round_trip(EVERY, {"color": "BLUE"})["color"] == "BLUE"
    assert round_trip(EVERY, {"color": "7"})["color"] == "7"  # as the decoder reads 7
    assert round_trip(EVERY, {"color": "1"})["color"] == "BLUE"
    legacy = schema(PROTO2, 2)
    assert round_trip(legacy, {"id": 1, "color": "1"})["color"] == "BLUE"
    with pytest.raises(ValueEncodeError, match=r"field color: '7' is no number of enum legacy"):
        encode_one(ProtobufValueEncoder(legacy), {"id": 1, "color": "7"})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (dt.datetime(2026, 11, 28, 1, 2, 3, 4, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
         dt.datetime(2026, 11, 28, 6, 2, 3, 4, tzinfo=UTC)),
        (dt.datetime(2026, 11, 28, 1, 2, 3), dt.datetime(2026, 11, 28, 1, 2, 3, tzinfo=UTC)),
        (dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(1, 1, 1, tzinfo=UTC)),
        (dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
         dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
    ],
)  # fmt: skip
def test_a_timestamp_is_its_instant_a_naive_one_in_utc(value: Any, expected: Any) -> None:
    assert round_trip(EVERY, {"at": value})["at"] == expected


def test_a_duration_keeps_one_sign_in_seconds_and_nanos() -> None:
    took = dt.timedelta(seconds=-1, microseconds=-500_000)
    raw = encode_one(ProtobufValueEncoder(EVERY), {"took": took})
    decoded: Any = ProtobufValueDecoder(EVERY, lambda _: EVERY).read(raw)
    assert (decoded.took.seconds, decoded.took.nanos) == (-1, -500_000_000)
    assert round_trip(EVERY, {"took": took})["took"] == took


@pytest.mark.parametrize(
    ("field", "text", "expected"),
    [("meta", '{"a": [1, null, "x"]}', '{"a":[1.0,null,"x"]}'), ("loose", "null", "null"),
     ("loose", '"s"', '"s"'), ("list", "[]", "[]"), ("meta", "{}", "{}")],
)  # fmt: skip
def test_struct_value_and_list_value_are_their_json_text_numbers_as_doubles(
    field: str, text: str, expected: str
) -> None:
    assert round_trip(EVERY, {field: text})[field] == expected


def test_maps_take_pairs_or_a_dict_and_are_written_in_key_order() -> None:
    by_pairs = encode_one(ProtobufValueEncoder(EVERY), {"counts": [("b", 1), ("a", 2)]})
    by_dict = encode_one(ProtobufValueEncoder(EVERY), {"counts": {"a": 2, "b": 1}})
    assert by_pairs == by_dict == deterministic(1, message_class(EVERY)(counts={"a": 2, "b": 1}))


# -- errors -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({"i32": 2**31}, r"field i32: 2147483648 is beyond int32's range"),
        ({"u32": -1}, r"field u32: -1 is beyond uint32's range"),
        ({"u64": decimal.Decimal("1.5")}, r"field u64: uint64 takes an int .*Decimal\('1.5'\)"),
        ({"i64": True}, r"field i64: int64 takes an int, not bool True"),
        ({"i64": 1.0}, r"field i64: int64 takes an int, not float 1.0"),
        ({"flag": 1}, r"field flag: bool takes a bool, not int 1"),
        ({"fl": 1e39}, r"field fl: 1e\+39 is beyond float's \(float32's\) range"),
        ({"db": "1"}, r"field db: a floating-point field takes a float"),
        ({"text": b"x"}, r"field text: string takes a str, not bytes"),
        ({"text": "\ud800"}, r"field text: the protobuf library refuses it: .*surrogates"),
        ({"raw": "x"}, r"field raw: bytes takes bytes, not str 'x'"),
        ({"color": "BLU"}, r"field color: enum shop.Color takes .* did you mean 'BLUE'\?"),
        ({"color": 1}, r"field color: enum shop.Color takes .*not int 1"),
        ({"line": {"sku": "a", "qyt": 1}}, r"field line: .*no field 'qyt'; did you mean 'qty'"),
        ({"line": "a"}, r"field line: message shop.Line takes a dict of its fields, not str"),
        ({"lines": [{}, {"qty": "2"}]}, r"field lines\[1\].qty: int32 takes an int"),
        ({"lines": [None]}, r"field lines\[0\]: an item of a repeated field cannot be null"),
        ({"numbers": "12"}, r"field numbers: a repeated field takes a list, not str"),
        ({"counts": [("a", None)]}, r"field counts\{'a'\}: a map value cannot be null"),
        ({"counts": [(None, 1)]}, r"field counts\{None\}: a map key cannot be null"),
        ({"counts": [("a", 1), ("a", 2)]}, r"field counts\{'a'\}: the key is given twice"),
        ({"counts": [("a",)]}, r"field counts: a map takes \(key, value\) pairs, not tuple"),
        ({"by_id": [(decimal.Decimal(1), {"sku": 2})]}, r"field by_id\{1\}.sku: string takes"),
        ({"word": "w", "picked": {}}, r"Every of schema 1: fields word and picked of oneof choice"),
        ({"at": dt.date(2026, 1, 1)}, r"field at: google.protobuf.Timestamp takes a datetime"),
        ({"took": 5}, r"field took: google.protobuf.Duration takes a timedelta, not int 5"),
        ({"took": dt.timedelta(days=4_000_000)}, r"field took: .* beyond the range of google"),
        ({"w_int32": 2**40}, r"field w_int32: 1099511627776 is beyond int32's range"),
        ({"meta": "[1]"}, r"field meta: JSON text '\[1\]' is no google.protobuf.Struct"),
        ({"loose": "NaN"}, r"field loose: 'NaN' is not JSON text: NaN is not a JSON number"),
        ({"loose": {"a": 1}}, r"field loose: google.protobuf.Value takes its JSON text, not"),
        ({"packed": {"type_url": 1}}, r"field packed.type_url: string takes a str, not int"),
        ({"nope": 1}, r"Every of schema 1: message shop.Every has no field 'nope'"),
        ([1], r"Every of schema 1: message shop.Every takes a dict of its fields, not list"),
    ],
)
def test_a_value_that_does_not_fit_names_the_row_the_field_and_the_schema(
    value: Any, fragment: str
) -> None:
    encoder = ProtobufValueEncoder(EVERY)
    with pytest.raises(ValueEncodeError, match=fragment) as caught:
        encoder.encode([None, value], locate=lambda i: f"row {i + 7}")
    assert str(caught.value).startswith("the value of row 8 does not fit message shop.Every")
    assert isinstance(caught.value, ValueError)


def test_an_unknown_writer_message_is_refused_with_the_closest_name() -> None:
    with pytest.raises(SchemaError, match=r"no message 'shop\.Evry'; did you mean 'shop\.Every'"):
        ProtobufValueEncoder(EVERY, message="shop.Evry")


# -- properties ---------------------------------------------------------------------------
SMALL_SCHEMA = schema(SMALL, 4)
COLORS = ("RED", "GREEN", "BLUE")
texts = st.text(max_size=8)
maybe = st.none  # a None: unset (with presence) or the default (without)
line_rows = st.fixed_dictionaries(
    {"sku": maybe() | texts, "qty": maybe() | st.integers(0, 2**32 - 1)}
)
SMALL_ROWS = st.fixed_dictionaries(
    {
        "i": maybe() | st.integers(-(2**31), 2**31 - 1),
        "u": maybe() | st.integers(0, 2**64 - 1).map(decimal.Decimal),
        "s": maybe() | st.integers(-(2**63), 2**63 - 1),
        "d": maybe() | st.floats(allow_nan=False),
        "f": maybe() | st.floats(width=32, allow_nan=False),
        "b": maybe() | st.booleans(),
        "t": maybe() | texts,
        "y": maybe() | st.binary(max_size=8),
        "c": maybe() | st.sampled_from(COLORS),
        "maybe": maybe() | st.integers(-(2**63), 2**63 - 1),
        "tags": maybe() | st.lists(texts, max_size=3),
        "counts": maybe()
        | st.dictionaries(texts, st.integers(-(2**31), 2**31 - 1), max_size=3).map(
            lambda d: list(d.items())
        ),
        "line": maybe() | line_rows,
        "lines": maybe() | st.lists(line_rows, max_size=3),
        "at": maybe() | st.datetimes(timezones=st.just(UTC)),
    }
)
PICKS = st.one_of(
    st.just({}), texts.map(lambda t: {"word": t}), line_rows.map(lambda r: {"item": r})
)
DEFAULTS = {
    "i": 0, "u": decimal.Decimal(0), "s": 0, "d": 0.0, "f": 0.0, "b": False, "t": "", "y": b"",
    "c": "RED", "tags": [], "counts": [], "lines": [],
}  # fmt: skip


def expected_row(row: dict[str, Any]) -> dict[str, Any]:
    """The row the decoder gives back: Nones of scalars without presence as defaults."""

    def line(value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else {"sku": value["sku"] or "", "qty": value["qty"] or 0}

    out = {name: DEFAULTS[name] if v is None and name in DEFAULTS else v for name, v in row.items()}
    out["line"], out["item"] = line(row["line"]), line(row.get("item"))
    out["lines"] = [line(v) for v in row["lines"] or []]
    out["counts"] = dict(out["counts"])  # read back in the map's order, not the written one
    return {"word": None, **out}


def library_message(row: dict[str, Any]) -> Message:
    """The same value, built with the protobuf library's own API."""
    small, line = message_class(SMALL_SCHEMA), message_class(SMALL_SCHEMA, "prop.Line")
    fields = {k: v for k, v in row.items() if v is not None and k not in ("at", "item")}
    for name in ("line", "item"):
        if row.get(name) is not None:
            fields[name] = line(**{k: v for k, v in row[name].items() if v is not None})
    fields["lines"] = [
        line(**{k: v for k, v in r.items() if v is not None}) for r in fields.get("lines", [])
    ]
    fields["counts"] = dict(fields.get("counts", []))
    fields["u"] = int(fields.get("u", 0))
    value: Any = small(**fields)
    if row["at"] is not None:
        value.at.FromDatetime(row["at"])
    return value


@settings(max_examples=150, deadline=None)
@given(SMALL_ROWS, PICKS)
def test_arbitrary_rows_encode_as_the_library_does_and_round_trip(
    row: dict[str, Any], pick: dict[str, Any]
) -> None:
    row = {**row, "word": None, "item": None, **pick}
    raw = encode_one(ProtobufValueEncoder(SMALL_SCHEMA), row)
    assert raw == deterministic(4, library_message(row))
    decoded = round_trip(SMALL_SCHEMA, row)
    assert {**decoded, "counts": dict(decoded["counts"])} == expected_row(row)
