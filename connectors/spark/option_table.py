"""Every option of the ``spark_statestore`` data source, declared once.

Each :class:`OptionSpec` gives an option's name as users write it (``startingOffsets``),
the type of its value, its default (as users would write it), one line of help, the
surfaces that take it and those that require it. From this table come the valid names of
each surface, the spelling in error messages, the "did you mean" hint, the generic parsing
of booleans, integers and enums (:mod:`~spark_statestore.connectors.spark.options`), and the
test that the option tables in ``docs/`` list exactly these options.

The enums of option values live here too, so the table can name them without importing
Spark or Arrow.

Why one module: the table, the enums it names and :class:`OptionReader`, which reads Spark's
option map only through it (defaults, required surfaces, bounds, the NUL check of the
options naming files), are one concept; a change to how an option is declared changes how
it is read, and the two are reviewed together.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from spark_statestore.changelog.missing_position import OnMissingPosition
from spark_statestore.errors import OptionError, closest_hint
from spark_statestore.integer_spec import INT64_MAX, parse_integer

__all__ = [
    "KAFKA_PREFIX",
    "OPTIONS",
    "REGISTRY_FORMATS",
    "SCHEMA_REGISTRY_PREFIX",
    "DecodeMode",
    "Framing",
    "OptionReader",
    "OptionSpec",
    "StoreType",
    "SubjectNameStrategy",
    "Surface",
    "ValueFormat",
    "View",
    "options_of",
    "parse_choice",
    "spec_of",
    "spelling",
]

KAFKA_PREFIX = "kafka."
"""Options starting with this are Kafka client settings, passed through without the prefix."""
SCHEMA_REGISTRY_PREFIX = "schemaregistry."
"""Options starting with this (``schemaRegistry.basic.auth.user.info``...) are the schema
registry client's settings, passed through without the prefix (Spark lower-cases names)."""
_PASSTHROUGH = (KAFKA_PREFIX, SCHEMA_REGISTRY_PREFIX)


class Surface(Enum):
    """Where an option is given; the value names the surface in error messages."""

    SOURCE = "the spark_statestore follower source"
    READER = "the spark_statestore snapshot reader"
    SINK = "the spark_statestore sink"
    BATCH_WRITER = "the spark_statestore batch writer"


class StoreType(str, Enum):
    """What kind of Kafka Streams store the changelog belongs to (``storeType``)."""

    KEY_VALUE = "keyValue"
    TIMESTAMPED = "timestamped"
    WINDOW = "window"
    SESSION = "session"
    VERSIONED = "versioned"


class View(str, Enum):
    """What a snapshot read returns (``view``)."""

    DATA = "data"
    POSITION = "position"
    LAG = "lag"
    METADATA = "metadata"
    HOST = "host"
    """How tasks reach the driver's store host (``enrich`` plans with it)."""
    HEALTH = "health"
    """The owner's state (RESTORING, RUNNING, FAILED, ...) and why."""


class DecodeMode(str, Enum):
    """What an undecodable key or value does (``mode``), as in Spark's JSON/CSV readers."""

    FAILFAST = "failfast"
    PERMISSIVE = "permissive"


class Framing(str, Enum):
    """How a registry format's bytes are framed (``keyFraming``/``valueFraming``)."""

    REGISTRY = "registry"
    """The registry serializers' frame: a magic byte, the 4-byte schema id, the payload."""
    NONE = "none"
    """The bare payload, written with the given schema."""


class SubjectNameStrategy(str, Enum):
    """Which registry subject a writer schema is under (the serializers' strategies)."""

    TOPIC = "TopicNameStrategy"
    """``<topic>-key`` / ``<topic>-value``: the serializers' default."""
    RECORD = "RecordNameStrategy"
    """The record's full name."""
    TOPIC_RECORD = "TopicRecordNameStrategy"
    """``<topic>-<the record's full name>``."""


