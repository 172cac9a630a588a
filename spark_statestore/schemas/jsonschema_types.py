"""JSON Schemas as column types, the way Kafka Connect's ``JsonSchemaConverter`` and common
practice map them; :mod:`~spark_statestore.schemas.jsonschema_values` reads JSON values as
those columns hold them.

======================================================  ====================  =========
JSON Schema                                             Arrow                 Spark
======================================================  ====================  =========
object with properties                                  struct, in order      STRUCT
object, additionalProperties a schema, no properties    map<string, T>        MAP
array, items a schema                                   list<T>               ARRAY
string                                                  string                STRING
string, format date                                     date32                DATE
string, format date-time                                timestamp[us, UTC]    TIMESTAMP
string, other formats (time, uuid, ...)                 string                STRING
integer                                                 int64                 BIGINT
number; [integer, number]                               float64               DOUBLE
boolean                                                 bool                  BOOLEAN
[T, null]; oneOf/anyOf of [T, {"type": "null"}] or [T]  T                     T
enum of strings (and null); a string const              string                STRING
$ref                                                    its target's type
allOf of objects whose common properties agree          the merged struct     STRUCT
anything else                                           string: JSON text     STRING
======================================================  ====================  =========

Anything else is ``{}``, ``true``, ``{"type": "null"}``, an object with neither
``properties`` nor an ``additionalProperties`` schema, an array without ``items`` or with
tuple items (``items`` a list, ``prefixItems``), several types, ``oneOf``/``anyOf`` of
several schemas, ``not``, enums and consts of other values, an ``allOf`` that conflicts.

Every column and field is nullable (a delete's value is null, a property may be absent, and
PERMISSIVE reads null an undecodable value); a JSON ``null`` is null in every column, the JSON
text ones too. A schema without ``type`` is an object when it has ``properties`` or
``additionalProperties``, an array when it has ``items``. ``additionalProperties`` beside
``properties``, and ``patternProperties``, are not columns. Only the type keywords make the
column; the others (``required``, ``minimum``, ``pattern``, the members of an ``enum``, ...)
constrain the writer's values, which are validated against their writer schema. Recursive
types (a ``$ref`` back into a schema that contains it) cannot be a Spark column and are
refused, as Spark refuses them.

:func:`path_segment` names the places of both: a column's in a schema error, a value's in a
:class:`~spark_statestore.schemas.jsonschema_values.Misfit`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from referencing import Registry, Specification
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT3, DRAFT4, DRAFT6, DRAFT7, specification_with

from spark_statestore.schemas.errors import SchemaError

if TYPE_CHECKING:  # referencing exports its Resolver for type hints only from there
    from referencing._core import Resolver

__all__ = [
    "NO_DEFAULT",
    "ColumnType",
    "Kind",
    "Property",
    "column_type_of",
    "path_segment",
]

_IDENTIFIER = re.compile(r"[a-zA-Z][a-zA-Z0-9_]*")
_LEGACY_REF = (DRAFT3, DRAFT4, DRAFT6, DRAFT7)
"""Drafts where ``$ref`` replaces its siblings (later drafts apply both)."""
_SHAPE_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "additionalProperties",
        "items",
        "prefixItems",
        "enum",
        "const",
        "oneOf",
        "anyOf",
        "allOf",
        "$ref",
    }
)
"""The keywords that make a schema's column type; the others only constrain values."""


class Kind(Enum):
    """What a column holds."""

    STRUCT = auto()
    MAP = auto()
    LIST = auto()
    STRING = auto()
    DATE = auto()
    TIMESTAMP = auto()
    INTEGER = auto()
    NUMBER = auto()
    BOOLEAN = auto()
    JSON = auto()
    """The value's JSON text."""


_ARROW: Mapping[Kind, pa.DataType] = {
    Kind.STRING: pa.string(),
    Kind.DATE: pa.date32(),
    Kind.TIMESTAMP: pa.timestamp("us", tz="UTC"),
    Kind.INTEGER: pa.int64(),
    Kind.NUMBER: pa.float64(),
    Kind.BOOLEAN: pa.bool_(),
    Kind.JSON: pa.string(),
}


class _Absent(Enum):
    ABSENT = auto()


NO_DEFAULT = _Absent.ABSENT
"""The :attr:`Property.default` of a property that gives none."""


