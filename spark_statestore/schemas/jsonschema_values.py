"""JSON values as the columns of :mod:`~spark_statestore.schemas.jsonschema_types` hold them.

:func:`converter_of` compiles, once per schema, the function from a JSON value to its
column's :func:`pyarrow.array` input. Nothing is coerced: a string column takes JSON strings
only, an integer column integers (``2.0`` too) within int64, a number column any finite
number. A ``date`` is RFC 3339's ``full-date`` (``2026-11-28``); a ``date-time`` RFC 3339's
``date-time`` with its offset (``Z`` or ``+05:30``), its fraction cut to microseconds, and no
leap second (Spark has none). Anything else raises :class:`Misfit`, with the value's path.

The JSON text of a JSON column is compact and keeps the writer's key order:
``json.dumps(value, separators=(",", ":"), ensure_ascii=False)`` of the parsed value (so a
number is written as Python writes it back: ``1E2`` becomes ``100.0``).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from spark_statestore.schemas.jsonschema_types import (
    NO_DEFAULT,
    ColumnType,
    Kind,
    path_segment,
)

__all__ = ["Converter", "Misfit", "converter_of"]

Converter = Callable[[Any], Any]
"""Turns one JSON value (as :func:`json.loads` returns it) into what :func:`pyarrow.array`
takes for its column; raises :class:`Misfit` for a value the column cannot hold."""

_INT64 = range(-(2**63), 2**63)
_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
_DATE_TIME = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))"
)
_EXPECTED: Mapping[Kind, str] = {
    Kind.STRUCT: "an object (struct)",
    Kind.MAP: "an object (map)",
    Kind.LIST: "an array",
    Kind.STRING: "a string",
    Kind.DATE: "a date string (RFC 3339 full-date, 2026-11-28)",
    Kind.TIMESTAMP: "a date-time string (RFC 3339 with an offset, 2026-11-28T01:02:03.5Z)",
    Kind.INTEGER: "an integer (int64)",
    Kind.NUMBER: "a number (float64)",
    Kind.BOOLEAN: "a boolean",
}


class Misfit(Exception):
    """A value its reader column cannot hold; the path is added as the error unwinds."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.segments: list[str] = []

    def where(self) -> str:
        return "$" + "".join(reversed(self.segments))


def converter_of(column: ColumnType) -> Converter:
    """The converter of ``column``'s values; the defaults of its properties are converted
    now (a default the column cannot hold raises :class:`Misfit`, with its path)."""
    kind = column.kind
    if kind is Kind.STRUCT:
        return _struct_converter(column)
    if kind is Kind.LIST:
        assert column.item is not None
        return _list_converter(converter_of(column.item))
    if kind is Kind.MAP:
        assert column.item is not None
        return _map_converter(converter_of(column.item))
    return _SCALARS[kind]


def _struct_converter(column: ColumnType) -> Converter:
    fields: list[tuple[str, str, Converter, Any]] = []
    for prop in column.properties:
        convert = converter_of(prop.type)
        default = None
        if prop.default is not NO_DEFAULT:
            try:
                default = convert(prop.default)
            except Misfit as misfit:
                misfit.reason = f"its default {json.dumps(prop.default):.60}: {misfit.reason}"
                misfit.segments.append(path_segment(prop.name))
                raise
        fields.append((prop.name, path_segment(prop.name), convert, default))
    absent = object()

    def convert_struct(value: Any) -> Any:
        if value is None:
            return None
        if type(value) is not dict:
            raise Misfit(_mismatch(value, Kind.STRUCT))
        row = {}
        for name, segment, convert, default in fields:
            item = value.get(name, absent)
            if item is absent:
                row[name] = default
                continue
            try:
                row[name] = convert(item)
            except Misfit as misfit:
                misfit.segments.append(segment)
                raise
        return row

    return convert_struct