class ValueFormat(str, Enum):
    """How a key or value column is decoded (the ``keyFormat``/``valueFormat`` options)."""

    BINARY = "binary"
    STRING = "string"
    LONG = "long"
    INT = "int"
    DOUBLE = "double"
    JSON = "json"
    AVRO = "avro"
    PROTOBUF = "protobuf"
    JSONSCHEMA = "jsonschema"

    @classmethod
    def parse(cls, option_name: str, text: str) -> ValueFormat:
        """Parse an option value (case-insensitive).

        Raises
        ------
        OptionError
            Naming the option, the bad value, the closest valid value and all valid values.
        """
        return parse_choice(option_name, text, cls)


REGISTRY_FORMATS = (ValueFormat.AVRO, ValueFormat.PROTOBUF, ValueFormat.JSONSCHEMA)
"""The formats whose values are written with a schema (a registry's, or given)."""

REGISTRY_COLUMN_OPTIONS = (
    "Schema", "SchemaFile", "Subject", "SchemaVersion", "SchemaId", "Framing",
    "SubjectNameStrategy", "MessageName",
)  # fmt: skip
"""The options of a registry format's column, after ``key`` or ``value`` (``valueSchema``...):
given to a column written as it is (binary), each is refused."""

E = TypeVar("E", bound=Enum)


def parse_choice(option: str, text: str, kind: type[E]) -> E:
    """The member of the enum ``kind`` whose value is ``text`` (case and blanks ignored).

    Raises
    ------
    OptionError
        Naming the option, the bad value, the closest valid value and all valid values.
    """
    lowered = text.strip().lower()
    for member in kind:
        if str(member.value).lower() == lowered:
            return member
    raise OptionError(
        f"option {spelling(option)!r}: unknown value {text!r}"
        + closest_hint(lowered, [str(member.value) for member in kind], noun="values")
    )


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """One option: its name as users write it, its value's type, default and help."""

    name: str
    """The documented spelling; Spark passes it lower-cased, matching is case-insensitive."""
    kind: type
    """``str``, ``bool``, ``int`` or an :class:`~enum.Enum` of the values (case-insensitive)."""
    surfaces: frozenset[Surface]
    help: str
    """One line: what the option is for (also the end of its "is required" error)."""
    default: str | None = None
    """The value taken when the option is absent, written as a user would write it."""
    required: frozenset[Surface] = frozenset()
    """The surfaces that fail without it."""
    minimum: int = 0
    """``int`` options: the smallest value taken."""
    maximum: int = INT64_MAX
    """``int`` options: the largest value taken."""
    names_file: bool = False
    """The value is a file name, so it cannot hold a NUL."""

    @property
    def key(self) -> str:
        """The name as Spark passes it (lower-cased)."""
        return self.name.lower()


_SOURCE = frozenset({Surface.SOURCE})
_READER = frozenset({Surface.READER})
_SINKS = frozenset({Surface.SINK, Surface.BATCH_WRITER})
_DECODERS = _SOURCE | _READER
_ALL = _DECODERS | _SINKS
_SERVERS = _SOURCE | _SINKS  # a follower query serves its store; a sink with serve=true too
_STREAM_SINK = frozenset({Surface.SINK})  # reads the query's checkpoint

