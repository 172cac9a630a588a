"""Rows encoded as Avro values the way a registry serializer writes them (for the sink).

The input is what :meth:`pyarrow.Array.to_pylist` gives for a column of the writer schema's
Arrow type (:func:`~spark_statestore.schemas.avro_types.arrow_type_of`): dicts for records,
lists of ``(key, value)`` pairs for maps, ``member0``... structs for general unions. They are
turned back into Avro data and written by fastavro with the writer schema, then framed with
its registry id (or left bare). A row that does not fit the schema fails naming the row and
the field; nothing is written loosely.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any

import fastavro
from fastavro.validation import ValidationError, validate

from spark_statestore.schemas.avro import AvroSchema
from spark_statestore.schemas.avro_types import member_branches, named_types
from spark_statestore.schemas.errors import AvroEncodeError, SchemaError
from spark_statestore.schemas.frame import encode_frame

__all__ = ["AvroEncodeError", "AvroValueEncoder"]

Converter = Callable[[Any], Any]


class AvroValueEncoder:
    """Encodes column values with one writer schema.

    Parameters
    ----------
    writer
        The writer schema; its ``schema_id`` goes into each frame.
    framed
        True: the registry serializers' frame (the schema needs an id); False: bare Avro.
    column
        ``"key"`` or ``"value"``, named in messages.
    """

    def __init__(self, writer: AvroSchema, *, framed: bool = True, column: str = "value") -> None:
        if framed and writer.schema_id is None:
            raise SchemaError(f"{writer.what} has no registry id to frame {column}s with")
        self.writer = writer
        self.framed = framed
        self.column = column
        self._convert = _converter(writer.parsed, named_types(writer.parsed))

    def encode(self, values: Sequence[Any], *, locate: Callable[[int], str]) -> list[bytes | None]:
        """Each value's bytes (None stays None: a delete).

        Raises
        ------
        AvroEncodeError
            For the first value that does not fit, naming ``locate(index)`` and the field.
        """
        out: list[bytes | None] = []
        for index, value in enumerate(values):
            if value is None:
                out.append(None)
                continue
            datum = self._convert(value)
            stream = io.BytesIO()
            try:
                fastavro.schemaless_writer(stream, self.writer.parsed, datum)
            except (ValueError, TypeError, KeyError, OverflowError, AttributeError) as exc:
                raise AvroEncodeError(
                    f"the {self.column} of {locate(index)} does not fit {self.writer.what}: "
                    f"{self._why(datum, exc)}"
                ) from None
            payload = stream.getvalue()
            if self.framed:
                assert self.writer.schema_id is not None
                payload = encode_frame(self.writer.schema_id, payload)
            out.append(payload)
        return out

    def _why(self, datum: Any, exc: BaseException) -> str:
        try:
            validate(datum, self.writer.parsed, raise_errors=True)
        except ValidationError as invalid:
            return "; ".join(str(error) for error in invalid.errors) or str(exc)
        except (ValueError, TypeError, KeyError):
            pass
        return str(exc)


def _converter(schema: Any, named: dict[str, Any]) -> Converter:
    """From pyarrow's Python value of the schema's Arrow type to fastavro's datum."""
    if isinstance(schema, list):
        return _union(schema, named)
    if isinstance(schema, str):
        return _converter(named[schema], named) if schema in named else _same
    kind = schema["type"]
    if kind in ("record", "error"):
        named[schema["name"]] = schema
        fields = [(f["name"], _converter(f["type"], named)) for f in schema["fields"]]
        return lambda row: (
            None if row is None else {name: convert(row.get(name)) for name, convert in fields}
        )
    if kind in ("enum", "fixed"):
        named[schema["name"]] = schema
        return _same
    if kind == "array":
        item = _converter(schema["items"], named)
        return lambda items: None if items is None else [item(i) for i in items]
    if kind == "map":
        value = _converter(schema["values"], named)
        return lambda pairs: None if pairs is None else {k: value(v) for k, v in pairs}
    return _same


def _union(branches: list[Any], named: dict[str, Any]) -> Converter:
    kept = member_branches(branches)
    if kept is None:
        single = [b for b in branches if b != "null"][:1]
        inner = _converter(single[0], named) if single else _same
        return lambda value: None if value is None else inner(value)
    members = [_converter(branch, named) for branch in kept]
    names = [_branch_name(branch) for branch in kept]

    def convert(value: Any) -> Any:
        if value is None:
            return None
        chosen = [i for i in range(len(kept)) if value.get(f"member{i}") is not None]
        if len(chosen) != 1:
            raise AvroEncodeError(
                f"a union value must set exactly one of member0..member{len(kept) - 1}, "
                f"got {len(chosen)} set"
            )
        index = chosen[0]
        body = members[index](value[f"member{index}"])
        # Tuple notation names the branch, so fastavro does not guess it from the value.
        return (names[index], body) if names[index] is not None else body

    return convert


def _branch_name(branch: Any) -> str | None:
    if isinstance(branch, dict) and branch.get("type") in ("record", "error", "enum", "fixed"):
        return str(branch["name"])
    if isinstance(branch, str) and branch not in (
        "boolean", "int", "long", "float", "double", "bytes", "string", "null",
    ):  # fmt: skip
        return branch  # a named type referenced by name
    return None


def _same(value: Any) -> Any:
    return value
