"""The options of the ``spark_statestore`` data source, parsed once into frozen dataclasses.

Spark passes options as a case-insensitive map of strings. :func:`parse_source_options`,
:func:`parse_reader_options` and :func:`parse_sink_options` turn that map into
:class:`SourceOptions` (the follower source, ``spark.readStream``), :class:`ReaderOptions`
(the snapshot reader, ``spark.read``) and :class:`SinkOptions` (the sink and the batch
writer). Nothing else in the connector reads raw option strings. An unknown or misspelled
option, a malformed value or a missing required option raises
:class:`~spark_statestore.errors.OptionError` naming the option and, for a misspelling, the
closest valid name.

Which options exist, their types, defaults and surfaces are declared once in
:mod:`~spark_statestore.connectors.spark.option_table`, which also reads booleans, integers
and enums generically; this module adds the values with their own syntax (offsets JSON,
positions, partitions, key lookups) and the rules that tie options together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spark_statestore.changelog.missing_position import OnMissingPosition
from spark_statestore.connectors.spark.checkpoint_fs import QueryCheckpoint
from spark_statestore.connectors.spark.follower.leader_options import leader_options
from spark_statestore.connectors.spark.format_options import (
    FormatOptions,
    codecs_for,
    parse_formats,
)
from spark_statestore.connectors.spark.metrics_options import METRICS_OPTIONS, metrics_endpoint
from spark_statestore.connectors.spark.option_table import (
    REGISTRY_COLUMN_OPTIONS,
    DecodeMode,
    OptionReader,
    StoreType,
    Surface,
    View,
)
from spark_statestore.connectors.spark.paths import resolve_local_path
from spark_statestore.connectors.spark.serve_options import (
    SERVE_OPTIONS,
    ServeSettings,
    serve_settings,
)
from spark_statestore.connectors.spark.starting_offsets import (
    EARLIEST,
    LATEST,
    StartingOffsets,
    parse_starting_offsets,
)
from spark_statestore.connectors.spark.windows import WINDOWED, check_window_size
from spark_statestore.errors import InvalidPositionError, OptionError
from spark_statestore.partition_spec import parse_partitions
from spark_statestore.position import Position, PositionBound
from spark_statestore.serve.protocol import MAX_PIN_WAIT_S
from spark_statestore.sink.staging import MAX_QUERY_ID_BYTES, query_id_problem
from spark_statestore.store.scan import ScanSpec

if TYPE_CHECKING:
    from spark_statestore.metrics.server import MetricsEndpoint

__all__ = [
    "EARLIEST",
    "LATEST",
    "SINK_SERVER_OPTIONS",
    "DecodeMode",
    "FormatOptions",
    "ReaderOptions",
    "SinkOptions",
    "SourceOptions",
    "StartingOffsets",
    "StoreType",
    "View",
    "parse_reader_options",
    "parse_sink_options",
    "parse_source_options",
]


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The follower source's options (``spark.readStream.format("spark_statestore")``)."""

    path: str
    bootstrap_servers: str
    changelog: str
    kafka: Mapping[str, str]
    starting_offsets: StartingOffsets
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    include_headers: bool
    partitions: tuple[int, ...] | None
    key_prefix: bytes | None
    store_type: StoreType
    formats: FormatOptions
    on_missing_position: OnMissingPosition
    serve_host: str | None
    serve_port: int
    serve_tls_cert: str | None = None
    """PEM certificate chain file of the owner's Flight server (TLS); with serve_tls_key."""
    serve_tls_key: str | None = None
    """PEM private key file of the owner's Flight server (TLS); with serve_tls_cert."""
    serve_tls_client_ca: str | None = None
    """PEM file of the CAs whose client certificates the owner's Flight server accepts
    (mutual TLS); with serve_tls_cert."""
    serve_token_file: str | None = None
    """A file holding the Flight server's bearer token (None: a random token); read where
    the server starts, so the token itself never travels in Spark's plan."""
    leader_application_id: str | None = None
    """The exactly-once leader whose committed offsets give the store's position."""
    leader_topology: str | None = None
    """The text of the leader's ``Topology.describe()`` (checked: it has the store)."""
    leader_upstream_topics: tuple[str, ...] | None = None
    """The internal topics between the leader's input topics and the store."""
    window_size_ms: int | None = None
    """``storeType`` window: the window size, for the ``window_end`` column (None: no column)."""
    history_retention_ms: int | None = None
    """``storeType`` versioned: the history retention given (None: the changelog's)."""
    announce: bool = True
    """Announce the replica on ``<changelog>-replicas`` while the query runs."""
    announce_interval_ms: int = 5000
    """The announcement's heartbeat interval (it is stale after three)."""
    announce_key_file: str | None = None
    """The membership key announcements are signed with (None: this user's default)."""
    metrics: MetricsEndpoint | None = None
    """The follower's metrics endpoint (options ``metrics*``; None: none)."""


