"""How keys and values are decoded into columns: the format options the follower source and
the snapshot reader share, parsed once (registry schemas resolved then), and their codecs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spark_statestore.connectors.spark.option_table import (
    REGISTRY_FORMATS,
    DecodeMode,
    OptionReader,
    ValueFormat,
)
from spark_statestore.errors import OptionError

__all__ = ["FormatOptions", "codecs_for", "parse_formats"]


@dataclass(frozen=True, slots=True)
class FormatOptions:
    """How keys and values are decoded into columns (shared by the source and the reader).

    ``key_schema`` / ``value_schema`` are DDL strings, only for the ``json`` format; their
    parsing and the codecs live in :mod:`spark_statestore.connectors.spark.formats`.
    """

    key_format: ValueFormat = ValueFormat.BINARY
    value_format: ValueFormat = ValueFormat.BINARY
    key_schema: str | None = None
    value_schema: str | None = None
    mode: DecodeMode = DecodeMode.FAILFAST
    key_registry_column: Any = None
    """A registry key format's
    :class:`~spark_statestore.connectors.spark.registry_column.RegistryColumn` (its reader
    schema fixed when the options were parsed), else None."""
    value_registry_column: Any = None
    """As ``key_registry_column``, for values."""


def parse_formats(
    options: OptionReader, changelog: str | None = None, planned: Any = None
) -> FormatOptions:
    """The format options; ``planned`` is the schema Spark planned the query with (None
    while it asks for one): a registry's ``latest`` reader schema is then the newest
    version whose columns are the planned ones, so the columns never change under a query
    (a version registered since it was defined, or a restart from its checkpoint).

    Raises
    ------
    OptionError, SchemaError
    """
    from spark_statestore.connectors.spark.registry_column import registry_column, schema_text

    key_format = options.choice("keyFormat", ValueFormat)
    value_format = options.choice("valueFormat", ValueFormat)
    key_schema = schema_text(options, "key")
    value_schema = schema_text(options, "value")
    columns = {} if planned is None else {f.name: f.dataType for f in planned.fields}
    key_registry_column = registry_column(
        options, "key", key_format, key_schema, changelog=changelog, planned=columns.get("key")
    )
    value_registry_column = registry_column(
        options,
        "value",
        value_format,
        value_schema,
        changelog=changelog,
        planned=columns.get("value"),
    )
    if (
        options.given("schemaRegistryUrl")
        and key_registry_column is None
        and value_registry_column is None
    ):
        raise OptionError(
            "option schemaRegistryUrl is for a registry keyFormat or valueFormat ("
            + ", ".join(f.value for f in REGISTRY_FORMATS)
            + "): set one, or remove it"
        )
    formats = FormatOptions(
        key_format=key_format,
        value_format=value_format,
        key_schema=None if key_registry_column is not None else key_schema,
        value_schema=None if value_registry_column is not None else value_schema,
        mode=options.choice("mode", DecodeMode),
        key_registry_column=key_registry_column,
        value_registry_column=value_registry_column,
    )
    # Build the codecs once here, so a bad schema or format combination fails at the
    # boundary with the option's name, not later in a task.
    codecs_for(formats)
    return formats


def codecs_for(formats: FormatOptions) -> tuple[Any, Any]:
    """The key and value :class:`~spark_statestore.connectors.spark.formats.ColumnCodec`."""
    from spark_statestore.connectors.spark.ddl import parse_ddl
    from spark_statestore.connectors.spark.formats import ColumnCodec

    def codec(fmt: ValueFormat, schema: str | None, column: str, typed: Any) -> Any:
        struct = None
        if schema is not None:
            struct = parse_ddl(schema, option=f"{column}Schema")
        return ColumnCodec.create(fmt, struct, column=column, registry_column=typed)

    return (
        codec(formats.key_format, formats.key_schema, "key", formats.key_registry_column),
        codec(formats.value_format, formats.value_schema, "value", formats.value_registry_column),
    )
