"""The registry key and value formats (``avro``): which reader schema a query reads with,
fixed when the query is planned, and where each value's writer schema comes from.

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
from spark_statestore.connectors.spark.option_table import (
    SCHEMA_REGISTRY_PREFIX,
    Framing,
    OptionReader,
    ValueFormat,
)
from spark_statestore.errors import OptionError
from spark_statestore.schemas import AvroSchema, AvroValueDecoder, SchemaError, SchemaNotFoundError

if TYPE_CHECKING:
    from pyspark.sql.types import DataType

__all__ = [
    "PicklesWithoutCaches",
    "RegistryColumn",
    "parse_schema_version",
    "registry_column",
    "schema_text",
    "spark_type_of",
]

_AVRO_ONLY = ("Subject", "SchemaVersion", "SchemaId", "Framing")


class PicklesWithoutCaches:
    """For a frozen dataclass whose private fields (``_decoder``, ``_encoder``) are caches
    rebuilt where they are used: pickled without them, unpickled with them empty."""

    __dataclass_fields__: Mapping[str, Any]

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__ if name[0] != "_"}

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        for name in self.__dataclass_fields__:
            object.__setattr__(self, name, state.get(name))


def spark_type_of(schema: AvroSchema) -> DataType:
    """The Spark type of ``schema``'s values (``from_avro``'s mapping)."""
    from pyspark.sql.pandas.types import from_arrow_type

    return from_arrow_type(schema.arrow_type())


@dataclass(frozen=True)
class RegistryColumn(PicklesWithoutCaches):
    """How one column (``key`` or ``value``) is read in a registry format. Picklable: a
    plan carries it to the executors, which build their decoder from it."""

    column: str
    reader: AvroSchema
    framing: Framing
    subject: str | None = None
    registry: RegistrySettings | None = None
    writers: Mapping[int, AvroSchema] = field(default_factory=dict)
    """Writer schemas known when the query was planned, by id."""
    format: ValueFormat = ValueFormat.AVRO
    _decoder: Any = field(default=None, compare=False, repr=False)

    def spark_type(self) -> DataType:
        """The Spark type of the column: the reader schema's."""
        return spark_type_of(self.reader)

    def decoder(self) -> AvroValueDecoder:
        """This column's decoder (built once per instance)."""
        if self._decoder is None:
            writers = None if self.framing is Framing.NONE else self._writer
            decoder = AvroValueDecoder(
                self.reader, writers, subject=self.subject, column=self.column
            )
            object.__setattr__(self, "_decoder", decoder)
        return self._decoder  # type: ignore[no-any-return]

    def _writer(self, schema_id: int) -> AvroSchema:
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
        return registry.avro(registry.by_id(schema_id, subject=self.subject))


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
    """The :class:`RegistryColumn` of ``column`` for format ``fmt`` (None: not avro), reading the
    registry now when it gives the reader schema: with ``planned`` (the Spark type the query
    was planned with) the newest version (up to the one asked for) that reads as it.

    Raises
    ------
    OptionError
        Avro options with another format, a missing schema, subject or id, or options
        that contradict each other.
    SchemaError
        The schema given or registered is not a valid Avro schema, or not one a column
        can hold; the registry cannot be reached or has no such subject or version.
    """
    given = [f"{column}{suffix}" for suffix in _AVRO_ONLY if options.given(f"{column}{suffix}")]
    if fmt is not ValueFormat.AVRO:
        if given:
            raise OptionError(
                f"option {given[0]} is for {column}Format avro, but {column}Format is "
                f"{fmt.value}: remove it or set {column}Format avro"
            )
        return None
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
                f"{column}Framing none reads bare Avro written with a known schema: give it "
                f"as option {column}Schema (or {column}SchemaFile)"
            )
        _refuse_with_bare(options, column, registry is not None)
        return RegistryColumn(column, AvroSchema.parse(text, what=what), framing)
    if registry is None:
        for suffix in ("Subject", "SchemaVersion"):
            if options.given(f"{column}{suffix}"):
                raise OptionError(
                    f"option {column}{suffix} names a registry subject's schema: give "
                    "schemaRegistryUrl too, or remove it"
                )
        if text is None or schema_id is None:
            raise OptionError(
                f"{column}Format avro reads values framed with a schema id: give "
                f"schemaRegistryUrl (each value read with its own writer schema), or the "
                f"schema as {column}Schema with its id as {column}SchemaId"
            )
        reader = AvroSchema.parse(text, what=what, schema_id=schema_id)
        return RegistryColumn(column, reader, framing, writers={schema_id: reader})
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
    found = _registered(column, registry, subject, version, text, what, planned)
    if planned is not None and spark_type_of(found.reader) != planned:
        raise SchemaError(
            f"{found.reader.what} reads {column}s as {spark_type_of(found.reader).simpleString()}"
            f", but the query was planned with {planned.simpleString()}: define the "
            "DataFrame again to read with it"
        )
    return found


def _registered(
    column: str,
    settings: RegistrySettings,
    subject: str,
    version: int | None,
    text: str | None,
    what: str,
    planned: Any,
) -> RegistryColumn:
    registry = registry_for(settings)
    writers: dict[int, AvroSchema] = {}
    chosen = registry.version(subject, version)
    found_versions = {}
    for number in registry.versions(subject):
        found = chosen if number == chosen.version else registry.version(subject, number)
        found_versions[number] = found
        if found.schema_type.upper() == "AVRO":
            writers[found.schema_id] = registry.avro(found)
    if chosen.schema_id not in writers:
        raise SchemaError(
            f"subject {subject!r} version {chosen.version} (schema id {chosen.schema_id}) is a "
            f"{chosen.schema_type} schema, not Avro: read it with the format of its type"
        )
    if text is not None:
        reader = AvroSchema.parse(text, what=what)
    elif version is None and planned is not None:
        # The newest version that reads as planned: versions registered after the query
        # was defined do not change its columns.
        candidates = [
            writers[f.schema_id]
            for n, f in sorted(found_versions.items(), reverse=True)
            if n <= (chosen.version or n) and f.schema_id in writers
        ]
        reader = next(
            (c for c in candidates if spark_type_of(c) == planned), writers[chosen.schema_id]
        )
    else:
        reader = writers[chosen.schema_id]
    return RegistryColumn(column, reader, Framing.REGISTRY, subject, settings, writers)


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
