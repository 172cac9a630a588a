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

__all__ = ["arrow_type_of", "union_branches"]

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
    named = schema.get("__named_schemas") if isinstance(schema, dict) else None
    return _arrow(schema, dict(named or {}), ())


def union_branches(branches: list[Any]) -> tuple[list[Any], bool]:
    """A union's branches without ``null``, and whether ``null`` was one of them."""
    kept = [b for b in branches if b != "null"]
    return kept, len(kept) != len(branches)


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
    kept, _ = union_branches(branches)
    if not kept:
        return pa.null()
    if len(kept) == 1:
        return _arrow(kept[0], named, seen)
    if set(kept) <= {"int", "long"}:
        return pa.int64()
    if set(kept) <= {"float", "double"}:
        return pa.float64()
    return pa.struct(
        [pa.field(f"member{i}", _arrow(branch, named, seen)) for i, branch in enumerate(kept)]
    )


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
