"""Where a writer schema fails to resolve to a reader schema, for the error message.

fastavro decides whether a value resolves (Avro's specification, "Schema Resolution") and
says why only in type terms ("long is not string"). A user needs the field. This walks the
two schemas along the same rules and returns the path of the first field that cannot be
resolved; it is used only to word an error fastavro already raised, never to decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spark_statestore.schemas.avro_types import named_types

__all__ = ["first_mismatch"]

_PROMOTIONS: Mapping[str, frozenset[str]] = {
    "int": frozenset({"int", "long", "float", "double"}),
    "long": frozenset({"long", "float", "double"}),
    "float": frozenset({"float", "double"}),
    "string": frozenset({"string", "bytes"}),
    "bytes": frozenset({"bytes", "string"}),
}


def first_mismatch(writer: Any, reader: Any) -> str | None:
    """``"field items[].sku: writer long, reader string"``-like text for the first place
    where ``writer`` does not resolve to ``reader`` (both as fastavro parses them), None
    when this walk finds none."""
    named = {**named_types(writer), **named_types(reader)}
    return _walk(writer, reader, "", named, set())


def _walk(
    writer: Any, reader: Any, path: str, named: Mapping[str, Any], seen: set[tuple[str, str]]
) -> str | None:
    writer, reader = _deref(writer, named), _deref(reader, named)
    if isinstance(writer, list):
        for branch in writer:
            found = _walk(branch, reader, path, named, seen)
            if found:
                return found
        return None
    if isinstance(reader, list):
        fits = [_walk(writer, branch, path, named, seen) for branch in reader]
        if any(found is None for found in fits):
            return None
        return f"{_where(path)}: writer {_name(writer)} is no branch of the reader's union"
    w_kind, r_kind = _kind(writer), _kind(reader)
    if w_kind in ("record", "error") and r_kind in ("record", "error"):
        key = (str(writer.get("name")), str(reader.get("name")))
        if key in seen:  # a recursive type already being compared
            return None
        seen.add(key)
        fields = {f["name"]: f for f in writer["fields"]}
        for field in reader["fields"]:
            source = fields.get(field["name"])
            if source is None:
                for alias in field.get("aliases", ()):
                    source = fields.get(alias)
            inner = f"{path}.{field['name']}" if path else field["name"]
            if source is None:
                if "default" not in field:
                    return (
                        f"field {inner}: the reader's field has no default and the writer "
                        "has no such field"
                    )
                continue
            found = _walk(source["type"], field["type"], inner, named, seen)
            if found:
                return found
        return None
    if w_kind == "enum" and r_kind == "enum":
        extra = [s for s in writer["symbols"] if s not in reader["symbols"]]
        if extra and "default" not in reader:
            return f"{_where(path)}: the writer's enum symbol(s) {extra} are not the reader's"
        return None
    if w_kind == r_kind == "array":
        return _walk(writer["items"], reader["items"], f"{path}[]", named, seen)
    if w_kind == r_kind == "map":
        return _walk(writer["values"], reader["values"], f"{path}{{}}", named, seen)
    if w_kind == r_kind == "fixed":
        if writer.get("size") != reader.get("size"):
            return (
                f"{_where(path)}: fixed of {writer.get('size')} bytes, reader {reader.get('size')}"
            )
        return None
    if r_kind in _PROMOTIONS.get(w_kind, frozenset({w_kind})):
        return None
    return f"{_where(path)}: writer {_name(writer)}, reader {_name(reader)}"


def _deref(schema: Any, named: Mapping[str, Any]) -> Any:
    if isinstance(schema, str) and schema in named:
        return named[schema]
    return schema


def _kind(schema: Any) -> str:
    return schema if isinstance(schema, str) else str(schema["type"])


def _name(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    return str(schema.get("name") or schema["type"])


def _where(path: str) -> str:
    return f"field {path}" if path else "the value"
