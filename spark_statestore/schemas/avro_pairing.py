"""Which Avro writer schemas the compiled path is handed, and how (for
:mod:`~spark_statestore.schemas.avro_native`).

What is not handed over (the reference path decodes it; logged once per writer schema):
aliases; logical types that differ between writer and reader, or that Spark's ``from_avro``
mapping does not name; ``long`` promoted to ``float`` (fastavro rounds through a double);
an ``int`` promoted into a ``[float, double]`` union; a writer union with a branch the reader
cannot read; a union whose branches the reference path tells apart differently than
arrow-avro chooses them; defaults other than plain JSON values of non-logical types
(non-ASCII bytes, logical types, partial records); named types whose full names differ;
recursive types.

Both schemas are given to arrow-avro self-contained (every named type defined where it is
used, so no reference is resolved against the other side's definition), wrapped in a record
of one field (a record's encoding is its fields', so the bytes do not change); the writer's
``[null, T]`` unions get a third branch no reader type matches, so that arrow-avro checks
their branch index as fastavro does; the writer's fields the reader drops are decoded (and
so checked, as fastavro's skipping checks them) and then left out.

Why one module: it is one walk over two schemas (:class:`_Pairing`) and the rules it
applies at each step; split, each rule would be read away from the step that applies it.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from spark_statestore.schemas.avro_types import member_branches, named_types
from spark_statestore.schemas.errors import SchemaError

__all__ = ["BranchIndex", "NativeUnsupported", "pair_schemas"]

BranchIndex = Callable[[list[Any], Any, Mapping[str, Any]], int]
"""The reference path's choice of a general union's member for a value (fastavro's value,
named types tagged ``(name, value)``); raises a SchemaError when none matches."""

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED = frozenset({"record", "error", "enum", "fixed"})
# Avro's promotions both libraries make alike (long -> float is not: fastavro goes through
# a double, arrow-avro converts directly).
_PROMOTIONS = frozenset(
    {
        ("int", "long"),
        ("int", "float"),
        ("int", "double"),
        ("long", "double"),
        ("float", "double"),
        ("string", "bytes"),
        ("bytes", "string"),
    }
)
# fastavro's match for union branches (``match_types``): its promotions, long -> float too.
_FASTAVRO_MATCHES = _PROMOTIONS | {("long", "float")}
_LOGICAL_BASES: Mapping[str, tuple[str, ...]] = {
    "date": ("int",),
    "time-millis": ("int",),
    "time-micros": ("long",),
    "timestamp-millis": ("long",),
    "timestamp-micros": ("long",),
    "local-timestamp-millis": ("long",),
    "local-timestamp-micros": ("long",),
    "uuid": ("string",),
    "decimal": ("bytes", "fixed"),
}
_WRAPPER = "spark_statestore_value"
_INT_RANGE = range(-(2**31), 2**31)
_LONG_RANGE = range(-(2**63), 2**63)
_UTC = dt.timezone.utc
_SAMPLES: Mapping[str, Any] = {
    "boolean": True,
    "int": 1,
    "long": 1,
    "float": 1.0,
    "double": 1.0,
    "bytes": b"x",
    "string": "x",
    "array": [],
    "map": {},
    "uuid": uuid.UUID(int=1),
    "date": dt.date(2000, 1, 1),
    "time-millis": dt.time(),
    "time-micros": dt.time(),
    "timestamp-millis": dt.datetime(2000, 1, 1, tzinfo=_UTC),
    "timestamp-micros": dt.datetime(2000, 1, 1, tzinfo=_UTC),
    "local-timestamp-millis": dt.datetime(2000, 1, 1),
    "local-timestamp-micros": dt.datetime(2000, 1, 1),
    "decimal": decimal.Decimal(1),
}
"""A value of each unnamed type as fastavro returns it, for the reference's member choice."""


class NativeUnsupported(Exception):
    """A writer schema's values are not handed to the compiled path (the reason)."""