@dataclass(frozen=True, slots=True)
class ReaderOptions:
    """The snapshot reader's options (``spark.read.format("spark_statestore")``)."""

    path: str
    view: View
    formats: FormatOptions
    position_bound: PositionBound
    max_lag: int | None
    bootstrap_servers: str | None
    kafka: Mapping[str, str]
    position_bound_timeout_s: float = 0.0
    """How long planning waits for the store to reach ``position_bound`` (0: fail at once)."""
    lookup: ScanSpec = field(default_factory=ScanSpec.everything)
    """The rows the lookup options (``keys``, ``keyPrefix``, ``keyFrom``, ``keyTo``,
    ``partitions``) select, as of ``asOfTimestamp`` when given; every row by default. For
    window and session stores, a scan of the stored keys that holds every row the options
    select (see ``key_filter``)."""
    store_type: StoreType = StoreType.KEY_VALUE
    """The Kafka Streams store behind the changelog: window and session keys are split."""
    window_size_ms: int | None = None
    """``storeType`` window: the window size, for ``window_end`` (required there)."""
    include_headers: bool = False
    """Add the ``headers`` column: the headers kept with each key's latest record."""
    key_filter: ScanSpec | None = None
    """Window and session stores: the lookup options on user keys, checked row by row
    after the keys are split (None: every row of ``lookup``)."""


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """The sink's options (``df.writeStream`` / ``df.write`` ``.format("spark_statestore")``)."""

    path: str
    checkpoint_location: str | None
    bootstrap_servers: str | None
    kafka: Mapping[str, str]
    changelog: str | None
    application_id: str | None
    allow_foreign_changelog: bool
    uncommitted_max_bytes: int | None
    txn_app_id: str | None
    txn_version: int | None
    serve: ServeSettings | None = None
    """With option ``serve``: how the sink's store server serves and announces the store."""
    serve_liveness_timeout_ms: int = 30000
    """With ``serve``: how long the store server may answer nothing before a commit takes it
    for hung (kills and replaces it); also how long its shutdown waits for a commit."""
    serve_idle_timeout_ms: int = 600000
    """With ``serve``: the store server stops after this long without a commit (0: never)."""
    metrics: MetricsEndpoint | None = None
    """With ``serve``: the store server's metrics endpoint (options ``metrics*``)."""
    publish_while_staging: bool = True
    """With a changelog: the driver's store host publishes a batch's rows while its tasks
    stage them (option ``publishWhileStaging``)."""
    raw: Mapping[str, str] = field(default_factory=dict)
    """The options as given (the sink's store server parses them again)."""
    checkpoint: QueryCheckpoint | None = None
    """The streaming sink: ``checkpointLocation`` parsed, with its filesystem's options."""
    key_registry_column: Any = None
    """A registry ``keyFormat``: the
    :class:`~spark_statestore.connectors.spark.registry_sink.RegistrySinkColumn` the keys are
    encoded with (its writer schema and id fixed when the options were parsed)."""
    value_registry_column: Any = None
    """As ``key_registry_column``, for values."""


SINK_SERVER_OPTIONS = ("serveLivenessTimeoutMs", "serveIdleTimeoutMs")
"""The options of the sink's store server alone (beside the ``serve*`` options every
store owner takes)."""

MAX_POSITION_BOUND_TIMEOUT_MS = int(MAX_PIN_WAIT_S * 1000)  # what a store server waits at most


