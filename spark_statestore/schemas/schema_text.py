"""What every registry format's schema is: its text, where it came from, its registry id and
the schemas it references; picklable as those, without its parsed form.

A format's schema class (Avro's, Protobuf's, JSON Schema's) is a frozen dataclass that
extends :class:`SchemaText`, caching its parsed form in private fields of its own. Pickling
keeps the public fields and drops the private ones, so a schema travels to Spark's executors
as text and is parsed again where it is used: a parsed form (fastavro's dicts, protobuf
descriptors, ``jsonschema`` validators) is not picklable, or not worth shipping.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any, Generic, TypeVar

__all__ = ["SchemaText"]

ReferenceT = TypeVar("ReferenceT")


@dataclass(frozen=True)
class SchemaText(Generic[ReferenceT]):
    """A schema's text, where it came from, and the schemas it references.

    A subclass's private fields (``_parsed``) are caches, with ``compare=False`` and a
    default: they are not pickled, and an unpickled schema holds their defaults.
    """

    text: str
    what: str
    """Where the schema came from, for messages: ``"option valueSchema"``, ``"schema id 7
    of subject orders-value"``."""
    schema_id: int | None = None
    """Its id in the registry; None for a schema given as an option."""
    references: tuple[ReferenceT, ...] = ()
    """The schemas it references (a registry's schema references), in its format's form."""

    def __getstate__(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)
        for cache in fields(self):
            if cache.name.startswith("_"):
                assert cache.default is not MISSING, f"the cache {cache.name} has no default"
                object.__setattr__(self, cache.name, cache.default)
