"""Rows encoded as Protobuf values the way a registry serializer writes them (for the sink).

The input is what :meth:`pyarrow.Array.to_pylist` gives for a column of the writer message's
Arrow type (:mod:`~spark_statestore.schemas.protobuf_types`): dicts for messages, lists,
``(key, value)`` pairs (or dicts) for maps, enum values by name, ``Decimal`` (or ``int``)
for 64-bit unsigned ints, ``datetime`` for ``Timestamp`` (a naive one is UTC, as pyarrow
takes it), ``timedelta`` for ``Duration``, JSON text for ``Struct``/``Value``/``ListValue``.
Each row fills a message of the protobuf library's class, field by field; the library
serializes it (deterministically: map entries sorted), framed with the writer's schema id
and the message's indexes as Confluent's serializer frames it.

None, as Protobuf's presence rules read it back (the decoder gives the row again):

- a field with presence (a message, a wrapper, ``optional``, a oneof member): unset, None;
- a proto3 scalar without presence: its default (0, ``""``, false, the enum's first name),
  the one normalization (so is a field a message's dict lacks);
- a repeated field or a map: empty;
- an item of a repeated field, a map's key or value, a proto2 ``required`` field: refused.

Values are taken strictly: ``bool`` is no int, an int field takes an ``int`` in its range,
a float field a ``float`` or ``int`` (beyond float32: refused, not made infinite), a string
``str``, bytes ``bytes``/``bytearray``/``memoryview``. An enum takes a value's name, or the
decimal text of a number (``"7"``, as the decoder reads a number the enum does not name)
when the enum is open (proto3) or names it. Two members of one oneof, a key the message has
no field for, or a ``Duration`` beyond ±10,000 years fail naming the field's path
(``lines[2].sku``, ``counts{'x'}``).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.message import EncodeError, Message

from spark_statestore.errors import closest_hint
from spark_statestore.schemas.errors import SchemaError, ValueEncodeError, describe
from spark_statestore.schemas.frame import encode_frame
from spark_statestore.schemas.protobuf import ProtobufSchema
from spark_statestore.schemas.protobuf_types import SCALAR_NAMES, WELL_KNOWN_TYPES, message_of

__all__ = ["ProtobufValueEncoder", "ValueEncodeError", "message_indexes"]

_Fill = Callable[[Message, Any], None]
"""Sets a message's fields (or a well-known type's content) from its row value."""
_Convert = Callable[[Any], Any]
"""Checks a scalar and returns what the protobuf library takes for it."""

_F = FieldDescriptor
_MESSAGES = (_F.TYPE_MESSAGE, _F.TYPE_GROUP)
_UTC = dt.timezone.utc
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=_UTC)
_MICROSECOND = dt.timedelta(microseconds=1)
_MAX_DURATION_SECONDS = 315_576_000_000  # google/protobuf/duration.proto: ±10,000 years
_DECIMAL_TEXT = re.compile(r"-?[0-9]{1,11}")
_INT_RANGES: Mapping[str, range] = {
    **dict.fromkeys(("int32", "sint32", "sfixed32"), range(-(2**31), 2**31)),
    **dict.fromkeys(("uint32", "fixed32"), range(2**32)),
    **dict.fromkeys(("int64", "sint64", "sfixed64"), range(-(2**63), 2**63)),
    **dict.fromkeys(("uint64", "fixed64"), range(2**64)),
}
_INT32 = _INT_RANGES["int32"]


class _Misfit(Exception):
    """A value that does not fit its field; the field path is added as it unwinds."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.segments: list[str] = []

    def at(self, segment: str) -> _Misfit:
        self.segments.append(segment)
        return self

    def where(self) -> str:
        return "".join(reversed(self.segments)).removeprefix(".")