def _key_prefix(text: str | None) -> bytes | None:
    if text is None:
        return None
    if text.lower().startswith("hex:"):
        try:
            return bytes.fromhex(text[4:])
        except ValueError:
            raise OptionError(
                f"option 'keyPrefix' {text!r} is not valid hex after 'hex:'"
            ) from None
    return text.encode()


def parse_source_options(raw: Mapping[str, Any], planned: Any = None) -> SourceOptions:
    """Parse and check the follower source's options (``planned``: the schema Spark planned
    the query with, when it has one).

    Raises
    ------
    OptionError
        Naming the unknown, misspelled, malformed or missing option.
    """
    options = OptionReader(raw, Surface.SOURCE)
    path = resolve_local_path(options.required("path"))
    bootstrap = options.required("kafka.bootstrap.servers")
    kafka = options.kafka()
    changelog = options.kafka_name("changelog", "topic")
    assert changelog is not None  # required for the source
    partitions_text = options.text("partitions")
    partitions = None
    if partitions_text is not None:
        partitions = tuple(parse_partitions(partitions_text, option="partitions"))
    leader, topology, upstream = leader_options(options, changelog, partitions)
    store_type = options.choice("storeType", StoreType)
    retention = options.integer("historyRetentionMs")
    if retention is not None and store_type is not StoreType.VERSIONED:
        raise OptionError(
            "option 'historyRetentionMs' is a versioned store's history retention: set "
            "storeType 'versioned' too, or drop it"
        )
    serve = serve_settings(options)
    return SourceOptions(
        path=path,
        bootstrap_servers=bootstrap,
        changelog=changelog,
        kafka=kafka,
        starting_offsets=parse_starting_offsets(options.text("startingOffsets")),
        max_offsets_per_trigger=options.integer("maxOffsetsPerTrigger"),
        fail_on_data_loss=options.boolean("failOnDataLoss"),
        include_headers=options.boolean("includeHeaders"),
        partitions=partitions,
        key_prefix=_key_prefix(options.text("keyPrefix")),
        store_type=store_type,
        formats=parse_formats(options, changelog, planned),
        on_missing_position=options.choice("onMissingPosition", OnMissingPosition),
        serve_host=serve.host,
        serve_port=serve.port,
        serve_tls_cert=serve.tls_cert,
        serve_tls_key=serve.tls_key,
        serve_tls_client_ca=serve.tls_client_ca,
        serve_token_file=serve.token_file,
        leader_application_id=leader,
        leader_topology=topology,
        leader_upstream_topics=upstream,
        window_size_ms=check_window_size(options.integer("windowSizeMs"), store_type, False),
        history_retention_ms=retention,
        announce=serve.announce,
        announce_interval_ms=serve.announce_interval_ms,
        announce_key_file=serve.announce_key_file,
        metrics=metrics_endpoint(options),
    )


