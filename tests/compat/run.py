"""``make compat``: run each cell of the compatibility table and write its result into
README.md (between ``<!-- compat:begin -->`` and ``<!-- compat:end -->``).

A cell is a few focused tests run against one version of a peer: the repository's Kafka
Streams app built against another Kafka Streams (``$SPARK_STATESTORE_STREAMS_VERSION``), a
local broker of another Kafka (``$SPARK_STATESTORE_BROKER_VERSION``), or another PySpark (a
virtualenv of its own, ``.venv-pyspark-<version>``). Cells sharing a setup run in one pytest
process, one setup after another; each result is read from pytest's junit XML
(``compat-results/<group>.xml``) and written as ``pass (n/n, <date>)`` or
``fail (passed/run: failed tests; <date>)``. Only the cells run are rewritten.

Usage: ``make compat`` (every cell), ``make compat CELLS='streams-4.4.0:*,broker-3.9.2:*'``,
or ``.venv/bin/python -m tests.compat.run --list``. Not part of ``make test`` or CI.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from tests.compat.table import Outcome, Row, assign, read_junit, write_table

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "compat-results"
README = ROOT / "README.md"
APP = ROOT / "interop" / "kafka-streams"
GROUP_TIMEOUT_S = 40 * 60

STREAMS_VERSIONS = ("3.9.2", "4.0.2", "4.3.1", "4.4.0")
BROKER_VERSIONS = ("3.9.2", "4.3.1", "4.4.0")
BOTH_VERSIONS = ("3.9.2",)
"""Kafka versions run as broker and Streams app at once (a 3.x shop's whole Kafka)."""
PYSPARK_VERSIONS = ("4.2.0", "4.3.0")
KAFKA_CONNECTOR_VERSIONS = ("4.2.0",)
"""The PySpark versions whose Kafka connector (spark-sql-kafka-0-10) Maven Central serves
here (constraints.txt)."""

INTEROP = "tests/interop/test_kafka_streams.py"
DEMO = (
    "tests/integration/test_cli.py::"
    "test_demo_runs_end_to_end_with_the_real_kafka_streams_app_and_cleans_up"
)


@dataclass(frozen=True)
class Cell:
    """One row of the table.

    Attributes
    ----------
    group
        Cells of one group share a setup (env, virtualenv) and a pytest process.
    name
        The surface, unique in its group; the cell's id is ``<group>:<name>``.
    selectors
        pytest node ids (``path`` or ``path::test``) the cell runs.
    static
        A result without a run (a surface that cannot be tested with this version).
    """

    group: str
    name: str
    peer: str
    version: str
    what: str
    selectors: tuple[str, ...] = ()
    static: str = ""

    @property
    def id(self) -> str:
        return f"{self.group}:{self.name}"

    def row(self) -> Row:
        return Row(self.id, self.peer, self.version, self.what)


@dataclass(frozen=True)
class Setup:
    """What a group runs with: the versions it sets in the environment and the Python."""

    streams: str | None = None
    broker: str | None = None
    pyspark: str | None = None
    env: dict[str, str] = field(default_factory=dict)


def _streams_cells(
    version: str, group: str | None = None, peer: str = "Kafka Streams app"
) -> list[Cell]:
    group = group or f"streams-{version}"
    return [
        Cell(
            group,
            "follower-kv",
            peer,
            version,
            "follower = Kafka Streams' IQv2: key-value and timestamped stores, with and "
            "without position headers",
            (f"{INTEROP}::test_key_value_and_timestamped_stores_equal_kafka_streams_answers",),
        ),
        Cell(
            group,
            "follower-window-session",
            peer,
            version,
            "follower = IQv2: window and session stores",
            (f"{INTEROP}::test_window_and_session_stores_equal_kafka_streams_answers",),
        ),
        Cell(
            group,
            "follower-versioned",
            peer,
            version,
            "versioned store: follower and Spark as of a time = IQv2; its changelog refused "
            "as key-value",
            (
                "tests/interop/test_kafka_streams_versioned.py",
                f"{INTEROP}::test_a_versioned_store_changelog_is_refused_as_a_key_value_store",
            ),
        ),
        Cell(
            group,
            "read-your-writes",
            peer,
            version,
            "read-your-writes: without position headers (follower, Spark), and bounded "
            "reads through repartitions/joins with and without them",
            (
                f"{INTEROP}::test_read_your_writes_without_position_headers",
                f"{INTEROP}::test_spark_reads_its_writes_against_an_unmodified_app",
                "tests/interop/test_shapes_read_your_writes.py::"
                "test_bounded_reads_hold_the_write_they_are_bounded_by",
            ),
        ),
        Cell(
            group,
            "follows-sink",
            peer,
            version,
            "Kafka Streams follows our sink's changelog (read-only store, global table)",
            ("tests/interop/test_kafka_streams_follows_sink.py",),
        ),
        Cell(
            group,
            "headers-stores",
            peer,
            version,
            "header-aware stores (Kafka Streams 4.3+) read by Spark = Kafka Streams",
            (
                "tests/interop/test_kafka_streams_spark.py::"
                "test_spark_reads_the_headers_of_a_header_aware_store_as_kafka_streams_does",
            ),
        ),
    ]


def _broker_cells(version: str) -> list[Cell]:
    group, peer = f"broker-{version}", "Kafka broker"
    return [
        Cell(
            group,
            "follower",
            peer,
            version,
            "follower: restore, follow, restart, lost offsets",
            ("tests/integration/test_follower.py",),
        ),
        Cell(
            group,
            "sink",
            peer,
            version,
            "sink's Kafka transactions: read_committed, fencing, aborts, timeouts; a Spark "
            "sink's changelog followed",
            (
                "tests/integration/test_changelog_writer.py",
                "tests/integration/test_sink.py::"
                "test_the_sink_publishes_a_changelog_that_a_follower_converges_to",
            ),
        ),
        Cell(
            group,
            "discovery",
            peer,
            version,
            "discovery: the replicas topic",
            ("tests/integration/test_discovery.py",),
        ),
        Cell(
            group,
            "kafka-streams",
            peer,
            version,
            "the Kafka Streams 4.3.1 app on this broker, followed key for key",
            (f"{INTEROP}::test_key_value_and_timestamped_stores_equal_kafka_streams_answers",),
        ),
    ]


def _pyspark_cells(version: str) -> list[Cell]:
    group, peer = f"pyspark-{version}", "PySpark"
    connector = (
        Cell(
            group,
            "kafka-connector",
            peer,
            version,
            'Spark\'s own Kafka source beside ours: the demo (format("kafka"), '
            "read_committed, Kafka 4.3.1)",
            (DEMO,),
        )
        if version in KAFKA_CONNECTOR_VERSIONS
        else Cell(
            group,
            "kafka-connector",
            peer,
            version,
            'beside Spark\'s own Kafka connector (format("kafka")): the demo, tests/cluster',
            static=f"untested (no Kafka connector for {version})",
        )
    )
    return [
        Cell(
            group,
            "follower-source",
            peer,
            version,
            "the follower source (streaming), bounded reads, routed queries",
            ("tests/integration/test_spark_follower.py",),
        ),
        Cell(
            group,
            "sink",
            peer,
            version,
            "the sink: micro-batches once, complete/update modes, batch writer, changelog",
            ("tests/integration/test_sink.py",),
        ),
        Cell(
            group,
            "enrich",
            peer,
            version,
            "enrich(df, path): lookups through the owner, the router, bounded",
            ("tests/integration/test_spark_enrich.py",),
        ),
        Cell(
            group,
            "kafka-streams",
            peer,
            version,
            "Spark reads the 4.3.1 app's window, session and header-aware stores = Kafka Streams",
            ("tests/interop/test_kafka_streams_spark.py",),
        ),
        Cell(
            group,
            "snapshot-reader",
            peer,
            version,
            "the snapshot reader: replay from a checkpoint",
            ("tests/integration/test_snapshot_reader_replay.py",),
        ),
        connector,
    ]


def cells() -> list[Cell]:
    """Every cell, in the table's order."""
    found = [c for v in STREAMS_VERSIONS for c in _streams_cells(v)]
    found += [c for v in BROKER_VERSIONS for c in _broker_cells(v)]
    for version in BOTH_VERSIONS:
        both = _streams_cells(version, f"kafka-{version}", "Kafka Streams app and broker")
        found += [c for c in both if c.name != "headers-stores"]
    found += [c for v in PYSPARK_VERSIONS for c in _pyspark_cells(v)]
    found.append(
        Cell(
            "demo-4.4.0",
            "demo",
            "demo (broker and Streams app)",
            "4.4.0",
            "`spark-statestore demo` end to end, twice",
            (DEMO,),
        )
    )
    return found


def setup_of(group: str) -> Setup:
    from spark_statestore.connectors.kafka.local.jars import ENV_BROKER_VERSION, KAFKA_VERSION
    from spark_statestore.connectors.kafka.local.streams_build import ENV_STREAMS_VERSION

    kind, _, version = group.partition("-")
    if kind == "streams":
        return Setup(streams=version, env={ENV_STREAMS_VERSION: version})
    if kind == "broker":
        return Setup(broker=version, env={ENV_BROKER_VERSION: version})
    if kind == "pyspark":
        return Setup(pyspark=version)
    if kind in ("demo", "kafka"):
        env = {ENV_STREAMS_VERSION: version, ENV_BROKER_VERSION: version}
        return Setup(streams=version, broker=version, env=env)
    raise ValueError(f"unknown group {group!r} (kafka {KAFKA_VERSION})")


# -- preparing a setup ----------------------------------------------------------------------
def build_streams_app(version: str) -> str:
    """Build the interop app against Kafka Streams ``version`` (once); '' or the problem."""
    from spark_statestore.connectors.kafka.local.streams_build import (
        has_headers_stores,
        interop_app_dir,
    )

    target = interop_app_dir(version)
    jar = target / "spark-statestore-interop.jar"
    if (target / "lib" / f"kafka-streams-{version}.jar").is_file() and jar.is_file():
        sources = [APP / "pom.xml", *(p for p in (APP / "src").rglob("*") if p.is_file())]
        if max(p.stat().st_mtime for p in sources) <= jar.stat().st_mtime:
            return ""  # built after its last change
    command = [
        "mvn",
        "-B",
        "-q",
        "-f",
        str(APP / "pom.xml"),
        "package",
        f"-Dkafka.version={version}",
        f"-Dbuild.dir={target}",
    ]
    if not has_headers_stores(version):
        command.append("-Pwithout-headers-stores")
    print(f"[compat] building the Kafka Streams app for {version}: {' '.join(command)}", flush=True)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode == 0:
        return ""
    output = (done.stdout + done.stderr).splitlines()
    errors = [line for line in output if line.startswith("[ERROR]") and line.strip() != "[ERROR]"]
    first = (errors or output or ["mvn failed"])[0].replace("|", "/")[:200]
    print("[compat] build failed:\n" + "\n".join(output[-40:]), flush=True)
    return f"does not build: {first}"


def resolve_broker(version: str) -> str:
    from spark_statestore.connectors.kafka.local.jars import kafka_jars, resolve
    from spark_statestore.errors import StateStoreError

    try:
        resolve(kafka_jars(version))
    except StateStoreError as exc:
        return f"jars do not resolve: {str(exc).splitlines()[0][:200]}"
    return ""


def pyspark_python(version: str) -> Path:
    """The Python of the virtualenv with PySpark ``version`` (the setup's own for the
    pinned one), created on first use with the project installed editable."""
    import pyspark

    if pyspark.__version__ == version:
        return ROOT / ".venv" / "bin" / "python"
    venv = ROOT / f".venv-pyspark-{version}"
    python = venv / "bin" / "python"
    stamp = venv / ".compat-ready"
    if stamp.is_file():
        return python
    print(f"[compat] creating {venv} (PySpark {version})", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--upgrade", "pip", "setuptools>=77", "wheel"], check=True)
    # constraints.txt pins only pyspark (to the setup's version): nothing else to keep.
    subprocess.run([*pip, f"pyspark=={version}", "-e", f"{ROOT}[dev]"], check=True)
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    env = {
        **os.environ,
        "CARGO_TARGET_DIR": os.environ.get(
            "CARGO_TARGET_DIR", str(cache / "spark-statestore" / "native-target")
        ),
        "PATH": f"{Path.home() / '.cargo' / 'bin'}{os.pathsep}{os.environ['PATH']}",
    }
    if os.environ.get("SPARK_STATESTORE_NATIVE", "auto") not in ("0", "off"):
        subprocess.run([*pip, str(ROOT / "native")], check=True, env=env)
    stamp.write_text(version + "\n")
    return python


def prepare(setup: Setup) -> tuple[Path, str]:
    """The Python to run and, when the setup cannot be made, why."""
    python = ROOT / ".venv" / "bin" / "python"
    if setup.streams:
        problem = build_streams_app(setup.streams)
        if problem:
            return python, problem
    if setup.broker:
        problem = resolve_broker(setup.broker)
        if problem:
            return python, problem
    if setup.pyspark:
        python = pyspark_python(setup.pyspark)
    return python, ""


# -- running ---------------------------------------------------------------------------------
def run_group(group: str, members: Sequence[Cell]) -> dict[str, Outcome]:
    """Run the cells of one group in one pytest process; their outcomes."""
    static = {c.id: Outcome(problem=c.static) for c in members if c.static}
    runnable = [c for c in members if not c.static]
    if not runnable:
        return static
    setup = setup_of(group)
    python, problem = prepare(setup)
    if problem:
        return {**static, **{c.id: Outcome(problem=problem) for c in runnable}}
    RESULTS.mkdir(exist_ok=True)
    junit = RESULTS / f"{group}.xml"
    junit.unlink(missing_ok=True)
    selectors = [s for c in runnable for s in c.selectors]
    command = [
        str(python),
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-m",
        "not soak",
        f"--junitxml={junit}",
        *selectors,
    ]
    env = {
        **os.environ,
        **setup.env,
        "PYSPARK_PYTHON": str(python),
        "PYSPARK_DRIVER_PYTHON": str(python),
    }
    log = RESULTS / f"{group}.log"
    print(
        f"[compat] {group}: {' '.join(f'{k}={v}' for k, v in setup.env.items())} "
        f"{' '.join(command[1:])}  (log: {log})",
        flush=True,
    )
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = proc.wait(GROUP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the pytest run this function started
            proc.wait()
            code = -1
    seconds = time.monotonic() - started
    if not junit.is_file():
        why = f"error (pytest exit {code}, no report; see compat-results/{group}.log)"
        if code == -1:
            why = f"error (timed out after {GROUP_TIMEOUT_S // 60} min)"
        return {**static, **{c.id: Outcome(problem=why) for c in runnable}}
    cases = read_junit(junit)
    results = dict(static)
    for cell in runnable:
        mine = assign(cases, cell.selectors)
        results[cell.id] = Outcome(cases=mine, seconds=sum(c.seconds for c in mine))
    print(f"[compat] {group}: pytest exit {code} after {seconds:.0f} s", flush=True)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.compat.run", description=__doc__)
    parser.add_argument(
        "--cells",
        default="*",
        help="comma-separated cell ids or patterns (streams-4.4.0:*); default: all",
    )
    parser.add_argument("--list", action="store_true", help="list the cells and exit")
    args = parser.parse_args(argv)
    every = cells()
    if args.list:
        for cell in every:
            print(f"{cell.id:40} {cell.what}")
            for selector in cell.selectors:
                print(f"{'':40}   {selector}")
        return 0
    patterns = [p.strip() for p in args.cells.split(",") if p.strip()]
    chosen = [c for c in every if any(fnmatch.fnmatchcase(c.id, p) for p in patterns)]
    if not chosen:
        parser.error(f"no cell matches {args.cells!r} (see --list)")
    if shutil.which("mvn") is None:
        parser.error("mvn is not on PATH: run `make setup` first")
    groups: dict[str, list[Cell]] = {}
    for cell in chosen:
        groups.setdefault(cell.group, []).append(cell)
    failed = False
    for group, members in groups.items():
        outcomes = run_group(group, members)
        day = datetime.now(timezone.utc).date().isoformat()
        texts = {}
        for cell_id, outcome in outcomes.items():
            texts[cell_id] = outcome.text(day)
            failed |= texts[cell_id].startswith(("fail", "error"))
            print(
                f"[compat]   {cell_id}: {texts[cell_id]}  ({outcome.seconds:.0f} s of tests)",
                flush=True,
            )
        README.write_text(write_table(README.read_text(), [c.row() for c in every], texts))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
