"""Avro schemas as Arrow types, the way Spark's ``from_avro`` maps them to Spark types.

=================================  =====================================  ====================
Avro                               Arrow                                  Spark
=================================  =====================================  ====================
null                               null                                   VOID
boolean                            bool                                   BOOLEAN
int                                int32                                  INT
int, logicalType date              date32                                 DATE
long                               int64                                  BIGINT
long, timestamp-millis/-micros     timestamp[us, UTC]                     TIMESTAMP
long, local-timestamp-millis/-us   timestamp[us]                          TIMESTAMP_NTZ
float / double                     float32 / float64                      FLOAT / DOUBLE
bytes, fixed                       binary                                 BINARY
bytes/fixed, logicalType decimal   decimal128(precision, scale)           DECIMAL(p, s)
string (uuid too), enum            string                                 STRING
record                             struct                                 STRUCT
array                              list                                   ARRAY
map                                map<string, value>                     MAP<STRING, value>
union [null, T]                    T                                      T
union [int, long] / [float, dbl]   int64 / float64                        BIGINT / DOUBLE
other unions                       struct<member0, member1, ...>          STRUCT<member0, ...>
=================================  =====================================  ====================

Every column and field is nullable (a delete's value is null, and PERMISSIVE reads null an
undecodable value). ``time-millis`` and ``time-micros`` stay ints, as in ``from_avro``.
Recursive types (a record that contains itself) cannot be a Spark column and are refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from spark_statestore.schemas.errors import SchemaError

__all__ = ["arrow_type_of", "member_branches", "named_types"]

_PRIMITIVES: Mapping[str, pa.DataType] = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}
_MAX_DECIMAL_PRECISION = 38  # Spark's DecimalType


def arrow_type_of(schema: Any) -> pa.DataType:
    """The Arrow type of values of ``schema`` (a schema as :func:`fastavro.parse_schema`
    returns it: named types are defined once and referenced by their full name).

    Raises
    ------
    SchemaError
        For a recursive type or a decimal wider than Spark's 38 digits.
    """
    return _arrow(schema, named_types(schema), ())


def named_types(parsed: Any) -> dict[str, Any]:
    """The named types a schema parsed by :func:`fastavro.parse_schema` defines or takes
    from its references (a new dict, which a walk may add to)."""
    found = parsed.get("__named_schemas") if isinstance(parsed, dict) else None
    return dict(found or {})


def member_branches(branches: list[Any]) -> list[Any] | None:
    """A union's non-null branches when its column is a struct of ``member0``,
    ``member1``...; None when it is one column: ``[null, T]`` (T, nullable), or the
    promotions ``[int, long]`` and ``[float, double]``. Branches are type names or inline
    definitions (dicts)."""
    kept = [b for b in branches if b != "null"]
    names = {b for b in kept if isinstance(b, str)}
    promoted = len(names) == len(kept) and (
        names <= {"int", "long"} or names <= {"float", "double"}
    )
    return None if len(kept) <= 1 or promoted else kept


def _arrow(schema: Any, named: dict[str, Any], seen: tuple[str, ...]) -> pa.DataType:
    if isinstance(schema, list):
        return _union(schema, named, seen)
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        if schema in seen:
            raise SchemaError(
                f"Avro type {schema!r} contains itself: a recursive type cannot be a Spark "
                "column (read the value with format binary)"
            )
        if schema not in named:
            raise SchemaError(f"Avro type {schema!r} is not defined before its use")
        return _arrow(named[schema], named, seen)
    kind = schema["type"]
    logical = schema.get("logicalType")
    if kind in ("record", "error"):
        name = schema["name"]
        named[name] = schema
        inner = (*seen, name)
        return pa.struct(
            [pa.field(f["name"], _arrow(f["type"], named, inner)) for f in schema["fields"]]
        )
    if kind == "enum":
        named[schema["name"]] = schema
        return pa.string()
    if kind == "fixed":
        named[schema["name"]] = schema
        return _decimal(schema) if logical == "decimal" else pa.binary()
    if kind == "array":
        return pa.list_(_arrow(schema["items"], named, seen))
    if kind == "map":
        return pa.map_(pa.string(), _arrow(schema["values"], named, seen))
    if logical == "decimal" and kind == "bytes":
        return _decimal(schema)
    if logical == "date" and kind == "int":
        return pa.date32()
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return pa.timestamp("us", tz="UTC")
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and kind == "long":
        return pa.timestamp("us")
    return _arrow(kind, named, seen)


def _union(branches: list[Any], named: dict[str, Any], seen: tuple[str, ...]) -> pa.DataType:
    members = member_branches(branches)
    if members is not None:
        return pa.struct(
            [pa.field(f"member{i}", _arrow(b, named, seen)) for i, b in enumerate(members)]
        )
    kept = [b for b in branches if b != "null"]
    if not kept:
        return pa.null()
    if len(kept) == 1:
        return _arrow(kept[0], named, seen)
    return pa.int64() if "long" in kept or "int" in kept else pa.float64()


def _decimal(schema: Mapping[str, Any]) -> pa.DataType:
    precision = schema.get("precision")
    scale = schema.get("scale", 0)
    if not isinstance(precision, int) or not 0 < precision <= _MAX_DECIMAL_PRECISION:
        raise SchemaError(
            f"Avro decimal with precision {precision!r}: Spark decimals hold 1 to "
            f"{_MAX_DECIMAL_PRECISION} digits"
        )
    if not isinstance(scale, int) or not 0 <= scale <= precision:
        raise SchemaError(f"Avro decimal with scale {scale!r} outside 0..{precision}")
    return pa.decimal128(precision, scale)