def pair_schemas(writer: Any, reader: Any, branch_index: BranchIndex) -> tuple[str, str]:
    """The writer and reader schemas (as :func:`fastavro.parse_schema` returns them) as the
    compiled path takes them: self-contained JSON texts of records with one field ``v``.

    Raises
    ------
    NativeUnsupported
        The reference path may decode these values differently (the reason).
    """
    pairing = _Pairing(named_types(writer), named_types(reader), branch_index)
    writer_json, reader_json = pairing.pair(writer, reader)
    return _wrapped(writer_json), _wrapped(reader_json)


def _wrapped(schema: Any) -> str:
    return json.dumps(
        {"type": "record", "name": _WRAPPER, "fields": [{"name": "v", "type": schema}]}
    )


# -- pairing a writer schema with the reader schema ---------------------------------------
class _Pairing:
    """Walks a writer and a reader schema together, emitting both as arrow-avro takes them."""

    def __init__(
        self, writer_named: dict[str, Any], reader_named: dict[str, Any], branch_index: BranchIndex
    ) -> None:
        self._writer_named = writer_named
        self._reader_named = reader_named
        self._branch_index = branch_index
        self._never = 0
        self._inside: list[str] = []

    def pair(self, writer: Any, reader: Any) -> tuple[Any, Any]:
        w = _definition(writer, self._writer_named)
        r = _definition(reader, self._reader_named)
        if isinstance(r, list):
            return self._to_union(w, r)
        if isinstance(w, list):
            return self._from_union(w, r)
        w_type, r_type = _type(w), _type(r)
        if _logical(w) != _logical(r):
            raise NativeUnsupported(
                f"logical types differ: writer {_logical(w)}, reader {_logical(r)}"
            )
        if w_type in _PRIMITIVES and r_type in _PRIMITIVES:
            if w_type != r_type and (w_type, r_type) not in _PROMOTIONS:
                raise NativeUnsupported(f"writer {w_type} is not read as reader {r_type}")
            return _plain(w), _plain(r)
        if w_type != r_type and {w_type, r_type} != {"record", "error"}:
            raise NativeUnsupported(f"writer {w_type} is not read as reader {r_type}")
        if w_type in _NAMED:
            _no_aliases(w, r)
            if w["name"] != r["name"]:
                raise NativeUnsupported(f"writer type {w['name']} is read as {r['name']}")
        if w_type in ("record", "error"):
            return self._records(w, r)
        if w_type == "enum":
            reader_enum = {"type": "enum", "name": r["name"], "symbols": r["symbols"]}
            if "default" in r:
                reader_enum["default"] = r["default"]
            return {"type": "enum", "name": w["name"], "symbols": w["symbols"]}, reader_enum
        if w_type == "fixed":
            if w["size"] != r["size"]:
                raise NativeUnsupported(f"fixed {w['name']} changes size")
            return _plain(w), _plain(r)
        if w_type == "array":
            items = self.pair(w["items"], r["items"])
            return {"type": "array", "items": items[0]}, {"type": "array", "items": items[1]}
        if w_type == "map":
            values = self.pair(w["values"], r["values"])
            return {"type": "map", "values": values[0]}, {"type": "map", "values": values[1]}
        raise NativeUnsupported(f"Avro type {w_type!r}")

    def _records(self, w: Mapping[str, Any], r: Mapping[str, Any]) -> tuple[Any, Any]:
        name = w["name"]
        self._enter(name)
        writer_fields = {f["name"]: f for f in w["fields"]}
        paired: dict[str, Any] = {}
        reader_out: list[dict[str, Any]] = []
        for field in r["fields"]:
            _no_aliases(field)
            written = writer_fields.get(field["name"])
            if written is not None:
                _no_aliases(written)
                writer_type, reader_type = self.pair(written["type"], field["type"])
                paired[field["name"]] = writer_type
                reader_out.append({"name": field["name"], "type": reader_type})
                continue
            if "default" not in field:
                raise NativeUnsupported(f"reader field {field['name']} has no default")
            self._check_default(field["type"], field["default"], field["name"])
            reader_out.append(
                {
                    "name": field["name"],
                    "type": self._emit(field["type"], self._reader_named, writer=False),
                    "default": field["default"],
                }
            )
        writer_out: list[dict[str, Any]] = []
        for field in w["fields"]:
            if field["name"] in paired:
                writer_out.append({"name": field["name"], "type": paired[field["name"]]})
                continue
            # Dropped by the reader: decoded all the same (fastavro's skip checks it), then
            # left out of the column.
            writer_out.append(
                {
                    "name": field["name"],
                    "type": self._emit(field["type"], self._writer_named, writer=True),
                }
            )
            reader_out.append(
                {
                    "name": field["name"],
                    "type": self._emit(field["type"], self._writer_named, writer=False),
                }
            )
        self._inside.pop()
        return (
            {"type": "record", "name": name, "fields": writer_out},
            {"type": "record", "name": name, "fields": reader_out},
        )

    def _to_union(self, w: Any, r: list[Any]) -> tuple[Any, Any]:
        members = member_branches(r)
        if members is not None:
            self._check_members(members)
        definitions = [_definition(b, self._reader_named) for b in r]
        written = w if isinstance(w, list) else [w]
        reader_out: list[Any] = [None] * len(r)
        writer_out: list[Any] = []
        for branch in written:
            definition = _definition(branch, self._writer_named)
            if isinstance(definition, list):
                raise NativeUnsupported("a union inside a union")
            chosen = self._fastavro_choice(definition, definitions)
            if chosen is None or chosen != self._arrow_choice(definition, definitions):
                raise NativeUnsupported(
                    f"writer {_type(definition)} in reader union {_names(r)}: no branch, or "
                    "fastavro and arrow-avro choose different branches"
                )
            if (
                members is None
                and _type(definitions[chosen]) == "float"
                and _type(definition) in ("int", "long")
            ):
                raise NativeUnsupported("an int read into a [float, double] union")
            writer_type, reader_type = self.pair(branch, r[chosen])
            if reader_out[chosen] not in (None, reader_type):
                raise NativeUnsupported(f"two writer branches read as reader {_names(r)}")
            reader_out[chosen] = reader_type
            writer_out.append(writer_type)
        for index, branch in enumerate(r):
            if reader_out[index] is None:
                reader_out[index] = self._emit(branch, self._reader_named, writer=False)
        if not isinstance(w, list):
            return writer_out[0], reader_out
        return self._checked_union(w, writer_out), reader_out

    def _from_union(self, w: list[Any], r: Any) -> tuple[Any, Any]:
        writer_out: list[Any] = []
        reader_types: list[Any] = []
        for branch in w:
            definition = _definition(branch, self._writer_named)
            if not _fastavro_match(definition, r, self._writer_named, self._reader_named):
                raise NativeUnsupported(f"writer union branch {_type(definition)} is not readable")
            writer_type, reader_type = self.pair(branch, r)
            writer_out.append(writer_type)
            reader_types.append(reader_type)
        if any(t != reader_types[0] for t in reader_types):
            raise NativeUnsupported("writer union branches read differently")
        return self._checked_union(w, writer_out), reader_types[0]

    def _checked_union(self, w: list[Any], branches: list[Any]) -> list[Any]:
        """The writer union as arrow-avro takes it: ``[null, T]`` gets a branch no reader
        type matches, so its branch index is checked (arrow-avro reads any other index of a
        two-branch nullable union as its non-null branch)."""
        if len(w) == 2 and "null" in w:
            self._never += 1
            return [
                *branches,
                {"type": "fixed", "name": f"{_WRAPPER}_never_{self._never}", "size": 1},
            ]
        return branches

    def _check_members(self, members: list[Any]) -> None:
        """Each branch of a general union fills its own member on the reference path too."""
        for index, branch in enumerate(members):
            definition = _definition(branch, self._reader_named)
            if isinstance(definition, dict) and _type(definition) in _NAMED:
                sample: Any = (definition["name"], None)
            else:
                key = _logical_name(definition) or _type(definition)
                if key not in _SAMPLES:
                    raise NativeUnsupported(f"a {key} branch in a general union")
                sample = _SAMPLES[key]
            try:
                chosen = self._branch_index(members, sample, self._reader_named)
            except SchemaError:
                raise NativeUnsupported(f"union branch {index} fills no member") from None
            if chosen != index:
                raise NativeUnsupported(f"union branch {index} fills member {chosen}")

    def _fastavro_choice(self, w: Any, branches: list[Any]) -> int | None:
        """fastavro's branch: the first that matches (promotions included)."""
        for index, branch in enumerate(branches):
            if _fastavro_match(w, branch, self._writer_named, self._reader_named):
                return index
        return None

    def _arrow_choice(self, w: Any, branches: list[Any]) -> int | None:
        """arrow-avro's branch: the same type if there is one, else the first it reads."""
        w_type = _type(w)
        if w_type in _PRIMITIVES:
            for index, branch in enumerate(branches):
                if not isinstance(branch, list) and _type(branch) == w_type:
                    return index
        for index, branch in enumerate(branches):
            scratch = _Pairing(self._writer_named, self._reader_named, self._branch_index)
            try:
                scratch.pair(w, branch)
            except NativeUnsupported:
                continue
            return index
        return None

    def _check_default(self, schema: Any, default: Any, where: str) -> None:
        """A default both libraries turn into the same value (see the module's text)."""
        d = _definition(schema, self._reader_named)
        if isinstance(d, list):
            first = _definition(d[0], self._reader_named)
            if first == "null":
                if default is not None:
                    raise NativeUnsupported(f"default of {where}")
                return
            if member_branches(d) is None and _type(first) in ("float", "double") and len(d) > 1:
                raise NativeUnsupported(f"default of {where} in a [float, double] union")
            self._check_default(first, default, where)
            return
        kind = _type(d)
        if _logical(d) is not None:
            raise NativeUnsupported(f"default of {where} has a logical type")
        fits = _plain_default_fits(kind, d, default)
        if fits is not None:
            if not fits:
                raise NativeUnsupported(f"default {default!r:.40} of {where}")
            return
        if kind == "array" and isinstance(default, list):
            for item in default:
                self._check_default(d["items"], item, where)
            return
        if kind == "map" and isinstance(default, dict):
            for value in default.values():
                self._check_default(d["values"], value, where)
            return
        if kind in ("record", "error") and isinstance(default, dict):
            names = [f["name"] for f in d["fields"]]
            if sorted(names) != sorted(default):
                raise NativeUnsupported(f"default of {where} does not give every field")
            for field in d["fields"]:
                self._check_default(field["type"], default[field["name"]], where)
            return
        raise NativeUnsupported(f"default {default!r:.40} of {where}")

    def _emit(self, schema: Any, named: dict[str, Any], *, writer: bool) -> Any:
        """``schema`` alone, self-contained (for a reader branch no writer branch reads, a
        reader field filled by its default, a writer field the reader drops)."""
        d = _definition(schema, named)
        if isinstance(d, list):
            branches = [self._emit(b, named, writer=writer) for b in d]
            return self._checked_union(d, branches) if writer else branches
        kind = _type(d)
        _logical(d)
        if kind in _PRIMITIVES or kind == "fixed":
            return _plain(d)
        if kind == "enum":
            return {"type": "enum", "name": d["name"], "symbols": d["symbols"]}
        if kind == "array":
            return {"type": "array", "items": self._emit(d["items"], named, writer=writer)}
        if kind == "map":
            return {"type": "map", "values": self._emit(d["values"], named, writer=writer)}
        if kind in ("record", "error"):
            self._enter(d["name"])
            fields = [
                {"name": f["name"], "type": self._emit(f["type"], named, writer=writer)}
                for f in d["fields"]
            ]
            self._inside.pop()
            return {"type": "record", "name": d["name"], "fields": fields}
        raise NativeUnsupported(f"Avro type {kind!r}")

    def _enter(self, name: str) -> None:
        if name in self._inside:
            raise NativeUnsupported(f"recursive type {name}")
        self._inside.append(name)


