"""The registry key and value formats (``avro``, ``protobuf``, ``jsonschema``): which reader
schema a query reads with, fixed when the query is planned, and where each value's writer
schema comes from.

Where the reader schema comes from (``value*`` options; ``key*`` the same for keys):

* ``valueSchema`` / ``valueSchemaFile``: the given Avro schema;
* else the registry (``schemaRegistryUrl``): version ``valueSchemaVersion`` (``latest``, read
  once when the query is planned, or a number) of subject ``valueSubject`` (the follower
  source's default: ``<changelog>-value``, the subject Kafka Streams' registry serdes use for
  a store, whose changelog is the topic they serialize for).

Where each value's writer schema comes from (``valueFraming registry``, the default): the id
in its frame; the subject's versions are fetched when the query is planned (a registry
outage later does not stop the query for them), other ids from the registry when first seen
and cached per process. Without a registry the given schema is the writer schema of the id
``valueSchemaId`` only: a value framed with another id fails, never decoded with a schema it
was not written with. ``valueFraming none``: bare Avro, written with the given schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_statestore.connectors.schema_registry import RegistrySettings, registry_for
from spark_statestore.connectors.schema_registry.client import SCHEMA_TYPES
from spark_statestore.connectors.spark.option_table import (
    REGISTRY_FORMATS,
    SCHEMA_REGISTRY_PREFIX,
    Framing,
    OptionReader,
    ValueFormat,
)
from spark_statestore.errors import OptionError
from spark_statestore.schemas import (
    AvroSchema,
    AvroValueDecoder,
    SchemaError,
    SchemaNotFoundError,
    ValueDecoder,
)

if TYPE_CHECKING:
    from pyspark.sql.types import DataType

__all__ = [
    "PicklesWithoutCaches",
    "RegistryColumn",
    "parse_schema_version",
    "registry_column",
    "schema_text",
]

_REGISTRY_ONLY = ("Subject", "SchemaVersion", "SchemaId", "Framing")


class PicklesWithoutCaches:
    """For a frozen dataclass whose private fields (``_decoder``, ``_encoder``) are caches
    rebuilt where they are used: pickled without them, unpickled with them empty."""

    __dataclass_fields__: Mapping[str, Any]

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__ if name[0] != "_"}

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        for name in self.__dataclass_fields__:
            object.__setattr__(self, name, state.get(name))


REGISTRY_TYPES = {fmt: SCHEMA_TYPES[fmt.value] for fmt in REGISTRY_FORMATS}
"""Each registry format's schema type, as the registry names it (``schemaType``)."""


def parse_schema(fmt: ValueFormat, text: str, *, what: str, schema_id: int | None = None) -> Any:
    """A given schema of format ``fmt``: an AvroSchema, ProtobufSchema or JsonSchema.

    Raises
    ------
    SchemaError
        Not a valid schema of the format.
    """
    if fmt is ValueFormat.AVRO:
        return AvroSchema.parse(text, what=what, schema_id=schema_id)
    if fmt is ValueFormat.PROTOBUF:
        from spark_statestore.schemas.protobuf import ProtobufSchema

        return ProtobufSchema.parse(text, what=what, schema_id=schema_id)
    from spark_statestore.schemas.jsonschema import JsonSchema

    return JsonSchema.parse(text, what=what, schema_id=schema_id)


