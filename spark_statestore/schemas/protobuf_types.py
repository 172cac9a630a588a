"""Protobuf messages as Arrow types and rows, the way Spark's ``from_protobuf`` maps them
where that is lossless.

=========================================  ===============================  =======================
Protobuf                                   Arrow                            Spark
=========================================  ===============================  =======================
bool                                       bool                             BOOLEAN
int32, sint32, sfixed32                    int32                            INT
uint32, fixed32                            int64                            BIGINT
int64, sint64, sfixed64                    int64                            BIGINT
uint64, fixed64                            decimal128(20, 0)                DECIMAL(20, 0)
float / double                             float32 / float64                FLOAT / DOUBLE
string                                     string                           STRING
bytes                                      binary                           BINARY
enum                                       string (the value's name)        STRING
message, group                             struct of its fields             STRUCT
repeated T                                 list<T>                          ARRAY<T>
map<K, V>                                  map<K, V>                        MAP<K, V>
google.protobuf.Timestamp                  timestamp[us, tz=UTC]            TIMESTAMP
google.protobuf.Duration                   duration[us]                     INTERVAL DAY TO SECOND
google.protobuf.*Value (the 9 wrappers)    the wrapped type, as above       as above
google.protobuf.Struct, Value, ListValue   string: the value as JSON text   STRING
google.protobuf.Any                        struct<type_url: string, value:  STRUCT<type_url, value>
                                           binary>
google.protobuf.Empty                      struct<> (no fields)             STRUCT<>
=========================================  ===============================  =======================

This is ``from_protobuf`` with the options ``upcast.unsigned.ints`` (unsigned ints never
overflow), ``unwrap.primitive.wrapper.types`` and ``emit.default.values`` set: a wrapper
(``BoolValue``, ``Int32Value``, ``Int64Value``, ``UInt32Value``, ``UInt64Value``,
``FloatValue``, ``DoubleValue``, ``StringValue``, ``BytesValue``) is its value, null when
unset. Struct fields are the message's fields in declaration order under their .proto names;
a oneof's members are each a field of their own (the one set is not null). Where this differs from
``from_protobuf``: ``Struct``/``Value``/``ListValue`` are JSON text (they are recursive, which
``from_protobuf`` refuses by default); ``Empty`` (and any message without fields) is an empty
struct, which Arrow and PySpark accept (``from_protobuf`` drops it); an enum number the
reader's enum does not name (an open enum keeps it) is its decimal text, ``"7"``.

Presence, as Protobuf defines it: a field with presence (a message, a wrapper, proto3
``optional``, proto2 ``optional``/``required``, a oneof member) is null when unset; a proto3
scalar without presence is its default (0, ``""``, false, the enum's first name), never null;
a repeated field is a list and a map a map, empty when unset, never null. Every Arrow field
is declared nullable anyway (a delete's value is null, and PERMISSIVE reads null an
undecodable value). Timestamps and durations with nanoseconds below a microsecond are
truncated toward the past (floored): ``-1.0000005`` s is ``-1.000001`` s; one beyond int64
microseconds (about 292,000 years either side of 1970) is an undecodable value.

Recursive message types (a message that contains itself) cannot be a Spark column and are
refused, as ``from_protobuf`` refuses them by default.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message

from spark_statestore.schemas.errors import SchemaDecodeError, SchemaError

__all__ = [
    "SCALAR_NAMES",
    "WELL_KNOWN_TYPES",
    "WIRE_COMPATIBLE",
    "RowConverter",
    "arrow_type_of",
    "field_type_name",
    "first_incompatibility",
    "message_of",
    "row_converter",
]

RowConverter = Callable[[Message], Any]
"""Turns one parsed message into what :func:`pyarrow.array` takes for its Arrow type."""

_Get = Callable[[Message], Any]
_Convert = Callable[[Any], Any]

_F = FieldDescriptor
SCALAR_NAMES: Mapping[int, str] = {
    _F.TYPE_DOUBLE: "double",
    _F.TYPE_FLOAT: "float",
    _F.TYPE_INT64: "int64",
    _F.TYPE_UINT64: "uint64",
    _F.TYPE_INT32: "int32",
    _F.TYPE_FIXED64: "fixed64",
    _F.TYPE_FIXED32: "fixed32",
    _F.TYPE_BOOL: "bool",
    _F.TYPE_STRING: "string",
    _F.TYPE_BYTES: "bytes",
    _F.TYPE_UINT32: "uint32",
    _F.TYPE_SFIXED32: "sfixed32",
    _F.TYPE_SFIXED64: "sfixed64",
    _F.TYPE_SINT32: "sint32",
    _F.TYPE_SINT64: "sint64",
}
"""The .proto names of the scalar field types (``FieldDescriptor.TYPE_*``)."""

_UNSIGNED_64 = pa.decimal128(20, 0)  # 2**64 - 1 has 20 digits
_SCALARS: Mapping[int, pa.DataType] = {
    _F.TYPE_DOUBLE: pa.float64(),
    _F.TYPE_FLOAT: pa.float32(),
    _F.TYPE_INT64: pa.int64(),
    _F.TYPE_UINT64: _UNSIGNED_64,
    _F.TYPE_INT32: pa.int32(),
    _F.TYPE_FIXED64: _UNSIGNED_64,
    _F.TYPE_FIXED32: pa.int64(),
    _F.TYPE_BOOL: pa.bool_(),
    _F.TYPE_STRING: pa.string(),
    _F.TYPE_BYTES: pa.binary(),
    _F.TYPE_UINT32: pa.int64(),
    _F.TYPE_SFIXED32: pa.int32(),
    _F.TYPE_SFIXED64: pa.int64(),
    _F.TYPE_SINT32: pa.int32(),
    _F.TYPE_SINT64: pa.int64(),
}
_MESSAGES = (_F.TYPE_MESSAGE, _F.TYPE_GROUP)

WIRE_COMPATIBLE: tuple[frozenset[str], ...] = (
    frozenset({"int32", "uint32", "int64", "uint64", "bool", "enum"}),
    frozenset({"sint32", "sint64"}),
    frozenset({"fixed32", "sfixed32"}),
    frozenset({"fixed64", "sfixed64"}),
    frozenset({"string", "bytes"}),
    frozenset({"float"}),
    frozenset({"double"}),
    frozenset({"message"}),
    frozenset({"group"}),
)
"""The field types that read each other's values (Protobuf's "Updating A Message Type")."""
_WIRE_GROUP: Mapping[str, int] = {
    name: number for number, names in enumerate(WIRE_COMPATIBLE) for name in names
}
_WELL_KNOWN_PACKAGE = "google.protobuf."

_WRAPPERS: Mapping[str, pa.DataType] = {
    "google.protobuf.DoubleValue": pa.float64(),
    "google.protobuf.FloatValue": pa.float32(),
    "google.protobuf.Int64Value": pa.int64(),
    "google.protobuf.UInt64Value": _UNSIGNED_64,
    "google.protobuf.Int32Value": pa.int32(),
    "google.protobuf.UInt32Value": pa.int64(),
    "google.protobuf.BoolValue": pa.bool_(),
    "google.protobuf.StringValue": pa.string(),
    "google.protobuf.BytesValue": pa.binary(),
}
_INSTANTS: Mapping[str, pa.DataType] = {
    "google.protobuf.Timestamp": pa.timestamp("us", tz="UTC"),
    "google.protobuf.Duration": pa.duration("us"),
}
_JSON_TYPES = frozenset(
    {"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"}
)
WELL_KNOWN_TYPES = frozenset({*_WRAPPERS, *_INSTANTS, *_JSON_TYPES})
"""The message types mapped to another type than the struct of their fields (``Any``
and ``Empty`` are plain structs)."""


def arrow_type_of(message: Descriptor) -> pa.DataType:
    """The Arrow type of values of ``message`` (see the module's table).

    Raises
    ------
    SchemaError
        For a recursive message type, naming the path through which it contains itself.
    """
    return _message_type(message, ())


def row_converter(message: Descriptor) -> RowConverter:
    """A function from a parsed ``message`` (of this descriptor's class) to its row, built
    once: per field, a getter that applies the presence rules and the conversions of the
    module's table.

    Raises
    ------
    SchemaError
        For a recursive message type.
    """
    return _message_converter(message, ())


def field_type_name(field: FieldDescriptor) -> str:
    """``"int64"``, ``"enum shop.Color"``, ``"message shop.Line"``, ``"repeated string"``,
    ``"map<string, int32>"``: a field's type as a .proto file writes it, for messages."""
    if _is_map(field):
        entry = message_of(field)
        key, value = entry.fields_by_number[1], entry.fields_by_number[2]
        return f"map<{field_type_name(key)}, {field_type_name(value)}>"
    prefix = "repeated " if field.is_repeated else ""
    if field.type in _MESSAGES:
        kind = "group" if field.type == _F.TYPE_GROUP else "message"
        return f"{prefix}{kind} {message_of(field).full_name}"
    if field.type == _F.TYPE_ENUM:
        return f"{prefix}enum {_enum_of(field).full_name}"
    return prefix + SCALAR_NAMES[field.type]


def first_incompatibility(writer: Descriptor, reader: Descriptor) -> str | None:
    """``"field stats.max_amount (number 3): writer string, reader int64; ..."``-like text
    for the first field of ``reader`` that cannot parse what ``writer`` wrote, None when
    every field can.

    Fields are matched by number, recursively into message fields (and map values).
    Protobuf's own rules decide: a field only one side has is skipped or left unset, and a
    type may change within one wire encoding (:data:`WIRE_COMPATIBLE`). A singular writer
    field may become repeated (the reader gets a list of it); a repeated one may not become
    singular (the reader would keep only its last value, or none of a packed one). A
    well-known type (``google.protobuf.*``) reads only as itself, and two messages of
    different names must share a field number.
    """
    return _message_problem(writer, reader, "", set())


# -- Arrow types --------------------------------------------------------------------------
def _message_type(message: Descriptor, seen: tuple[str, ...]) -> pa.DataType:
    name = message.full_name
    if name in _INSTANTS:
        return _INSTANTS[name]
    if name in _WRAPPERS:
        return _WRAPPERS[name]
    if name in _JSON_TYPES:
        return pa.string()
    inner = _enter(message, seen)
    return pa.struct([pa.field(f.name, _field_type(f, inner)) for f in message.fields])


def _field_type(field: FieldDescriptor, seen: tuple[str, ...]) -> pa.DataType:
    if _is_map(field):
        entry = message_of(field)
        key, value = entry.fields_by_number[1], entry.fields_by_number[2]
        return pa.map_(
            _single_type(key, seen, f"{field.name}{{key}}"),
            _single_type(value, seen, f"{field.name}{{}}"),
        )
    single = _single_type(field, seen, field.name)
    return pa.list_(single) if field.is_repeated else single


def _single_type(field: FieldDescriptor, seen: tuple[str, ...], label: str) -> pa.DataType:
    """``label`` names the field in paths: its name, ``tags{}`` for a map's values."""
    if field.type in _MESSAGES:
        return _message_type(message_of(field), (*seen, label))
    if field.type == _F.TYPE_ENUM:
        return pa.string()
    return _SCALARS[field.type]


def _enter(message: Descriptor, seen: tuple[str, ...]) -> tuple[str, ...]:
    """``seen`` alternates message full names and the field names leading out of them."""
    name = message.full_name
    if name in seen[::2]:
        start = seen[::2].index(name) * 2
        steps = [f"{seen[i]}.{seen[i + 1]}" for i in range(start, len(seen) - 1, 2)]
        raise SchemaError(
            f"message type {name} contains itself ({' → '.join([*steps, name])}): a "
            "recursive type cannot be a Spark column (read the value with format binary)"
        )
    return (*seen, name)


# -- wire compatibility ------------------------------------------------------------------
def _message_problem(
    writer: Descriptor, reader: Descriptor, path: str, seen: set[tuple[str, str]]
) -> str | None:
    names = (writer.full_name, reader.full_name)
    if names in seen:  # this pair is being (or was) compared
        return None
    seen.add(names)
    if names[0] != names[1]:
        if any(name.startswith(_WELL_KNOWN_PACKAGE) for name in names):
            return (
                f"{_where(path)}: writer message {names[0]}, reader message {names[1]}; a "
                "well-known type reads only as itself"
            )
        if (writer.fields or reader.fields) and not (
            {f.number for f in writer.fields} & {f.number for f in reader.fields}
        ):
            return (
                f"{_where(path)}: the writer's message {names[0]} shares no field number "
                f"with the reader's {names[1]}: every field would read as unset"
            )
    written = {f.number: f for f in writer.fields}
    for field in reader.fields:
        source = written.get(field.number)
        if source is None:
            continue  # the reader's field is unset; the writer's other fields are skipped
        found = _field_problem(source, field, f"{path}.{field.name}" if path else field.name, seen)
        if found:
            return found
    return None


def _field_problem(
    writer: FieldDescriptor,
    reader: FieldDescriptor,
    path: str,
    seen: set[tuple[str, str]],
    *,
    numbered: bool = True,
) -> str | None:
    number = f"field {path} (number {reader.number})" if numbered else f"field {path}"
    if writer.is_repeated and not reader.is_repeated:
        return (
            f"{number}: writer {field_type_name(writer)}, reader {field_type_name(reader)}; a "
            "singular field keeps only the last of a repeated field's values (none of packed "
            "ones)"
        )
    if _wire_group(writer) != _wire_group(reader):
        return (
            f"{number}: writer {field_type_name(writer)}, reader {field_type_name(reader)}; "
            "they are not encoded alike"
        )
    if reader.type not in _MESSAGES:
        return None
    if _is_map(writer) and _is_map(reader):
        w_entry, r_entry = message_of(writer), message_of(reader)
        for key, where in ((1, f"{path}{{key}}"), (2, f"{path}{{}}")):
            found = _field_problem(
                w_entry.fields_by_number[key],
                r_entry.fields_by_number[key],
                where,
                seen,
                numbered=False,
            )
            if found:
                return found
        return None
    inner = f"{path}[]" if reader.is_repeated else path
    return _message_problem(message_of(writer), message_of(reader), inner, seen)


def _wire_group(field: FieldDescriptor) -> int:
    if field.type in _MESSAGES:
        return _WIRE_GROUP["group" if field.type == _F.TYPE_GROUP else "message"]
    if field.type == _F.TYPE_ENUM:
        return _WIRE_GROUP["enum"]
    return _WIRE_GROUP[SCALAR_NAMES[field.type]]


def _where(path: str) -> str:
    return f"field {path}" if path else "the value"


# -- rows ---------------------------------------------------------------------------------
def _message_converter(message: Descriptor, seen: tuple[str, ...]) -> RowConverter:
    name = message.full_name
    if name in _INSTANTS:
        return _micros_converter(_path(seen), name)
    if name in _WRAPPERS:
        if name == "google.protobuf.StringValue":
            return _wrapped_text(_text_converter(_path(seen)))
        return _wrapped
    if name in _JSON_TYPES:
        return _json_converter(_path(seen))
    inner = _enter(message, seen)
    getters = [(f.name, _field_getter(f, inner)) for f in message.fields]
    return lambda value: {field: get(value) for field, get in getters}


def _field_getter(field: FieldDescriptor, seen: tuple[str, ...]) -> _Get:
    name = field.name
    if _is_map(field):
        entry = message_of(field)
        key = _single_converter(entry.fields_by_number[1], seen, f"{name}{{key}}")
        value = _single_converter(entry.fields_by_number[2], seen, f"{name}{{}}")
        return lambda message: [(key(k), value(v)) for k, v in getattr(message, name).items()]
    convert = _single_converter(field, seen, name)
    if field.is_repeated:
        if convert is _same:
            return lambda message: list(getattr(message, name))
        return lambda message: [convert(item) for item in getattr(message, name)]
    if field.has_presence:
        return lambda message: convert(getattr(message, name)) if message.HasField(name) else None
    if convert is _same:
        return lambda message: getattr(message, name)
    return lambda message: convert(getattr(message, name))


def _single_converter(field: FieldDescriptor, seen: tuple[str, ...], label: str) -> _Convert:
    if field.type in _MESSAGES:
        return _message_converter(message_of(field), (*seen, label))
    if field.type == _F.TYPE_ENUM:
        names = {value.number: value.name for value in _enum_of(field).values}
        return lambda number: names.get(number) or str(number)
    if field.type == _F.TYPE_STRING:
        return _text_converter(_path((*seen, label)))
    return _same


def _is_map(field: FieldDescriptor) -> bool:
    return bool(
        field.is_repeated
        and field.type == _F.TYPE_MESSAGE
        and message_of(field).GetOptions().map_entry
    )


def message_of(field: FieldDescriptor) -> Descriptor:
    """The message type of a message field."""
    message = field.message_type
    assert message is not None, field.full_name  # protoc gives every message field its type
    return message


def _enum_of(field: FieldDescriptor) -> EnumDescriptor:
    enum = field.enum_type
    assert enum is not None, field.full_name
    return enum


def _same(value: Any) -> Any:
    return value


def _path(seen: tuple[str, ...]) -> str:
    """The field path (``stats.note``, ``tags{}``) of what ``seen`` leads to."""
    return ".".join(seen[1::2]) or "(the value)"


def _wrapped(wrapper: Any) -> Any:
    return wrapper.value


def _wrapped_text(text: _Convert) -> _Convert:
    return lambda wrapper: text(wrapper.value)


def _text_converter(path: str) -> _Convert:
    def text(value: Any) -> Any:
        # A proto2 string field keeps bytes that are not UTF-8 as bytes (proto3 refuses
        # them when parsing): an Arrow string column would take them unchecked.
        if isinstance(value, bytes):
            raise SchemaDecodeError(
                f"field {path} holds {len(value)} byte(s) that are not UTF-8 text: not "
                "written with this schema (or the field is bytes in the writer's)"
            )
        return value

    return text


def _micros_converter(path: str, name: str) -> _Convert:
    def micros(message: Any) -> int:
        # Floor division: sub-microsecond nanos truncate toward the past, also below zero.
        value = int((message.seconds * 1_000_000_000 + message.nanos) // 1000)
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise SchemaDecodeError(
                f"field {path} ({name}) of {message.seconds} s is a time its column cannot "
                "hold (int64 microseconds, about 292,000 years either side of 1970): not "
                "written with this schema"
            )
        return value

    return micros


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _json_converter(path: str) -> RowConverter:
    def json_text(message: Message) -> str:
        try:
            value = json_format.MessageToDict(message)
            return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (ValueError, json_format.Error) as exc:  # NaN and infinities have no JSON form
            raise SchemaDecodeError(
                f"field {path} ({message.DESCRIPTOR.full_name}) has no JSON text: {exc}"
            ) from None

    return json_text
