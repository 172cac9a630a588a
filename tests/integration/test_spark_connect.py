"""Every Spark surface of the plugin through Spark Connect, as a notebook reaches Spark.

One local Connect server for the module (the installed PySpark's own, Spark's Kafka connector
on its classpath) whose Python has a plain install of the project, as a server where a user
installed the plugin has. Each test runs a Connect client program
(:mod:`tests.integration.connect_client`) in a process of its own, with
``SparkSession.builder.remote(url)``, and compares what it saw with ground truth read here:
the records in Kafka (read_committed) and the stores on disk.

The clients run apart from pytest's process because PySpark allows no remote session in a
process that has a classic one (``SESSION_ALREADY_EXIST``), and forcing one in makes
``pyspark.sql.functions`` build classic columns for Connect DataFrames (``is_remote()`` is
one flag per process): the suite's classic ``spark`` fixture and a client would interfere.
"""

from __future__ import annotations

import json
import os
import random
import socket
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from spark_statestore.changelog import ChangelogRecord
from spark_statestore.connectors.spark.driver import ProcessId
from spark_statestore.connectors.spark.local.connect import LocalConnectServer
from spark_statestore.store import Role, Store, StoreSpec
from tests.conftest import REPO_ROOT
from tests.integration.test_follower import INPUT, ChangelogWriter, random_changes
from tests.integration.test_sink import row, store_content, write_input
from tests.integration.test_spark_enrich import make_prices
from tests.integration.test_spark_follower import wait_for_owner_exit
from tests.kafka_util import settled_changelog

pytestmark = pytest.mark.integration

CLIENT_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def connect_server(
    installed_package: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalConnectServer]:
    """The module's Connect server; stopping it must leave none of its processes behind."""
    server = LocalConnectServer(
        python_path=[installed_package], log_dir=tmp_path_factory.mktemp("connect-server")
    )
    with server:
        yield server
        started = [ProcessId.of(pid) for pid in server.processes()]
    left = [p.pid for p in started if p is not None and p.alive()]
    assert not left, f"processes {left} of the stopped Connect server {server} are still there"


def listening_addresses(port: int) -> set[str]:
    """The IPv4 addresses (also as IPv4-mapped IPv6) of the sockets listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as handle:
            for line in handle.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                address, _, hex_port = local.partition(":")
                if state == "0A" and int(hex_port, 16) == port:  # LISTEN
                    # The last 32 bits, little-endian: an IPv4 or an IPv4-mapped address.
                    found.add(socket.inet_ntoa(bytes.fromhex(address[-8:])[::-1]))
    return found


def run_client(server: LocalConnectServer, scenario: str, **args: Any) -> dict[str, Any]:
    """Run one scenario of the client program against ``server``; its report."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.connect_client", scenario],
        input=json.dumps({"url": server.url, **args}),
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_S,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        cwd=REPO_ROOT,
    )
    reports = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and reports, (
        f"the Connect client ({scenario}) failed with {done.returncode}:\n{done.stdout}\n"
        f"{done.stderr[-6000:]}\nthe server's log ends with:\n{server.log_tail()}"
    )
    report: dict[str, Any] = json.loads(reports[-1].removeprefix("REPORT "))
    return report


def test_the_server_listens_on_loopback_and_refuses_a_wrong_token(
    connect_server: LocalConnectServer,
) -> None:
    # A bare client (no session: nothing process-wide changes here) asks for a setting.
    from pyspark.errors import PySparkException
    from pyspark.sql.connect.client import SparkConnectClient

    assert connect_server.url == (
        f"sc://localhost:{connect_server.port}/;token={connect_server.token}"
    )
    wrong = connect_server.url.replace(connect_server.token, "wrong")
    with (
        closing(SparkConnectClient(wrong)) as client,
        pytest.raises(PySparkException, match=r"UNAUTHENTICATED|Invalid auth"),
    ):
        client.get_configs("spark.master")
    with closing(SparkConnectClient(connect_server.url)) as client:
        assert client.get_configs("spark.master") == ("local[2]",)
    # Loopback only, and the token is in the server's environment, not its command line.
    assert listening_addresses(connect_server.port) == {"127.0.0.1"}
    with open(f"/proc/{connect_server.pid}/cmdline", "rb") as handle:
        assert connect_server.token.encode() not in handle.read()


