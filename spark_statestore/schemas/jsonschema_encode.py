"""Rows encoded as JSON Schema values the way a registry serializer writes them (for the sink).

The input is what :meth:`pyarrow.Array.to_pylist` gives for a column of the writer schema's
Arrow type (:mod:`~spark_statestore.schemas.jsonschema_types`): dicts for structs, lists,
``(key, value)`` pairs (or dicts) for maps, ``date``, aware ``datetime`` (a naive one is UTC,
as pyarrow takes it), ``int``, ``float``, ``bool``, ``str``, and JSON text for the columns the
decoder reads as JSON text. Each value becomes one JSON value:

- a struct: an object of its properties, in the schema's order; a None property is written
  as ``null`` where the writer schema accepts null for it and left out where it does not
  (the validator decides, so ``$ref``, ``oneOf``, ``allOf`` and conditionals count): a reader
  reads a left-out property as its ``default`` (null without one), the one normalization;
- a map: an object; a list: an array (their None items are ``null``);
- a date: ``2026-11-28``; a timestamp: RFC 3339 in UTC, ``2026-11-28T01:02:03Z``, with
  ``.ffffff`` when its microseconds are not zero;
- an integer: a JSON integer within int64; a number: a JSON number (an integral ``Decimal``
  an integer, another a float64; no NaN or infinities);
- a JSON-text column: the JSON its text (or UTF-8 bytes) holds, parsed strictly.

Anything else (bytes outside a JSON-text column, a wrong Python type, a key the schema has
no property for) is refused naming the value's path (``$.lines[2].sku``). The JSON is
compact UTF-8 (``separators=(",", ":")``, ``ensure_ascii=False``) and, by default,
validated against the writer schema with the validator the decoder uses, as Confluent's
JSON serializer validates by default; then framed with the writer's schema id.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from jsonschema.exceptions import ValidationError, best_match

from spark_statestore.errors import closest_hint
from spark_statestore.schemas.errors import SchemaError, ValueEncodeError, describe, shorten
from spark_statestore.schemas.frame import encode_frame
from spark_statestore.schemas.jsonschema import STRICT_JSON, JsonSchema
from spark_statestore.schemas.jsonschema_types import ColumnType, Kind, path_segment
from spark_statestore.schemas.jsonschema_values import Misfit

__all__ = ["JsonSchemaValueEncoder", "ValueEncodeError"]

_Nulls = set[tuple[int, str]]
"""The None properties written as null: (``id`` of their object, property name)."""
_Encode = Callable[[Any, _Nulls], Any]
"""Turns one column value into its JSON value (as :func:`json.loads` returns it), adding
the None properties it writes to the set."""

_UTC = dt.timezone.utc
_INT64 = range(-(2**63), 2**63)


class JsonSchemaValueEncoder:
    """Encodes column values as JSON values of one writer schema.

    Parameters
    ----------
    writer
        The writer schema; its ``schema_id`` goes into each frame.
    framed
        True: the registry serializers' frame (the schema needs an id); False: bare JSON.
    column
        ``"key"`` or ``"value"``, named in messages.
    validate
        Refuse a value the writer schema does not validate. Without, it is written anyway
        (the validator still decides where a None property is null or left out).

    Raises
    ------
    SchemaError
        Framed without a schema id.
    """

    def __init__(
        self,
        writer: JsonSchema,
        *,
        framed: bool = True,
        column: str = "value",
        validate: bool = True,
    ) -> None:
        if framed and writer.schema_id is None:
            raise SchemaError(f"{writer.what} has no registry id to frame {column}s with")
        self.writer = writer
        self.framed = framed
        self.column = column
        self.validate = validate
        self.arrow_type = writer.arrow_type()
        """The Arrow type of the values :meth:`encode` takes."""
        self._encode = _encoder_of(writer.column_type())
        self._validator = writer.validator()

    def encode(self, values: Sequence[Any], *, locate: Callable[[int], str]) -> list[bytes | None]:
        """Each value's bytes (None stays None: a delete).

        Raises
        ------
        ValueEncodeError
            For the first value that does not fit the column or does not validate, naming
            ``locate(index)``, the JSON path and the writer schema.
        """
        out: list[bytes | None] = []
        for index, value in enumerate(values):
            if value is None:
                out.append(None)
                continue
            where = f"the {self.column} of {locate(index)}"
            try:
                document = self._document(value)
                payload = json.dumps(
                    document, separators=(",", ":"), ensure_ascii=False, allow_nan=False
                ).encode("utf-8")
            except Misfit as misfit:
                raise ValueEncodeError(
                    f"{where} does not fit {self.writer.what} at {misfit.where()}: {misfit.reason}"
                ) from None
            except ValidationError as invalid:
                raise ValueEncodeError(
                    f"{where} does not validate against {self.writer.what} at "
                    f"{invalid.json_path}: {shorten(invalid.message)}. Give a value the schema "
                    "accepts, or encode without validation"
                ) from None
            except RecursionError:
                raise ValueEncodeError(f"{where} is nested too deeply to encode") from None
            except UnicodeEncodeError as exc:  # a lone surrogate, from a JSON text's \ud800
                raise ValueEncodeError(f"{where} holds text that is not Unicode: {exc}") from None
            if self.framed:
                assert self.writer.schema_id is not None
                payload = encode_frame(self.writer.schema_id, payload)
            out.append(payload)
        return out

    def _document(self, value: Any) -> Any:
        """The JSON value of ``value``: None properties the schema refuses null for left out,
        validated when ``validate`` (raising the best-matching ValidationError)."""
        nulls: _Nulls = set()
        document = self._encode(value, nulls)
        if not nulls:
            if self.validate:
                self._check(document)
            return document
        errors = list(self._validator.iter_errors(document))
        if not errors:
            return document
        dropped = False
        for path in _null_paths(errors):
            parent = _container(document, path[:-1])
            key = path[-1]
            # several errors may be about one null: it is left out once
            if isinstance(parent, dict) and (id(parent), key) in nulls and key in parent:
                del parent[key]
                dropped = True
        if self.validate:
            if dropped:
                self._check(document)
            else:
                raise best_match(errors)
        return document

    def _check(self, document: Any) -> None:
        if not self._validator.is_valid(document):
            raise best_match(self._validator.iter_errors(document))


def _null_paths(errors: list[ValidationError]) -> Iterator[tuple[Any, ...]]:
    """The paths of the nulls the errors (and the errors under their ``oneOf``, ``anyOf``
    ...) are about."""
    todo = list(errors)
    while todo:
        error = todo.pop()
        if error.instance is None and error.absolute_path:
            yield tuple(error.absolute_path)
        todo.extend(error.context or ())


def _container(document: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        try:
            document = document[step]
        except (KeyError, IndexError, TypeError):
            return None
    return document


# -- values -------------------------------------------------------------------------------
def _encoder_of(column: ColumnType) -> _Encode:
    kind = column.kind
    if kind is Kind.STRUCT:
        return _struct_encoder(column)
    if kind in (Kind.LIST, Kind.MAP):
        assert column.item is not None
        item = _encoder_of(column.item)
        return _list_encoder(item) if kind is Kind.LIST else _map_encoder(item)
    scalar = _SCALARS[kind]
    return lambda value, nulls: None if value is None else scalar(value)


def _struct_encoder(column: ColumnType) -> _Encode:
    names = [p.name for p in column.properties]
    known = frozenset(names)
    fields = [(p.name, path_segment(p.name), _encoder_of(p.type)) for p in column.properties]

    def encode_struct(value: Any, nulls: _Nulls) -> Any:
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise Misfit(f"{describe(value)} where the schema has an object (a dict)")
        for key in value:
            if key not in known:
                hint = closest_hint(str(key), names, noun="properties")
                raise Misfit(f"the schema has no property {key!r}{hint}")
        out: dict[str, Any] = {}
        for name, segment, encode in fields:
            item = value.get(name)
            if item is None:
                nulls.add((id(out), name))  # null, or left out where the schema refuses null
                out[name] = None
                continue
            try:
                out[name] = encode(item, nulls)
            except Misfit as misfit:
                misfit.segments.append(segment)
                raise
        return out

    return encode_struct


def _list_encoder(encode: _Encode) -> _Encode:
    def encode_list(value: Any, nulls: _Nulls) -> Any:
        if value is None:
            return None
        if not isinstance(value, (list, tuple)):
            raise Misfit(f"{describe(value)} where the schema has an array (a list)")
        items = []
        for index, item in enumerate(value):
            try:
                items.append(encode(item, nulls))
            except Misfit as misfit:
                misfit.segments.append(path_segment(index))
                raise
        return items

    return encode_list


def _map_encoder(encode: _Encode) -> _Encode:
    def encode_map(value: Any, nulls: _Nulls) -> Any:
        if value is None:
            return None
        pairs = value.items() if isinstance(value, Mapping) else value
        if not isinstance(value, (Mapping, list, tuple)):
            raise Misfit(f"{describe(value)} where the schema has a map (key, value pairs)")
        out: dict[str, Any] = {}
        for pair in pairs:
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise Misfit(f"a map takes (key, value) pairs, not {describe(pair)}")
            key, item = pair
            if not isinstance(key, str):
                raise Misfit(f"a map's key is a str (a JSON object's name), not {describe(key)}")
            if key in out:
                raise Misfit(f"the key {key!r:.60} is given twice: a JSON object holds it once")
            try:
                out[key] = encode(item, nulls)
            except Misfit as misfit:
                misfit.segments.append(path_segment(key))
                raise
        return out

    return encode_map


def _string(value: Any) -> Any:
    if not isinstance(value, str):
        # JSON has no bytes: only a JSON-text column takes them (as the UTF-8 of its text)
        raise Misfit(f"{describe(value)} where the schema has a string (a str)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise Misfit(f"the text is not Unicode ({exc.reason} at {exc.start})") from None
    return value


def _boolean(value: Any) -> Any:
    if not isinstance(value, bool):
        raise Misfit(f"{describe(value)} where the schema has a boolean (a bool)")
    return value


def _integer(value: Any) -> Any:
    if isinstance(value, decimal.Decimal) and _integral(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise Misfit(f"{describe(value)} where the schema has an integer (an int)")
    if value not in _INT64:
        raise Misfit(f"{value} is beyond int64's range, which its column holds")
    return value


def _integral(value: decimal.Decimal) -> bool:
    return value.is_finite() and value == value.to_integral_value()


def _number(value: Any) -> Any:
    if isinstance(value, decimal.Decimal) and value.is_finite():
        value = int(value) if _integral(value) else float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Misfit(f"{describe(value)} where the schema has a number (a float)")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int beyond float64
        finite = False
    if not finite:
        raise Misfit(f"{value!r:.60} is no JSON number its float64 column holds")
    return value


def _date(value: Any) -> Any:
    if not isinstance(value, dt.date) or isinstance(value, dt.datetime):
        raise Misfit(f"{describe(value)} where the schema has a date (a datetime.date)")
    return value.isoformat()


def _timestamp(value: Any) -> Any:
    if not isinstance(value, dt.datetime):
        raise Misfit(f"{describe(value)} where the schema has a date-time (a datetime)")
    if value.tzinfo is not None:
        try:
            value = value.astimezone(_UTC).replace(tzinfo=None)
        except OverflowError:
            raise Misfit(f"{value} is before year 1 or after 9999 in UTC") from None
    return value.isoformat() + "Z"  # .ffffff only when the microseconds are not zero


def _json_text(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Misfit(f"the JSON text is not UTF-8 ({exc.reason} at {exc.start})") from None
    if not isinstance(value, str):
        raise Misfit(f"{describe(value)} where the schema's column is JSON text (a str)")
    try:
        return STRICT_JSON.decode(value)
    except ValueError as exc:
        raise Misfit(f"{value!r:.60} is not JSON text: {shorten(str(exc))}") from None


_SCALARS: Mapping[Kind, Callable[[Any], Any]] = {
    Kind.STRING: _string,
    Kind.BOOLEAN: _boolean,
    Kind.INTEGER: _integer,
    Kind.NUMBER: _number,
    Kind.DATE: _date,
    Kind.TIMESTAMP: _timestamp,
    Kind.JSON: _json_text,
}
