"""Logical Avro keys as the bytes a store holds them under, for key lookups (``keys``).

A registry serializer writes a key as its frame (magic byte, the schema id it used) and the
Avro binary of that schema, so one logical key has as many byte forms as the key's subject
has schema versions. A lookup encodes each key under every version whose schema the key
column's reader schema covers (every field of the version is a field of the reader, so the
logical key fixes all its bytes) and whose encoding reads back as the same key; the scan
then checks that the store holds keys under no other id
(:attr:`~spark_statestore.store.scan.ScanSpec.framed_ids`): a key stored under an id the
lookup could not encode for fails the read, never reads as absent.

Avro's binary form is one byte string per value except for maps (entries in any order) and
floating-point numbers (``0.0`` and ``-0.0``, NaNs), which Spark compares by value: key
schemas with them are refused for lookups (filter in Spark instead).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from spark_statestore.connectors.spark.option_table import Framing, ValueFormat
from spark_statestore.errors import OptionError
from spark_statestore.schemas import AvroSchema, AvroValueEncoder, SchemaError
from spark_statestore.schemas.avro_types import named_types

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_statestore.connectors.spark.registry_column import RegistryColumn

__all__ = ["avro_key_forms", "avro_lookup_keys"]

_SEVERAL_FORMS = {"map": "map", "float": "float", "double": "double"}


def avro_lookup_keys(
    column: RegistryColumn, values: Sequence[Any], arrow_type: pa.DataType
) -> tuple[list[bytes], frozenset[int] | None]:
    """The stored bytes of the logical keys ``values`` (JSON values of the key column: an
    object of fields for a record), and the schema ids they are encoded under (None for
    bare Avro, which has no ids).

    Raises
    ------
    OptionError
        A key that is not a value of the key column, or a key schema with maps or
        floating-point numbers.
    """
    forms, ids = avro_key_forms(column, values, arrow_type, what="option 'keys'")
    return [raw for key_forms in forms for raw in key_forms], ids


def avro_key_forms(
    column: RegistryColumn, values: Sequence[Any], arrow_type: pa.DataType, *, what: str
) -> tuple[list[list[bytes]], frozenset[int] | None]:
    """Every stored byte form of each logical key of ``values`` (none for a None key), and
    the schema ids they are encoded under (None for bare Avro, which has no ids).

    Raises
    ------
    OptionError
        Naming ``what``: a key that is not a value of the key column, or a key schema with
        maps or floating-point numbers.
    """
    import pyarrow as pa

    if column.format is not ValueFormat.AVRO:
        raise OptionError(
            f"{what}: {column.format.value} keys cannot be looked up (a value has several "
            "byte forms: field order, defaults written or not); filter keys in Spark"
        )
    several = _several_forms(column.reader.parsed, named_types(column.reader.parsed), "key")
    if several is not None:
        raise OptionError(
            f"{what}: the key schema ({column.reader.what}) has a {several}, which has "
            "several byte forms for one value: filter keys in Spark instead"
        )
    logical: list[Any] = []
    for value in values:
        try:
            logical.append(pa.array([value], type=arrow_type).to_pylist()[0])
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as exc:
            raise OptionError(
                f"{what}: {_shown(value)} is not a key of the key column "
                f"({arrow_type}): {exc}. Give each key as JSON of the key's fields"
            ) from None
    forms: list[list[bytes]] = [[] for _ in logical]
    if column.framing is Framing.NONE:
        encoder = AvroValueEncoder(column.reader, framed=False, column="key")
        for key_forms, raw in zip(forms, _encoded(encoder, logical, what), strict=True):
            if raw is not None:
                key_forms.append(raw)
        return forms, None
    decoder = column.decoder()
    ids: set[int] = set()
    for schema_id, writer in sorted(column.writers.items()):
        if _uncovered_field(writer, column.reader) is not None:
            continue  # a key under this id has bytes the logical key does not fix
        ids.add(schema_id)
        encoder = AvroValueEncoder(writer, framed=True, column="key")
        encoded = _encoded(encoder, logical, what, strict=False)
        for key_forms, key, raw in zip(forms, logical, encoded, strict=True):
            if raw is not None and _reads_back(decoder, raw, key, arrow_type):
                key_forms.append(raw)
    return forms, frozenset(ids)


def _encoded(
    encoder: AvroValueEncoder, logical: Sequence[Any], what: str, *, strict: bool = True
) -> list[bytes | None]:
    out: list[bytes | None] = []
    for key in logical:
        if key is None:
            out.append(None)
            continue
        shown = f"key {_shown(key)}"

        def locate(_: int, shown: str = shown) -> str:
            return shown

        try:
            out.extend(encoder.encode([key], locate=locate))
        except SchemaError as exc:
            if strict:
                raise OptionError(f"{what}: {exc}") from None
            out.append(None)  # not a value of this version: no key of it is stored there
    return out


def _reads_back(decoder: Any, raw: bytes, key: Any, arrow_type: pa.DataType) -> bool:
    """Whether ``raw`` reads back as ``key`` (both as Arrow holds them)."""
    import pyarrow as pa

    try:
        return bool(pa.array([decoder.decode_one(raw)], type=arrow_type).to_pylist()[0] == key)
    except (SchemaError, pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return False


def _uncovered_field(writer: AvroSchema, reader: AvroSchema) -> str | None:
    """The path of the first field of ``writer`` that ``reader`` does not have (None: it
    covers them all)."""
    return _uncovered(
        writer.parsed, reader.parsed, named_types(writer.parsed), named_types(reader.parsed), ""
    )


def _uncovered(
    writer: Any, reader: Any, w_named: dict[str, Any], r_named: dict[str, Any], path: str
) -> str | None:
    writer = w_named.get(writer, writer) if isinstance(writer, str) else writer
    reader = r_named.get(reader, reader) if isinstance(reader, str) else reader
    if isinstance(writer, list):
        for branch in writer:
            found = _uncovered(
                branch, _branch_like(branch, reader, w_named), w_named, r_named, path
            )
            if found is not None:
                return found
        return None
    if isinstance(reader, list):
        reader = _branch_like(writer, reader, w_named)
    if not isinstance(writer, dict):
        return None
    kind = writer.get("type")
    if kind in ("record", "error"):
        fields = {}
        if isinstance(reader, dict) and reader.get("type") in ("record", "error"):
            for field in reader["fields"]:
                fields[field["name"]] = field["type"]
                for alias in field.get("aliases", ()):
                    fields[alias] = field["type"]
        for field in writer["fields"]:
            where = f"{path}.{field['name']}" if path else field["name"]
            if field["name"] not in fields:
                return where
            found = _uncovered(field["type"], fields[field["name"]], w_named, r_named, where)
            if found is not None:
                return found
        return None
    if kind == "array" and isinstance(reader, dict) and reader.get("type") == "array":
        return _uncovered(writer["items"], reader["items"], w_named, r_named, f"{path}[]")
    return None


def _branch_like(branch: Any, reader: Any, w_named: dict[str, Any]) -> Any:
    """The branch of a reader union that a writer value of ``branch`` reads as (the reader
    itself when it is not a union)."""
    if not isinstance(reader, list):
        return reader
    name = _name(w_named.get(branch, branch) if isinstance(branch, str) else branch)
    for candidate in reader:
        if _name(candidate) == name:
            return candidate
    return None


def _name(schema: Any) -> Any:
    if isinstance(schema, dict):
        return schema.get("name", schema.get("type"))
    return schema


def _several_forms(schema: Any, named: dict[str, Any], path: str) -> str | None:
    seen: set[str] = set()

    def walk(node: Any, where: str) -> str | None:
        if isinstance(node, str):
            if node in _SEVERAL_FORMS:
                return f"{_SEVERAL_FORMS[node]} at {where}"
            if node in named and node not in seen:
                seen.add(node)
                return walk(named[node], where)
            return None
        if isinstance(node, list):
            return next((f for f in (walk(b, where) for b in node) if f), None)
        kind = node.get("type")
        if kind in _SEVERAL_FORMS:
            return f"{_SEVERAL_FORMS[kind]} at {where}"
        if kind in ("record", "error"):
            seen.add(node["name"])
            for field in node["fields"]:
                found = walk(field["type"], f"{where}.{field['name']}")
                if found:
                    return found
            return None
        if kind == "array":
            return walk(node["items"], f"{where}[]")
        return walk(kind, where) if isinstance(kind, (list, str)) else None

    return walk(schema, path)


def _shown(value: Any) -> str:
    import json

    try:
        return json.dumps(value)[:80]
    except (TypeError, ValueError):
        return repr(value)[:80]