def _list_converter(convert: Converter) -> Converter:
    def convert_list(value: Any) -> Any:
        if value is None:
            return None
        if type(value) is not list:
            raise Misfit(_mismatch(value, Kind.LIST))
        items = []
        for index, item in enumerate(value):
            try:
                items.append(convert(item))
            except Misfit as misfit:
                misfit.segments.append(path_segment(index))
                raise
        return items

    return convert_list


def _map_converter(convert: Converter) -> Converter:
    def convert_map(value: Any) -> Any:
        if value is None:
            return None
        if type(value) is not dict:
            raise Misfit(_mismatch(value, Kind.MAP))
        entries = []
        for key, item in value.items():
            try:
                entries.append((key, convert(item)))
            except Misfit as misfit:
                misfit.segments.append(path_segment(key))
                raise
        return entries

    return convert_map


def _string(value: Any) -> Any:
    if value is None or type(value) is str:
        return value
    raise Misfit(_mismatch(value, Kind.STRING))


def _boolean(value: Any) -> Any:
    if value is None or type(value) is bool:
        return value
    raise Misfit(_mismatch(value, Kind.BOOLEAN))


def _integer(value: Any) -> Any:
    if value is None:
        return None
    if type(value) is int:
        if value in _INT64:
            return value
    elif type(value) is float:
        if not value.is_integer():
            raise Misfit(f"{value!r} is not an integer")
        if int(value) in _INT64:
            return int(value)
    else:
        raise Misfit(_mismatch(value, Kind.INTEGER))
    raise Misfit(f"{value!r:.60} is beyond int64's range")


def _number(value: Any) -> Any:
    if value is None:
        return None
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:
            raise Misfit(f"{value!r:.60} is beyond float64's range") from None
    if type(value) is not float:
        raise Misfit(_mismatch(value, Kind.NUMBER))
    if not math.isfinite(value):
        raise Misfit("a number beyond float64's range")
    return value


def _date(value: Any) -> Any:
    if value is None:
        return None
    if type(value) is not str:
        raise Misfit(_mismatch(value, Kind.DATE))
    match = _DATE.fullmatch(value)
    try:
        if match is None:
            raise ValueError("not YYYY-MM-DD")
        return dt.date(*(int(part) for part in match.groups()))
    except ValueError:
        raise Misfit(f"{value!r:.60} is not {_EXPECTED[Kind.DATE]}") from None


def _timestamp(value: Any) -> Any:
    if value is None:
        return None
    if type(value) is not str:
        raise Misfit(_mismatch(value, Kind.TIMESTAMP))
    match = _DATE_TIME.fullmatch(value)
    try:
        if match is None:
            raise ValueError("not RFC 3339")
        year, month, day, hour, minute, second, fraction, sign, hours, minutes = match.groups()
        offset = dt.timedelta(hours=int(hours or 0), minutes=int(minutes or 0))
        micros = int((fraction or "0")[:6].ljust(6, "0"))  # Spark keeps microseconds
        zone = dt.timezone(-offset if sign == "-" else offset)
        moment = dt.datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), micros, zone
        )
        return moment.astimezone(dt.timezone.utc)
    except (ValueError, OverflowError):
        raise Misfit(f"{value!r:.60} is not {_EXPECTED[Kind.TIMESTAMP]}") from None


def _json_text(value: Any) -> Any:
    if value is None:
        return None
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError:  # 1e400 read as inf
        raise Misfit("a number beyond float64's range") from None


_SCALARS: Mapping[Kind, Converter] = {
    Kind.STRING: _string,
    Kind.BOOLEAN: _boolean,
    Kind.INTEGER: _integer,
    Kind.NUMBER: _number,
    Kind.DATE: _date,
    Kind.TIMESTAMP: _timestamp,
    Kind.JSON: _json_text,
}


def _mismatch(value: Any, kind: Kind) -> str:
    return f"{_describe(value)} where the reader has {_EXPECTED[kind]}"


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"a boolean ({json.dumps(value)})"
    if isinstance(value, int):
        return f"an integer ({value!r:.40})"
    if isinstance(value, float):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return f"a string ({value!r:.60})"
    return "an object" if isinstance(value, dict) else "an array"
