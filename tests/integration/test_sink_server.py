"""The sink's store server (option ``serve``): while a sink query runs, one process keeps the
leader store open, takes the commits, serves the store over Flight and announces it as the
leader, so routers, remote clients and Spark's snapshot reader read the live leader store."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from spark_statestore.changelog import partition_for_key
from spark_statestore.connectors.kafka.discovery import ReplicaRegistry
from spark_statestore.connectors.spark.leader.remote import live_server, stop_sink_server
from spark_statestore.discovery import ReplicaSet, Router
from spark_statestore.query import KeyQuery, RangeQuery, StateQueryRequest
from spark_statestore.serve.client import connect_to_owner
from spark_statestore.store import Role, Store
from spark_statestore.store.ownership import live_owner
from tests.integration.test_sink import changelog_writer, row, write_input
from tests.kafka_util import settled_changelog

pytestmark = pytest.mark.integration

FORMAT = "spark_statestore"
PARTITIONS = 2


def _key_request(key: bytes) -> StateQueryRequest:
    partition = partition_for_key(key, PARTITIONS)
    return (
        StateQueryRequest.in_store("store").with_query(KeyQuery(key)).with_partitions([partition])
    )


def test_a_served_sink_store_is_read_routed_and_handed_over(
    spark: Any, kafka_broker: Any, make_topic: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    changelog = f"totals-app-{make_topic(partitions=1)}-changelog"
    kafka_broker.create_topic(changelog, PARTITIONS, compacted=False)
    kafka_broker.create_topic(f"{changelog}-progress", 1)
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