@dataclass(frozen=True)
class ColumnType:
    """The column of a schema: its kind, a struct's properties, a list's or map's items."""

    kind: Kind
    properties: tuple[Property, ...] = ()
    item: ColumnType | None = None
    """A list's elements, a map's values."""

    def arrow_type(self) -> pa.DataType:
        """The Arrow type of the column (the table in this module's docstring)."""
        if self.kind is Kind.STRUCT:
            return pa.struct([pa.field(p.name, p.type.arrow_type()) for p in self.properties])
        if self.kind is Kind.LIST:
            assert self.item is not None
            return pa.list_(self.item.arrow_type())
        if self.kind is Kind.MAP:
            assert self.item is not None
            return pa.map_(pa.string(), self.item.arrow_type())
        return _ARROW[self.kind]


@dataclass(frozen=True)
class Property:
    """A property of an object schema: a struct field."""

    name: str
    type: ColumnType
    default: Any = field(default=NO_DEFAULT, compare=False)
    """The schema's ``default`` (a JSON value), or :data:`NO_DEFAULT`."""


_JSON = ColumnType(Kind.JSON)


def path_segment(key: str | int) -> str:
    """The step to a property or an array index in a JSON path, as ``jsonschema`` writes
    them in its errors: ``.name``, ``['odd key']``, ``[3]``."""
    if isinstance(key, int):
        return f"[{key}]"
    if _IDENTIFIER.fullmatch(key):
        return f".{key}"
    return "['" + key.replace("\\", "\\\\").replace("'", "\\'") + "']"


def column_type_of(
    body: Any, registry: Registry[Any], specification: Specification[Any]
) -> ColumnType:
    """The column type of values of ``body`` (a schema document of the draft
    ``specification``), its ``$ref`` resolved within it and in ``registry`` (the schemas it
    references, by the names its ``$ref`` use).

    Raises
    ------
    SchemaError
        For a ``$ref`` that does not resolve, or a recursive type; the message names the
        place (``$.lines[*].sku``) and says what to do.
    """
    resolver = registry.resolver_with_root(specification.create_resource(body))
    return _walk(body, _Place(resolver, specification, "$", ()))


@dataclass(frozen=True)
class _Place:
    """Where the walk is: the base URI's resolver, the draft, the value's path, and the
    ``$ref`` targets being expanded (to refuse a recursion)."""

    resolver: Resolver[Any]
    specification: Specification[Any]
    path: str
    expanding: tuple[int, ...]

    def at(self, segment: str) -> _Place:
        return _Place(self.resolver, self.specification, self.path + segment, self.expanding)

    def entering(self, node: Mapping[str, Any]) -> _Place:
        resolver = self.resolver.in_subresource(self.specification.create_resource(node))
        return _Place(resolver, self.specification, self.path, self.expanding)


def _walk(node: Any, place: _Place) -> ColumnType:
    """A subschema met in the document: its ``$id`` (if any) moves the base URI."""
    if not isinstance(node, Mapping):  # true, false (and what the meta-schema refused)
        return _JSON
    return _shape(node, place.entering(node))


def _shape(node: Mapping[str, Any], place: _Place) -> ColumnType:
    ref = node.get("$ref")
    if isinstance(ref, str):
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        if place.specification in _LEGACY_REF or _unshaped(siblings):
            return _follow(ref, place)
        return _merged([_follow(ref, place), _shape(siblings, place)])
    if "allOf" in node:
        rest = {k: v for k, v in node.items() if k != "allOf"}
        parts = [] if _unshaped(rest) else [_shape(rest, place)]
        branches = node["allOf"] if isinstance(node["allOf"], list) else []
        parts += [_walk(b, place) for b in branches if not _unshaped(b)]
        return _merged(parts)
    if "type" in node:
        return _typed(_type_name(node["type"]), node, place)
    for combinator in ("oneOf", "anyOf"):
        if combinator in node:
            return _nullable(node[combinator], place)
    if "enum" in node:
        values = node["enum"] if isinstance(node["enum"], list) else []
        strings = [v for v in values if v is not None]
        textual = strings and all(isinstance(v, str) for v in strings)
        return ColumnType(Kind.STRING) if textual else _JSON
    if "const" in node:
        return ColumnType(Kind.STRING) if isinstance(node["const"], str) else _JSON
    if "properties" in node or "additionalProperties" in node:
        return _typed("object", node, place)
    if "items" in node or "prefixItems" in node:
        return _typed("array", node, place)
    return _JSON


def _type_name(kind: Any) -> str | None:
    """The one type of a ``type`` keyword less ``null``; None when it names several (or
    only null)."""
    names = [kind] if isinstance(kind, str) else list(kind) if isinstance(kind, list) else []
    kept = {n for n in names if n != "null"}
    if kept == {"integer", "number"}:
        return "number"
    if len(kept) == 1:
        (name,) = kept
        return name if isinstance(name, str) else None
    return None


