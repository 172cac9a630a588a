"""Replica discovery on a real broker: follower owners (the Spark follower runtime, each in its
own process) announce themselves on ``<changelog>-replicas``; a registry reading that topic
sees them with their partitions, lags and Flight locations, loses a cleanly stopped one at
its tombstone and a SIGKILLed one once its TTL has passed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from spark_statestore.changelog import partition_for_key
from spark_statestore.connectors.kafka.discovery import ReplicaAnnouncer, ReplicaRegistry
from spark_statestore.discovery import ReplicaAnnouncement, ReplicaSet, announce_ttl_ms
from spark_statestore.position import Position
from spark_statestore.query import HostInfo, KeyQueryMetadata
from spark_statestore.store import read_owner
from spark_statestore.store.manifest import Role
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.integration

PARTITIONS = 4
INTERVAL_MS = 300  # announced TTL: announce_ttl_ms(INTERVAL_MS)

OWNER = textwrap.dedent(
    """
    import json, signal, sys, threading
    from spark_statestore.connectors.spark.follower.runtime import FollowerRuntime
    from spark_statestore.connectors.spark.options import parse_source_options

    path, bootstrap, changelog, interval, partitions, extra = sys.argv[1:7]
    options = {"path": path, "kafka.bootstrap.servers": bootstrap, "changelog": changelog,
               "announceIntervalMs": interval, **json.loads(extra)}
    if partitions:
        options["partitions"] = partitions
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    runtime = FollowerRuntime(parse_source_options(options))
    print("ready", flush=True)
    stop.wait()
    runtime.close()
    print("closed", flush=True)
    """
)


class Owner:
    """A follower store owner (the Spark follower runtime) in a child process; ``options``
    are more source options (``serveTokenFile``...)."""

    def __init__(
        self,
        path: Path,
        bootstrap: str,
        changelog: str,
        partitions: str,
        options: dict[str, str] | None = None,
    ) -> None:
        self.path = path
        self.process = subprocess.Popen(
            [sys.executable, "-c", OWNER, str(path), bootstrap, changelog, str(INTERVAL_MS),
             partitions, json.dumps(options or {})],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )  # fmt: skip
        self._expect("ready")
        owner = read_owner(str(path))
        assert owner is not None and owner.flight_location is not None
        self.location = owner.flight_location

    @property
    def pid(self) -> int:
        return self.process.pid

    def _expect(self, line: str) -> None:
        assert self.process.stdout is not None
        got = self.process.stdout.readline().strip()  # the child prints it or exits
        if got != line:
            self.process.kill()
            _, err = self.process.communicate(timeout=30)
            raise AssertionError(f"owner said {got!r}, not {line!r}; stderr:\n{err}")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self._expect("closed")
        assert self.process.wait(timeout=30) == 0

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        assert self.process.wait(timeout=30) == -signal.SIGKILL

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate(timeout=30)


@pytest.fixture
def start_owner(tmp_path: Path) -> Iterator[Callable[..., Owner]]:
    owners: list[Owner] = []

    def factory(
        name: str, bootstrap: str, changelog: str, partitions: str = "", **options: str
    ) -> Owner:
        owners.append(Owner(tmp_path / name, bootstrap, changelog, partitions, options))
        return owners[-1]

    yield factory
    for owner in owners:
        owner.close()


def _produce(bootstrap: str, changelog: str, keys: list[bytes]) -> dict[int, int]:
    """One record per key, partitioned like Kafka Streams; the end offset of each partition."""
    producer = Producer({"bootstrap.servers": bootstrap})
    ends = dict.fromkeys(range(PARTITIONS), 0)
    for key in keys:
        partition = partition_for_key(key, PARTITIONS)
        producer.produce(changelog, key=key, value=b"v-" + key, partition=partition)
        ends[partition] += 1
    assert producer.flush(30) == 0
    return ends


def _key_in(partition: int) -> bytes:
    return next(
        key
        for key in (f"key-{n}".encode() for n in range(1000))
        if partition_for_key(key, PARTITIONS) == partition
    )


def test_owners_announce_and_vanish_at_a_tombstone_or_after_their_ttl(
    kafka_broker: object, make_topic: Callable[..., str], start_owner: Callable[..., Owner]
) -> None:
    bootstrap = kafka_broker.bootstrap_servers  # type: ignore[attr-defined]
    changelog = make_topic(PARTITIONS, suffix="-changelog")
    ends = _produce(bootstrap, changelog, [f"key-{n}".encode() for n in range(40)])
    low = start_owner("low", bootstrap, changelog, "0,1")
    every = start_owner("every", bootstrap, changelog)

    with ReplicaRegistry(bootstrap, changelog) as registry:

        def caught_up(found: ReplicaSet) -> bool:
            return {r.pid for r in found.replicas} == {low.pid, every.pid} and all(
                info.current_offset_position == info.end_offset_position == ends[p]
                for r in found.replicas
                for p, info in r.lags.items()
            )

        found = registry.wait_for(caught_up, timeout_s=30)
        assert found is not None, f"owners not seen caught up: {registry.view()}"
        by_pid = {r.pid: r for r in found.replicas}
        assert by_pid[low.pid].held_partitions == (0, 1)
        assert by_pid[every.pid].held_partitions == (0, 1, 2, 3)
        for owner in (low, every):
            replica = by_pid[owner.pid]
            assert replica.location == owner.location
            assert replica.role is Role.FOLLOWER
            assert replica.partitions == PARTITIONS
            assert set(replica.lags) == set(replica.held_partitions)
            assert replica.ttl_ms == announce_ttl_ms(INTERVAL_MS)
        low_host, every_host = by_pid[low.pid].host_info, by_pid[every.pid].host_info
        assert registry.metadata_for_key(_key_in(1)) == KeyQueryMetadata(
            None, frozenset({low_host, every_host}), 1
        )
        assert registry.metadata_for_key(_key_in(3)).standbys == {every_host}
        assert set(registry.lags()) == {r.replica_id for r in found.replicas}

        # A clean stop: a signed withdrawal, seen long before any TTL (the registry's is an
        # hour).
        with ReplicaRegistry(bootstrap, changelog, ttl_s=3600) as patient:
            low.stop()
            gone = patient.wait_for(lambda s: low.pid not in {r.pid for r in s.replicas}, 30)
            assert gone is not None and [r.pid for r in gone.replicas] == [every.pid]

            # SIGKILL: no withdrawal; the last announcement stays in the topic and goes stale
            # once its TTL has passed without a heartbeat.
            every.kill()
            stale = registry.wait_for(lambda s: not s.replicas, timeout_s=30)
            assert stale is not None
            assert registry.metadata_for_key(_key_in(3)) == KeyQueryMetadata.not_available()
            kept = patient.replicas()  # with an hour's TTL it is still there: no withdrawal
            assert [r.pid for r in kept.replicas] == [every.pid]
            last = kept.replicas[0]
            assert registry.view().replicas == ()
            assert time.time() * 1000 >= last.heartbeat_ms + last.ttl_ms


def test_an_announcer_publishes_heartbeats_with_fresh_progress_and_a_tombstone(
    kafka_broker: object, make_topic: Callable[..., str]
) -> None:
    bootstrap = kafka_broker.bootstrap_servers  # type: ignore[attr-defined]
    changelog = make_topic(1, suffix="-changelog")
    progress = [Position.empty()]
    announcement = ReplicaAnnouncement(
        "leader-1", changelog, Role.LEADER, "host-a", "grpc://127.0.0.1:7001", 1, (0,), ttl_ms=900
    )
    announcer = ReplicaAnnouncer(
        bootstrap, announcement, lambda: (progress[-1], {}), interval_s=0.1
    )
    with ReplicaRegistry(bootstrap, changelog, ttl_s=3600) as registry:
        announcer.start()  # creates the compacted topic, delivers the first announcement
        try:
            first = registry.replicas().replica("leader-1")
            assert first is not None and first.position == Position.empty()
            progress.append(Position.from_map({"orders": {0: 7}}))
            moved = registry.wait_for(
                lambda s: s.replicas and s.replicas[0].position == progress[-1], 30
            )
            assert moved is not None
            assert moved.replicas[0].heartbeat_ms > first.heartbeat_ms
            assert moved.metadata_for_key(b"k").active == HostInfo("127.0.0.1", 7001)
        finally:
            announcer.close()
        assert registry.wait_for(lambda s: not s.replicas, 30) is not None
        assert announcer.heartbeats >= 2

        # Anyone who may write the topic can write garbage: skipped, counted, never fatal.
        producer = Producer({"bootstrap.servers": bootstrap})
        reports: list[tuple[object, int]] = []
        for key, value in [
            (b"leader-1", b'{"version": 1'),
            (b"other", announcement.to_bytes()),  # (a compacted topic refuses keyless records)
        ]:
            producer.produce(
                announcer.topic,
                key=key,
                value=value,
                on_delivery=lambda e, m: reports.append((e, m.offset())),
            )
        assert producer.flush(30) == 0
        assert [error for error, _ in reports] == [None, None]
        assert registry.replicas().replicas == ()
        assert registry.malformed == 2
        # By reason, for the router's metrics: the truncated JSON and the record of another
        # key (its signature covers the key it was made for).
        assert registry.refused_counts() == {"unverified": 2}, registry.refusals


def test_a_reader_slower_than_the_ttl_still_sees_a_live_replica(
    kafka_broker: object, make_topic: Callable[..., str]
) -> None:
    """Issue 38: an enrich task on a busy executor failed with "no live replica ... 1 verified
    announcement(s) expired, the last 0.0 s ago" while the replica announced on time. The
    reader read the topic up to its end, and by the time it judged liveness (by its clock,
    after the read) more than a TTL had passed: every announcement it had read was stale,
    though it had read nothing that says the replica stopped. It judges as of when it asked
    for the ends it read up to."""
    bootstrap = kafka_broker.bootstrap_servers  # type: ignore[attr-defined]
    changelog = make_topic(1, suffix="-changelog")
    ttl_ms = 900
    announcement = ReplicaAnnouncement(
        "slow-read", changelog, Role.FOLLOWER, "host-a", "grpc://127.0.0.1:7001", 1, (0,),
        ttl_ms=ttl_ms,
    )  # fmt: skip
    announcer = ReplicaAnnouncer(
        bootstrap, announcement, lambda: (Position.empty(), {}), interval_s=3600
    )
    late_s = [0.0]  # how far behind the broker this reader's reads have fallen

    def clock() -> float:
        return time.time() + late_s[0]

    announcer.start()  # delivered when this returns: appended now, by the broker's clock
    try:
        with ReplicaRegistry(bootstrap, changelog, clock=clock) as registry:
            consume = registry._consume

            def slow_consume(timeout_s: float) -> None:
                consume(timeout_s)
                late_s[0] += 2 * ttl_ms / 1000  # each read step takes two TTLs

            registry._consume = slow_consume  # type: ignore[method-assign]
            view = registry.replicas()
            assert [r.replica_id for r in view.replicas] == ["slow-read"], view.refused
            assert late_s[0] > 0, "the read never consumed"
            # Its next complete read starts after the TTL: now the replica is gone.
            later = registry.replicas()
            assert later.replicas == (), later
            assert "expired" in later.refused[-1]
    finally:
        announcer.close()
