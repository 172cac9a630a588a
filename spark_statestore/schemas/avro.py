"""Avro values, framed by a registry serializer or bare, decoded to one reader schema.

Decoding is fastavro's (the maintained C-accelerated Avro implementation for Python): each
value is read with its own writer schema (found by the frame's schema id) and resolved to
the reader schema by Avro's rules (fields added with defaults, fields dropped, promotions,
enum symbols, union branches). The values then become Arrow arrays of
:func:`~spark_statestore.schemas.avro_types.arrow_type_of` the reader schema. A batch that
arrives as an Arrow array (:meth:`AvroValueDecoder.decode_array`: the feed, the snapshot
reader) is decoded in bulk by the compiled path when it answers
(:mod:`~spark_statestore.schemas.avro_native`), which gives only answers equal to these.

A value is never decoded loosely: a payload that ends before its schema does, or has bytes
left after it, is an error, since reading bytes with the wrong writer schema otherwise
yields plausible garbage.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import fastavro
import pyarrow as pa
from fastavro.read import SchemaResolutionError as FastavroResolutionError

from spark_statestore.schemas.avro_native import NativeAvroColumn
from spark_statestore.schemas.avro_resolution import first_mismatch
from spark_statestore.schemas.avro_types import arrow_type_of, member_branches, named_types
from spark_statestore.schemas.decoding import ValueDecoder, WriterCache, writer_named
from spark_statestore.schemas.errors import (
    SchemaDecodeError,
    SchemaError,
    SchemaResolutionError,
)
from spark_statestore.schemas.frame import parse_frame
from spark_statestore.schemas.schema_text import SchemaText

__all__ = ["AvroSchema", "AvroValueDecoder"]

Converter = Callable[[Any], Any]
"""Turns one value as fastavro returns it into what :func:`pyarrow.array` takes."""

_DECODE_FAILURES = (
    EOFError,
    StopIteration,
    ValueError,
    IndexError,
    KeyError,
    TypeError,
    OverflowError,
    UnicodeDecodeError,
)


@dataclass(frozen=True)
class AvroSchema(SchemaText[str]):
    """One Avro schema: its text, and where it came from for messages.

    Its ``references`` are the texts of the schemas it references (a registry's schema
    references), each before those that use its types.

    Build it with :meth:`parse`. Picklable (it holds the text; the parsed form is rebuilt
    where it is used).
    """

    _parsed: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def parse(
        cls,
        text: str,
        *,
        what: str,
        schema_id: int | None = None,
        references: tuple[str, ...] = (),
    ) -> AvroSchema:
        """Parse and check ``text`` (with the named types of ``references``).

        Raises
        ------
        SchemaError
            Not JSON, or not a valid Avro schema (fastavro's reason), or a type that cannot
            be a Spark column.
        """
        parsed = _parse(text, what, references)
        schema = cls(text, what, schema_id, references, parsed)
        schema.arrow_type()  # refuses recursive types and too wide decimals now
        return schema

    @property
    def parsed(self) -> Any:
        """The schema as :func:`fastavro.parse_schema` returns it."""
        if self._parsed is None:
            object.__setattr__(self, "_parsed", _parse(self.text, self.what, self.references))
        return self._parsed

    def arrow_type(self) -> pa.DataType:
        """The Arrow type of its values (:mod:`~spark_statestore.schemas.avro_types`)."""
        try:
            return arrow_type_of(self.parsed)
        except SchemaError as exc:
            raise SchemaError(f"{self.what}: {exc}") from None


WriterLookup = Callable[[int], AvroSchema]
"""The writer schema registered under an id (raises a RegistryError when it cannot)."""


class AvroValueDecoder(ValueDecoder):
    """Decodes batches of stored bytes written with Avro to the reader schema.

    Parameters
    ----------
    reader
        The reader schema: every value is resolved to it.
    writers
        The writer schema of a frame's schema id (a registry lookup, cached here); None
        for bare Avro (no frame), written with ``reader`` itself.
    subject
        The registry subject, named in messages (None without a registry).
    column
        ``"key"`` or ``"value"``, named in messages.
    """

    def __init__(
        self,
        reader: AvroSchema,
        writers: WriterLookup | None,
        *,
        subject: str | None = None,
        column: str = "value",
    ) -> None:
        self.reader = reader
        self.subject = subject
        self.column = column
        self._writers = WriterCache(writers) if writers is not None else None
        self._convert = _converter(reader.parsed, named_types(reader.parsed))
        self.arrow_type = reader.arrow_type()
        self._native = (
            NativeAvroColumn(reader.parsed, framed=writers is not None, branch_index=_branch_index)
            if NativeAvroColumn.available()
            else None
        )

    def decode_array(
        self,
        values: pa.Array,
        *,
        locate: Callable[[int], str],
        permissive: bool,
        arrow_type: pa.DataType | None = None,
    ) -> tuple[pa.Array, int]:
        """:meth:`decode` of an Arrow binary array: decoded in bulk by the compiled path
        (:mod:`~spark_statestore.schemas.avro_native`, no Python object per value) when it
        answers for the batch, else value by value as :meth:`decode` does (which names a bad
        value, or nulls and counts it)."""
        if self._native is not None:
            writers = self._writers
            found = self._native.decode(
                values,
                arrow_type or self.arrow_type,
                None if writers is None else (lambda schema_id: writers(schema_id).parsed),
            )
            if found is not None:
                return found, 0
        return self.decode(
            values.to_pylist(), locate=locate, permissive=permissive, arrow_type=arrow_type
        )

    def decode_one(self, raw: bytes) -> Any:
        """One value, as :func:`pyarrow.array` takes it.

        Raises
        ------
        FrameError, SchemaDecodeError, SchemaResolutionError, RegistryError
        """
        return self._convert(self.read(raw))

    def read(self, raw: bytes) -> Any:
        """One value as Avro data (fastavro's: dicts for records and maps, a named union
        branch as ``(name, value)``), resolved to the reader schema.

        Raises
        ------
        FrameError, SchemaDecodeError, SchemaResolutionError, RegistryError
        """
        if self._writers is None:
            writer, offset, schema_id = self.reader.parsed, 0, None
        else:
            frame = parse_frame(raw)
            schema_id, offset = frame.schema_id, frame.payload_offset
            writer = self._writers(schema_id).parsed
        stream = io.BytesIO(raw)
        stream.seek(offset)
        try:
            value = fastavro.schemaless_reader(
                stream, writer, self.reader.parsed, return_named_type=True
            )
        except FastavroResolutionError as exc:
            where = first_mismatch(writer, self.reader.parsed) or str(exc)
            raise SchemaResolutionError(
                f"{self._which(schema_id)} cannot be read as the reader schema "
                f"({self.reader.what}): {where}. Avro's rules allow adding fields with a "
                "default, removing fields, and type promotions; read with the writer's "
                "schema version, or evolve the schema by those rules"
            ) from None
        except _DECODE_FAILURES as exc:
            raise SchemaDecodeError(
                f"{len(raw) - offset} payload byte(s) do not decode with "
                f"{self._which(schema_id)}: {type(exc).__name__} {exc}".rstrip()
            ) from None
        left = len(raw) - stream.tell()
        if left:
            raise SchemaDecodeError(
                f"{left} byte(s) are left after the value decoded with "
                f"{self._which(schema_id)}: it was written with another schema"
            )
        return value

    def _which(self, schema_id: int | None) -> str:
        return writer_named(schema_id, self.reader, self.subject)


# -- fastavro's values to Arrow's ---------------------------------------------------------
def _converter(schema: Any, named: dict[str, Any]) -> Converter:
    """A function from fastavro's value of ``schema`` to pyarrow's input (None: as is)."""
    if isinstance(schema, list):
        return _union_converter(schema, named)
    if isinstance(schema, str):
        if schema in named:
            return _converter(named[schema], named)
        return _same
    kind = schema["type"]
    logical = schema.get("logicalType")
    if kind in ("record", "error"):
        named[schema["name"]] = schema
        fields = [(f["name"], _converter(f["type"], named)) for f in schema["fields"]]
        if all(convert is _same for _, convert in fields):
            return _same
        return lambda record: (
            None
            if record is None
            else {name: convert(record.get(name)) for name, convert in fields}
        )
    if kind in ("enum", "fixed"):
        named[schema["name"]] = schema
        return _same
    if kind == "array":
        item = _converter(schema["items"], named)
        if item is _same:
            return _same
        return lambda items: None if items is None else [item(i) for i in items]
    if kind == "map":
        value = _converter(schema["values"], named)
        if value is _same:
            return _pairs
        return lambda entries: (
            None if entries is None else [(k, value(v)) for k, v in entries.items()]
        )
    if logical == "uuid":
        return _uuid
    if logical == "time-millis" and kind == "int":
        return _time_millis
    if logical == "time-micros" and kind == "long":
        return _time_micros
    return _same


def _union_converter(branches: list[Any], named: dict[str, Any]) -> Converter:
    kept = member_branches(branches)
    if kept is None:
        single = [b for b in branches if b != "null"][:1]
        inner = _converter(single[0], named) if single else _same
        return lambda value: None if value is None else inner(_unnamed(value))
    members = [(branch, _converter(branch, named)) for branch in kept]
    names = [f"member{i}" for i in range(len(kept))]

    def convert(value: Any) -> Any:
        if value is None:
            return None
        index = _branch_index(kept, value, named)
        body = value[1] if isinstance(value, tuple) else value
        return {name: members[i][1](body) if i == index else None for i, name in enumerate(names)}

    return convert


def _branch_index(branches: list[Any], value: Any, named: Mapping[str, Any]) -> int:
    """Which branch of a union (without null) ``value`` came from: fastavro tags named
    types (``return_named_type``); the others are told apart by their Python type."""
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        for index, branch in enumerate(branches):
            if _type_name(branch) == value[0]:
                return index
    for index, branch in enumerate(branches):
        if _python_match(_type_name(branch), value):
            return index
    raise SchemaDecodeError(f"a union value {value!r:.60} matches none of its branches")


def _type_name(branch: Any) -> str:
    if isinstance(branch, str):
        return branch
    return str(branch.get("name") or branch.get("logicalType") or branch["type"])


_PY_TYPES: Mapping[str, tuple[type, ...]] = {
    "boolean": (bool,),
    "int": (int,),
    "long": (int,),
    "float": (float,),
    "double": (float,),
    "bytes": (bytes,),
    "string": (str,),
    "array": (list,),
    "map": (dict,),
    "date": (dt.date,),
    "timestamp-millis": (dt.datetime,),
    "timestamp-micros": (dt.datetime,),
    "local-timestamp-millis": (dt.datetime,),
    "local-timestamp-micros": (dt.datetime,),
    "uuid": (uuid.UUID, str),
}


def _python_match(name: str, value: Any) -> bool:
    types = _PY_TYPES.get(name)
    if types is None or (isinstance(value, bool) and bool not in types):
        return False
    return isinstance(value, types)


def _same(value: Any) -> Any:
    return value


def _unnamed(value: Any) -> Any:
    # A single named branch in a nullable union still comes tagged (return_named_type).
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return value[1]
    return value


def _pairs(entries: Mapping[str, Any] | None) -> Any:
    return None if entries is None else list(entries.items())


def _uuid(value: Any) -> Any:
    return None if value is None else str(value)


def _time_millis(value: Any) -> Any:
    if isinstance(value, dt.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + (
            value.microsecond // 1000
        )
    return value


def _time_micros(value: Any) -> Any:
    if isinstance(value, dt.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + (
            value.microsecond
        )
    return value


def _parse(text: str, what: str, references: tuple[str, ...] = ()) -> Any:
    named: dict[str, Any] = {}
    for number, reference in enumerate(references):
        _parse_one(reference, f"{what}, reference {number}", named)
    return _parse_one(text, what, named)


def _parse_one(text: str, what: str, named: dict[str, Any]) -> Any:
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise SchemaError(f"{what} is not an Avro schema: not JSON ({exc})") from None
    try:
        return fastavro.parse_schema(body, named)
    except (fastavro.schema.SchemaParseException, ValueError, TypeError, KeyError) as exc:
        raise SchemaError(f"{what} is not a valid Avro schema: {exc}") from None
