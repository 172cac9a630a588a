"""The sink's ``avro`` key and value formats: rows encoded with a registered writer schema, as
a registry serializer writes them, so that an application reading with its registry serdes
reads the store's changelog.

Which writer schema (``value*`` options; ``key*`` the same for keys):

* with ``schemaRegistryUrl``: the subject is ``valueSubject``, else the serializers'
  ``valueSubjectNameStrategy`` (``TopicNameStrategy``: ``<changelog>-value``;
  ``RecordNameStrategy``: the record's full name; ``TopicRecordNameStrategy``:
  ``<changelog>-<record full name>``). The writer schema is ``valueSchema`` (or its file),
  which must be registered under the subject (``autoRegisterSchemas true`` registers it,
  under the registry's compatibility rules), else version ``valueSchemaVersion`` (``latest``
  when the query starts) of the subject;
* without a registry: ``valueSchema`` with its id ``valueSchemaId`` (the frame needs one);
* ``valueFraming none``: bare Avro with ``valueSchema``.

The column must have the Spark type the writer schema reads as (``from_avro``'s mapping):
a query is refused before it starts, not row by row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spark_statestore.connectors.schema_registry import RegistrySettings, registry_for
from spark_statestore.connectors.spark.option_table import (
    SCHEMA_REGISTRY_PREFIX,
    Framing,
    OptionReader,
    SubjectNameStrategy,
    ValueFormat,
)
from spark_statestore.connectors.spark.registry_column import (
    PicklesWithoutCaches,
    parse_schema_version,
    schema_text,
    spark_type_of,
)
from spark_statestore.errors import OptionError
from spark_statestore.schemas import AvroSchema, AvroValueEncoder

__all__ = ["AvroSinkColumn", "avro_sink_column"]


@dataclass(frozen=True)
class AvroSinkColumn(PicklesWithoutCaches):
    """How the sink encodes one column (``key`` or ``value``) as Avro. Picklable."""

    column: str
    writer: AvroSchema
    framing: Framing
    subject: str | None = None
    _encoder: Any = field(default=None, compare=False, repr=False)

    def encoder(self) -> AvroValueEncoder:
        """This column's encoder (built once per instance)."""
        if self._encoder is None:
            encoder = AvroValueEncoder(
                self.writer, framed=self.framing is Framing.REGISTRY, column=self.column
            )
            object.__setattr__(self, "_encoder", encoder)
        return self._encoder  # type: ignore[no-any-return]

    def spark_type(self) -> Any:
        """The Spark type the column must have."""
        return spark_type_of(self.writer)


def avro_sink_column(
    options: OptionReader, column: str, *, changelog: str | None
) -> AvroSinkColumn | None:
    """The sink's :class:`AvroSinkColumn` of ``column`` (None: written as it is), asking
    the registry now for the writer schema and its id.

    Raises
    ------
    OptionError
        A format the sink does not write, avro options without avro, a missing schema,
        subject or id, or options that contradict each other.
    SchemaError
        The schema is not valid Avro, or not registered (and not to be), or the registry
        cannot be reached or refuses it.
    """
    fmt = options.choice(f"{column}Format", ValueFormat)
    if fmt not in (ValueFormat.BINARY, ValueFormat.AVRO):
        raise OptionError(
            f"option {column}Format {fmt.value!r} is not a sink format: the sink writes the "
            f"{column} column as it is (binary: a binary or string column) or encodes it "
            "(avro); protobuf and jsonschema are read formats only, so far"
        )
    avro_only = (
        "Schema", "SchemaFile", "Subject", "SchemaVersion", "SchemaId", "Framing",
        "SubjectNameStrategy",
    )  # fmt: skip
    if fmt is ValueFormat.BINARY:
        named = [f"{column}{name}" for name in avro_only if options.given(f"{column}{name}")]
        if named:
            raise OptionError(
                f"option {named[0]} is for {column}Format avro: set it, or remove {named[0]}"
            )
        return None
    text = schema_text(options, column)
    what = f"option {column}Schema{'File' if options.given(f'{column}SchemaFile') else ''}"
    framing = options.choice(f"{column}Framing", Framing)
    url = options.text("schemaRegistryUrl")
    schema_id = options.integer(f"{column}SchemaId")
    if framing is Framing.NONE or url is None:
        if text is None or (framing is Framing.REGISTRY and schema_id is None):
            raise OptionError(
                f"{column}Format avro writes with a known schema: give schemaRegistryUrl (and "
                f"the schema's subject), or {column}Schema"
                + (f" with its id as {column}SchemaId" if framing is Framing.REGISTRY else "")
            )
        writer = AvroSchema.parse(text, what=what, schema_id=schema_id)
        return AvroSinkColumn(column, writer, framing)
    if schema_id is not None:
        raise OptionError(
            f"option {column}SchemaId is for a {column}Schema written without a registry: "
            "with schemaRegistryUrl the registry gives the id; remove it"
        )
    settings = RegistrySettings.from_options(
        url, options.schema_registry(), prefix=SCHEMA_REGISTRY_PREFIX
    )
    registry = registry_for(settings)
    given = None if text is None else AvroSchema.parse(text, what=what)
    subject = _subject(options, column, changelog, given)
    if given is None:
        version = parse_schema_version(options.required(f"{column}SchemaVersion"), column)
        found = registry.version(subject, version)
        return AvroSinkColumn(column, registry.avro(found), framing, subject)
    found_id = registry.lookup(subject, given.text)
    if found_id is None:
        if not options.boolean("autoRegisterSchemas"):
            raise OptionError(
                f"{what} is not registered under subject {subject!r} of the registry at "
                f"{settings.shown_url}: register it, or set autoRegisterSchemas true to have "
                "the sink register it"
            )
        found_id = registry.register(subject, given.text)
    writer = AvroSchema.parse(
        given.text, what=f"{what} (schema id {found_id} of subject {subject!r})", schema_id=found_id
    )
    return AvroSinkColumn(column, writer, framing, subject)


def _subject(
    options: OptionReader, column: str, changelog: str | None, given: AvroSchema | None
) -> str:
    explicit = options.text(f"{column}Subject")
    if explicit is not None:
        return explicit
    strategy = options.choice(f"{column}SubjectNameStrategy", SubjectNameStrategy)
    record = None
    if strategy is not SubjectNameStrategy.TOPIC:
        parsed = None if given is None else given.parsed
        record = parsed.get("name") if isinstance(parsed, dict) else None
        if record is None:
            raise OptionError(
                f"{column}SubjectNameStrategy {strategy.value} names the subject after the "
                f"record: give the record schema as {column}Schema (or the subject as "
                f"{column}Subject)"
            )
        if strategy is SubjectNameStrategy.RECORD:
            return str(record)
    if changelog is None:
        raise OptionError(
            f"{column}SubjectNameStrategy {strategy.value} names the subject after the "
            f"changelog topic, and this sink publishes none: give {column}Subject"
        )
    return f"{changelog}-{column}" if record is None else f"{changelog}-{record}"
