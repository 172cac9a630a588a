"""The sink's store server (option ``serve``): while a sink query runs, one process keeps the
leader store open, takes the commits, serves the store over Flight and announces it as the
leader, so routers, remote clients and Spark's snapshot reader read the live leader store."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from spark_statestore.changelog import partition_for_key
from spark_statestore.changelog.missing_position import OnMissingPosition
from spark_statestore.connectors.kafka.discovery import ReplicaRegistry
from spark_statestore.connectors.kafka.tail import tail_changelog
from spark_statestore.connectors.spark.leader.remote import (
    commit_through_server,
    live_server,
    stop_sink_server,
)
from spark_statestore.connectors.spark.leader.server import read_server_record
from spark_statestore.connectors.spark.options import parse_sink_options
from spark_statestore.discovery import REPLICAS_SUFFIX, ReplicaSet, Router
from spark_statestore.discovery.records import verified_announcement
from spark_statestore.discovery.signing import MembershipKey
from spark_statestore.query import KeyQuery, RangeQuery, StateQueryRequest
from spark_statestore.serve.client import connect_to_owner
from spark_statestore.sink.commit import CommitOutcome
from spark_statestore.store import Role, Store
from spark_statestore.store.crash import STOP
from spark_statestore.store.ownership import live_owner, wait_for_exit
from tests.conftest import crash_file_path
from tests.integration.test_sink import changelog_writer, row, write_input
from tests.kafka_util import settled_changelog
from tests.unit.test_sink_server import staged_batch

pytestmark = pytest.mark.integration

FORMAT = "spark_statestore"
PARTITIONS = 2


def _key_request(key: bytes) -> StateQueryRequest:
    partition = partition_for_key(key, PARTITIONS)
    return (
        StateQueryRequest.in_store("store").with_query(KeyQuery(key)).with_partitions([partition])
    )


def sink_changelog(kafka_broker: Any, make_topic: Any, app: str) -> str:
    """A fresh changelog of application ``app`` (``PARTITIONS`` partitions) and its
    progress topic."""
    changelog = f"{app}-{make_topic(partitions=1)}-changelog"
    kafka_broker.create_topic(changelog, PARTITIONS, compacted=False)
    kafka_broker.create_topic(f"{changelog}-progress", 1)
    return changelog


def test_a_served_sink_store_is_read_routed_and_handed_over(
    spark: Any, kafka_broker: Any, make_topic: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    changelog = sink_changelog(kafka_broker, make_topic, "totals-app")
    source, store, checkpoint = tmp_path / "in", tmp_path / "store", tmp_path / "cp"

    def sink(serve: bool = True) -> Any:
        writer = changelog_writer(spark, source, checkpoint, bootstrap, changelog, "totals-app")
        if serve:
            writer = writer.option("serve", "true").option("announceIntervalMs", "200")
        return writer.start(str(store))

    write_input(source, "1.json", [row(f"k{i}", str(i), i) for i in range(10)])
    query = sink()
    try:
        query.processAllAvailable()
        server = live_server(str(store))
        assert server is not None, "no sink store server owns the store after a commit"
        owner = live_owner(str(store))
        assert owner is not None and owner.pid == server.pid and owner.role == Role.LEADER.value
        assert owner.flight_location == server.location

        # A remote client of the live leader store sees each commit as it lands.
        client = connect_to_owner(store)
        assert client is not None
        with client:
            answer = client.query(_key_request(b"k3"))
            assert answer.only_partition_result().result == b"3"
            assert answer.position.to_map() == {"orders": {0: 9}}
            write_input(source, "2.json", [row("k3", "30", 10), row("k4", None, 11)])
            query.processAllAvailable()
            assert live_server(str(store)) == server, "the server was restarted between batches"
            assert client.query(_key_request(b"k3")).only_partition_result().result == b"30"
            assert client.query(_key_request(b"k4")).only_partition_result().result is None

        # Spark's snapshot reader reads the live store through the server.
        rows = spark.read.format(FORMAT).load(str(store)).collect()
        assert {bytes(r.key): bytes(r.value) for r in rows} == {
            **{f"k{i}".encode(): str(i).encode() for i in range(10) if i not in (3, 4)},
            b"k3": b"30",
        }

        # The leader is announced, and a router sends every partition's queries to it.
        with ReplicaRegistry(bootstrap, changelog) as registry:

            def announced(found: ReplicaSet) -> bool:
                return any(r.pid == server.pid and r.role is Role.LEADER for r in found.replicas)

            found = registry.wait_for(announced, timeout_s=30)
            assert found is not None, f"the leader was not announced: {registry.view()}"
            leader = next(r for r in found.replicas if r.pid == server.pid)
            assert leader.location == server.location
            assert leader.held_partitions == tuple(range(PARTITIONS))
            assert registry.metadata_for_key(b"k1").active == leader.host_info

            def connect(replica: Any) -> Any:
                assert replica.location == server.location
                return connect_to_owner(store)

            with Router(registry.view, connect, max_lag=0) as router:
                for key, value in ((b"k1", b"1"), (b"k3", b"30"), (b"k4", None)):
                    result = router.query(_key_request(key))
                    partition = partition_for_key(key, PARTITIONS)
                    assert result.partition_results[partition].result == value
                scan = router.query(StateQueryRequest.in_store("store").with_query(RangeQuery()))
                assert all(r.is_success for r in scan.partition_results.values())
                assert sum(len(list(r.result)) for r in scan.partition_results.values()) == 9
    finally:
        query.stop()

    # After a SIGKILL of the server, the next commit starts another one; nothing is lost.
    os.kill(server.pid, signal.SIGKILL)
    write_input(source, "3.json", [row("k5", "50", 12)])
    query = sink()
    try:
        query.processAllAvailable()
        restarted = live_server(str(store))
        assert restarted is not None and restarted.pid != server.pid
    finally:
        query.stop()

    # A commit without serve takes the store over from the server it finds.
    write_input(source, "4.json", [row("k6", "60", 13)])
    plain = sink(serve=False)
    try:
        plain.processAllAvailable()
    finally:
        plain.stop()
    assert live_server(str(store)) is None
    assert not stop_sink_server(str(store))
    with Store.open(store) as opened, opened.snapshot() as snapshot:
        content = dict(snapshot.items())
        assert opened.metadata.position.to_map() == {"orders": {0: 13}}
    assert content[b"k5"] == b"50" and content[b"k6"] == b"60" and b"k4" not in content
    # Every batch is in the changelog exactly once (10 + 2 + 1 + 1 records).
    assert len(settled_changelog(bootstrap, changelog)) == 14


# -- a server that hangs, a server left idle ------------------------------------------------
LIVENESS_MS = 1500
BOUND_S = 120.0
"""What these tests wait at most for what should take seconds (without the fixes: a day)."""


def _within(step: Any, bound_s: float, what: str) -> float:
    """Run ``step()`` in a thread, failing when it has not returned after ``bound_s``;
    the seconds it took."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            step()
        except BaseException as exc:
            failures.append(exc)

    started = time.monotonic()
    runner = threading.Thread(target=run, name=what, daemon=True)
    runner.start()
    runner.join(bound_s)
    took = time.monotonic() - started
    assert not runner.is_alive(), f"{what} did not return in {bound_s:.0f} s"
    if failures:
        raise failures[0]
    return took