def test_snapshot_reads_and_sql_registered_by_the_installed_package(
    connect_server: LocalConnectServer, tmp_path: Path
) -> None:
    path = tmp_path / "store"
    with Store.open(path, StoreSpec(Role.FOLLOWER, "app-s-changelog", 2)) as store:
        with store.begin() as txn:
            txn.put(b"a", b"1", partition=0, offset=0, source=(INPUT, 0, 10))
            txn.put(b"b", b"2", partition=1, offset=0, source=(INPUT, 1, 11))
            txn.put(b"gone", b"x", partition=0, offset=1, source=(INPUT, 0, 12))
            txn.put(b"c", b"3", partition=0, offset=2, source=(INPUT, 0, 13))
            txn.delete(b"gone")
        with store.snapshot() as snapshot:
            truth = sorted(
                [k.decode(), v.decode(), r.partition, r.offset]
                for k, v in snapshot.items()
                if (r := snapshot.get_record(k)) is not None
            )
        position = store.metadata.position.to_map()

    report = run_client(connect_server, "read", path=str(path))

    assert truth == [["a", "1", 0, 0], ["b", "2", 1, 0], ["c", "3", 0, 2]]
    assert report["format"] == truth
    assert report["sql"] == truth
    assert report["registered"] == truth
    assert report["position"] == sorted(
        [topic, p, o] for topic, offsets in position.items() for p, o in offsets.items()
    )
    # Our option errors reach the client whole, with the closest valid name.
    error = report["misspelled"]
    assert error is not None and error["type"].startswith("pyspark.errors.exceptions.connect")
    assert "unknown option 'keyfromat'" in error["message"]
    assert "did you mean 'keyFormat'?" in error["message"]


def feed_row(record: ChangelogRecord) -> list[Any]:
    """The feed row the client reports for a changelog record (string key and value)."""
    position = None
    if record.position is not None:
        position = {
            topic: {str(p): o for p, o in offsets.items()}
            for topic, offsets in record.position.to_map().items()
        }
    value = None if record.value is None else record.value.decode()
    op = "delete" if record.value is None else "upsert"
    return [record.key.decode(), value, record.partition, record.offset, op, position]


