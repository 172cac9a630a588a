"""Stream enrichment from a live store: each row's key looked up in a store another
application keeps up to date (KIP-813's motivating case, an app reading another app's state
while it processes).

:func:`enrich` adds the store's value of each row's key to a batch or streaming DataFrame.
Lookups run on the executors, one batched multi-get per Arrow batch (``mapInArrow``), sent
to the driver's store host (:mod:`~spark_statestore.connectors.spark.host`; executors may run
on other hosts), which reads the store on its host through its live owner (a follower query,
``spark-statestore serve``; one Flight exchange of Arrow columns per batch,
:meth:`~spark_statestore.serve.StoreClient.lookup`), or, when the store has no owner, from a
private checkpoint of it. Every row of a batch is looked up in one snapshot.

With ``changelog=`` instead of a path, the lookups go to the live replicas of that changelog
on any host (announced on ``<changelog>-replicas``), through the
:class:`~spark_statestore.discovery.Router`: each task reads the announcements once and
keeps one router (and its clients) for all its batches; each distinct key of a batch is an
IQv2 ``KeyQuery`` answered by a replica of the key's partition (the leader first, then the
least lagging follower within ``max_lag``, failing over), reached with the replicas' shared
token. There is no multi-key IQv2 query, so a batch is one round trip per distinct key.

With ``position_column`` each batch's snapshot must have reached the positions of its rows
(merged): a row that carries the offset of the input record that caused a write (e.g. an
order whose total another application keeps) is enriched with a state that includes that
write, waiting for it up to ``position_timeout_ms``. ``lookup_position_column`` records the
snapshot's position in each row, so the value can be checked against it. Through the router
each key's replica checks the bound's entries for the key's partition only, as Kafka
Streams does (store partition *n* holds input partition *n*), or the whole bound where its
position holds store-wide (a leader, a follower of a sink's changelog), and the position
recorded is the merge of the answers' positions. The task checks every answer's position
against the bound again (the replica's client and the router do): a replica that answers
success under a bound it has not reached is passed over and its value never used; with no
replica left that has reached the bound, the lookup fails with NOT_UP_TO_BOUND. Through the
store's owner, the task checks the position of the snapshot the owner read (it comes with
the rows) against the whole bound itself before using any row.

What the executor tasks run per batch is in
:mod:`~spark_statestore.connectors.spark.enrich_tasks`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from spark_statestore.connectors.spark.enrich_tasks import Plan, enrich_batches
from spark_statestore.connectors.spark.option_table import REGISTRY_FORMATS, ValueFormat
from spark_statestore.connectors.spark.reader.routed import ReplicaRoute
from spark_statestore.errors import OptionError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from spark_statestore.connectors.spark.host import HostRef

__all__ = ["enrich"]

MAX_POSITION_TIMEOUT_MS = 600_000


def enrich(
    df: DataFrame,
    path: str | None = None,
    *,
    key_column: str,
    changelog: str | None = None,
    bootstrap_servers: str | None = None,
    token_file: str | None = None,
    tls_root_certs_file: str | None = None,
    max_lag: int | None = None,
    kafka_config: Mapping[str, str] | None = None,
    membership_keys_file: str | None = None,
    tls_client_cert_file: str | None = None,
    tls_client_key_file: str | None = None,
    value_column: str = "value",
    key_format: str = "binary",
    value_format: str = "binary",
    value_schema: str | None = None,
    schema_registry_url: str | None = None,
    schema_registry_config: Mapping[str, str] | None = None,
    value_subject: str | None = None,
    value_schema_version: str = "latest",
    value_schema_id: int | None = None,
    value_message_name: str | None = None,
    key_schema: str | None = None,
    key_subject: str | None = None,
    key_schema_version: str = "latest",
    key_schema_id: int | None = None,
    position_column: str | None = None,
    position_timeout_ms: int = 0,
    lookup_position_column: str | None = None,
) -> DataFrame:
    """``df`` with ``value_column``: the store's value of each row's ``key_column`` (null when
    the key is absent or null).

    Parameters
    ----------
    df
        A batch or streaming DataFrame.
    path
        The store directory on the driver's host: the tasks, wherever they run, look keys
        up through the driver's store host, which reads the store through its live owner or
        from a private checkpoint.
        Give exactly one of ``path`` and ``changelog``.
    changelog
        Look up in the live replicas of this changelog, on any host, through the router
        (they announce themselves on ``<changelog>-replicas``).
    bootstrap_servers
        With ``changelog`` (required): the Kafka cluster of its replicas topic.
    token_file
        With ``changelog`` (required): a file holding the bearer token the replicas share
        (``spark-statestore serve --token-file``, the follower source's ``serveTokenFile``);
        read where ``enrich`` is called (the driver; a Spark Connect client's own process),
        so the executors need not have it.
    tls_root_certs_file
        With ``changelog``: PEM certificates to trust for ``grpc+tls`` replicas (read where
        ``enrich`` is called). Required for ``grpc+tls`` replicas: the replicas' token is
        never sent under the system's roots.
    tls_client_cert_file, tls_client_key_file
        With ``changelog``: the PEM client certificate chain and private key to present to
        replicas in mutual-TLS mode (``serveTlsClientCa``); read where ``enrich`` is called,
        they travel to the executors in the plan, as the token does.
    max_lag
        With ``changelog``: skip followers lagging by more than this many records on the
        key's partition (None: any).
    kafka_config
        With ``changelog``: librdkafka settings for reading the replicas topic (e.g.
        ``security.protocol``).
    membership_keys_file
        With ``changelog``: PEM file(s) (comma-separated) of the public keys the replicas
        sign their announcements with (read where ``enrich`` is called; None: the public
        half of that user's default membership key). Announcements not signed by one of
        them are ignored.
    key_column
        The column holding the keys, of the type ``key_format`` decodes to (``binary``,
        ``string``, ``long``, ``int``, ``double``).
    value_column
        The new column's name (it must not exist yet).
    key_format, value_format, value_schema
        As the snapshot reader's ``keyFormat`` / ``valueFormat`` / ``valueSchema`` (for
        the registry value formats ``avro``, ``protobuf`` and ``jsonschema``, the reader
        schema's text: see docs/schemas.md).
    schema_registry_url, schema_registry_config, value_subject, value_schema_version,\
    value_schema_id, value_message_name
        A registry ``value_format``: as the reader's ``schemaRegistryUrl``,
        ``schemaRegistry.*``, ``valueSubject`` (default with ``changelog``:
        ``<changelog>-value``), ``valueSchemaVersion``, ``valueSchemaId`` and (protobuf)
        ``valueMessageName``; the reader schema is fixed here, on the driver, and travels in
        the plan with the subject's writer schemas.
    key_schema, key_subject, key_schema_version, key_schema_id
        ``key_format="avro"`` (with ``path``): as the reader's ``keySchema``,
        ``keySubject``, ``keySchemaVersion`` and ``keySchemaId``. Each row's key (a struct
        of the key schema's fields) is looked up under every schema id of the subject that
        can hold it, in a snapshot checked to hold no key under another id; a key stored
        under two ids fails the task naming both (see docs/schemas.md, "Avro keys").
    position_column
        A column of each row's position: ``map<string, map<int, bigint>>`` (the follower
        feed's ``position``, or ``create_map`` of a Kafka source's topic, partition and
        offset) or offsets JSON text (``{"orders": {"0": 41}}``). Each batch is looked up in
        a snapshot that has reached every row's position; null positions are not bounds.
    position_timeout_ms
        How long a batch waits for the store to reach its positions before failing with
        NOT_UP_TO_BOUND (at most 600000).
    lookup_position_column
        When given, a string column with the position (offsets JSON) of the snapshot each
        row was looked up in.

    Raises
    ------
    OptionError
        For a missing or clashing column, a bad format or timeout, not exactly one of
        ``path`` and ``changelog``, or an unreadable token or certificate file (at once, on
        the driver).
    """
    from pyspark.sql.types import StringType, StructField, StructType

    from spark_statestore.connectors.spark.ddl import parse_ddl
    from spark_statestore.connectors.spark.formats import ColumnCodec

    columns = df.columns
    if key_column not in columns:
        raise OptionError(f"enrich: key_column {key_column!r} is not a column of {columns}")
    if position_column is not None and position_column not in columns:
        raise OptionError(
            f"enrich: position_column {position_column!r} is not a column of {columns}"
        )
    for name in (value_column, lookup_position_column):
        if name is not None and name in columns:
            raise OptionError(f"enrich: column {name!r} exists already; choose another name")
    if lookup_position_column is not None and lookup_position_column == value_column:
        raise OptionError("enrich: value_column and lookup_position_column must differ")
    if ValueFormat.parse("keyFormat", key_format) is ValueFormat.JSON:
        raise OptionError("enrich: key_format json is not supported; look up binary or string keys")
    parsed_key_format = ValueFormat.parse("keyFormat", key_format)
    if parsed_key_format in REGISTRY_FORMATS:
        if parsed_key_format is not ValueFormat.AVRO:
            raise OptionError(
                f"enrich: key_format {parsed_key_format.value} keys cannot be looked up (a "
                "value has several byte forms); read the store with Spark and join instead"
            )
        if changelog is not None:
            raise OptionError(
                f"enrich: key_format {parsed_key_format.value} looks keys up in a store's "
                "snapshot checked for the schema ids its keys are under; a replica's key "
                "query cannot check that: give path, not changelog"
            )
        key_codec = _registry_codec(
            "key",
            parsed_key_format,
            key_schema,
            changelog=changelog,
            subject=key_subject,
            version=key_schema_version,
            schema_id=key_schema_id,
            message=None,
            registry_url=schema_registry_url,
            registry_config=schema_registry_config,
        )
    else:
        if (key_schema, key_subject, key_schema_id) != (None, None, None):
            raise OptionError(
                "enrich: key_schema, key_subject and key_schema_id are for key_format avro"
            )
        key_codec = ColumnCodec.create(key_format, None, column="key")
    parsed_value_format = ValueFormat.parse("valueFormat", value_format)
    if parsed_value_format in REGISTRY_FORMATS:
        value_codec = _registry_codec(
            "value",
            parsed_value_format,
            value_schema,
            changelog=changelog,
            subject=value_subject,
            version=value_schema_version,
            schema_id=value_schema_id,
            message=value_message_name,
            registry_url=schema_registry_url,
            registry_config=schema_registry_config,
        )
    else:
        registry_only = (value_subject, value_schema_id, value_message_name)
        if registry_only != (None, None, None) or (
            schema_registry_url is not None and parsed_key_format not in REGISTRY_FORMATS
        ):
            raise OptionError(
                "enrich: schema_registry_url, value_subject, value_schema_id and "
                "value_message_name are for a registry value_format ("
                + ", ".join(f.value for f in REGISTRY_FORMATS)
                + ")"
            )
        schema = None if value_schema is None else parse_ddl(value_schema, option="valueSchema")
        value_codec = ColumnCodec.create(value_format, schema, column="value")
    if (
        isinstance(position_timeout_ms, bool)
        or not isinstance(position_timeout_ms, int)
        or not 0 <= position_timeout_ms <= MAX_POSITION_TIMEOUT_MS
    ):
        raise OptionError(
            f"enrich: position_timeout_ms must be an int in [0, {MAX_POSITION_TIMEOUT_MS}], "
            f"got {position_timeout_ms!r}"
        )
    route = _route(
        path,
        changelog,
        bootstrap_servers=bootstrap_servers,
        token_file=token_file,
        tls_root_certs_file=tls_root_certs_file,
        max_lag=max_lag,
        kafka_config=kafka_config,
        membership_keys_file=membership_keys_file,
        tls_client_cert_file=tls_client_cert_file,
        tls_client_key_file=tls_client_key_file,
    )
    fields = [*df.schema.fields, StructField(value_column, value_codec.spark_type, True)]
    if lookup_position_column is not None:
        fields.append(StructField(lookup_position_column, StringType(), True))
    host = None if route is not None else _store_host(df, path)
    plan = Plan(
        path=None if host is None else host[1],
        host=None if host is None else host[0],
        route=route,
        key_index=columns.index(key_column),
        key_codec=key_codec,
        value_codec=value_codec,
        position_index=None if position_column is None else columns.index(position_column),
        wait_s=position_timeout_ms / 1000.0,
        names=tuple(field.name for field in fields),
    )
    return df.mapInArrow(lambda batches: enrich_batches(batches, plan), StructType(fields))


def _registry_codec(
    column: str,
    fmt: ValueFormat,
    schema: str | None,
    *,
    changelog: str | None,
    registry_url: str | None,
    registry_config: Mapping[str, str] | None,
    subject: str | None,
    version: str,
    schema_id: int | None,
    message: str | None,
) -> Any:
    """A registry format's key or value codec, through the snapshot reader's options (their
    checks and their registry look-ups, once, here on the driver)."""
    from spark_statestore.connectors.spark.formats import ColumnCodec
    from spark_statestore.connectors.spark.option_table import (
        SCHEMA_REGISTRY_PREFIX,
        OptionReader,
        Surface,
    )
    from spark_statestore.connectors.spark.registry_column import registry_column

    given = {
        "path": "enrich",
        f"{column}Format": fmt.value,
        f"{column}Schema": schema,
        f"{column}MessageName": message,
        "schemaRegistryUrl": registry_url,
        f"{column}Subject": subject,
        f"{column}SchemaVersion": version,
        f"{column}SchemaId": None if schema_id is None else str(schema_id),
        **{SCHEMA_REGISTRY_PREFIX + k: v for k, v in (registry_config or {}).items()},
    }
    options = OptionReader({k: v for k, v in given.items() if v is not None}, Surface.READER)
    typed = registry_column(options, column, fmt, schema, changelog=changelog)
    return ColumnCodec.create(fmt, None, column=column, registry_column=typed)


def _route(
    path: str | None,
    changelog: str | None,
    *,
    bootstrap_servers: str | None,
    token_file: str | None,
    tls_root_certs_file: str | None,
    max_lag: int | None,
    kafka_config: Mapping[str, str] | None,
    membership_keys_file: str | None = None,
    tls_client_cert_file: str | None = None,
    tls_client_key_file: str | None = None,
) -> ReplicaRoute | None:
    """The replicas to look up in (None: the store at ``path``), checked where ``enrich`` is
    called (the driver, or a Spark Connect client)."""
    routing = {
        "bootstrap_servers": bootstrap_servers,
        "token_file": token_file,
        "tls_root_certs_file": tls_root_certs_file,
        "max_lag": max_lag,
        "kafka_config": kafka_config,
        "membership_keys_file": membership_keys_file,
        "tls_client_cert_file": tls_client_cert_file,
        "tls_client_key_file": tls_client_key_file,
    }
    if (path is None) == (changelog is None):
        raise OptionError(
            "enrich: give exactly one of path (a store on the driver's host, through its "
            "owner) and changelog (its live replicas on any host, through the router)"
        )
    if path is not None:
        given = [name for name, value in routing.items() if value is not None]
        if given:
            raise OptionError(
                f"enrich: {given[0]} goes with changelog (routed lookups), not with path "
                f"{path!r}: the store's owner wrote its credentials next to it"
            )
        return None
    assert changelog is not None
    if not isinstance(changelog, str) or not changelog.strip():
        raise OptionError(f"enrich: changelog must be a topic name, got {changelog!r}")
    for name in ("bootstrap_servers", "token_file"):
        if routing[name] is None:
            raise OptionError(
                f"enrich: changelog {changelog!r} needs {name}: the Kafka cluster of its "
                "replicas topic and a file holding the token the replicas share"
            )
    if max_lag is not None and (
        isinstance(max_lag, bool) or not isinstance(max_lag, int) or max_lag < 0
    ):
        raise OptionError(f"enrich: max_lag must be an int >= 0 or None, got {max_lag!r}")
    from spark_statestore.serve.auth import ServeCredentials, read_token_file
    from spark_statestore.serve.mutual_tls import read_client_identity

    assert bootstrap_servers is not None and token_file is not None
    certs = None
    if tls_root_certs_file is not None:
        try:
            with open(tls_root_certs_file, "rb") as handle:
                certs = handle.read()
        except OSError as exc:
            raise OptionError(
                f"enrich: tls_root_certs_file: cannot read {tls_root_certs_file}: {exc.strerror}"
            ) from None
    from spark_statestore.discovery.errors import DiscoveryError
    from spark_statestore.discovery.signing import MembershipKeys

    try:
        keys = (
            MembershipKeys.default()
            if membership_keys_file is None
            else MembershipKeys.load(membership_keys_file, "membership_keys_file")
        )
    except DiscoveryError as exc:
        raise OptionError(f"enrich: {exc}") from None
    client_cert, client_key = read_client_identity(
        tls_client_cert_file,
        tls_client_key_file,
        cert_option="tls_client_cert_file",
        key_option="tls_client_key_file",
    ) or (None, None)
    token = read_token_file(token_file, "token_file")
    return ReplicaRoute(
        changelog=changelog,
        bootstrap_servers=bootstrap_servers,
        credentials=ServeCredentials(token, None, certs, client_cert, client_key),
        max_lag=max_lag,
        kafka_config=tuple(sorted((str(k), str(v)) for k, v in (kafka_config or {}).items())),
        membership_keys=keys.to_pem() if keys.keys else b"",
    )


def _store_host(df: DataFrame, path: str | None) -> tuple[HostRef, str]:
    """How the tasks reach the store host of the driver, and the store's absolute path
    there: planned on the driver's host by the snapshot reader's ``host`` view (this process
    may be a Spark Connect client on another machine)."""
    from spark_statestore.connectors.spark.datasource import FORMAT_NAME
    from spark_statestore.connectors.spark.host import HostRef

    if not isinstance(path, str) or not path:
        raise OptionError(f"enrich: path must be a store directory, got {path!r}")
    row = df.sparkSession.read.format(FORMAT_NAME).option("view", "host").load(path).first()
    assert row is not None  # the view has one row
    pems = (row["tls_root_certs"], row["tls_client_cert"], row["tls_client_key"])
    certs, client_cert, client_key = (None if pem is None else pem.encode() for pem in pems)
    return HostRef(row["location"], row["token"], certs, client_cert, client_key), row["store"]