def test_a_stopped_sink_store_server_is_replaced_and_nothing_is_lost_or_doubled(
    spark: Any, kafka_broker: Any, make_topic: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    changelog = sink_changelog(kafka_broker, make_topic, "hung-app")
    source, store, checkpoint = tmp_path / "in", tmp_path / "store", tmp_path / "cp"
    crash = crash_file_path()
    inputs = [[row(f"k{f}-{i}", f"{f}.{i}", f * 10 + i) for i in range(10)] for f in range(2)]
    write_input(source, "0.json", inputs[0])
    first = None
    query = (
        changelog_writer(spark, source, checkpoint, bootstrap, changelog, "hung-app")
        .option("serve", "true")
        .option("serveLivenessTimeoutMs", str(LIVENESS_MS))
        .start(str(store))
    )
    try:
        query.processAllAvailable()
        first = live_server(str(store))
        assert first is not None
        # The next commit's server stops (SIGSTOP) once its Kafka transaction is committed
        # and before its store commit: the changelog has the batch, the store has not.
        crash.write_text(f"{STOP} sink.after_publish")
        write_input(source, "1.json", inputs[1])
        took = _within(query.processAllAvailable, BOUND_S, "the batch's commit")
        assert not crash.exists(), "no server reached the point"
        assert crash.with_name(f"{crash.name}.fired.{first.pid}").exists()
        assert not first.process.alive(), "the stopped server was not killed"
        second = live_server(str(store))
        assert second is not None and second.pid != first.pid
        # Killed one liveness timeout after its last answer, then a new server's start.
        assert took < LIVENESS_MS / 1000 + 30, f"the query went on only after {took:.1f} s"
        assert query.exception() is None
    finally:
        crash.unlink(missing_ok=True)
        for claimed in crash.parent.glob(f"{crash.name}.fired.*"):
            claimed.unlink()
        if first is not None:  # it still hangs (without the fix): end it, that very process
            first.process.kill(BOUND_S)
        query.stop()
        stop_sink_server(str(store))
    rows = [r for batch in inputs for r in batch]
    with Store.open(store) as opened, opened.snapshot() as snapshot:
        assert dict(snapshot.items()) == {r["key"].encode(): r["value"].encode() for r in rows}
        assert opened.metadata.position.to_map() == {"orders": {0: rows[-1]["offset"]}}
    # The roll-forward from the changelog published nothing again: each record once.
    published = [(r.key, r.value) for r in settled_changelog(bootstrap, changelog)]
    assert sorted(published) == sorted((r["key"].encode(), r["value"].encode()) for r in rows)


def test_an_idle_sink_store_server_stops_withdraws_its_announcement_and_frees_the_store(
    kafka_broker: Any, make_topic: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    changelog = sink_changelog(kafka_broker, make_topic, "idle-app")
    path = tmp_path / "store"
    options = parse_sink_options(
        {
            "path": str(path),
            "kafka.bootstrap.servers": bootstrap,
            "changelog": changelog,
            "application.id": "idle-app",
            "serve": "true",
            "announceIntervalMs": "200",
            "serveIdleTimeoutMs": "1000",
        },
        streaming=False,
    )

    def commit(batch_id: int, rows: dict[bytes, bytes | None]) -> CommitOutcome:
        batch = staged_batch(path, batch_id, rows)
        return commit_through_server(options, batch, streaming=False, raw_options=dict(options.raw))

    assert commit(0, {b"a": b"1"}) is CommitOutcome.COMMITTED
    committed = time.monotonic()
    server = live_server(str(path))
    assert server is not None
    assert wait_for_exit(server.pid, BOUND_S), "the idle server did not stop"
    idled = time.monotonic() - committed
    assert 1.0 <= idled < 30, f"it stopped {idled:.1f} s after its last commit"
    assert live_owner(str(path)) is None, "the idle server left the store locked"
    assert read_server_record(str(path)) is None
    # It announced itself, then withdrew: a tombstone is the last record under its key.
    topic = changelog + REPLICAS_SUFFIX
    records = list(tail_changelog(bootstrap, topic, on_missing_position=OnMissingPosition.SKIP))
    keys = MembershipKey.default().verifier()
    announced = [
        verified_announcement(r.value, keys=keys, topic=topic, record_key=r.key)
        for r in records
        if r.value is not None
    ]
    mine = [a for a in announced if a.pid == server.pid]
    assert mine, f"the server never announced itself on {topic}"
    # A signed withdrawal, then the tombstone that lets compaction drop the key.
    assert mine[-1].withdrawn and not mine[0].withdrawn
    assert [r.value for r in records if r.key == mine[0].replica_id.encode()][-1] is None
    with ReplicaRegistry(bootstrap, changelog, ttl_s=3600) as registry:  # no TTL expiry here
        assert registry.replicas().replicas == ()
    # The next commit starts a new server.
    try:
        assert commit(1, {b"b": b"2"}) is CommitOutcome.COMMITTED
        restarted = live_server(str(path))
        assert restarted is not None and restarted.pid != server.pid
    finally:
        stop_sink_server(str(path))
    with Store.open(path) as opened, opened.snapshot() as snapshot:
        assert dict(snapshot.items()) == {b"a": b"1", b"b": b"2"}
