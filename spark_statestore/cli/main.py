"""The ``spark-statestore`` command's parser and its subcommands.

Subcommands import what they need when they run, so ``spark-statestore --help`` stays fast
and the engine keeps its no-Kafka-at-import rule.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from spark_statestore.cli.arguments import VersionAction, add_metrics_arguments, metrics_endpoint
from spark_statestore.cli.arguments import integer as _integer
from spark_statestore.cli.arguments import seconds as _seconds
from spark_statestore.cli.membership import add_membership_commands
from spark_statestore.cli.pack import add_pack_command
from spark_statestore.cli.query_formats import REGISTRY_FORMAT_NAMES
from spark_statestore.cli.signals import catch_stop_signals
from spark_statestore.cli.store_commands import add_store_commands
from spark_statestore.errors import OptionError, StateStoreError, closest_hint
from spark_statestore.logs import FORMATS, configure_logging, log_format

if TYPE_CHECKING:
    from spark_statestore.changelog.missing_position import OnMissingPosition

__all__ = ["build_parser", "catch_stop_signals", "main"]

_log = logging.getLogger(__name__)


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def _on_missing_position(text: str) -> OnMissingPosition:
    """The argparse type of ``--on-missing-position``: ``fail`` or ``skip``, as the Spark
    option ``onMissingPosition``. ``error``, this flag's former spelling of ``fail`` (the
    README documented it), is still taken, with a warning."""
    from spark_statestore.changelog.missing_position import OnMissingPosition

    if text == "error":
        print("--on-missing-position error is deprecated: use fail", file=sys.stderr)
        return OnMissingPosition.FAIL
    try:
        return OnMissingPosition(text)
    except ValueError:
        values = [member.value for member in OnMissingPosition]
        raise argparse.ArgumentTypeError(
            f"unknown value {text[:40]!r}" + closest_hint(text, values, noun="values")
        ) from None


def _wait_for_signal() -> int:
    """Block until SIGINT or SIGTERM; returns the signal number."""
    return catch_stop_signals()()


def _cmd_broker(args: argparse.Namespace) -> int:
    from spark_statestore.connectors.kafka.local import LocalKafkaCluster, create_topics
    from spark_statestore.connectors.kafka.local.jars import broker_version

    bootstrap_file = Path(args.bootstrap_file) if args.bootstrap_file else None
    cluster = LocalKafkaCluster(
        brokers=args.brokers, host=args.host, data_dir=args.data_dir, heap=args.heap
    )
    # SIGTERM ends the run like Ctrl-C, also while the cluster is still starting.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with cluster:
        created = create_topics(cluster, args.topic)
        if bootstrap_file is not None:
            _write_atomically(bootstrap_file, cluster.bootstrap_servers + "\n")
        print(f"bootstrap.servers={cluster.bootstrap_servers}", flush=True)
        for name, partitions in created:
            print(f"topic {name} partitions={partitions}", flush=True)
        where = args.data_dir or f"{cluster.data_dir} (removed on exit)"
        print(
            f"Apache Kafka {broker_version()} running in KRaft mode ({args.brokers} node(s), "
            f"data in {where}); stop with Ctrl-C or SIGTERM",
            file=sys.stderr,
            flush=True,
        )
        signum = _wait_for_signal()
        print(f"received {signal.Signals(signum).name}, shutting down", file=sys.stderr)
    if bootstrap_file is not None:
        bootstrap_file.unlink(missing_ok=True)
    return 0


def _cmd_jars(args: argparse.Namespace) -> int:
    from spark_statestore.connectors.kafka.local import (
        hdfs_minicluster_jars,
        kafka_jars,
        resolve,
        spark_avro_jars,
        spark_kafka_jars,
    )

    for jar_set in (kafka_jars(), spark_kafka_jars(), spark_avro_jars(), hdfs_minicluster_jars()):
        cached = jar_set.is_resolved() and not args.force
        directory = resolve(jar_set, force=args.force)
        state = "cached" if cached else "resolved"
        print(f"{jar_set.name} {jar_set.version}: {state} in {directory}", flush=True)
    return 0


def _cmd_tail(args: argparse.Namespace) -> int:
    from spark_statestore.connectors.kafka.tail import format_record, tail_changelog

    typed = {args.key_format, args.value_format} & set(REGISTRY_FORMAT_NAMES)
    shown = None
    if typed:
        if args.schema_registry_url is None:
            raise OptionError(
                f"--key-format/--value-format {sorted(typed)[0]} looks each record's schema up "
                "by its id: give --schema-registry-url"
            )
        from spark_statestore.cli.arguments import parse_settings
        from spark_statestore.connectors.schema_registry import RegistrySettings
        from spark_statestore.connectors.schema_registry.show import RegistryJson

        settings = parse_settings(
            args.schema_registry or [],
            option="--schema-registry",
            what="a schema registry client setting",
            example="basic.auth.user.info=user:secret",
        )
        registry = RegistrySettings.from_options(
            args.schema_registry_url, settings, prefix="--schema-registry "
        )
        shown = {fmt: RegistryJson(registry, fmt) for fmt in typed}
    count = 0
    for record in tail_changelog(
        args.bootstrap_servers,
        args.changelog,
        timeout_s=args.timeout,
        on_missing_position=args.on_missing_position,
    ):
        print(format_record(record, args.key_format, args.value_format, shown=shown), flush=True)
        count += 1
    print(f"{count} committed record(s) in {args.changelog}", file=sys.stderr)
    return 0


def _cmd_follow(args: argparse.Namespace) -> int:
    from spark_statestore.cli.follow import FollowOptions, run_follow

    options = FollowOptions.from_cli(
        bootstrap_servers=args.bootstrap_servers,
        changelog=args.changelog,
        path=args.path,
        partitions=args.partitions,
        chunk_records=args.chunk_records,
        until_caught_up=args.until_caught_up,
        kafka=args.kafka,
        progress=args.progress,
        leader_application_id=args.leader_application_id,
        leader_topology=args.leader_topology,
        leader_upstream_topics=args.leader_upstream_topics,
    )
    metrics = metrics_endpoint(args)
    if metrics is not None:
        options = dataclasses.replace(options, metrics=metrics)
    return run_follow(options)


def _cmd_demo(args: argparse.Namespace) -> int:
    from spark_statestore.demo import run_demo

    return run_demo(workdir=Path(args.workdir) if args.workdir else None)


def _cmd_bench(args: argparse.Namespace) -> int:
    from spark_statestore.bench import BenchOptions, run_suites
    from spark_statestore.bench.report import render_table, report_json
    from spark_statestore.bench.suites import resolve_suites

    options = BenchOptions.for_run(quick=args.quick, rounds=args.rounds, records=args.records)
    suites = resolve_suites(args.suite)
    print(
        f"running suite(s) {', '.join(suites)} "
        f"({options.rounds} rounds, {options.records:,} records per run) ...",
        file=sys.stderr,
        flush=True,
    )
    run = run_suites(suites, options)
    print(render_table(run), flush=True)
    if args.output:
        from spark_statestore.bench.plot import write_plots

        _write_atomically(Path(args.output), report_json(run))
        print(f"report written to {args.output}", file=sys.stderr)
        plots = write_plots(run, Path(args.output))
        if plots is not None:
            print(f"scale curves written to {plots}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``spark-statestore`` (exposed for docs and tests)."""
    parser = argparse.ArgumentParser(
        prog="spark-statestore",
        description="Kafka Streams style state stores for Spark Structured Streaming.",
    )
    parser.add_argument(
        "--version",
        action=VersionAction,
        help="print the version and which paths run here (compiled or reference), then exit",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="log this project's records at DEBUG level (else at "
        "$SPARK_STATESTORE_LOG_LEVEL, default WARNING)",
    )
    parser.add_argument(
        "--log-format",
        choices=FORMATS,
        help="log records as text lines or as JSON lines, one object each (default: "
        "$SPARK_STATESTORE_LOG_FORMAT, else text)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    broker = sub.add_parser(
        "broker",
        help="run a local Apache Kafka cluster (KRaft, JVM processes) until stopped",
        description="Start a real Apache Kafka cluster in KRaft mode as local JVM processes "
        "(one combined broker+controller, or N nodes with a controller quorum), create the "
        "topics asked for (names ending in -changelog compacted, as Kafka Streams creates "
        "them), print the bootstrap servers and run until SIGINT/SIGTERM; then stop every "
        "JVM and remove the data unless --data-dir was given. Needs Java 17 and the jars "
        "of `spark-statestore jars`.",
    )
    broker.add_argument("--brokers", type=_integer, default=1, help="number of brokers (default 1)")
    broker.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="NAME:PARTITIONS",
        help="create a topic (repeatable), e.g. --topic orders:8",
    )
    broker.add_argument(
        "--bootstrap-file", metavar="FILE", help="also write the bootstrap servers to FILE"
    )
    broker.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    broker.add_argument(
        "--data-dir",
        metavar="DIR",
        help="keep the cluster's data in DIR (reused by the next run; default: a temporary "
        "directory removed on exit)",
    )
    broker.add_argument(
        "--heap", metavar="SIZE", help="JVM heap of each node, e.g. 1g (default 512m)"
    )
    broker.set_defaults(func=_cmd_broker)

    jars = sub.add_parser(
        "jars",
        help="resolve the jars of Kafka, Spark's Kafka connector and the test HDFS with Maven "
        "(once)",
        description="Resolve Apache Kafka's broker jars, Spark's Kafka connector and Hadoop's "
        "minicluster (the HDFS the tests put a checkpoint on; both for the installed PySpark) "
        "from Maven Central into the local cache (~/.cache/spark-statestore/jars or "
        "$SPARK_STATESTORE_JARS). Needs Maven; nothing is downloaded when cached.",
    )
    jars.add_argument("--force", action="store_true", help="resolve again even when cached")
    jars.set_defaults(func=_cmd_jars)

    tail = sub.add_parser(
        "tail",
        help="print the committed records of a changelog topic with their positions",
        description="Read a Kafka Streams changelog topic from the beginning to its current "
        "end (read_committed) and print each record with its decoded position header.",
    )
    tail.add_argument("--bootstrap-servers", required=True, help="Kafka bootstrap servers")
    tail.add_argument("--changelog", required=True, help="changelog topic")
    tail.add_argument(
        "--key-format",
        choices=["string", "hex", *REGISTRY_FORMAT_NAMES],
        default="string",
        help="how to print keys (avro, protobuf, jsonschema: registry-framed values as JSON, "
        "each with its own writer schema)",
    )
    tail.add_argument(
        "--value-format",
        choices=["string", "hex", *REGISTRY_FORMAT_NAMES],
        default="string",
        help="how to print values (avro, protobuf, jsonschema: as for --key-format)",
    )
    tail.add_argument(
        "--schema-registry-url",
        help="for avro, protobuf, jsonschema: the schema registry's Confluent-compatible API",
    )
    tail.add_argument(
        "--schema-registry",
        action="append",
        metavar="KEY=VALUE",
        help="a registry client setting (repeatable), e.g. basic.auth.user.info=user:secret",
    )
    tail.add_argument(
        "--on-missing-position",
        type=_on_missing_position,
        default="fail",
        metavar="{fail,skip}",
        help="a record with v=0 but no valid c header: fail (default) or skip its position",
    )
    tail.add_argument(
        "--timeout", type=_seconds, default=30.0, help="give up after this many seconds"
    )
    tail.set_defaults(func=_cmd_tail)

    follow = sub.add_parser(
        "follow",
        help="follow a changelog topic into a local store, in the foreground",
        description="Open (creating it when missing) a follower store at PATH and apply the "
        "changelog to it: restore with a progress line on stderr, say 'caught up' once the "
        "end offsets seen at start are reached, then keep following until SIGINT/SIGTERM "
        "(a clean stop: a later run resumes where this one ended).",
    )
    follow.add_argument("--bootstrap-servers", required=True, help="Kafka bootstrap servers")
    follow.add_argument("--changelog", required=True, help="changelog topic to follow")
    follow.add_argument("path", metavar="PATH", help="the store directory")
    follow.add_argument(
        "--partitions",
        metavar="LIST",
        help="follow only these changelog partitions, e.g. 0,2,5-7 (default: all); "
        "fixed when the store is created",
    )
    follow.add_argument(
        "--chunk-records",
        type=_integer,
        metavar="N",
        help="records per store commit (default 50000)",
    )
    follow.add_argument(
        "--until-caught-up",
        action="store_true",
        help="exit 0 as soon as the store has caught up (for scripts)",
    )
    follow.add_argument(
        "--kafka",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Kafka consumer setting (repeatable), e.g. --kafka security.protocol=SSL",
    )
    follow.add_argument(
        "--leader-application-id",
        metavar="ID",
        help="the application.id of the exactly-once leader writing the changelog: the "
        "store's position comes from its committed offsets (for changelogs without "
        "position headers); not with --partitions",
    )
    upstream = follow.add_mutually_exclusive_group()
    upstream.add_argument(
        "--leader-topology",
        metavar="FILE",
        help="a file holding the text of the leader's Topology.describe(): only the internal "
        "topics upstream of the store are waited through (with --leader-application-id)",
    )
    upstream.add_argument(
        "--leader-upstream-topics",
        metavar="TOPICS",
        help="the internal topics between the leader's input topics and the store, "
        "comma-separated (with --leader-application-id)",
    )
    add_metrics_arguments(follow, "the follower")
    shown = follow.add_mutually_exclusive_group()
    shown.add_argument(
        "--progress",
        dest="progress",
        action="store_true",
        default=None,
        help="redraw the progress line in place even when stderr is not a terminal",
    )
    shown.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="no progress lines (status lines such as 'caught up' are still printed)",
    )
    follow.set_defaults(func=_cmd_follow)

    demo = sub.add_parser(
        "demo",
        help="run the end-to-end demo on a local Apache Kafka broker",
        description="Start a local Apache Kafka broker, let another application write a Kafka "
        "Streams-format changelog (position headers, tombstones, an aborted transaction), "
        "follow it with a Spark query and query the live store with Spark SQL.",
    )
    demo.add_argument(
        "--workdir",
        help="directory for demo files (default: /tmp/spark-statestore-demo; cleaned at "
        "start, kept afterwards)",
    )
    demo.set_defaults(func=_cmd_demo)

    bench = sub.add_parser(
        "bench",
        help="measure each path against the raw limit of this machine",
        description="Measure each path against the raw limit of the same machine, "
        "interleaving candidate and baseline runs and keeping each side's best rate. "
        "Prints one line per measurement (rates, ratio, target, PASS/BELOW) and exits 0 "
        "even when a ratio is below its target: it is a measurement, not a test.",
    )
    bench.add_argument(
        "--suite",
        action="append",
        default=[],
        metavar="NAME",
        help="run this suite, e.g. store (repeatable; default: every suite)",
    )
    bench.add_argument(
        "--rounds", type=_integer, help="interleaved rounds per path, best kept (default 5)"
    )
    bench.add_argument(
        "--records",
        type=_integer,
        help="records written or keys read per timed run (default 100000)",
    )
    bench.add_argument("--output", metavar="FILE", help="also write the JSON report to FILE")
    bench.add_argument(
        "--quick", action="store_true", help="tiny sizes (a smoke run of about a second)"
    )
    bench.set_defaults(func=_cmd_bench)
    add_store_commands(sub)
    add_membership_commands(sub)
    add_pack_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``spark-statestore`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    json_handler: logging.Handler | None = None
    try:
        # One handler for every record of this process (see spark_statestore.logs); an
        # invalid $SPARK_STATESTORE_LOG_* is an error of the command like any other.
        handler = configure_logging(logging.DEBUG if args.verbose else None, args.log_format)
        if handler is not None and log_format(args.log_format) == "json":
            json_handler = handler
        code: int = args.func(args)
    except StateStoreError as exc:
        _report(args.command, exc, json_handler)
        return int(getattr(exc, "exit_code", 2))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader of stdout left (`... | head`): stop quietly, as Unix tools do. Point
        # stdout at /dev/null so the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a tool killed by it
    return code


def _report(command: str, exc: StateStoreError, json_handler: logging.Handler | None) -> None:
    """Say that ``command`` failed with an expected error, in one line and no traceback: as
    text on stderr, or with ``--log-format json`` as a JSON record like the others (whatever
    the log level: it is the command's answer, not a log record)."""
    line = f"spark-statestore {command}: error: {_one_line(exc)}"
    if json_handler is None:
        print(line, file=sys.stderr)
        return
    extra = {"command": command, "error": type(exc).__name__}
    json_handler.handle(
        _log.makeRecord(_log.name, logging.ERROR, __file__, 0, line, (), None, extra=extra)
    )


def _one_line(exc: BaseException) -> str:
    """The error's message on one line (a server's or a library's may span several)."""
    return " ".join(str(exc).split())