OPTIONS: tuple[OptionSpec, ...] = (
    # -- every surface ----------------------------------------------------------------------
    OptionSpec(
        "path",
        str,
        _ALL,
        "the store directory, e.g. .load('/data/stores/orders') or .start(...)",
        required=_ALL,
        names_file=True,
    ),
    OptionSpec(
        "kafka.bootstrap.servers",
        str,
        _ALL,
        "the Kafka cluster of the changelog, e.g. 'broker1:9092'",
        required=_SOURCE,
    ),
    # -- the follower source ----------------------------------------------------------------
    OptionSpec(
        "changelog",
        str,
        _SOURCE | _SINKS,
        "the changelog topic to follow or publish to, e.g. 'app-store-changelog'",
        required=_SOURCE,
    ),
    OptionSpec(
        "startingOffsets",
        str,
        _SOURCE,
        'where the feed of a new query starts: earliest, latest or JSON {"0": 12, "1": -2}',
        default="earliest",
    ),
    OptionSpec(
        "maxOffsetsPerTrigger", int, _SOURCE, "at most this many offsets per micro-batch", minimum=1
    ),
    OptionSpec(
        "failOnDataLoss", bool, _SOURCE, "fail when offsets are gone from the topic", default="true"
    ),
    OptionSpec("includeHeaders", bool, _DECODERS, "add the headers column", default="false"),
    OptionSpec(
        "leaderApplicationId",
        str,
        _SOURCE,
        "the exactly-once leader's application.id: the store's position comes from its "
        "committed offsets (for changelogs without position headers)",
    ),
    OptionSpec(
        "leaderTopology",
        str,
        _SOURCE,
        "the text of the leader's Topology.describe(): wait only through the internal "
        "topics upstream of the store (with leaderApplicationId)",
    ),
    OptionSpec(
        "leaderUpstreamTopics",
        str,
        _SOURCE,
        "the internal topics between the leader's input topics and the store, "
        "comma-separated (with leaderApplicationId)",
    ),
    OptionSpec("partitions", str, _DECODERS, "a subset of changelog partitions, e.g. 0,2,5-7"),
    OptionSpec("keyPrefix", str, _DECODERS, "only keys starting with this (UTF-8, or hex:...)"),
    OptionSpec(
        "storeType",
        StoreType,
        _DECODERS,
        "the Kafka Streams store of the changelog: keyValue, timestamped, window, session, "
        "versioned",
        default="keyValue",
    ),
    OptionSpec(
        "windowSizeMs",
        int,
        _DECODERS,
        "storeType window: the window size, for the window_end column (the reader needs it)",
        minimum=1,
    ),
    OptionSpec(
        "historyRetentionMs",
        int,
        _SOURCE,
        "storeType versioned: the store's history retention (default: the changelog's, "
        "from its min.compaction.lag.ms)",
    ),
    OptionSpec(
        "onMissingPosition",
        OnMissingPosition,
        _SOURCE,
        "a record with v=0 and no valid c header: fail naming it, or skip its position",
        default="fail",
    ),
    OptionSpec(
        "serveHost",
        str,
        _SERVERS,
        "where the owner's Flight server listens (default: 127.0.0.1 when executors run on "
        "the driver's host, else the driver's address, over TLS)",
    ),
    OptionSpec(
        "servePort", int, _SERVERS, "the owner's Flight server port (any free one)", maximum=65535
    ),
    OptionSpec(
        "serveTlsCert",
        str,
        _SERVERS,
        "PEM certificate chain file of the owner's Flight server (TLS)",
        names_file=True,
    ),
    OptionSpec(
        "serveTlsKey",
        str,
        _SERVERS,
        "PEM private key file of the owner's Flight server (TLS)",
        names_file=True,
    ),
    OptionSpec(
        "serveTlsClientCa",
        str,
        _SERVERS,
        "PEM file of the CAs whose client certificates the owner's Flight server accepts: "
        "mutual TLS, a client without one fails the TLS handshake (needs serveTlsCert)",
        names_file=True,
    ),
    OptionSpec(
        "serveTokenFile",
        str,
        _SERVERS,
        "a file holding the bearer token of the owner's Flight server (default: a random "
        "one); replicas sharing it can be queried through the router",
        names_file=True,
    ),
    OptionSpec(
        "announce",
        bool,
        _SERVERS,
        "announce the store on the changelog's <changelog>-replicas topic (discovery)",
        default="true",
    ),
    OptionSpec(
        "metricsPort",
        int,
        _SERVERS,
        "serve the metrics (Prometheus' text format) at http://metricsHost:PORT/metrics from "
        "the process that owns the store: a follower query's driver process, a sink's store "
        "server (with serve) (0: a free port, logged)",
        maximum=65535,
    ),
    OptionSpec(
        "metricsHost",
        str,
        _SERVERS,
        "the metrics endpoint's address (beyond loopback it needs metricsTlsCert, "
        "metricsTlsKey and metricsTokenFile)",
        default="127.0.0.1",
    ),
    OptionSpec(
        "metricsTlsCert",
        str,
        _SERVERS,
        "PEM certificate chain file of the metrics endpoint (HTTPS; with metricsTlsKey)",
    ),
    OptionSpec("metricsTlsKey", str, _SERVERS, "PEM private key file of the metrics endpoint"),
    OptionSpec(
        "metricsTokenFile",
        str,
        _SERVERS,
        "a file holding the bearer token every scrape of the metrics endpoint must send",
    ),
    OptionSpec(
        "announceIntervalMs",
        int,
        _SERVERS,
        "heartbeat interval of the announcement; stale after three intervals without one "
        "(at least one interval plus 2 s)",
        default="5000",
        minimum=100,
    ),
    OptionSpec(
        "announceKeyFile",
        str,
        _SERVERS,
        "PEM file of the membership key announcements are signed with (default: this "
        "user's, created on first use); readers verify with its public key",
        names_file=True,
    ),
    # -- typed keys and values (the source and the reader) ----------------------------------
    OptionSpec(
        "keyFormat",
        ValueFormat,
        _ALL,
        "how keys are decoded (sinks: binary, the column as it is, or avro); registry "
        "formats: avro, protobuf, jsonschema",
        default="binary",
    ),
    OptionSpec(
        "valueFormat",
        ValueFormat,
        _ALL,
        "how values are decoded (sinks: binary, the column as it is, or avro); registry "
        "formats: avro, protobuf, jsonschema",
        default="binary",
    ),
    OptionSpec(
        "keySchema",
        str,
        _ALL,
        "the json key format's DDL ('id INT'), or a registry key format's schema (Avro JSON, "
        ".proto text, JSON Schema)",
    ),
    OptionSpec(
        "valueSchema",
        str,
        _ALL,
        "the json value format's DDL ('id INT'), or a registry value format's schema (Avro "
        "JSON, .proto text, JSON Schema)",
    ),
    OptionSpec("keySchemaFile", str, _ALL, "a file holding keySchema's text", names_file=True),
    OptionSpec("valueSchemaFile", str, _ALL, "a file holding valueSchema's text", names_file=True),
    OptionSpec(
        "schemaRegistryUrl",
        str,
        _ALL,
        "the schema registry's Confluent-compatible API (registry-format keys or values), e.g. "
        "'http://registry:8081'; its client's settings as schemaRegistry.*",
    ),
    OptionSpec(
        "keySubject",
        str,
        _ALL,
        "the registry subject of the keys (source default: <changelog>-key)",
    ),
    OptionSpec(
        "valueSubject",
        str,
        _ALL,
        "the registry subject of the values (source default: <changelog>-value)",
    ),
    OptionSpec(
        "keySchemaVersion",
        str,
        _ALL,
        "the subject's version keys are read as: latest (when the query starts) or a number",
        default="latest",
    ),
    OptionSpec(
        "valueSchemaVersion",
        str,
        _ALL,
        "the subject's version values are read as: latest (when the query starts) or a number",
        default="latest",
    ),
    OptionSpec(
        "keySchemaId",
        int,
        _ALL,
        "without a registry: the schema id of keySchema in the keys' frames",
    ),
    OptionSpec(
        "valueSchemaId",
        int,
        _ALL,
        "without a registry: the schema id of valueSchema in the values' frames",
    ),
    OptionSpec(
        "keyFraming",
        Framing,
        _ALL,
        "registry-format keys: registry (magic byte, schema id, payload) or none (bare)",
        default="registry",
    ),
    OptionSpec(
        "keyMessageName",
        str,
        _ALL,
        "protobuf keys: the full name of the message keys are read (sinks: written) as "
        "(default: the schema's first message)",
    ),
    OptionSpec(
        "valueFraming",
        Framing,
        _ALL,
        "registry-format values: registry (magic byte, schema id, payload) or none (bare)",
        default="registry",
    ),
    OptionSpec(
        "valueMessageName",
        str,
        _ALL,
        "protobuf values: the full name of the message values are read (sinks: written) as "
        "(default: the schema's first message)",
    ),
    OptionSpec(
        "mode",
        DecodeMode,
        _DECODERS,
        "an undecodable key or value: FAILFAST, or PERMISSIVE (null, counted)",
        default="FAILFAST",
    ),
    OptionSpec(
        "keySubjectNameStrategy",
        SubjectNameStrategy,
        _SINKS,
        "avro keys with a registry: the subject the writer schema is under (as the "
        "serializers name it), unless keySubject is given",
        default="TopicNameStrategy",
    ),
    OptionSpec(
        "valueSubjectNameStrategy",
        SubjectNameStrategy,
        _SINKS,
        "avro values with a registry: the subject the writer schema is under (as the "
        "serializers name it), unless valueSubject is given",
        default="TopicNameStrategy",
    ),
    OptionSpec(
        "autoRegisterSchemas",
        bool,
        _SINKS,
        "register a given keySchema/valueSchema under its subject when it is not there",
        default="false",
    ),
    # -- the snapshot reader ----------------------------------------------------------------
    OptionSpec(
        "view", View, _READER, "data, position, lag, metadata, health or host", default="data"
    ),
    OptionSpec("positionBound", str, _READER, "JSON position the snapshot must have reached"),
    OptionSpec(
        "positionBoundTimeoutMs",
        int,
        _READER,
        "wait up to this long for the store to reach positionBound",
        default="0",
    ),
    OptionSpec("maxLag", int, _READER, "refuse a store lagging by more than N records"),
    OptionSpec(
        "asOfTimestamp",
        str,
        _READER,
        "a versioned store's values valid at this time: epoch millis or an ISO-8601 timestamp "
        "(UTC unless it has an offset)",
    ),
    OptionSpec(
        "keys", str, _READER, "a JSON array of keys to look up (objects for avro record keys)"
    ),
    OptionSpec("keyFrom", str, _READER, "only keys from this one on (inclusive)"),
    OptionSpec("keyTo", str, _READER, "only keys up to this one (inclusive)"),
    # -- the sink and the batch writer ------------------------------------------------------
    OptionSpec(
        "checkpointLocation",
        str,
        _SINKS,
        "Spark's checkpoint directory of the query",
        required=frozenset({Surface.SINK}),
        names_file=True,
    ),
    # Hadoop's keys for the checkpoint's filesystem: the sink's processes never see Spark's
    # Hadoop configuration (checkpoint_fs/settings.py).
    OptionSpec(
        "fs.defaultFS",
        str,
        _STREAM_SINK,
        "the filesystem of a checkpointLocation without scheme, e.g. hdfs://nn:8020 "
        "(default: the local disk)",
    ),
    OptionSpec(
        "dfs.namenode.http-address",
        str,
        _STREAM_SINK,
        "hdfs:// checkpoints: the NameNode's WebHDFS host:port, comma-separated for HA "
        "(default: the URI's host, port 9870)",
    ),
    OptionSpec("fs.s3a.endpoint", str, _STREAM_SINK, "S3 checkpoints: the endpoint"),
    OptionSpec("fs.s3a.endpoint.region", str, _STREAM_SINK, "S3 checkpoints: the region"),
    OptionSpec("fs.s3a.access.key", str, _STREAM_SINK, "S3 checkpoints: the access key"),
    OptionSpec("fs.s3a.secret.key", str, _STREAM_SINK, "S3 checkpoints: the secret key"),
    OptionSpec("fs.s3a.session.token", str, _STREAM_SINK, "S3 checkpoints: a session token"),
    OptionSpec(
        "fs.s3a.path.style.access",
        bool,
        _STREAM_SINK,
        "S3 checkpoints: address buckets as endpoint/bucket, not bucket.endpoint",
        default="false",
    ),
    OptionSpec(
        "fs.s3a.connection.ssl.enabled",
        bool,
        _STREAM_SINK,
        "S3 checkpoints: https to an endpoint given without a scheme",
        default="true",
    ),
    OptionSpec(
        "queryName", str, _SINKS, "the query's name: Spark passes writeStream.queryName(...)"
    ),
    OptionSpec(
        "application.id", str, _SINKS, "owns the changelog (KIP-813), names the transactional id"
    ),
    OptionSpec(
        "allowForeignChangelog",
        bool,
        _SINKS,
        "publish to a changelog not named after application.id",
        default="false",
    ),
    OptionSpec(
        "uncommitted.max.bytes", int, _SINKS, "a commit's memory budget before chunking", minimum=1
    ),
    OptionSpec(
        "publishWhileStaging",
        bool,
        _SINKS,
        "with changelog: the driver's store host publishes a batch's rows while the tasks stage "
        "them, in the transaction the commit then commits; false: everything at the commit",
        default="true",
    ),
    OptionSpec(
        "serve",
        bool,
        _SINKS,
        "keep the store open in a server process while the query runs: it takes the commits, "
        "serves the store over Flight and announces it as the leader (discovery)",
        default="false",
    ),
    OptionSpec(
        "serveLivenessTimeoutMs",
        int,
        _SINKS,
        "with serve: a store server that answers nothing for this long is hung: a commit "
        "kills it and commits through a new one; also what its shutdown waits for a commit",
        default="30000",
        minimum=1000,
    ),
    OptionSpec(
        "serveIdleTimeoutMs",
        int,
        _SINKS,
        "with serve: the store server stops after this long without a commit, freeing the "
        "store (the next commit starts a new one); 0: never",
        default="600000",
    ),
    OptionSpec(
        "txnAppId", str, _SINKS, "batch writer only: commit at most once per (txnAppId, txnVersion)"
    ),
    OptionSpec(
        "txnVersion", int, _SINKS, "batch writer only: with txnAppId, the version to commit once"
    ),
)
"""Every option, in the order error messages list them."""