def _definition(schema: Any, named: Mapping[str, Any]) -> Any:
    """A named type's definition for its name; the schema itself otherwise."""
    if isinstance(schema, str) and schema not in _PRIMITIVES:
        found = named.get(schema)
        if found is None:
            raise NativeUnsupported(f"type {schema!r} is not defined")
        return found
    return schema


def _type(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    kind = schema.get("type")
    if not isinstance(kind, str):
        raise NativeUnsupported(f"type {kind!r:.40}")
    return kind


def _logical_name(schema: Any) -> str | None:
    if isinstance(schema, dict) and "logicalType" in schema:
        return str(schema["logicalType"])
    return None


def _logical(schema: Any) -> tuple[Any, ...] | None:
    """The logical type's signature (None without one).

    Raises
    ------
    NativeUnsupported
        A logical type outside Spark's mapping, or on another base type.
    """
    name = _logical_name(schema)
    if name is None:
        return None
    kind = _type(schema)
    if kind not in _LOGICAL_BASES.get(name, ()):
        raise NativeUnsupported(f"logical type {name!r} on {kind}")
    if name == "decimal":
        size = schema.get("size") if kind == "fixed" else None
        return (name, kind, schema.get("precision"), schema.get("scale", 0), size)
    return (name,)


def _plain(schema: Any) -> Any:
    """A primitive or fixed type as JSON, with its logical type."""
    kind = _type(schema)
    logical = _logical(schema)
    if kind == "fixed":
        out: dict[str, Any] = {"type": "fixed", "name": schema["name"], "size": schema["size"]}
    elif logical is None:
        return kind
    else:
        out = {"type": kind}
    if logical is not None:
        out["logicalType"] = logical[0]
        if logical[0] == "decimal":
            out["precision"], out["scale"] = logical[2], logical[3]
    return out


def _fastavro_match(
    w: Any, r: Any, writer_named: Mapping[str, Any], reader_named: Mapping[str, Any]
) -> bool:
    """fastavro's ``match_types`` (logical types ignored, named types by unqualified name)."""
    w = _definition(w, writer_named)
    r = _definition(r, reader_named)
    if isinstance(w, list) or isinstance(r, list):
        return True
    w_type, r_type = _type(w), _type(r)
    if w_type in _NAMED and r_type in _NAMED:
        _no_aliases(r)
        if w_type == r_type == "fixed" and w["size"] != r["size"]:
            return False
        return bool(w["name"].split(".")[-1] == r["name"].split(".")[-1])
    if w_type == r_type == "array":
        return _fastavro_match(w["items"], r["items"], writer_named, reader_named)
    if w_type == r_type == "map":
        return _fastavro_match(w["values"], r["values"], writer_named, reader_named)
    if w_type in _NAMED or r_type in _NAMED:
        return False
    return w_type == r_type or (w_type, r_type) in _FASTAVRO_MATCHES


def _plain_default_fits(kind: str, schema: Any, value: Any) -> bool | None:
    """Whether ``value`` is a default of the unnamed or enum or fixed type ``kind`` that
    both libraries read alike (None for the other types)."""
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "int":
        return _is_int(value) and value in _INT_RANGE
    if kind == "long":
        return _is_int(value) and value in _LONG_RANGE
    if kind in ("float", "double"):
        return _is_int(value) or isinstance(value, float)
    if kind == "string":
        return isinstance(value, str)
    if kind == "bytes":  # fastavro encodes a default's text as UTF-8, arrow-avro as Latin-1
        return isinstance(value, str) and value.isascii()
    if kind == "enum":
        return isinstance(value, str) and value in schema["symbols"]
    if kind == "fixed":
        return isinstance(value, str) and value.isascii() and len(value) == schema["size"]
    return None


def _no_aliases(*schemas: Mapping[str, Any]) -> None:
    for schema in schemas:
        if schema.get("aliases"):
            raise NativeUnsupported(f"aliases of {schema.get('name')}")


def _names(branches: list[Any]) -> list[str]:
    return [b if isinstance(b, str) else _type(b) for b in branches]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
