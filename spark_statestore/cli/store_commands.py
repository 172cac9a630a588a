"""The parser and handlers of the store commands: ``serve``, ``inspect``, ``lag``, ``status``,
``query``.

Each handler imports its command's module when it runs (see
:mod:`~spark_statestore.cli.main`), so building the parser loads no Arrow, LevelDB or Kafka.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from spark_statestore.cli.arguments import add_metrics_arguments, metrics_endpoint
from spark_statestore.cli.arguments import integer as _integer
from spark_statestore.cli.arguments import seconds as _seconds

if TYPE_CHECKING:
    from spark_statestore.cli.store_state import StoreTarget
    from spark_statestore.discovery.signing import MembershipKeys

__all__ = ["add_store_commands"]


def _cmd_serve(args: argparse.Namespace) -> int:
    from spark_statestore.cli.serve import ServeOptions, run_serve

    options = ServeOptions.from_cli(
        path=args.path,
        host=args.host,
        port=args.port,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        token_file=args.token_file,
        bootstrap_servers=args.bootstrap_servers,
        kafka=args.kafka,
        announce_key=args.announce_key,
        metrics=metrics_endpoint(args),
    )
    return run_serve(options)


def _target(args: argparse.Namespace) -> StoreTarget:
    from spark_statestore.cli.store_state import StoreTarget

    return StoreTarget.from_cli(
        args.store,
        token_file=args.token_file,
        tls_root_cert=args.tls_root_cert,
        tls_client_cert=args.tls_client_cert,
        tls_client_key=args.tls_client_key,
    )


def _add_target(parser: argparse.ArgumentParser, *, optional: bool = False) -> None:
    """STORE (a path or a location) and the credentials a location needs."""
    parser.add_argument(
        "store",
        nargs="?" if optional else None,
        metavar="STORE",
        help="the store directory, or a store server's location (grpc+tcp://host:port)",
    )
    parser.add_argument(
        "--token-file",
        metavar="F",
        help="a file holding the server's token (for a location, or query --changelog's "
        "replicas; a store directory's owner wrote it in <store>/_serve.json)",
    )
    parser.add_argument(
        "--tls-root-cert", metavar="F", help="PEM certificate to trust (a grpc+tls location)"
    )
    parser.add_argument(
        "--tls-client-cert",
        metavar="F",
        help="PEM client certificate chain, for a server in mutual-TLS mode (a location, or "
        "query --changelog's replicas)",
    )
    parser.add_argument(
        "--tls-client-key", metavar="F", help="PEM private key of --tls-client-cert"
    )


def _add_membership_keys(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--membership-keys",
        metavar="F[,F]",
        help="with --changelog: PEM file(s) of the public keys replicas sign their "
        "announcements with (default: this user's membership key); others are ignored",
    )


def _add_kafka(parser: argparse.ArgumentParser, what: str) -> None:
    """``--bootstrap-servers B`` (used for ``what``) and ``--kafka KEY=VALUE``."""
    parser.add_argument("--bootstrap-servers", metavar="B", help=what)
    parser.add_argument(
        "--kafka", action="append", default=[], metavar="KEY=VALUE", help="a Kafka setting"
    )


def _cmd_inspect(args: argparse.Namespace) -> int:
    from spark_statestore.cli.inspect import run_inspect

    return run_inspect(_target(args), as_json=args.json)


def _cmd_lag(args: argparse.Namespace) -> int:
    from spark_statestore.cli.lag import run_lag, run_replica_lag
    from spark_statestore.cli.store_state import kafka_settings

    keys = _store_or_changelog(args, "lag")
    if args.changelog is not None:
        return run_replica_lag(
            args.changelog,
            bootstrap_servers=args.bootstrap_servers,
            kafka_config=kafka_settings(args.kafka),
            as_json=args.json,
            membership_keys=keys,
        )
    return run_lag(
        _target(args),
        bootstrap_servers=args.bootstrap_servers,
        kafka_config=kafka_settings(args.kafka),
        as_json=args.json,
    )


def _store_or_changelog(args: argparse.Namespace, command: str) -> MembershipKeys | None:
    """Check that ``command`` got one of STORE and ``--changelog`` (with the
    ``--bootstrap-servers`` its replicas announce on); the keys of ``--membership-keys``."""
    from spark_statestore.cli.store_state import read_membership_keys
    from spark_statestore.errors import OptionError

    if (args.store is None) == (args.changelog is None):
        raise OptionError(f"{command}: give one of STORE and --changelog TOPIC (its replicas)")
    if args.changelog is not None and args.bootstrap_servers is None:
        raise OptionError(
            f"{command} --changelog: give --bootstrap-servers (replicas announce there)"
        )
    return None if args.membership_keys is None else read_membership_keys(args.membership_keys)


def _cmd_status(args: argparse.Namespace) -> int:
    from spark_statestore.cli.status import run_changelog_status, run_status
    from spark_statestore.cli.store_state import kafka_settings

    keys = _store_or_changelog(args, "status")
    if args.changelog is not None:
        credentials = None
        if args.token_file is not None:
            target = _changelog_target(args)
            credentials = {
                "token": target.token,
                "tls_root_certs": target.tls_root_certs,
                "tls_client_cert": target.tls_client_cert,
                "tls_client_key": target.tls_client_key,
            }
        return run_changelog_status(
            args.changelog,
            bootstrap_servers=args.bootstrap_servers,
            kafka_config=kafka_settings(args.kafka),
            as_json=args.json,
            membership_keys=keys,
            credentials=credentials,
        )
    return run_status(
        _target(args),
        bootstrap_servers=args.bootstrap_servers,
        kafka_config=kafka_settings(args.kafka),
        as_json=args.json,
        membership_keys=keys,
    )


def _changelog_target(args: argparse.Namespace) -> StoreTarget:
    from spark_statestore.cli.store_state import StoreTarget

    return StoreTarget.for_changelog(
        args.changelog,
        token_file=args.token_file,
        tls_root_cert=args.tls_root_cert,
        tls_client_cert=args.tls_client_cert,
        tls_client_key=args.tls_client_key,
    )


def _cmd_query(args: argparse.Namespace) -> int:
    from spark_statestore.cli.query import QueryOptions, run_query

    options = QueryOptions.from_cli(
        store=args.store,
        changelog=args.changelog,
        token_file=args.token_file,
        tls_root_cert=args.tls_root_cert,
        tls_client_cert=args.tls_client_cert,
        tls_client_key=args.tls_client_key,
        keys=args.key,
        key_range=args.range,
        prefix=args.prefix,
        key_format=args.key_format,
        value_format=args.value_format,
        value_schema=args.value_schema,
        as_json=args.json,
        position_bound=args.position_bound,
        position_bound_timeout=args.position_bound_timeout,
        max_lag=args.max_lag,
        limit=args.limit,
        as_of=args.as_of,
        bootstrap_servers=args.bootstrap_servers,
        kafka=args.kafka,
        membership_keys=args.membership_keys,
        page_rows=args.page_rows,
        schema_registry_url=args.schema_registry_url,
        schema_registry=args.schema_registry or (),
        key_subject=args.key_subject,
        value_subject=args.value_subject,
        format_options=args.format_option or (),
    )
    return run_query(options)


def add_store_commands(sub: Any) -> None:
    """The commands that serve or read one store: serve, inspect, lag, query."""
    from spark_statestore.cli.query_types import KEY_FORMATS, VALUE_FORMATS

    serve = sub.add_parser(
        "serve",
        help="serve a store over Arrow Flight while no query runs",
        description="Open the store at PATH (this process owns it until it stops), serve it "
        "over Arrow Flight like a follower query does, advertised in the store's owner file "
        "(inspect, query and Spark's snapshot reader find it), print the location and serve "
        "until SIGINT/SIGTERM; then stop cleanly. Beyond loopback it needs TLS.",
    )
    serve.add_argument("path", metavar="PATH", help="the store directory")
    serve.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    serve.add_argument(
        "--port", type=_integer, default=0, help="listen port (default 0: any free port)"
    )
    serve.add_argument("--tls-cert", metavar="FILE", help="PEM certificate chain: serve grpc+tls")
    serve.add_argument("--tls-key", metavar="FILE", help="PEM private key of --tls-cert")
    serve.add_argument(
        "--tls-client-ca",
        metavar="FILE",
        help="PEM CA certificates: mutual TLS, a client without a certificate they signed "
        "fails the TLS handshake (needs --tls-cert)",
    )
    serve.add_argument(
        "--token-file",
        metavar="F",
        help="serve with the token in F instead of a random one (replicas sharing a token "
        "can be queried through one router)",
    )
    _add_kafka(
        serve,
        "announce the store as a replica of its changelog on <changelog>-replicas "
        "while serving, and report its lags",
    )
    serve.add_argument(
        "--announce-key",
        metavar="F",
        help="PEM file of the membership key announcements are signed with (default: this "
        "user's, created on first use)",
    )
    add_metrics_arguments(serve, "the store server")
    serve.set_defaults(func=_cmd_serve)

    inspect = sub.add_parser(
        "inspect",
        help="show a store's metadata, position, commit record and owner",
        description="Describe the store at PATH: name, role, changelog, partitions and "
        "subset, kind (key-value, or versioned with its history retention) and format "
        "version; the latest commit's sequence, position, changelog offsets and commit "
        "record; its owner (live or stale). Read through the live owner's server when there "
        "is one, else from disk.",
    )
    _add_target(inspect)
    inspect.add_argument("--json", action="store_true", help="one JSON object instead of text")
    inspect.set_defaults(func=_cmd_inspect)

    lag = sub.add_parser(
        "lag",
        help="show a store's lag behind its changelog, per partition",
        description="Per held partition: the store's current changelog offset, the "
        "changelog's end offset and the lag, like kafka-consumer-groups --describe. From the "
        "live follower's own lags, else the store's offsets against the changelog's end "
        "offsets (with --bootstrap-servers).",
    )
    _add_target(lag, optional=True)
    lag.add_argument(
        "--changelog",
        metavar="TOPIC",
        help="instead of STORE: every live replica of this changelog, as announced on "
        "TOPIC-replicas (needs --bootstrap-servers)",
    )
    _add_kafka(
        lag,
        "Kafka bootstrap servers: where --changelog's replicas announce, or for a store nobody "
        "follows now",
    )
    _add_membership_keys(lag)
    lag.add_argument("--json", action="store_true", help="one JSON object per partition")
    lag.set_defaults(func=_cmd_lag)

    status = sub.add_parser(
        "status",
        help="show a store's owner, state, commit, lag and announcements on one screen",
        description="For a store (a directory or a server's location): its owner and role, "
        "the owner's state (CREATED, RESTORING, RUNNING, STOPPED, FAILED with the reason) and "
        "since when, the latest commit and its age, the position, the lag per partition and, "
        "with --bootstrap-servers, the announcements of its changelog's replicas and their "
        "age. With --changelog: every replica announced on TOPIC-replicas (live, expired or "
        "withdrawn); with --token-file also each live replica's state. Exit code 0 when "
        "RUNNING, 3 when not, 2 on an error.",
    )
    _add_target(status, optional=True)
    status.add_argument(
        "--changelog",
        metavar="TOPIC",
        help="instead of STORE: every replica of this changelog, as announced on "
        "TOPIC-replicas (needs --bootstrap-servers)",
    )
    _add_kafka(
        status,
        "Kafka bootstrap servers: the changelog's end offsets and its replicas' announcements",
    )
    _add_membership_keys(status)
    status.add_argument("--json", action="store_true", help="JSON instead of text")
    status.set_defaults(func=_cmd_status)

    query = sub.add_parser(
        "query",
        help="look up keys, a key range or a prefix in a store",
        description="Read one consistent snapshot of the store at PATH, through its live "
        "owner's server or from disk, and print the rows (key, value, partition, offset, "
        "timestamp) as a table or JSON lines; a summary with the snapshot's commit and "
        "position goes to stderr. A store behind --position-bound (NOT_UP_TO_BOUND) or "
        "lagging more than --max-lag is refused with exit code 3.",
    )
    _add_target(query, optional=True)
    query.add_argument(
        "--changelog",
        metavar="TOPIC",
        help="instead of STORE: route the query over the live replicas of this changelog "
        "(announced on TOPIC-replicas; needs --bootstrap-servers and their shared --token-file)",
    )
    _add_membership_keys(query)
    what = query.add_mutually_exclusive_group(required=True)
    what.add_argument("--key", action="append", metavar="K", help="a key to look up (repeatable)")
    what.add_argument(
        "--range", nargs=2, metavar=("FROM", "TO"), help="keys from FROM to TO, both inclusive"
    )
    what.add_argument("--prefix", metavar="P", help="keys starting with P")
    what.add_argument("--all", action="store_true", help="every key")
    query.add_argument(
        "--key-format",
        choices=KEY_FORMATS,
        default="string",
        help="how keys are written and shown (binary: hex; avro: JSON of the key's fields, "
        "through a schema registry; default string)",
    )
    query.add_argument(
        "--value-format",
        choices=VALUE_FORMATS,
        default="string",
        help="how values are shown (binary: hex; json needs --value-schema; avro: as JSON, "
        "through a schema registry; default string)",
    )
    query.add_argument(
        "--value-schema",
        metavar="SCHEMA",
        help="the DDL schema of json values, or the schema of avro values read without a "
        "registry (with --format-option valueSchemaId=N, or valueFraming=none)",
    )
    query.add_argument(
        "--schema-registry-url",
        metavar="URL",
        help="avro: the schema registry (its Confluent-compatible API) the keys' and values' "
        "schema ids are looked up in",
    )
    query.add_argument(
        "--schema-registry",
        action="append",
        metavar="KEY=VALUE",
        help="a registry client setting (repeatable), e.g. basic.auth.user.info=user:secret",
    )
    query.add_argument(
        "--key-subject",
        metavar="SUBJECT",
        help="avro keys: the registry subject of the reader schema (default <changelog>-key)",
    )
    query.add_argument(
        "--value-subject",
        metavar="SUBJECT",
        help="avro values: the registry subject of the reader schema (default <changelog>-value)",
    )
    query.add_argument(
        "--format-option",
        action="append",
        metavar="NAME=VALUE",
        help="any other format option of the Spark snapshot reader (repeatable), e.g. "
        "valueSchemaVersion=2, keySchemaFile=key.avsc (docs/schemas.md)",
    )
    query.add_argument("--json", action="store_true", help="one JSON object per row")
    query.add_argument(
        "--position-bound",
        metavar="JSON",
        help='the position the store must have reached, e.g. \'{"orders": {"0": 41}}\'',
    )
    query.add_argument(
        "--position-bound-timeout",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="let a live owner wait this long for --position-bound (default 0)",
    )
    query.add_argument(
        "--max-lag", type=_integer, metavar="N", help="refuse a store lagging more than N records"
    )
    query.add_argument("--limit", type=_integer, metavar="N", help="at most N rows")
    query.add_argument(
        "--page-rows",
        type=_integer,
        metavar="N",
        help="with --changelog: read a range, prefix or --all in pages of at most N rows per "
        "replica (default 4096)",
    )
    query.add_argument(
        "--as-of", type=_integer, metavar="MS", help="a versioned store's values at this time"
    )
    _add_kafka(
        query,
        "Kafka bootstrap servers: of --changelog, or for --max-lag of a store nobody follows now",
    )
    query.set_defaults(func=_cmd_query)
