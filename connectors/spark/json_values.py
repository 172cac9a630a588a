"""JSON values decoded the way Spark's ``from_json`` reads them (the ``json`` format).

A field of the wrong JSON type is an error for that record (:class:`JsonMismatch`, naming
the field path), never a batch failure; a ``STRING`` field takes any JSON value as its text;
decimals are built from the number's text and rounded half up; dates and timestamps come from
ISO-8601 strings (timestamps also from epoch seconds). Missing fields are null; unknown fields
are ignored. A value nested deeper than :data:`MAX_JSON_DEPTH` levels is an error for that
record, as Jackson's ``maxNestingDepth`` makes it one for Spark.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import json
import re
import zoneinfo
from array import array
from collections.abc import Callable
from itertools import accumulate
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from spark_statestore.errors import OptionError

from .ddl import type_to_ddl

__all__ = ["MAX_JSON_DEPTH", "JsonMismatch", "exceeds_json_depth", "json_row", "struct_converter"]

MAX_JSON_DEPTH = 500
"""The deepest nesting of arrays and objects a JSON value may have (the outermost counts as 1).

Python's decoder and encoder recurse once per level, within the interpreter's recursion limit
(1000 frames, shared with the caller's stack): a fixed bound half that deep makes a record's
fate the same wherever it is decoded. Jackson, and so Spark, allow 1000 levels."""


class _JsonFloat(float):
    """A JSON non-integer number that remembers its text (decimals are built from it)."""

    __slots__ = ("text",)
    text: str

    def __new__(cls, text: str) -> _JsonFloat:
        number = super().__new__(cls, text)
        number.text = text
        return number


_JSON = json.JSONDecoder(parse_float=_JsonFloat, parse_constant=_JsonFloat)
_Convert = Callable[[Any], Any]


class JsonMismatch(Exception):
    """A JSON value does not fit the schema; becomes a DecodeError or a counted null."""

    def __init__(self, reason: str, path: tuple[str, ...] = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path = path

    def at(self, step: str) -> JsonMismatch:
        return JsonMismatch(self.reason, (step, *self.path))

    def describe(self) -> str:
        where = "".join(self.path).lstrip(".")
        return f"field {where}: {self.reason}" if where else self.reason


# A JSON string (escapes included), so brackets inside strings do not count as nesting.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))
_BRACKET_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1, +1, -1, -1 as int8


def exceeds_json_depth(text: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON ``text`` nests arrays and objects deeper than ``limit`` levels.

    Counts brackets outside strings, without recursion. Text that is not JSON may be
    answered either way: the decoder rejects it then.
    """
    if text.count(b"[") + text.count(b"{") <= limit:
        return False  # the common case: too few brackets to nest that deep
    steps = array("b", _JSON_STRING.sub(b"", text).translate(_BRACKET_STEPS, _NOT_BRACKETS))
    return max(accumulate(steps), default=0) > limit


def json_row(raw: bytes, convert: _Convert) -> Any:
    if exceeds_json_depth(raw):
        raise JsonMismatch(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        parsed = _JSON.decode(str(raw, "utf-8"))
    except UnicodeDecodeError as exc:
        raise JsonMismatch(f"invalid UTF-8 at byte {exc.start}") from None
    except (ValueError, RecursionError) as exc:
        raise JsonMismatch(f"invalid JSON: {exc}") from None
    return None if parsed is None else convert(parsed)


def _describe(value: Any) -> str:
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:40] + "..."
        return f"string {_json_text(shown)}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, _JsonFloat):
        return f"number {value.text}"
    if isinstance(value, int):
        return f"number {value}"
    return "an object" if isinstance(value, dict) else "an array"


def _mismatch(expected: str, value: Any) -> JsonMismatch:
    return JsonMismatch(f"expected {expected}, got {_describe(value)}")


def struct_converter(schema: StructType, zone: dt.tzinfo) -> _Convert:
    fields = [(f.name, _json_converter(f.dataType, zone), f.nullable) for f in schema.fields]

    def convert(value: Any) -> dict[str, Any]:
        if type(value) is not dict:
            raise _mismatch("a JSON object", value)
        row: dict[str, Any] = {}
        for name, convert_field, nullable in fields:
            item = value.get(name)
            if item is None:
                if not nullable:
                    raise JsonMismatch(
                        "missing or null, but the schema says NOT NULL", (f".{name}",)
                    )
                row[name] = None
                continue
            try:
                row[name] = convert_field(item)
            except JsonMismatch as exc:
                raise exc.at(f".{name}") from None
        return row

    return convert


def _json_converter(data_type: DataType, zone: dt.tzinfo) -> _Convert:
    if isinstance(data_type, StructType):
        return struct_converter(data_type, zone)
    if isinstance(data_type, ArrayType):
        return _array_converter(_json_converter(data_type.elementType, zone))
    if isinstance(data_type, MapType):
        return _map_converter(_json_converter(data_type.valueType, zone))
    if isinstance(data_type, StringType):
        return _to_string
    if isinstance(data_type, BooleanType):
        return _to_boolean
    if isinstance(data_type, (ByteType, ShortType, IntegerType, LongType)):
        return _int_converter(data_type)
    if isinstance(data_type, (FloatType, DoubleType)):
        return _to_float
    if isinstance(data_type, DecimalType):
        return _decimal_converter(data_type)
    if isinstance(data_type, BinaryType):
        return _to_binary
    if isinstance(data_type, DateType):
        return _to_date
    if isinstance(data_type, TimestampType):
        return lambda value: _to_micros(value, zone)
    if isinstance(data_type, TimestampNTZType):
        return lambda value: _to_micros(value, None)
    raise OptionError(f"JSON decoding does not support {data_type.simpleString()}")


def _array_converter(convert_element: _Convert) -> _Convert:
    def convert(value: Any) -> list[Any]:
        if type(value) is not list:
            raise _mismatch("an array", value)
        items = []
        for index, item in enumerate(value):
            try:
                items.append(None if item is None else convert_element(item))
            except JsonMismatch as exc:
                raise exc.at(f"[{index}]") from None
        return items

    return convert


def _map_converter(convert_value: _Convert) -> _Convert:
    def convert(value: Any) -> list[tuple[str, Any]]:
        if type(value) is not dict:
            raise _mismatch("an object (for a MAP)", value)
        entries = []
        for key, item in value.items():
            try:
                entries.append((_utf8_text(key), None if item is None else convert_value(item)))
            except JsonMismatch as exc:
                raise exc.at(f"[{_json_text(key)}]") from None
        return entries

    return convert


# A "\ud800" escape without its pair decodes to a lone surrogate, which is not UTF-8: Spark
# (Java's String.getBytes) stores "?" in its place, and Jackson writes it as an escape again.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _utf8_text(text: str) -> str:
    """``text`` as Spark stores a JSON string: a lone surrogate becomes ``?``."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub("?", text)


def _escape_surrogate(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04X}"


def _json_text(value: Any) -> str:
    """Compact JSON text of ``value`` as Jackson writes it: UTF-8, lone surrogates escaped."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text if text.isascii() else _SURROGATE.sub(_escape_surrogate, text)


def _to_string(value: Any) -> str:
    if type(value) is str:
        return _utf8_text(value)
    if isinstance(value, _JsonFloat):
        return value.text
    return _json_text(value)  # like Spark: any other JSON value is kept as its JSON text


def _to_boolean(value: Any) -> bool:
    if value is True or value is False:
        return value
    raise _mismatch("BOOLEAN (true or false)", value)


_INT_BITS: dict[type[DataType], int] = {ByteType: 8, ShortType: 16, IntegerType: 32, LongType: 64}


def _int_converter(data_type: DataType) -> _Convert:
    bits = _INT_BITS[type(data_type)]
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    expected = f"{type_to_ddl(data_type)} (an integer from {low} to {high})"

    def convert(value: Any) -> int:
        if type(value) is int and low <= value <= high:
            return value
        raise _mismatch(expected, value)

    return convert


_FLOAT_WORDS = {
    "NaN": float("nan"),
    "Infinity": float("inf"),
    "+Infinity": float("inf"),
    "+INF": float("inf"),
    "-Infinity": float("-inf"),
    "-INF": float("-inf"),
}


def _to_float(value: Any) -> float:
    kind = type(value)
    if kind is _JsonFloat:
        return float(value)
    if kind is int:
        try:
            return float(value)
        except OverflowError:
            return float("inf") if value > 0 else float("-inf")
    if kind is str and value in _FLOAT_WORDS:
        return _FLOAT_WORDS[value]
    raise _mismatch("a number (or NaN, Infinity, -Infinity as strings)", value)


_DECIMAL_TEXT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_DECIMAL_CONTEXT = decimal.Context(prec=200, Emax=10_000, Emin=-10_000)


def _decimal_converter(data_type: DecimalType) -> _Convert:
    precision, scale = data_type.precision, data_type.scale
    quantum = decimal.Decimal(1).scaleb(-scale)
    expected = f"{type_to_ddl(data_type)} (a number with at most {precision - scale} digits "
    expected += "before the point)"

    def convert(value: Any) -> decimal.Decimal:
        kind = type(value)
        if kind is int:
            text = str(value)
        elif kind is _JsonFloat:
            text = value.text
        elif kind is str:
            text = value.replace(",", "")  # Spark's decimal parser drops grouping commas
        else:
            raise _mismatch(expected, value)
        if not _DECIMAL_TEXT.fullmatch(text):
            raise _mismatch(expected, value)
        try:
            rounded = decimal.Decimal(text).quantize(
                quantum, rounding=decimal.ROUND_HALF_UP, context=_DECIMAL_CONTEXT
            )
        except decimal.InvalidOperation:
            raise _mismatch(expected, value) from None
        if len(rounded.as_tuple().digits) > precision:
            raise _mismatch(expected, value)
        return rounded

    return convert


def _to_binary(value: Any) -> bytes:
    if type(value) is str:
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            pass
    raise _mismatch("BINARY (a base64 string)", value)


_DATE = re.compile(r"\s*(\d{4})(?:-(\d{1,2})(?:-(\d{1,2})(?:[T ].*)?)?)?\s*", re.DOTALL)
_TIMESTAMP = re.compile(
    r"\s*(?P<year>\d{4})(?:-(?P<month>\d{1,2})(?:-(?P<day>\d{1,2}))?)?"
    r"(?:[T ](?P<hour>\d{1,2})(?::(?P<minute>\d{1,2})"
    r"(?::(?P<second>\d{1,2})(?:\.(?P<fraction>\d{1,9}))?)?)?)?"
    r"\s*(?P<zone>Z|[+-]\d{1,2}(?::?\d{2}){0,2}|(?:UTC|GMT|UT)(?:[+-]\d{1,2}(?::?\d{2})?)?"
    r"|[A-Za-z][\w+\-]*(?:/[\w+\-]+)+)?\s*"
)
_OFFSET = re.compile(r"([+-])(\d{1,2})(?::?(\d{2}))?(?::?(\d{2}))?")
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = _EPOCH.replace(tzinfo=dt.timezone.utc)
_MICROSECOND = dt.timedelta(microseconds=1)
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _to_date(value: Any) -> dt.date:
    match = _DATE.fullmatch(value) if type(value) is str else None
    if match:
        year, month, day = (int(part) if part else 1 for part in match.groups())
        try:
            return dt.date(year, month, day)
        except ValueError:
            pass
    raise _mismatch("DATE (a string like 2024-05-31)", value)


def _to_micros(value: Any, zone: dt.tzinfo | None) -> int:
    """Microseconds since the epoch; ``zone`` None means TIMESTAMP_NTZ (wall-clock time)."""
    stamp = None
    if type(value) is int and zone is not None:
        micros = value * 1_000_000  # Spark reads a JSON integer as epoch seconds
        if _INT64[0] <= micros <= _INT64[1]:
            return micros
    elif type(value) is str:
        stamp = _parse_timestamp(value)
    if stamp is not None:
        if zone is None and stamp.tzinfo is None:
            return (stamp - _EPOCH) // _MICROSECOND
        if zone is not None:
            if stamp.tzinfo is None:
                stamp = stamp.replace(tzinfo=zone)
            return (stamp - _EPOCH_UTC) // _MICROSECOND
    if zone is None:
        raise _mismatch("TIMESTAMP_NTZ (an ISO-8601 string without a time zone)", value)
    raise _mismatch("TIMESTAMP (an ISO-8601 string or epoch seconds)", value)


def _parse_timestamp(text: str) -> dt.datetime | None:
    """The timestamp in ``text`` (aware when a zone is written), None when there is none."""
    try:
        if len(text) >= 19 and text[10] in "T " and text[13] == ":" and text[16] == ":":
            try:  # the common spelling, parsed in C
                return dt.datetime.fromisoformat(text)
            except ValueError:
                pass  # another spelling Spark accepts: the general parser below
        match = _TIMESTAMP.fullmatch(text)
        if match is None:
            return None
        stamp = dt.datetime(
            int(match["year"]),
            int(match["month"] or 1),
            int(match["day"] or 1),
            int(match["hour"] or 0),
            int(match["minute"] or 0),
            int(match["second"] or 0),
            int((match["fraction"] or "").ljust(6, "0")[:6]),
        )
        return stamp.replace(tzinfo=_written_zone(match["zone"])) if match["zone"] else stamp
    except (ValueError, OverflowError, zoneinfo.ZoneInfoNotFoundError):
        return None


def _written_zone(text: str) -> dt.tzinfo:
    if text == "Z":
        return dt.timezone.utc
    for prefix in ("UTC", "GMT", "UT"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
            if not text:
                return dt.timezone.utc
            break
    offset = _OFFSET.fullmatch(text)
    if offset is None:
        return zoneinfo.ZoneInfo(text)
    sign, hours, minutes, seconds = offset.groups()
    delta = dt.timedelta(hours=int(hours), minutes=int(minutes or 0), seconds=int(seconds or 0))
    return dt.timezone(-delta if sign == "-" else delta)