class ProtobufValueEncoder:
    """Encodes column values as messages of one writer schema.

    Parameters
    ----------
    writer
        The writer schema; its ``schema_id`` goes into each frame.
    message
        The writer message's full name (``shop.Order``, ``shop.Basket.Item``); None: the
        schema's first message. It must be defined in the schema's own file (a frame's
        message indexes name messages of the registered file only).
    framed
        True: the registry serializers' frame (the schema needs an id); False: bare Protobuf.
    column
        ``"key"`` or ``"value"``, named in messages.

    Raises
    ------
    SchemaError
        Framed without a schema id, no such message (or one of an imported file), or a
        recursive message type (no Arrow column holds it).
    """

    def __init__(
        self,
        writer: ProtobufSchema,
        *,
        message: str | None = None,
        framed: bool = True,
        column: str = "value",
    ) -> None:
        if framed and writer.schema_id is None:
            raise SchemaError(f"{writer.what} has no registry id to frame {column}s with")
        self.writer = writer
        self.framed = framed
        self.column = column
        self.message = writer.message(message)
        """The writer message's descriptor: every value is encoded as it."""
        self.arrow_type = writer.arrow_type(self.message.full_name)
        """The Arrow type of the values :meth:`encode` takes."""
        self.message_indexes = message_indexes(writer, self.message)
        """The message's Confluent message indexes, written in each frame."""
        self._class = message_factory.GetMessageClass(self.message)
        self._fill = _message_filler(self.message)

    def encode(self, values: Sequence[Any], *, locate: Callable[[int], str]) -> list[bytes | None]:
        """Each value's bytes (None stays None: a delete).

        Raises
        ------
        ValueEncodeError
            For the first value that does not fit, naming ``locate(index)``, the field's
            path and the writer schema.
        """
        out: list[bytes | None] = []
        for index, value in enumerate(values):
            if value is None:
                out.append(None)
                continue
            try:
                payload = self._payload(value)
            except _Misfit as misfit:
                path = misfit.where()
                where = f", field {path}" if path else ""
                raise ValueEncodeError(
                    f"the {self.column} of {locate(index)} does not fit message "
                    f"{self.message.full_name} of {self.writer.what}{where}: {misfit.reason}"
                ) from None
            if self.framed:
                assert self.writer.schema_id is not None
                payload = encode_frame(self.writer.schema_id, payload, self.message_indexes)
            out.append(payload)
        return out

    def _payload(self, value: Any) -> bytes:
        built: Any = self._class()  # FindInitializationErrors is missing from the stubs
        try:
            self._fill(built, value)
        except (TypeError, ValueError) as exc:  # a well-known type's, as the whole value
            raise _Misfit(f"the protobuf library refuses it: {exc}") from None
        try:
            payload: bytes = built.SerializeToString(deterministic=True)
        except EncodeError:
            missing = ", ".join(built.FindInitializationErrors())
            raise _Misfit(
                f"required field(s) {missing} are null: proto2 cannot write a message "
                "without its required fields"
            ) from None
        return payload


def message_indexes(writer: ProtobufSchema, message: Descriptor) -> tuple[int, ...]:
    """Confluent's message indexes of ``message`` in ``writer``: the inverse of
    :meth:`~spark_statestore.schemas.protobuf.ProtobufSchema.message_for` (``(0,)`` for the
    first top-level message, ``(1, 0)`` for the first message nested in the second).

    Raises
    ------
    SchemaError
        The message is not defined in the schema's own file.
    """
    steps: list[int] = []
    current = message
    while current.containing_type is not None:
        parent = current.containing_type
        steps.append([m.full_name for m in parent.nested_types].index(current.full_name))
        current = parent
    if current.full_name not in writer.messages:
        raise SchemaError(
            f"message {message.full_name} is not defined in {writer.what} itself but in a "
            "file it imports: a registry frame names messages of the registered file only. "
            "Encode with the schema that defines it"
        )
    return (writer.messages.index(current.full_name), *reversed(steps))


# -- messages -----------------------------------------------------------------------------
def _message_filler(message: Descriptor) -> _Fill:
    name = message.full_name
    if name in WELL_KNOWN_TYPES:
        return _WELL_KNOWN.get(name, _wrapper)(message)
    names = [f.name for f in message.fields]
    known = frozenset(names)
    setters = [(f.name, _field_setter(f)) for f in message.fields]
    oneofs = {
        f.name: f.containing_oneof.name for f in message.fields if f.containing_oneof is not None
    }

    def fill(target: Message, row: Any) -> None:
        if not isinstance(row, Mapping):
            raise _Misfit(f"message {name} takes a dict of its fields, not {describe(row)}")
        for key in row:
            if key not in known:
                hint = closest_hint(str(key), names, noun="fields")
                raise _Misfit(f"message {name} has no field {key!r}{hint}")
        chosen: dict[str, str] = {}
        for field, setter in setters:
            value = row.get(field)
            if value is None:
                continue  # unset: null (with presence), the default (without), empty
            oneof = oneofs.get(field)
            if oneof is not None and chosen.setdefault(oneof, field) != field:
                raise _Misfit(
                    f"fields {chosen[oneof]} and {field} of oneof {oneof} are both set: a "
                    "oneof holds one of its fields (set the others to None)"
                )
            try:
                setter(target, value)
            except _Misfit as misfit:
                raise misfit.at(f".{field}") from None
            except (TypeError, ValueError) as exc:  # what the checks here let through
                raise _Misfit(f"the protobuf library refuses it: {exc}").at(f".{field}") from None

    return fill