def test_a_follower_query_and_sql_over_its_live_store(
    connect_server: LocalConnectServer,
    kafka_broker: Any,
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    writer = ChangelogWriter(kafka_broker.bootstrap_servers, make_topic(3, "-changelog"), 3)
    rng = random.Random(5)
    for changes in (random_changes(rng, 20), random_changes(rng, 20)):
        writer.transaction(changes)
    writer.transaction([(b"k001", b"ABORTED")], abort=True)
    writer.transaction([(b"live", b"yes"), (b"k002", None)])
    path = tmp_path / "store"

    report = run_client(
        connect_server,
        "follow",
        bootstrap=kafka_broker.bootstrap_servers,
        changelog=writer.topic,
        path=str(path),
        checkpoint=str(tmp_path / "checkpoint"),
    )

    assert report["exception"] is None
    # The feed is the committed changelog, record for record: the aborted one never.
    records = settled_changelog(kafka_broker.bootstrap_servers, writer.topic)
    assert len(records) == 42
    by_offset = sorted(report["feed"], key=lambda r: (r[2], r[3]))
    assert by_offset == sorted(map(feed_row, records), key=lambda r: (r[2], r[3]))
    model = {k.decode(): v.decode() for k, v in writer.model.items()}
    # Read while the query ran: through its live owner, the store already had every change.
    assert report["owner_pid"] is not None and report["flight_location"].startswith("grpc")
    assert report["live"] == model
    wait_for_owner_exit(path)
    with Store.open(path) as store:
        assert store.metadata.position.to_map() == writer.expected_position()
        with store.snapshot() as snapshot:
            assert {k.decode(): v.decode() for k, v in snapshot.items()} == model


def test_the_sink_and_the_batch_writer_in_foreach_batch(
    connect_server: LocalConnectServer,
    kafka_broker: Any,
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    changelog = f"connect-app-{make_topic(partitions=1)}-changelog"
    kafka_broker.create_topic(changelog, 2, compacted=False)  # read back record for record
    kafka_broker.create_topic(f"{changelog}-progress", 1)
    source, counts_source = tmp_path / "in", tmp_path / "counts-in"
    write_input(source, "1.json", [row(f"k{i}", str(i), i) for i in range(6)])
    write_input(source, "2.json", [row("k1", None, 6), row("k2", "changed", 7, partition=1)])
    write_input(counts_source, "1.json", [row("a", "x", 0), row("b", "x", 1), row("a", "x", 2)])
    # The leader's store and checkpoint are relative: to the server's working directory, as
    # Spark resolves the checkpoint (not to the per-session directory its workers run in).
    relative = Path(tmp_path.name)
    store, counts_store = connect_server.working_directory / relative / "store", tmp_path / "counts"

    report = run_client(
        connect_server,
        "sink",
        bootstrap=bootstrap,
        changelog=changelog,
        application_id="connect-app",
        source=str(source),
        store=str(relative / "store"),
        checkpoint=str(relative / "cp"),
        counts_source=str(counts_source),
        counts_store=str(counts_store),
        counts_checkpoint=str(tmp_path / "counts-cp"),
    )

    assert report["leader_batches"] == [0, 1]
    assert (connect_server.working_directory / relative / "cp" / "metadata").is_file()
    expected = {f"k{i}".encode(): str(i).encode() for i in range(6) if i != 1}
    expected[b"k2"] = b"changed"
    assert store_content(store) == expected
    with Store.open(store) as opened:
        record = opened.metadata.commit_record
        assert record is not None and record.batch_id == 1 and record.source_offsets
        assert opened.metadata.position.to_map() == {"orders": {0: 6, 1: 7}}
    # Each batch is in the changelog exactly once, in Kafka transactions.
    published = settled_changelog(bootstrap, changelog)
    assert sorted((r.key, r.value) for r in published if r.value is not None) == sorted(
        [(f"k{i}".encode(), str(i).encode()) for i in range(6)] + [(b"k2", b"changed")]
    )
    assert [r.key for r in published if r.value is None] == [b"k1"]
    # foreachBatch ran on the server; each version landed once though written twice.
    assert report["counts_batches"] == [0]
    assert store_content(counts_store) == {b"a": b"2", b"b": b"1"}
    with Store.open(counts_store) as opened:
        record = opened.metadata.commit_record
        assert record is not None and (record.query_id, record.batch_id) == ("connect-counts", 0)
        assert opened.metadata.commit_seq == 1


def test_enrich_looks_up_a_clients_rows_on_the_executors(
    connect_server: LocalConnectServer, tmp_path: Path
) -> None:
    relative = Path(tmp_path.name) / "prices"  # resolved in the task, not in the client
    path = make_prices(connect_server.working_directory / relative, items=20)
    items = [f"item-{i:02d}" for i in range(0, 30, 4)] + [None]
    with Store.open(path) as store, store.snapshot() as snapshot:
        prices = {k.decode(): struct.unpack(">q", v)[0] for k, v in snapshot.items()}
    assert len(prices) == 20

    report = run_client(connect_server, "enrich", path=str(relative), items=items)

    assert report["columns"] == ["item", "n", "price"]
    assert report["rows"] == [
        [item, n, None if item is None else prices.get(item)] for n, item in enumerate(items)
    ]
