"""The store commands (serve, inspect, lag, query) as real processes against real stores.

``serve`` runs in one process while ``inspect`` and ``query`` run in others and reach the
store through its server; without an owner they read the store on disk. Only the last test
needs a Kafka broker (``lag`` of a store nobody follows).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from spark_statestore.changelog.partitioner import partition_for_key
from spark_statestore.cli.lag import HEADERS
from spark_statestore.connectors.kafka.discovery import ReplicaAnnouncer
from spark_statestore.connectors.kafka.local import LocalKafkaCluster
from spark_statestore.discovery import ReplicaAnnouncement
from spark_statestore.position import Position
from spark_statestore.query import LagInfo
from spark_statestore.serve import StoreServer
from spark_statestore.serve.auth import ServeCredentials, read_credentials, write_credentials
from spark_statestore.serve.protocol import ACTION_QUERY
from spark_statestore.store import Role, Store, StoreSpec
from spark_statestore.store.ownership import OWNER_FILE
from tests.conftest import REPO_ROOT
from tests.integration.test_cli import cli

pytestmark = pytest.mark.integration

LONG = struct.Struct(">q")


def one_error_line(result: subprocess.CompletedProcess[str], command: str) -> str:
    """The single line a failed command printed, checked to be its only output."""
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"spark-statestore {command}: error: "), lines[0]
    return lines[0]


def make_inventory(path: Path) -> None:
    """A leader store of three keys with long values, at position orders 0:41, 1:8."""
    spec = StoreSpec(Role.LEADER, "inventory-changelog", 2, "inventory")
    with Store.open(path, spec, purpose="test") as store, store.begin() as txn:
        txn.put(b"apple", LONG.pack(7), source=("orders", 0, 41))
        txn.put(b"kiwi", LONG.pack(3), source=("orders", 1, 7))
        txn.put(b"pear", LONG.pack(-2), source=("orders", 1, 8))


def test_serve_then_inspect_and_query_through_it(
    tmp_path: Path, serve: Callable[..., tuple[subprocess.Popen[str], str]]
) -> None:
    path = tmp_path / "inventory"
    make_inventory(path)
    proc, location = serve(path)
    assert location.startswith("grpc+tcp://127.0.0.1:")

    described = cli("inspect", str(path), "--json")
    assert described.returncode == 0, described.stderr
    info = json.loads(described.stdout)
    assert info["read_through"] == location
    assert info["owner"]["live"] is True and info["owner"]["pid"] == proc.pid
    assert info["owner"]["purpose"] == "spark-statestore serve"
    assert (info["store"], info["kind"], info["format_version"]) == ("inventory", "key-value", 1)
    assert info["position"] == {"orders": {"0": 41, "1": 8}} and info["commit_seq"] == 1

    text = cli("inspect", str(path))
    assert text.returncode == 0, text.stderr
    assert f"read through   the owner's server at {location}" in text.stdout
    assert "kind           key-value (format version 1)" in text.stdout

    rows = cli("query", str(path), "--range", "a", "l", "--value-format", "long", "--json")
    assert rows.returncode == 0, rows.stderr
    got = [json.loads(line) for line in rows.stdout.splitlines()]
    assert [(r["key"], r["value"]) for r in got] == [("apple", 7), ("kiwi", 3)]
    assert f"2 row(s) through {location}, commit 1" in rows.stderr

    table = cli("query", str(path), "--key", "pear", "--key", "fig", "--value-format", "long")
    assert table.returncode == 0, table.stderr
    header, *lines = table.stdout.splitlines()
    assert header.split() == ["KEY", "VALUE", "PARTITION", "OFFSET", "TIMESTAMP"]
    assert [line.split()[:2] for line in lines] == [["pear", "-2"]]

    undecodable = cli("query", str(path), "--key", "pear")  # a long shown as a string
    assert undecodable.returncode == 2
    assert "try --value-format binary" in one_error_line(undecodable, "query")
    bound = '{"orders": {"1": 8}}'
    reached = cli("query", str(path), "--all", "--position-bound", bound, "--value-format", "long")
    assert reached.returncode == 0, reached.stderr
    behind = cli("query", str(path), "--all", "--position-bound", '{"orders": {"1": 9}}')
    assert behind.returncode == 3
    assert "NOT_UP_TO_BOUND" in one_error_line(behind, "query")

    # The same server by its location, with its token (from the owner's credentials file).
    credentials = read_credentials(str(path))
    assert credentials is not None
    token_file = tmp_path / "token"
    token_file.write_text(credentials.token + "\n")
    by_location = cli("query", location, "--token-file", str(token_file), "--key", "apple")
    assert by_location.returncode == 0, by_location.stderr
    assert by_location.stdout.splitlines()[1].split()[0] == "apple"
    described = cli("inspect", location, "--token-file", str(token_file), "--json")
    assert json.loads(described.stdout)["path"] == str(path)
    token_file.write_text("not-the-token-of-this-server\n")
    refused = cli("lag", location, "--token-file", str(token_file))
    assert refused.returncode == 2
    assert f"store server {location} refused" in one_error_line(refused, "lag")
    no_token = cli("inspect", location)
    assert no_token.returncode == 2
    assert "give its server's token with --token-file" in one_error_line(no_token, "inspect")

    second = cli("serve", str(path))
    assert second.returncode == 2
    assert f"is owned by pid {proc.pid}" in one_error_line(second, "serve")

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert proc.stderr is not None and "received SIGTERM" in proc.stderr.read()
    assert not (path / OWNER_FILE).exists() and read_credentials(str(path)) is None
    from_disk = cli("inspect", str(path), "--json")
    assert from_disk.returncode == 0, from_disk.stderr
    assert json.loads(from_disk.stdout)["read_through"] is None


def test_serve_beyond_loopback_is_tls_and_readers_trust_its_certificate(
    tmp_path: Path,
    serve: Callable[..., tuple[subprocess.Popen[str], str]],
    certificate: tuple[bytes, bytes],
) -> None:
    path = tmp_path / "inventory"
    make_inventory(path)
    (tmp_path / "cert.pem").write_bytes(certificate[0])
    (tmp_path / "key.pem").write_bytes(certificate[1])
    tls = ("--tls-cert", str(tmp_path / "cert.pem"), "--tls-key", str(tmp_path / "key.pem"))
    _, location = serve(path, "--host", "0.0.0.0", *tls)
    assert location.startswith("grpc+tls://")
    rows = cli("query", str(path), "--key", "apple", "--value-format", "long", "--json")
    assert rows.returncode == 0, rows.stderr
    assert json.loads(rows.stdout)["value"] == 7 and f"through {location}" in rows.stderr


def test_without_an_owner_the_commands_read_the_store_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "prices"
    spec = StoreSpec(Role.FOLLOWER, "app-prices-changelog", 1, history_retention_ms=3_600_000)
    with Store.open(path, spec, purpose="test") as store, store.begin() as txn:
        txn.put_versions([(b"apple", b"7", 0, 0, 1_000), (b"apple", b"9", 0, 1, 5_000)])
        txn.set_changelog_offset(0, 2)

    info = json.loads(cli("inspect", str(path), "--json").stdout)
    assert info["kind"] == "versioned" and info["history_retention_ms"] == 3_600_000
    assert info["format_version"] == 2 and info["owner"] is None
    assert info["role"] == "follower" and info["read_through"] is None

    latest = cli("query", str(path), "--key", "apple", "--json")
    assert latest.returncode == 0, latest.stderr
    assert json.loads(latest.stdout)["value"] == "9"
    earlier = cli("query", str(path), "--key", "apple", "--as-of", "2000", "--json")
    assert earlier.returncode == 0, earlier.stderr
    assert json.loads(earlier.stdout)["value"] == "7"
    assert "from the store on disk" in earlier.stderr

    lag = cli("lag", str(path), "--json")
    assert lag.returncode == 0, lag.stderr
    row = json.loads(lag.stdout)
    assert (row["partition"], row["current_offset"], row["end_offset"]) == (0, 2, None)
    assert "give --bootstrap-servers" in lag.stderr

    unknown = cli("query", str(path), "--all", "--max-lag", "0")
    assert unknown.returncode == 2
    assert "the lag of the store" in one_error_line(unknown, "query")


def test_lag_and_max_lag_come_from_a_live_followers_server(tmp_path: Path) -> None:
    path = tmp_path / "inventory"
    make_inventory(path)
    lags = {0: LagInfo(5, 9), 1: LagInfo(2, 2)}
    with (
        Store.open(path, purpose="a follower, as far as the CLI can tell") as store,
        StoreServer(store, lag_provider=lambda: lags),
    ):
        result = cli("lag", str(path), "--json")
        assert result.returncode == 0, result.stderr
        rows = [json.loads(line) for line in result.stdout.splitlines()]
        assert [(r["partition"], r["current_offset"], r["end_offset"], r["lag"]) for r in rows] == [
            (0, 5, 9, 4),
            (1, 2, 2, 0),
        ]
        assert all(r["owner"] == f"{os.getpid()}@{store.owner.host}" for r in rows)

        table = cli("lag", str(path))
        # kafka-consumer-groups --describe's columns, the store in the group's place
        assert table.stdout.splitlines()[0].split() == list(HEADERS)
        assert HEADERS[1:6] == ("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG")

        too_stale = cli("query", str(path), "--all", "--max-lag", "3")
        assert too_stale.returncode == 3
        assert "lags its changelog by {0: 4} records" in one_error_line(too_stale, "query")
        fresh = cli("query", str(path), "--all", "--max-lag", "4", "--value-format", "long")
        assert fresh.returncode == 0, fresh.stderr


def test_a_bounded_query_waits_for_the_owners_commit(tmp_path: Path) -> None:
    path = tmp_path / "inventory"
    make_inventory(path)
    bound = '{"orders": {"0": 42}}'
    with (
        Store.open(path, StoreSpec(Role.LEADER, "inventory-changelog", 2), purpose="t") as store,
        StoreServer(store) as server,
        server.client() as client,
    ):
        query = subprocess.Popen(
            [
                *(sys.executable, "-m", "spark_statestore.cli", "query", str(path)),
                *("--key", "fig", "--json"),
                *("--position-bound", bound, "--position-bound-timeout", "60"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
        )
        deadline = time.monotonic() + 60
        while client.stats()["waiting"] == 0:  # the query's pin waits on the server
            assert query.poll() is None, query.communicate()
            assert time.monotonic() < deadline, "the query never waited for its bound"
            time.sleep(0.05)
        with store.begin() as txn:
            txn.put(b"fig", b"12", source=("orders", 0, 42))
        out, err = query.communicate(timeout=60)
    assert query.returncode == 0, err
    assert json.loads(out)["value"] == "12"
    assert '"orders":{"0":42,"1":8}' in err


def test_a_reader_that_stops_reading_ends_the_query_quietly(tmp_path: Path) -> None:
    """``spark-statestore query ... | head -1``: no BrokenPipeError traceback."""
    path = tmp_path / "many"
    with (
        Store.open(path, StoreSpec(Role.LEADER, None, 1, "many"), purpose="t") as store,
        store.begin() as txn,
    ):
        for n in range(5000):  # about 400 kB of JSON lines, beyond any pipe buffer
            txn.put(b"key-%06d" % n, b"value")
    query = subprocess.Popen(
        [sys.executable, "-m", "spark_statestore.cli", "query", str(path), "--all", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
    )
    assert query.stdout is not None and query.stderr is not None
    assert json.loads(query.stdout.readline())["key"] == "key-000000"
    query.stdout.close()
    assert query.wait(60) == 141
    assert query.stderr.read() == ""


def test_no_store_unreachable_servers_and_refused_credentials_are_one_line(
    tmp_path: Path, serve: Callable[..., tuple[subprocess.Popen[str], str]]
) -> None:
    missing = cli("inspect", str(tmp_path / "missing"))
    assert missing.returncode == 2
    assert "no store at" in one_error_line(missing, "inspect")

    bad = cli("query", str(tmp_path), "--key", "x", "--key-format", "long")
    assert bad.returncode == 2
    assert "--key-format long" in one_error_line(bad, "query")

    usage = cli("query", str(tmp_path))
    assert usage.returncode == 2 and "one of the arguments" in usage.stderr

    path = tmp_path / "inventory"
    make_inventory(path)
    # An owner that advertises a server nobody listens on (port 9 on loopback: discard).
    with Store.open(path, purpose="an owner whose server died") as store:
        write_credentials(str(path), ServeCredentials("t" * 43, store.manifest.store_id, None))
        store.update_owner(flight_location="grpc+tcp://127.0.0.1:9")
        gone = cli("inspect", str(path))
        assert gone.returncode == 2
        assert "no store server at grpc+tcp://127.0.0.1:9" in one_error_line(gone, "inspect")
    (path / "_serve.json").unlink()

    _, location = serve(path)
    credentials = read_credentials(str(path))
    assert credentials is not None
    write_credentials(str(path), ServeCredentials("x" * 43, credentials.store_id, None))
    refused = cli("query", str(path), "--all")
    assert refused.returncode == 2
    assert f"store server {location} refused" in one_error_line(refused, "query")


def test_lag_of_a_store_nobody_follows_asks_the_changelog(
    tmp_path: Path, kafka_broker: LocalKafkaCluster, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=2)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    for n in range(5):
        producer.produce(topic, key=b"k%d" % n, value=b"v", partition=0)
    producer.produce(topic, key=b"k", value=b"v", partition=1)
    assert producer.flush(30) == 0
    path = tmp_path / "replica"
    spec = StoreSpec(Role.FOLLOWER, topic, 2)
    with Store.open(path, spec, purpose="test") as store, store.begin() as txn:
        txn.put(b"k0", b"v", partition=0, offset=0)
        txn.set_changelog_offset(0, 2)
        txn.set_changelog_offset(1, 1)

    bootstrap = ["--bootstrap-servers", kafka_broker.bootstrap_servers]
    result = cli("lag", str(path), *bootstrap, "--json")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["partition"], r["current_offset"], r["end_offset"], r["lag"]) for r in rows] == [
        (0, 2, 5, 3),
        (1, 1, 1, 0),
    ]
    assert all(r["topic"] == topic and r["owner"] is None for r in rows)

    stale = cli("query", str(path), "--all", "--max-lag", "2", *bootstrap)
    assert stale.returncode == 3
    assert "lags its changelog by {0: 3} records" in one_error_line(stale, "query")
    assert cli("query", str(path), "--all", "--max-lag", "3", *bootstrap).returncode == 0


def test_lag_per_replica_of_a_changelog_from_their_announcements(
    kafka_broker: LocalKafkaCluster, make_topic: Callable[..., str]
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    changelog = make_topic(2, suffix="-changelog")
    leader = ReplicaAnnouncement(
        "leader-1", changelog, Role.LEADER, "host-a", "grpc+tcp://127.0.0.1:7001", 2, (0, 1)
    )
    follower = ReplicaAnnouncement(
        "follower-1", changelog, Role.FOLLOWER, "host-b", "grpc+tcp://127.0.0.1:7002", 2, (1,)
    )
    lags = {"leader-1": {0: LagInfo(9, 9), 1: LagInfo(4, 4)}, "follower-1": {1: LagInfo(1, 4)}}
    announcers = [
        ReplicaAnnouncer(
            bootstrap,
            replica,
            lambda replica=replica: (Position.empty(), lags[replica.replica_id]),
            interval_s=60,
        )
        for replica in (leader, follower)
    ]
    for announcer in announcers:
        announcer.start()
    try:
        result = cli("lag", "--changelog", changelog, "--bootstrap-servers", bootstrap, "--json")
        assert result.returncode == 0, result.stderr
        rows = [json.loads(line) for line in result.stdout.splitlines()]
        assert [
            (
                r["replica"],
                r["role"],
                r["partition"],
                r["current_offset"],
                r["end_offset"],
                r["lag"],
            )
            for r in rows
        ] == [
            ("follower-1", "follower", 1, 1, 4, 3),
            ("leader-1", "leader", 0, 9, 9, 0),
            ("leader-1", "leader", 1, 4, 4, 0),
        ]
        assert rows[0]["host"] == "host-b" and rows[0]["location"] == "grpc+tcp://127.0.0.1:7002"
    finally:
        for announcer in announcers:
            announcer.close()
    gone = cli("lag", "--changelog", changelog, "--bootstrap-servers", bootstrap)
    assert gone.returncode == 0, gone.stderr
    assert "no live replica of" in gone.stderr  # the tombstones of a clean stop


@contextlib.contextmanager
def announced_replicas(
    bootstrap: str, stores: list[Store], token: str, server_class: type[StoreServer] = StoreServer
) -> Iterator[list[Any]]:
    """Serve each store with ``token`` and announce it on its changelog's replicas topic
    until the block ends; the servers, in order. The stores are closed at the end too."""
    servers: list[Any] = []
    with contextlib.ExitStack() as stack:
        for store in stores:
            stack.callback(store.close)
        for store in stores:
            server = server_class(store, token=token)
            server.start()
            stack.callback(server.close)
            servers.append(server)
            announcement = ReplicaAnnouncement.of_store(
                store, location=server.location, ttl_ms=60_000
            )
            announcer = ReplicaAnnouncer(
                bootstrap, announcement, lambda store=store: (store.metadata.position, {})
            )
            announcer.start()
            stack.callback(announcer.close)
        yield servers


def test_query_routed_over_a_changelogs_replicas_fails_over(
    tmp_path: Path, kafka_broker: LocalKafkaCluster, make_topic: Callable[..., str]
) -> None:
    """A leader and a follower of one changelog, served with a shared token and announced:
    query --changelog answers from the leader, then from the follower once the leader's
    server is gone; a bound no replica reached is NOT_UP_TO_BOUND (exit 3)."""
    bootstrap = kafka_broker.bootstrap_servers
    changelog = make_topic(2, suffix="-changelog")
    token = "shared-token-of-the-replicas"
    (tmp_path / "token").write_text(token)
    keys = [b"apple", b"kiwi", b"pear"]
    stores = []
    for role, value in ((Role.LEADER, b"L"), (Role.FOLLOWER, b"F")):
        store = Store.open(tmp_path / role.value, StoreSpec(role, changelog, 2), purpose="t")
        stores.append(store)
        with store.begin() as txn:
            for n, key in enumerate(keys):
                txn.put(key, value, offset=n, source=("orders", 0, 5))
    routed = ["query", "--changelog", changelog, "--bootstrap-servers", bootstrap]
    routed += ["--token-file", str(tmp_path / "token"), "--json"]
    with announced_replicas(bootstrap, stores, token) as servers:
        one = cli(*routed, "--key", "kiwi")
        assert one.returncode == 0, one.stderr
        assert json.loads(one.stdout)["value"] == "L"
        every = cli(*routed, "--all")
        assert every.returncode == 0, every.stderr
        rows = [json.loads(line) for line in every.stdout.splitlines()]
        assert [(r["key"], r["value"]) for r in rows] == [
            ("apple", "L"),
            ("kiwi", "L"),
            ("pear", "L"),
        ]
        assert f"through the replicas of {changelog}" in every.stderr

        behind = cli(*routed, "--key", "kiwi", "--position-bound", '{"orders": {"0": 6, "1": 6}}')
        assert behind.returncode == 3
        assert "NOT_UP_TO_BOUND" in one_error_line(behind, "query")

        servers[0].close()  # the leader's server is gone: the follower answers
        failover = cli(*routed, "--prefix", "p")
        assert failover.returncode == 0, failover.stderr
        assert [json.loads(line)["value"] for line in failover.stdout.splitlines()] == ["F"]


class CountingServer(StoreServer):
    """A real server that also counts the rows of its IQv2 ``query`` replies (the rows it
    streams are in its ``stats()``)."""

    def __init__(self, store: Store, **options: Any) -> None:
        super().__init__(store, **options)
        self.replied = 0

    def _handle_action(self, name: str, body: bytes, client: str = "") -> dict[str, Any] | bytes:
        reply = super()._handle_action(name, body, client)
        if name == ACTION_QUERY and isinstance(reply, dict):
            for _, result in reply["result"]["partitions"]:
                self.replied += len((result["value"] or {}).get("pairs", ()))
        return reply

    def sent(self) -> int:
        """Every row this server has sent, in replies and streams."""
        with self.client() as client:
            return self.replied + client.stats()["rows_returned"]


def test_routed_scans_read_pages_and_the_limit_at_the_replicas(
    tmp_path: Path, kafka_broker: LocalKafkaCluster, make_topic: Callable[..., str]
) -> None:
    """Two followers of one changelog, one partition each: --all, a range and a prefix come
    merged in key order with their partitions and offsets, in pages; with --limit 5 no
    replica sends more than 5 rows (before, each sent its whole partition)."""
    bootstrap = kafka_broker.bootstrap_servers
    changelog = make_topic(2, suffix="-changelog")
    (tmp_path / "token").write_text("shared-token-of-the-replicas")
    keys = [b"key%03d" % i for i in range(120)]
    stores = []
    for partition in range(2):
        spec = StoreSpec(Role.FOLLOWER, changelog, 2, held_partitions=(partition,))
        store = Store.open(tmp_path / f"p{partition}", spec, purpose="t")
        stores.append(store)
        with store.begin() as txn:
            for n, key in enumerate(keys):
                if partition_for_key(key, 2) == partition:
                    txn.put(key, b"v", partition=partition, offset=n, source=("orders", 0, 5))
            txn.set_changelog_offset(partition, len(keys))
    routed = ["query", "--changelog", changelog, "--bootstrap-servers", bootstrap]
    routed += ["--token-file", str(tmp_path / "token"), "--json"]
    token = "shared-token-of-the-replicas"
    with announced_replicas(bootstrap, stores, token, CountingServer) as servers:
        every = cli(*routed, "--all", "--page-rows", "7")
        assert every.returncode == 0, every.stderr
        rows = [json.loads(line) for line in every.stdout.splitlines()]
        assert [r["key"].encode() for r in rows] == keys
        assert [r["partition"] for r in rows] == [partition_for_key(k, 2) for k in keys]
        assert [r["offset"] for r in rows] == list(range(len(keys)))
        assert "120 row(s) through the replicas of" in every.stderr
        assert '"orders":{"0":5}' in every.stderr  # the snapshots' merged position
        ranged = cli(*routed, "--range", "key010", "key019", "--page-rows", "3")
        assert [json.loads(r)["key"] for r in ranged.stdout.splitlines()] == [
            k.decode() for k in keys[10:20]
        ]
        prefixed = cli(*routed, "--prefix", "key11")
        assert len(prefixed.stdout.splitlines()) == 10, prefixed.stderr

        before = [server.sent() for server in servers]
        limited = cli(*routed, "--all", "--limit", "5")
        assert limited.returncode == 0, limited.stderr
        assert [json.loads(r)["key"].encode() for r in limited.stdout.splitlines()] == keys[:5]
        sent = [server.sent() - was for server, was in zip(servers, before, strict=True)]
        assert all(rows <= 5 for rows in sent), sent


def test_served_stores_announce_themselves_and_answer_routed_queries(
    tmp_path: Path,
    kafka_broker: LocalKafkaCluster,
    make_topic: Callable[..., str],
    serve: Callable[..., tuple[subprocess.Popen[str], str]],
) -> None:
    """The whole loop from the shell: serve with a shared token, announced on the broker;
    lag per replica and through the server; a query routed by changelog; the tombstone."""
    bootstrap = kafka_broker.bootstrap_servers
    changelog = make_topic(1, suffix="-changelog")
    producer = Producer({"bootstrap.servers": bootstrap})
    for n in range(3):
        producer.produce(changelog, key=b"k%d" % n, value=b"v", partition=0)
    assert producer.flush(30) == 0
    path = tmp_path / "inventory"
    spec = StoreSpec(Role.FOLLOWER, changelog, 1, "inventory")
    with Store.open(path, spec, purpose="test") as store, store.begin() as txn:
        txn.put(b"k0", b"v", partition=0, offset=0)
        txn.set_changelog_offset(0, 1)
    (tmp_path / "token").write_text("the-replicas-shared-token\n")
    token = ("--token-file", str(tmp_path / "token"))
    proc, location = serve(path, *token, "--bootstrap-servers", bootstrap)
    kafka = ("--bootstrap-servers", bootstrap)

    replicas = cli("lag", "--changelog", changelog, *kafka, "--json")
    assert replicas.returncode == 0, replicas.stderr
    row = json.loads(replicas.stdout)
    assert (row["role"], row["location"], row["lag"]) == ("follower", location, 2)
    served = cli("lag", str(path), "--json")  # the server reports its lags now
    assert json.loads(served.stdout)["end_offset"] == 3, served.stderr

    routed = cli("query", "--changelog", changelog, *kafka, *token, "--key", "k0", "--json")
    assert routed.returncode == 0, routed.stderr
    assert json.loads(routed.stdout)["value"] == "v"
    too_stale = cli("query", "--changelog", changelog, *kafka, *token, "--all", "--max-lag", "1")
    assert too_stale.returncode == 3  # the only replica lags 2: stale, none qualifies
    assert "lags by more than max_lag=1" in one_error_line(too_stale, "query")

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    gone = cli("lag", "--changelog", changelog, *kafka)
    assert "no live replica of" in gone.stderr