def _field_setter(field: FieldDescriptor) -> Callable[[Message, Any], None]:
    name = field.name
    if field.type == _F.TYPE_MESSAGE and message_of(field).GetOptions().map_entry:
        return _map_setter(field)
    if field.type in _MESSAGES:
        fill = _message_filler(message_of(field))
        if field.is_repeated:
            return _repeated_setter(name, lambda items, item: fill(items.add(), item))

        def set_message(target: Message, value: Any) -> None:
            child = getattr(target, name)
            child.SetInParent()  # present even when none of its fields is set
            fill(child, value)

        return set_message
    convert = _scalar_converter(field)
    if field.is_repeated:
        return _repeated_setter(name, lambda items, item: items.append(convert(item)))
    return lambda target, value: setattr(target, name, convert(value))


def _repeated_setter(name: str, add: Callable[[Any, Any], None]) -> Callable[[Message, Any], None]:
    def set_items(target: Message, value: Any) -> None:
        if not isinstance(value, (list, tuple)):
            raise _Misfit(f"a repeated field takes a list, not {describe(value)}")
        items = getattr(target, name)
        for index, item in enumerate(value):
            try:
                add(items, _not_null(item, "an item of a repeated field"))
            except _Misfit as misfit:
                raise misfit.at(f"[{index}]") from None

    return set_items


def _map_setter(field: FieldDescriptor) -> Callable[[Message, Any], None]:
    name = field.name
    entry = message_of(field)
    key_field, value_field = entry.fields_by_number[1], entry.fields_by_number[2]
    convert_key = _scalar_converter(key_field)
    put: Callable[[Any, Any, Any], None]
    if value_field.type in _MESSAGES:
        fill = _message_filler(message_of(value_field))

        def put(container: Any, key: Any, value: Any) -> None:
            fill(container[key], value)  # the library adds the entry's message

    else:
        convert_value = _scalar_converter(value_field)

        def put(container: Any, key: Any, value: Any) -> None:
            container[key] = convert_value(value)

    def set_map(target: Message, value: Any) -> None:
        container = getattr(target, name)
        for key, item in _pairs(value):
            try:
                converted = convert_key(_not_null(key, "a map key"))
                if converted in container:
                    raise _Misfit("the key is given twice: a map holds each key once")
                put(container, converted, _not_null(item, "a map value"))
            except _Misfit as misfit:
                raise misfit.at(f"{{{key!r}}}" if isinstance(key, str) else f"{{{key}}}") from None

    return set_map


def _pairs(value: Any) -> Iterable[tuple[Any, Any]]:
    if isinstance(value, Mapping):
        return list(value.items())
    if isinstance(value, (list, tuple)):
        for pair in value:
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise _Misfit(f"a map takes (key, value) pairs, not {describe(pair)}")
        return value
    raise _Misfit(f"a map takes a list of (key, value) pairs or a dict, not {describe(value)}")


def _not_null(value: Any, what: str) -> Any:
    if value is None:
        raise _Misfit(f"{what} cannot be null in Protobuf")
    return value


# -- scalars ------------------------------------------------------------------------------
def _scalar_converter(field: FieldDescriptor) -> _Convert:
    if field.type == _F.TYPE_ENUM:
        enum = field.enum_type
        assert enum is not None, field.full_name
        return _enum_converter(enum)
    kind = SCALAR_NAMES[field.type]
    if kind in _INT_RANGES:
        return _integer_converter(kind, _INT_RANGES[kind])
    return _OTHER_SCALARS[kind]


def _integer_converter(kind: str, valid: range) -> _Convert:
    unsigned_64 = kind in ("uint64", "fixed64")  # a decimal(20, 0) column

    def integer(value: Any) -> int:
        if unsigned_64 and isinstance(value, decimal.Decimal) and _integral(value):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            takes = "an int (or an integral Decimal)" if unsigned_64 else "an int"
            raise _Misfit(f"{kind} takes {takes}, not {describe(value)}")
        if value not in valid:
            raise _Misfit(f"{value} is beyond {kind}'s range [{valid.start}, {valid.stop - 1}]")
        return value

    return integer


def _integral(value: decimal.Decimal) -> bool:
    return value.is_finite() and value == value.to_integral_value()