@dataclass(frozen=True)
class RegistryColumn(PicklesWithoutCaches):
    """How one column (``key`` or ``value``) is read in a registry format. Picklable: a
    plan carries it to the executors, which build their decoder from it."""

    column: str
    reader: Any
    """The reader schema: an AvroSchema, ProtobufSchema or JsonSchema (:attr:`format`)."""
    framing: Framing
    subject: str | None = None
    registry: RegistrySettings | None = None
    writers: Mapping[int, Any] = field(default_factory=dict)
    """Writer schemas known when the query was planned, by id."""
    format: ValueFormat = ValueFormat.AVRO
    message: str | None = None
    """Protobuf: the full name of the reader message (None: the reader schema's first)."""
    _decoder: Any = field(default=None, compare=False, repr=False)

    def arrow_type(self) -> Any:
        """The Arrow type of the column: the reader schema's (message's)."""
        if self.format is ValueFormat.PROTOBUF:
            return self.reader.arrow_type(self.message)
        return self.reader.arrow_type()

    def spark_type(self) -> DataType:
        """The Spark type of the column: the reader schema's."""
        from pyspark.sql.pandas.types import from_arrow_type

        return from_arrow_type(self.arrow_type())

    def decoder(self) -> ValueDecoder:
        """This column's decoder (built once per instance)."""
        if self._decoder is None:
            object.__setattr__(self, "_decoder", self._new_decoder())
        return self._decoder  # type: ignore[no-any-return]

    def _new_decoder(self) -> ValueDecoder:
        writers = None if self.framing is Framing.NONE else self._writer
        common: dict[str, Any] = {"subject": self.subject, "column": self.column}
        if self.format is ValueFormat.AVRO:
            return AvroValueDecoder(self.reader, writers, **common)
        if self.format is ValueFormat.PROTOBUF:
            from spark_statestore.schemas.protobuf import ProtobufValueDecoder

            return ProtobufValueDecoder(self.reader, writers, message=self.message, **common)
        from spark_statestore.schemas.jsonschema import JsonSchemaValueDecoder

        return JsonSchemaValueDecoder(self.reader, writers, **common)

    def _writer(self, schema_id: int) -> Any:
        known = self.writers.get(schema_id)
        if known is not None:
            return known
        if self.registry is None:
            given = ", ".join(str(i) for i in sorted(self.writers))
            raise SchemaNotFoundError(
                f"schema id {schema_id} is not {self.column}SchemaId ({given}), the id of the "
                f"given {self.column}Schema: give schemaRegistryUrl so that each value is "
                "read with the schema it was written with"
            )
        registry = registry_for(self.registry)
        found = registry.by_id(schema_id, subject=self.subject)
        return registry.parsed(found, REGISTRY_TYPES[self.format])


def schema_text(options: OptionReader, column: str) -> str | None:
    """``{column}Schema``, or the text of the file ``{column}SchemaFile`` (not both).

    Raises
    ------
    OptionError
        Both given, or the file cannot be read.
    """
    text = options.text(f"{column}Schema")
    path = options.text(f"{column}SchemaFile")
    if path is None:
        return text
    if text is not None:
        raise OptionError(
            f"options {column}Schema and {column}SchemaFile both give the {column} schema: keep one"
        )
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise OptionError(f"option {column}SchemaFile: cannot read {path!r}: {exc}") from None


def registry_column(
    options: OptionReader,
    column: str,
    fmt: ValueFormat,
    text: str | None,
    *,
    changelog: str | None,
    planned: Any = None,
) -> RegistryColumn | None:
    """The :class:`RegistryColumn` of ``column`` for format ``fmt`` (None: not a registry
    format), reading the registry now when it gives the reader schema: with ``planned``
    (the Spark type the query was planned with) the newest version (up to the one asked
    for) that reads as it.

    Raises
    ------
    OptionError
        Registry options with another format, a missing schema, subject or id, or options
        that contradict each other.
    SchemaError
        The schema given or registered is not a valid schema of the format, or not one a
        column can hold; the registry cannot be reached or has no such subject or version.
    """
    given = [f"{column}{suffix}" for suffix in _REGISTRY_ONLY if options.given(f"{column}{suffix}")]
    message_option = f"{column}MessageName"
    message = options.text(message_option)
    if fmt not in REGISTRY_TYPES:
        if given or message is not None:
            formats = ", ".join(f.value for f in REGISTRY_TYPES)
            raise OptionError(
                f"option {given[0] if given else message_option} is for a registry "
                f"{column}Format ({formats}), but {column}Format is {fmt.value}: remove it or "
                "set one of those"
            )
        return None
    if message is not None and fmt is not ValueFormat.PROTOBUF:
        raise OptionError(
            f"option {message_option} names a Protobuf message, but {column}Format is "
            f"{fmt.value}: remove it or set {column}Format protobuf"
        )
    url = options.text("schemaRegistryUrl")
    framing = options.choice(f"{column}Framing", Framing)
    registry = None
    if url is not None:
        settings = options.schema_registry()
        registry = RegistrySettings.from_options(url, settings, prefix=SCHEMA_REGISTRY_PREFIX)
    version_text = options.required(f"{column}SchemaVersion")
    schema_id = options.integer(f"{column}SchemaId")
    what = f"option {column}Schema{'File' if options.given(f'{column}SchemaFile') else ''}"
    if framing is Framing.NONE:
        if text is None:
            raise OptionError(
                f"{column}Framing none reads bare {fmt.value} written with a known schema: "
                f"give it as option {column}Schema (or {column}SchemaFile)"
            )
        _refuse_with_bare(options, column, registry is not None)
        bare = parse_schema(fmt, text, what=what)
        return _checked(RegistryColumn(column, bare, framing, format=fmt, message=message))
    if registry is None:
        for suffix in ("Subject", "SchemaVersion"):
            if options.given(f"{column}{suffix}"):
                raise OptionError(
                    f"option {column}{suffix} names a registry subject's schema: give "
                    "schemaRegistryUrl too, or remove it"
                )
        if text is None or schema_id is None:
            raise OptionError(
                f"{column}Format {fmt.value} reads values framed with a schema id: give "
                f"schemaRegistryUrl (each value read with its own writer schema), or the "
                f"schema as {column}Schema with its id as {column}SchemaId"
            )
        reader = parse_schema(fmt, text, what=what, schema_id=schema_id)
        given_column = RegistryColumn(
            column, reader, framing, writers={schema_id: reader}, format=fmt, message=message
        )
        return _checked(given_column)
    if schema_id is not None:
        raise OptionError(
            f"option {column}SchemaId is for a {column}Schema read without a registry: with "
            "schemaRegistryUrl each value's frame names its schema; remove it"
        )
    subject = options.text(f"{column}Subject") or (
        None if changelog is None else f"{changelog}-{column}"
    )
    if subject is None:
        raise OptionError(
            f"option {column}Subject is required with schemaRegistryUrl here: the registry "
            f"subject the application's serializer registers its {column}s under (with the "
            f"default TopicNameStrategy, '<changelog topic>-{column}')"
        )
    version = parse_schema_version(version_text, column)
    found = _registered(column, fmt, registry, subject, version, text, what, planned, message)
    if planned is not None and found.spark_type() != planned:
        raise SchemaError(
            f"{found.reader.what} reads {column}s as {found.spark_type().simpleString()}"
            f", but the query was planned with {planned.simpleString()}: define the "
            "DataFrame again to read with it"
        )
    return found


