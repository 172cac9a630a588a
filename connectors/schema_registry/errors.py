"""Errors of the schema-registry binding: the engine's (:mod:`spark_statestore.schemas.errors`),
raised here from the registry client's failures, classified once."""

from __future__ import annotations

from spark_statestore.errors import OptionError
from spark_statestore.schemas.errors import RegistryError, SchemaError, SchemaNotFoundError

__all__ = ["RegistryError", "RegistrySettingError", "SchemaError", "SchemaNotFoundError"]


class RegistrySettingError(OptionError, SchemaError):
    """A ``schemaRegistry*`` option the registry client refuses."""