def _double(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Misfit(f"a floating-point field takes a float (or an int), not {describe(value)}")
    try:
        return float(value)
    except OverflowError:
        raise _Misfit(f"{value} is beyond a floating-point field's range") from None


def _float(value: Any) -> float:
    number = _double(value)
    try:
        struct.pack("<f", number)  # what the library does to it, refusing an overflow
    except OverflowError:
        raise _Misfit(f"{value!r} is beyond float's (float32's) range") from None
    return number


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Misfit(f"bool takes a bool, not {describe(value)}")
    return value


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise _Misfit(f"string takes a str, not {describe(value)}")
    return value  # the library refuses a lone surrogate: a ValueError


def _bytes(value: Any) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise _Misfit(f"bytes takes bytes, not {describe(value)}")
    return bytes(value)


_OTHER_SCALARS: Mapping[str, _Convert] = {
    "double": _double, "float": _float, "bool": _boolean, "string": _string, "bytes": _bytes
}  # fmt: skip


def _enum_converter(enum: EnumDescriptor) -> _Convert:
    numbers = {value.name: value.number for value in enum.values}
    declared = frozenset(numbers.values())
    is_open = not enum.is_closed

    def convert(value: Any) -> int:
        if isinstance(value, str):
            found = numbers.get(value)
            if found is not None:
                return found
            if _DECIMAL_TEXT.fullmatch(value) and int(value) in _INT32:
                if is_open or int(value) in declared:
                    return int(value)
                raise _Misfit(
                    f"{value!r} is no number of enum {enum.full_name}, a closed (proto2) enum "
                    f"that keeps only its own ({', '.join(map(str, sorted(declared)))})"
                )
        hint = closest_hint(str(value), list(numbers), noun="values")
        number = " or the decimal text of a number" if is_open else ""
        raise _Misfit(
            f"enum {enum.full_name} takes the name of one of its values{number}, not "
            f"{describe(value)}{hint}"
        )

    return convert


# -- well-known types ---------------------------------------------------------------------
def _wrapper(message: Descriptor) -> _Fill:
    convert = _scalar_converter(message.fields_by_name["value"])
    return lambda target, value: setattr(target, "value", convert(value))


def _timestamp(message: Descriptor) -> _Fill:
    def fill(target: Any, value: Any) -> None:  # a message of the schema's own pool
        if not isinstance(value, dt.datetime):
            raise _Misfit(f"{message.full_name} takes a datetime, not {describe(value)}")
        if value.tzinfo is None:
            value = value.replace(tzinfo=_UTC)  # as pyarrow takes a naive datetime
        seconds, micros = divmod((value - _EPOCH) // _MICROSECOND, 1_000_000)
        target.seconds, target.nanos = seconds, micros * 1000  # in range for any datetime

    return fill


def _duration(message: Descriptor) -> _Fill:
    def fill(target: Any, value: Any) -> None:
        if not isinstance(value, dt.timedelta):
            raise _Misfit(f"{message.full_name} takes a timedelta, not {describe(value)}")
        total = value // _MICROSECOND
        seconds, micros = divmod(abs(total), 1_000_000)
        if seconds > _MAX_DURATION_SECONDS:
            raise _Misfit(
                f"{value} is beyond the range of {message.full_name} (±{_MAX_DURATION_SECONDS} "
                "s, about 10,000 years)"
            )
        sign = -1 if total < 0 else 1  # a duration's seconds and nanos share its sign
        target.seconds, target.nanos = sign * seconds, sign * micros * 1000

    return fill


def _json_value(message: Descriptor) -> _Fill:
    def fill(target: Message, value: Any) -> None:
        if not isinstance(value, str):
            raise _Misfit(f"{message.full_name} takes its JSON text, not {describe(value)}")
        try:
            parsed = json.loads(value, parse_constant=_refuse_constant)
        except (ValueError, RecursionError) as exc:
            raise _Misfit(f"{value!r:.60} is not JSON text: {exc}") from None
        try:
            json_format.ParseDict(parsed, target)
        except json_format.ParseError as exc:
            raise _Misfit(f"JSON text {value!r:.60} is no {message.full_name}: {exc}") from None

    return fill


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


_WELL_KNOWN: Mapping[str, Callable[[Descriptor], _Fill]] = {
    "google.protobuf.Timestamp": _timestamp,
    "google.protobuf.Duration": _duration,
    **{f"google.protobuf.{name}": _json_value for name in ("Struct", "Value", "ListValue")},
}
"""The fillers of :data:`~spark_statestore.schemas.protobuf_types.WELL_KNOWN_TYPES` but the
wrappers'. ``Any`` and ``Empty`` are plain messages."""
