"""Errors of schema-registry formats: framing, schemas, their resolution and the registry.

Every message names where the bytes came from (topic, partition, offset when the caller
knows them), the schema ids and the subject involved, and what to do.
"""

from __future__ import annotations

from typing import Any

from spark_statestore.errors import StateStoreError

__all__ = [
    "AvroEncodeError",
    "FrameError",
    "RegistryError",
    "SchemaDecodeError",
    "SchemaError",
    "SchemaNotFoundError",
    "SchemaResolutionError",
    "ValueEncodeError",
    "describe",
    "shorten",
]


class SchemaError(StateStoreError):
    """Root of the errors about schemas and values written with them."""


class FrameError(SchemaError, ValueError):
    """Bytes are not a Confluent wire-format frame (a wrong magic byte, truncated)."""


class SchemaDecodeError(SchemaError, ValueError):
    """A value's payload does not decode with its writer schema."""


class SchemaResolutionError(SchemaError, ValueError):
    """A writer schema cannot be resolved to the reader schema by the format's rules."""


class RegistryError(SchemaError):
    """The schema registry cannot be reached, refuses the credentials, or answers an error."""


class SchemaNotFoundError(RegistryError, LookupError):
    """The registry has no schema under that id, subject or version."""


class AvroEncodeError(SchemaError, ValueError):
    """A row does not fit the writer schema."""


class ValueEncodeError(SchemaError, ValueError):
    """A value does not fit the writer schema it is encoded with (Protobuf, JSON Schema):
    a wrong Python type, a number out of range, an unknown field, a value the schema's
    validation refuses."""


MAX_MESSAGE = 200
"""Characters of a library's own message quoted in ours."""


def shorten(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` cut to ``limit`` characters (an ellipsis marks the cut), for messages."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(value: Any) -> str:
    """A Python value's type and (the start of) its repr, for messages."""
    return f"{type(value).__name__} {value!r:.60}"