def _typed(name: str | None, node: Mapping[str, Any], place: _Place) -> ColumnType:
    if name == "object":
        properties = node.get("properties")
        if isinstance(properties, Mapping) and properties:
            return ColumnType(
                Kind.STRUCT,
                tuple(
                    Property(
                        str(key),
                        _walk(sub, place.at(path_segment(str(key)))),
                        sub.get("default", NO_DEFAULT) if isinstance(sub, Mapping) else NO_DEFAULT,
                    )
                    for key, sub in properties.items()
                ),
            )
        values = node.get("additionalProperties")
        if isinstance(values, Mapping):
            return ColumnType(Kind.MAP, item=_walk(values, place.at(".*")))
        return _JSON
    if name == "array":
        items = node.get("items")
        if "prefixItems" in node or not (isinstance(items, Mapping) or items is True):
            return _JSON
        return ColumnType(Kind.LIST, item=_walk(items, place.at("[*]")))
    if name == "string":
        form = node.get("format")
        if form == "date":
            return ColumnType(Kind.DATE)
        if form == "date-time":
            return ColumnType(Kind.TIMESTAMP)
        return ColumnType(Kind.STRING)
    simple = {"integer": Kind.INTEGER, "number": Kind.NUMBER, "boolean": Kind.BOOLEAN}
    return ColumnType(simple[name]) if name in simple else _JSON


def _nullable(branches: Any, place: _Place) -> ColumnType:
    """``oneOf``/``anyOf``: T for [T] and [T, null] (in any order), else JSON text."""
    if not isinstance(branches, list):
        return _JSON
    kept = [b for b in branches if not _is_null(b, place)]
    return _walk(kept[0], place) if len(kept) == 1 else _JSON


def _is_null(branch: Any, place: _Place) -> bool:
    if isinstance(branch, Mapping) and isinstance(branch.get("$ref"), str) and len(branch) == 1:
        try:
            branch = place.entering(branch).resolver.lookup(branch["$ref"]).contents
        except Unresolvable:
            return False  # the walk of the branch names it
    return isinstance(branch, Mapping) and branch.get("type") == "null"


def _follow(ref: str, place: _Place) -> ColumnType:
    try:
        resolved = place.resolver.lookup(ref)
    except Unresolvable as exc:
        raise SchemaError(
            f"$ref {ref!r} at {place.path} does not resolve ({type(exc).__name__}): define "
            "it under #/definitions (or #/$defs), or give the schema it names as a reference "
            "(a registry's schema reference, named as the $ref names it)"
        ) from None
    target = resolved.contents
    if not isinstance(target, Mapping):
        return _JSON
    dialect = target.get("$schema")  # a referenced schema may be of another draft
    specification = place.specification
    if isinstance(dialect, str):
        specification = specification_with(dialect, default=specification)
    key = id(target)
    if key in place.expanding:
        raise SchemaError(
            f"$ref {ref!r} at {place.path} refers back to a schema that contains it: a "
            "recursive type cannot be a Spark column (read the value with format binary, or "
            "with a reader schema that has {} there, read as JSON text)"
        )
    inner = _Place(resolved.resolver, specification, place.path, (*place.expanding, key))
    return _shape(target, inner)  # the resolver is already in the target's resource


def _unshaped(node: Any) -> bool:
    """A part of an ``allOf`` that does not shape the column: ``true``, ``{"required":
    [...]}``, a bare ``{"type": "object"}`` beside object parts."""
    if not isinstance(node, Mapping):
        return True
    keys = node.keys() & _SHAPE_KEYWORDS
    return not keys or (keys == {"type"} and _type_name(node["type"]) == "object")


def _merged(parts: Sequence[ColumnType]) -> ColumnType:
    """The column of values that are all of ``parts``: their struct with the properties of
    each (a property in several must have one type), the one type they share, else JSON."""
    if not parts:
        return _JSON
    if all(p.kind is Kind.STRUCT for p in parts):
        merged: dict[str, Property] = {}
        for part in parts:
            for prop in part.properties:
                first = merged.setdefault(prop.name, prop)
                if first.type != prop.type:
                    return _JSON
                if first.default is NO_DEFAULT and prop.default is not NO_DEFAULT:
                    merged[prop.name] = prop
        return ColumnType(Kind.STRUCT, tuple(merged.values()))
    return parts[0] if all(p == parts[0] for p in parts) else _JSON