_BY_KEY = {spec.key: spec for spec in OPTIONS}


def spec_of(name: str) -> OptionSpec:
    """The declaration of the option ``name`` (any case).

    Raises
    ------
    KeyError
        If no option has that name (a programming error: parsers read declared options only).
    """
    return _BY_KEY[name.lower()]


def options_of(surface: Surface) -> tuple[OptionSpec, ...]:
    """The options ``surface`` takes, in table order."""
    return tuple(spec for spec in OPTIONS if surface in spec.surfaces)


def spelling(name: str) -> str:
    """The documented spelling of an option name given in any case."""
    spec = _BY_KEY.get(name.lower())
    return name if spec is None else spec.name


# -- reading Spark's option map through the table -----------------------------------------
# Kafka's legal topic names (kafka.common.internals.Topic); Kafka Streams derives topic names,
# group and transactional ids from application.id, so it takes the same characters.
_KAFKA_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")

# Consumer settings the connector owns: passing them would break its guarantees.
_RESERVED_KAFKA = {
    "group.id": "the connector never joins a consumer group",
    "enable.auto.commit": "the store records what it applied; offsets are never committed",
    "isolation.level": "changelogs are always read with read_committed",
    "auto.offset.reset": "use startingOffsets and failOnDataLoss",
    "key.deserializer": "keys are bytes; use keyFormat",
    "value.deserializer": "values are bytes; use valueFormat",
}

