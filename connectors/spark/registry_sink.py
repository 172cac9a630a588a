"""The sink's registry key and value formats (``avro``; ``protobuf`` and ``jsonschema``): rows
encoded with a registered writer schema, as a registry serializer writes them, so that an
application reading with its registry serdes reads the store's changelog.

Which writer schema (``value*`` options; ``key*`` the same for keys):

* with ``schemaRegistryUrl``: the subject is ``valueSubject``, else the serializers'
  ``valueSubjectNameStrategy`` (``TopicNameStrategy``: ``<changelog>-value``;
  ``RecordNameStrategy``: the record's full name (Avro's record, Protobuf's message, JSON
  Schema's ``title``); ``TopicRecordNameStrategy``: ``<changelog>-<record full name>``).
  The writer schema is ``valueSchema`` (or its file), which must be registered under the
  subject (``autoRegisterSchemas true`` registers it, under the registry's compatibility
  rules), else version ``valueSchemaVersion`` (``latest`` when the query starts) of the
  subject;
* without a registry: ``valueSchema`` with its id ``valueSchemaId`` (the frame needs one);
* ``valueFraming none``: bare values with ``valueSchema``.

The column must have the Spark type the writer schema reads as (the format's type mapping,
as the readers map it): a query is refused before it starts, not row by row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spark_statestore.connectors.schema_registry import RegistrySettings, registry_for
from spark_statestore.connectors.spark.option_table import (
    REGISTRY_COLUMN_OPTIONS,
    REGISTRY_FORMATS,
    SCHEMA_REGISTRY_PREFIX,
    Framing,
    OptionReader,
    SubjectNameStrategy,
    ValueFormat,
)
from spark_statestore.connectors.spark.registry_column import (
    REGISTRY_TYPES,
    PicklesWithoutCaches,
    RegistryColumn,
    parse_schema,
    parse_schema_version,
    schema_text,
)
from spark_statestore.errors import OptionError
from spark_statestore.schemas import AvroValueEncoder

__all__ = ["RegistrySinkColumn", "registry_sink_column"]


@dataclass(frozen=True)
class RegistrySinkColumn(PicklesWithoutCaches):
    """How the sink encodes one column (``key`` or ``value``) in a registry format.
    Picklable."""

    column: str
    writer: Any
    """The writer schema: an AvroSchema (ProtobufSchema, JsonSchema) of :attr:`format`."""
    framing: Framing
    subject: str | None = None
    format: ValueFormat = ValueFormat.AVRO
    message: str | None = None
    """Protobuf: the full name of the message written (None: the schema's first)."""
    _encoder: Any = field(default=None, compare=False, repr=False)

    def encoder(self) -> Any:
        """This column's encoder (built once per instance): ``encode(values, locate=...)``."""
        if self._encoder is None:
            object.__setattr__(self, "_encoder", self._new_encoder())
        return self._encoder

    def _new_encoder(self) -> Any:
        framed = self.framing is Framing.REGISTRY
        if self.format is ValueFormat.AVRO:
            return AvroValueEncoder(self.writer, framed=framed, column=self.column)
        if self.format is ValueFormat.PROTOBUF:
            from spark_statestore.schemas.protobuf_encode import ProtobufValueEncoder

            return ProtobufValueEncoder(
                self.writer, message=self.message, framed=framed, column=self.column
            )
        from spark_statestore.schemas.jsonschema_encode import JsonSchemaValueEncoder

        return JsonSchemaValueEncoder(self.writer, framed=framed, column=self.column)

    def spark_type(self) -> Any:
        """The Spark type the column must have: the writer schema's, as the readers map it."""
        reading = RegistryColumn(
            self.column, self.writer, self.framing, format=self.format, message=self.message
        )
        return reading.spark_type()


def registry_sink_column(
    options: OptionReader, column: str, *, changelog: str | None
) -> RegistrySinkColumn | None:
    """The sink's :class:`RegistrySinkColumn` of ``column`` (None: written as it is),
    asking the registry now for the writer schema and its id.

    Raises
    ------
    OptionError
        A format the sink does not write, registry options without a registry format, a
        missing schema, subject or id, or options that contradict each other.
    SchemaError
        The schema is not valid, or not registered (and not to be), or the registry cannot
        be reached or refuses it.
    """
    fmt = options.choice(f"{column}Format", ValueFormat)
    if fmt is not ValueFormat.BINARY and fmt not in REGISTRY_FORMATS:
        raise OptionError(
            f"option {column}Format {fmt.value!r} is not a sink format: the sink writes the "
            f"{column} column as it is (binary: a binary or string column) or encodes it ("
            + ", ".join(f.value for f in REGISTRY_FORMATS)
            + ")"
        )
    if fmt is ValueFormat.BINARY:
        named = [
            f"{column}{name}"
            for name in REGISTRY_COLUMN_OPTIONS
            if options.given(f"{column}{name}")
        ]
        if named:
            raise OptionError(
                f"option {named[0]} is for a registry {column}Format: set one, or remove {named[0]}"
            )
        return None
    text = schema_text(options, column)
    message = options.text(f"{column}MessageName")
    if message is not None and fmt is not ValueFormat.PROTOBUF:
        raise OptionError(
            f"option {column}MessageName names a Protobuf message, but {column}Format is "
            f"{fmt.value}: remove it or set {column}Format protobuf"
        )
    what = f"option {column}Schema{'File' if options.given(f'{column}SchemaFile') else ''}"
    framing = options.choice(f"{column}Framing", Framing)
    url = options.text("schemaRegistryUrl")
    schema_id = options.integer(f"{column}SchemaId")
    if framing is Framing.NONE or url is None:
        if text is None or (framing is Framing.REGISTRY and schema_id is None):
            raise OptionError(
                f"{column}Format {fmt.value} writes with a known schema: give "
                f"schemaRegistryUrl (and the schema's subject), or {column}Schema"
                + (f" with its id as {column}SchemaId" if framing is Framing.REGISTRY else "")
            )
        writer = parse_schema(fmt, text, what=what, schema_id=schema_id)
        return _checked(RegistrySinkColumn(column, writer, framing, None, fmt, message))
    if schema_id is not None:
        raise OptionError(
            f"option {column}SchemaId is for a {column}Schema written without a registry: "
            "with schemaRegistryUrl the registry gives the id; remove it"
        )
    settings = RegistrySettings.from_options(
        url, options.schema_registry(), prefix=SCHEMA_REGISTRY_PREFIX
    )
    registry = registry_for(settings)
    schema_type = REGISTRY_TYPES[fmt]
    given = None if text is None else parse_schema(fmt, text, what=what)
    subject = _subject(options, column, changelog, given, fmt)
    if given is None:
        version = parse_schema_version(options.required(f"{column}SchemaVersion"), column)
        found = registry.version(subject, version)
        writer = registry.parsed(found, schema_type)
        return _checked(RegistrySinkColumn(column, writer, framing, subject, fmt, message))
    found_id = registry.lookup(subject, given.text, schema_type)
    if found_id is None:
        if not options.boolean("autoRegisterSchemas"):
            raise OptionError(
                f"{what} is not registered under subject {subject!r} of the registry at "
                f"{settings.shown_url}: register it, or set autoRegisterSchemas true to have "
                "the sink register it"
            )
        found_id = registry.register(subject, given.text, schema_type)
    registered = f"{what} (schema id {found_id} of subject {subject!r})"
    writer = parse_schema(fmt, given.text, what=registered, schema_id=found_id)
    return _checked(RegistrySinkColumn(column, writer, framing, subject, fmt, message))


def _checked(column: RegistrySinkColumn) -> RegistrySinkColumn:
    """``column`` once its encoder builds (the message exists and can be framed)."""
    column.encoder()
    return column


def _record_name(given: Any, fmt: ValueFormat, message: str | None) -> str | None:
    """The name the serializers' record strategies name a subject after: Avro's record's
    full name, Protobuf's (first) message's, JSON Schema's ``title``."""
    if given is None:
        return None
    if fmt is ValueFormat.AVRO:
        parsed = given.parsed
        return str(parsed["name"]) if isinstance(parsed, dict) and "name" in parsed else None
    if fmt is ValueFormat.PROTOBUF:
        return str(given.message(message).full_name)
    body = given.body
    title = body.get("title") if isinstance(body, dict) else None
    return None if title is None else str(title)


def _subject(
    options: OptionReader, column: str, changelog: str | None, given: Any, fmt: ValueFormat
) -> str:
    explicit = options.text(f"{column}Subject")
    if explicit is not None:
        return explicit
    strategy = options.choice(f"{column}SubjectNameStrategy", SubjectNameStrategy)
    record = None
    if strategy is not SubjectNameStrategy.TOPIC:
        record = _record_name(given, fmt, options.text(f"{column}MessageName"))
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