def parse_as_of(text: str) -> int:
    """``asOfTimestamp``: epoch milliseconds, or an ISO-8601 date-time (UTC unless it names
    an offset), as epoch milliseconds.

    Raises
    ------
    OptionError
        Naming the option and the value.
    """
    from datetime import datetime, timedelta, timezone

    stripped = text.strip()
    if stripped.lstrip("-").isdigit() and stripped.isascii():
        millis = int(stripped)
    else:
        try:
            moment = datetime.fromisoformat(stripped.replace("Z", "+00:00"))
        except ValueError:
            raise OptionError(
                f"option 'asOfTimestamp': {text!r} is neither epoch milliseconds nor an ISO-8601 "
                "timestamp such as '2026-11-24T19:00:00Z'"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        delta = moment - datetime(1970, 1, 1, tzinfo=timezone.utc)
        millis = delta // timedelta(milliseconds=1)
    if not -(2**63) <= millis < 2**63:
        raise OptionError(f"option 'asOfTimestamp': {text!r} is outside Kafka's timestamps")
    return millis


def parse_reader_options(raw: Mapping[str, Any], planned: Any = None) -> ReaderOptions:
    """Parse and check the snapshot reader's options (``planned``: the schema Spark planned
    the query with, when it has one).

    Raises
    ------
    OptionError
        Naming the unknown, misspelled, malformed or missing option.
    """
    options = OptionReader(raw, Surface.READER)
    path = resolve_local_path(options.required("path"))
    bound_text = options.text("positionBound")
    bound = PositionBound.unbounded()
    if bound_text is not None:
        try:
            bound = PositionBound.at(Position.from_json(bound_text))
        except InvalidPositionError as exc:
            raise OptionError(f"option 'positionBound': {exc}") from exc
    timeout_ms = options.integer("positionBoundTimeoutMs") or 0
    if timeout_ms > MAX_POSITION_BOUND_TIMEOUT_MS:
        raise OptionError(
            f"option 'positionBoundTimeoutMs' must be at most {MAX_POSITION_BOUND_TIMEOUT_MS} "
            f"(10 minutes), got {timeout_ms}"
        )
    if timeout_ms and bound.is_unbounded():
        raise OptionError(
            "option 'positionBoundTimeoutMs' waits for positionBound: set positionBound too, "
            "or drop positionBoundTimeoutMs"
        )
    bootstrap = options.text("kafka.bootstrap.servers")
    kafka = options.kafka()
    view = options.choice("view", View)
    formats = parse_formats(options, planned=planned)
    lookup_text = {
        name: options.text(name) for name in ("keys", "keyPrefix", "keyFrom", "keyTo", "partitions")
    }
    given = [name for name, text in lookup_text.items() if text is not None]
    if given and view is not View.DATA:
        raise OptionError(
            f"option {given[0]!r} selects rows of the data view; view {view.value!r} has no "
            "keys: drop the option or read view 'data'"
        )
    from spark_statestore.connectors.spark.reader.lookup import parse_lookup, windowed_lookup

    store_type = options.choice("storeType", StoreType)
    window_size = check_window_size(options.integer("windowSizeMs"), store_type, view is View.DATA)
    lookup = parse_lookup(
        keys=lookup_text["keys"],
        prefix=lookup_text["keyPrefix"],
        key_from=lookup_text["keyFrom"],
        key_to=lookup_text["keyTo"],
        partitions=lookup_text["partitions"],
        key_codec=codecs_for(formats)[0],
    )
    key_filter = None
    if store_type in WINDOWED and lookup != ScanSpec.everything():
        lookup, key_filter = windowed_lookup(lookup)
    as_of_text = options.text("asOfTimestamp")
    if as_of_text is not None:
        if view is not View.DATA:
            raise OptionError(
                f"option 'asOfTimestamp' reads the data view as of a time; view {view.value!r} "
                "is not read as of a time: drop the option or read view 'data'"
            )
        lookup = lookup.with_as_of(parse_as_of(as_of_text))
    return ReaderOptions(
        path=path,
        view=view,
        formats=formats,
        position_bound=bound,
        max_lag=options.integer("maxLag"),
        bootstrap_servers=bootstrap,
        kafka=kafka,
        position_bound_timeout_s=timeout_ms / 1000.0,
        lookup=lookup,
        store_type=store_type,
        window_size_ms=window_size,
        include_headers=options.boolean("includeHeaders"),
        key_filter=key_filter,
    )


def _registry_options_given(options: OptionReader) -> bool:
    """Whether the sink was given any option of a registry key or value format."""
    names = ["keyFormat", "valueFormat", "schemaRegistryUrl", "autoRegisterSchemas"]
    names += [f"{column}{name}" for column in ("key", "value") for name in REGISTRY_COLUMN_OPTIONS]
    return any(options.given(name) for name in names) or bool(options.schema_registry())


def parse_sink_options(raw: Mapping[str, Any], *, streaming: bool) -> SinkOptions:
    """Parse and check the sink's options (``streaming``: writeStream, else the batch writer).

    Raises
    ------
    OptionError
        Naming the unknown, misspelled, malformed or missing option.
    """
    options = OptionReader(raw, Surface.SINK if streaming else Surface.BATCH_WRITER)
    path = resolve_local_path(options.required("path"))
    bootstrap = options.text("kafka.bootstrap.servers")
    kafka = options.kafka()
    changelog = options.kafka_name("changelog", "topic")
    if changelog is not None and not bootstrap:
        raise OptionError(
            "option 'kafka.bootstrap.servers' is required when 'changelog' is set: the Kafka "
            "cluster the changelog is published to"
        )
    application_id = options.kafka_name("application.id", "application.id")
    if changelog is not None and application_id is None:
        raise OptionError(
            "option 'application.id' is required when 'changelog' is set: it owns the "
            "changelog (KIP-813) and names the Kafka transactional id"
        )
    txn_app_id = options.text("txnAppId")
    problem = None if txn_app_id is None else query_id_problem(txn_app_id)
    if txn_app_id is not None and problem is not None:
        raise OptionError(
            f"option 'txnAppId' {txn_app_id[:80]!r} {problem}: it names the batch writer's "
            f"staging directory, so it must be at most {MAX_QUERY_ID_BYTES} bytes of UTF-8 "
            "without NUL or '/' and must not start with '.'; use a short name such as "
            "'orders-agg'"
        )
    txn_version = options.integer("txnVersion")
    if streaming and (txn_app_id is not None or txn_version is not None):
        raise OptionError(
            "options 'txnAppId' / 'txnVersion' are for the batch writer inside foreachBatch "
            "(df.write); a streaming sink commits per micro-batch id already"
        )
    checkpoint = options.text("checkpointLocation")  # required by the streaming sink
    if not streaming and (txn_app_id is None) != (txn_version is None):
        raise OptionError(
            "options 'txnAppId' and 'txnVersion' go together: give both (e.g. "
            ".option('txnAppId', 'orders-agg').option('txnVersion', batch_id)) or neither"
        )
    serve = None
    if options.boolean("serve"):
        serve = serve_settings(options)
    else:
        names = (*SERVE_OPTIONS, *SINK_SERVER_OPTIONS, *METRICS_OPTIONS)
        given = [name for name in names if options.given(name)]
        if given:
            raise OptionError(
                f"option {given[0]!r} configures the sink's store server: set option 'serve' "
                "to 'true' too, or drop it: without 'serve' no process outlives a micro-batch's "
                "commit (each runs in a process of its own) to serve the store, announce it or "
                "report its metrics"
            )
    liveness_ms = options.integer("serveLivenessTimeoutMs")
    idle_ms = options.integer("serveIdleTimeoutMs")
    assert liveness_ms is not None and idle_ms is not None  # they have defaults
    key_typed = value_typed = None
    if _registry_options_given(options):
        # Only then: the registry client's modules take ~0.2 s to import, in the planning
        # process and again in each query's commit process.
        from spark_statestore.connectors.spark.registry_sink import registry_sink_column

        key_typed = registry_sink_column(options, "key", changelog=changelog)
        value_typed = registry_sink_column(options, "value", changelog=changelog)
    if key_typed is None and value_typed is None:
        given = [n for n in ("schemaRegistryUrl", "autoRegisterSchemas") if options.given(n)]
        if given:
            raise OptionError(
                f"option {given[0]} is for a registry keyFormat or valueFormat: set one, or "
                "remove it"
            )
    return SinkOptions(
        path=path,
        checkpoint_location=checkpoint,
        bootstrap_servers=bootstrap,
        kafka=kafka,
        changelog=changelog,
        application_id=application_id,
        allow_foreign_changelog=options.boolean("allowForeignChangelog"),
        uncommitted_max_bytes=options.integer("uncommitted.max.bytes"),
        txn_app_id=txn_app_id,
        txn_version=txn_version,
        serve=serve,
        serve_liveness_timeout_ms=liveness_ms,
        serve_idle_timeout_ms=idle_ms,
        metrics=metrics_endpoint(options),
        publish_while_staging=options.boolean("publishWhileStaging"),
        raw={str(name): str(value) for name, value in raw.items()},
        checkpoint=_query_checkpoint(checkpoint, options) if streaming else None,
        key_registry_column=key_typed,
        value_registry_column=value_typed,
    )


def _query_checkpoint(text: str | None, options: OptionReader) -> QueryCheckpoint:
    assert text is not None  # checkpointLocation is required for the streaming sink
    return QueryCheckpoint.from_options(text, options)