# Options naming files: a C string (a file name, a librdkafka setting) ends at a NUL.
_NAMES_FILE = frozenset(spec.key for spec in OPTIONS if spec.names_file)


def _check_text(name: str, value: str) -> None:
    """Refuse option text no reader can take: a lone surrogate (not Unicode, so not UTF-8:
    file names, Kafka settings and keys fail later with a raw error) or a NUL in a path or
    a Kafka setting."""
    for text in (name, value):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise OptionError(
                f"option {spelling(name)[:80]!r} is not valid Unicode text: it holds a lone "
                f"surrogate {text[exc.start]!r} at character {exc.start} (a broken string "
                "conversion?); give it as text"
            ) from None
    if "\0" in value and (name in _NAMES_FILE or name.startswith(_PASSTHROUGH)):
        raise OptionError(
            f"option {spelling(name)!r} contains a NUL character at character "
            f"{value.index(chr(0))}: a file name or Kafka setting cannot hold one"
        )


class OptionReader:
    """Spark's option map for one surface, read through the options declared for it.

    Each accessor takes an option's documented name, applies its declared default and
    refuses a missing required option; reading an option the surface does not declare is a
    programming error (``KeyError``).
    """

    def __init__(self, raw: Mapping[str, Any], surface: Surface) -> None:
        self._raw = {str(k).lower(): v for k, v in raw.items()}
        self._surface = surface
        self._specs = {spec.key: spec for spec in options_of(surface)}
        for name, value in self._raw.items():
            _check_text(name, str(value))
        passthrough = _PASSTHROUGH if "schemaregistryurl" in self._specs else (KAFKA_PREFIX,)
        unknown = [k for k in self._raw if k not in self._specs and not k.startswith(passthrough)]
        if unknown:
            names = [*(spec.name for spec in self._specs.values())]
            names += [f"{prefix}*" for prefix in passthrough]
            raise OptionError(
                f"unknown option {unknown[0]!r} for {surface.value}"
                + closest_hint(unknown[0], names, noun="options")
            )

    def _spec(self, name: str, kind: type) -> OptionSpec:
        spec = self._specs[name.lower()]
        if spec.kind is not kind:
            raise TypeError(f"option {spec.name!r} is declared {spec.kind}, read as {kind}")
        return spec

    def _given(self, spec: OptionSpec) -> str | None:
        """The option's text as given (stripped), else its default; None when neither."""
        value = self._raw.get(spec.key)
        if value is None:
            if self._surface in spec.required:
                raise OptionError(
                    f"option {spec.name!r} is required for {self._surface.value}: {spec.help}"
                )
            return spec.default
        value = str(value).strip()
        if not value:
            raise OptionError(f"option {spec.name!r} of {self._surface.value} is empty")
        return value

    def text(self, name: str) -> str | None:
        return self._given(self._spec(name, str))

    def given(self, name: str) -> bool:
        """True when the option was set (its default does not count)."""
        return self._specs[name.lower()].key in self._raw

    def required(self, name: str) -> str:
        """A text option that always has a value here: required by the surface, or defaulted."""
        value = self.text(name)
        if value is None:
            raise TypeError(f"option {name!r} is neither required by {self._surface} nor defaulted")
        return value

    def kafka_name(self, name: str, what: str) -> str | None:
        """A topic name or an ``application.id``: Kafka's legal characters and length."""
        value = self.text(name)
        if value is not None and (_KAFKA_NAME.fullmatch(value) is None or value in (".", "..")):
            shown = repr(value) if len(value) <= 80 else f"{value[:80]!r}... ({len(value)} chars)"
            raise OptionError(
                f"option {spelling(name)!r} of {self._surface.value} is not a valid Kafka "
                f"{what}: {shown}; use 1-249 of the characters a-z A-Z 0-9 . _ - (and not '.' "
                "or '..')"
            )
        return value

    def boolean(self, name: str) -> bool:
        spec = self._spec(name, bool)
        value = self._given(spec)
        lowered = None if value is None else value.lower()
        if lowered not in ("true", "false"):
            raise OptionError(f"option {spec.name!r} must be 'true' or 'false', got {value!r}")
        return lowered == "true"

    def integer(self, name: str) -> int | None:
        spec = self._spec(name, int)
        value = self._given(spec)
        if value is None:
            return None
        return parse_integer(
            value, option=repr(spec.name), minimum=spec.minimum, maximum=spec.maximum
        )

    def choice(self, name: str, kind: type[E]) -> E:
        spec = self._spec(name, kind)
        value = self._given(spec)
        if value is None:
            raise TypeError(f"option {spec.name!r} is an enum without a default")
        return parse_choice(spec.name, value, kind)

    def schema_registry(self) -> dict[str, str]:
        """The schema registry client's settings (``schemaRegistry.*``)."""
        return {
            k[len(SCHEMA_REGISTRY_PREFIX) :]: str(v)
            for k, v in self._raw.items()
            if k.startswith(SCHEMA_REGISTRY_PREFIX)
        }

    def kafka(self) -> dict[str, str]:
        """The Kafka client settings (``kafka.*``) but ``bootstrap.servers``."""
        settings = {
            k[len(KAFKA_PREFIX) :]: str(v)
            for k, v in self._raw.items()
            if k.startswith(KAFKA_PREFIX) and k not in self._specs
        }
        for key, why in _RESERVED_KAFKA.items():
            if key in settings:
                raise OptionError(f"option 'kafka.{key}' cannot be set: {why}")
        return settings
