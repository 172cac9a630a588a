"""Several hosts, for real: three follower replicas, each in its own network namespace with
its own address (veth pairs on a bridge this test creates; nothing leaves the machine), Kafka
reachable from all, announcing themselves on the replicas topic and serving over TLS. A
router in the root namespace answers key queries: kill one replica (SIGKILL) and it fails
over; cut one host's link and no answer is staler than ``max_lag``; bring the link back and
the replica rejoins.

Needs root (it creates namespaces and links); skipped, saying so, elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

import spark_statestore
from spark_statestore.connectors.kafka.discovery import ReplicaRegistry
from spark_statestore.connectors.kafka.local import LocalKafkaCluster
from spark_statestore.connectors.local import Host, LocalHosts
from spark_statestore.discovery import DiscoveryError, Router
from spark_statestore.query import KeyQuery, StateQueryRequest
from spark_statestore.store import read_owner
from tests.conftest import REPO_ROOT, self_signed_certificate
from tests.kafka_util import poll_until

pytestmark = pytest.mark.integration

PARTITIONS = 2
INTERVAL_MS = 300  # heartbeats; the announced TTL is three of them
KEYS = [f"cust-{i:02d}".encode() for i in range(8)]

OWNER = textwrap.dedent(
    """
    import signal, sys, threading
    from spark_statestore.connectors.spark.follower.runtime import FollowerRuntime
    from spark_statestore.connectors.spark.options import parse_source_options

    path, bootstrap, changelog, host, cert, key, interval = sys.argv[1:8]
    options = {"path": path, "kafka.bootstrap.servers": bootstrap, "changelog": changelog,
               "serveHost": host, "serveTlsCert": cert, "serveTlsKey": key,
               "announceIntervalMs": interval}
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    runtime = FollowerRuntime(parse_source_options(options))
    print("ready", flush=True)
    stop.wait()
    runtime.close()
    """
)


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True)


@pytest.fixture
def local_hosts(host_tools: None) -> Iterator[LocalHosts]:
    """Three hosts on a bridge; skipped, saying why, where they cannot be made."""
    with LocalHosts(3) as made:
        yield made


class Replica:
    """A follower runtime (store, follower, TLS Flight server, announcer) in a namespace."""

    def __init__(self, host: Host, path: Path, bootstrap: str, changelog: str,
                 tls: tuple[Path, Path]) -> None:  # fmt: skip
        self.path = path
        self.process = subprocess.Popen(
            host.command([sys.executable, "-c", OWNER, str(path), bootstrap, changelog,
                          host.address, str(tls[0]), str(tls[1]), str(INTERVAL_MS)]),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )  # fmt: skip
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if line != "ready":
            self.process.kill()
            raise AssertionError(
                f"replica on {host.address} did not start: {self.process.stderr.read()}"
            )

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


def _write(producer: Producer, topic: str, round_: int) -> None:
    """Every key's value is the round number (a changelog of upserts)."""
    for key in KEYS:
        producer.produce(topic, key=key, value=b"%d" % round_)
    assert producer.flush(30) == 0


def test_routing_across_hosts_fails_over_and_never_returns_stale_answers(
    local_hosts: LocalHosts, tmp_path: Path
) -> None:
    gateway, namespaces = local_hosts.address, local_hosts.hosts
    with contextlib.ExitStack() as stack:
        kafka = stack.enter_context(
            LocalKafkaCluster(brokers=1, host=gateway, config={"log.retention.ms": "-1"})
        )
        bootstrap = kafka.bootstrap_servers
        changelog = "multi-host-changelog"
        kafka.create_topic(changelog, partitions=PARTITIONS)
        producer = Producer(
            # Kafka's Java partitioner, as a Kafka Streams changelog's writer places keys.
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "partitioner": "murmur2_random",
            }
        )
        _write(producer, changelog, 1)
        tls = self_signed_certificate(tmp_path, [f"IP:{host.address}" for host in namespaces])
        replicas: dict[str, Replica] = {}
        for host in namespaces:
            ns, address = host.namespace, host.address
            replica = Replica(host, tmp_path / ns, bootstrap, changelog, tls)
            stack.callback(replica.stop)
            owner = read_owner(str(replica.path))
            assert (
                owner is not None
                and owner.flight_location
                == f"grpc+tls://{address}:" + (owner.flight_location.rsplit(":", 1)[1])
            )
            replicas[ns] = replica
        registry = stack.enter_context(ReplicaRegistry(bootstrap, changelog))
        found = registry.wait_for(lambda view: len(view.replicas) == 3, timeout_s=60)
        assert found is not None, f"not 3 live replicas: {registry.view()}"
        locations = {}
        for replica in replicas.values():
            owner = read_owner(str(replica.path))
            assert owner is not None
            locations[owner.flight_location] = replica
        by_id = {a.replica_id: locations[a.location] for a in registry.view().replicas}

        def connect(announcement: Any) -> Any:
            return spark_statestore.connect(by_id[announcement.replica_id].path, timeout_s=3)

        max_lag = 0
        router = stack.enter_context(Router(registry.view, connect, max_lag=max_lag))

        def values() -> dict[bytes, Any]:
            found = {}
            for key in KEYS:
                request = StateQueryRequest.in_store("any").with_query(KeyQuery.with_key(key))
                try:
                    result = router.query(request)
                except DiscoveryError:
                    # Between a replica's death and the rejoined one's first heartbeat
                    # after its link came back, no replica may be live: not an answer.
                    found[key] = "no live replica"
                    continue
                (answer,) = result.partition_results.values()
                found[key] = answer.result if answer.is_success else answer.failure_reason
            return found

        def caught_up(round_: int) -> bool | None:
            registry.replicas()  # read the newest announcements
            return True if values() == dict.fromkeys(KEYS, b"%d" % round_) else None

        poll_until(lambda: caught_up(1), timeout_s=60, interval_s=0.2,
                   failure=lambda: f"replicas never answered round 1: {values()}")  # fmt: skip

        # One host dies: the router fails over to the others.
        first = namespaces[0].namespace
        replicas[first].kill()
        _write(producer, changelog, 2)
        poll_until(lambda: caught_up(2), timeout_s=60, interval_s=0.2,
                   failure=lambda: f"no failover to round 2: {values()}")  # fmt: skip

        # One host's link is cut: it can no longer follow, and the router never returns its
        # (stale) answers. Every answer is round 3, or a failure, never round 2.
        second = namespaces[1]
        local_hosts.disconnect(second)
        _write(producer, changelog, 3)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            registry.replicas()
            seen = values()
            assert all(v != b"2" for v in seen.values()), seen  # nothing staler than max_lag
            if seen == dict.fromkeys(KEYS, b"3"):
                break
        assert values() == dict.fromkeys(KEYS, b"3")

        # The link comes back: the cut replica catches up and rejoins.
        local_hosts.reconnect(second)
        third = namespaces[2].namespace
        replicas[third].kill()  # only the rejoined replica is left to answer
        _write(producer, changelog, 4)
        poll_until(lambda: caught_up(4), timeout_s=90, interval_s=0.3,
                   failure=lambda: f"the cut replica did not rejoin: {values()}")  # fmt: skip