def _registered(
    column: str,
    fmt: ValueFormat,
    settings: RegistrySettings,
    subject: str,
    version: int | None,
    text: str | None,
    what: str,
    planned: Any,
    message: str | None,
) -> RegistryColumn:
    registry = registry_for(settings)
    schema_type = REGISTRY_TYPES[fmt]
    writers: dict[int, Any] = {}
    chosen = registry.version(subject, version)
    found_versions = {}
    for number in registry.versions(subject):
        found = chosen if number == chosen.version else registry.version(subject, number)
        found_versions[number] = found
        if found.schema_type.upper() == schema_type:
            writers[found.schema_id] = registry.parsed(found, schema_type)
    if chosen.schema_id not in writers:
        raise SchemaError(
            f"subject {subject!r} version {chosen.version} (schema id {chosen.schema_id}) is a "
            f"{chosen.schema_type} schema, not {schema_type}: read it with the format of its "
            "type"
        )

    def of(reader: Any) -> RegistryColumn:
        return RegistryColumn(
            column, reader, Framing.REGISTRY, subject, settings, writers, fmt, message
        )

    if text is not None:
        return _checked(of(parse_schema(fmt, text, what=what)))
    if version is None and planned is not None:
        # The newest version that reads as planned: versions registered after the query
        # was defined do not change its columns.
        candidates = [
            of(writers[f.schema_id])
            for n, f in sorted(found_versions.items(), reverse=True)
            if n <= (chosen.version or n) and f.schema_id in writers
        ]
        for candidate in candidates:
            try:
                if candidate.spark_type() == planned:
                    return candidate
            except SchemaError:
                continue  # e.g. an older version without the planned message
    return _checked(of(writers[chosen.schema_id]))


def _checked(column: RegistryColumn) -> RegistryColumn:
    """``column`` once its reader schema (message) is known to give a column type.

    Raises
    ------
    SchemaError
        No such message, a recursive type, a type no Spark column holds.
    """
    column.arrow_type()
    return column


def parse_schema_version(text: str, column: str) -> int | None:
    """Option ``{column}SchemaVersion``: None for ``latest``, else the version number.

    Raises
    ------
    OptionError
        Neither.
    """
    if text.lower() == "latest":
        return None
    if text.isascii() and text.isdigit() and int(text) >= 1:
        return int(text)
    raise OptionError(
        f"option {column}SchemaVersion must be 'latest' or a version number >= 1, got {text!r}"
    )


def _refuse_with_bare(options: OptionReader, column: str, registry: bool) -> None:
    if registry:
        raise OptionError(
            f"{column}Framing none reads bare Avro with {column}Schema; schemaRegistryUrl "
            "would not be used: remove one of them"
        )
    for suffix in ("SchemaId", "Subject"):
        if options.given(f"{column}{suffix}"):
            raise OptionError(
                f"option {column}{suffix} names a registry schema; {column}Framing none has "
                "none: remove it"
            )
