"""Issue 25, findings 1-3 on a real broker: nobody who can merely write ``<changelog>-replicas``
changes whom a router asks or whom it sends the replicas' token to.

A real follower owner (the Spark follower runtime in a child process, serving on loopback
with a shared token file) announces itself; an attacker with Write on the topic then
publishes a forged leader (unsigned; signed by a key readers do not hold; a real record
replayed under another replica id; the replica's own record with its heartbeat far in the
future; a null tombstone for the real replica) pointing at a socket it listens on. The
registry keeps exactly the real replica, the router's answers are the real replica's, and
the attacker's socket is never dialed.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from spark_statestore.connectors.kafka.discovery import ReplicaRegistry
from spark_statestore.discovery import REPLICAS_SUFFIX, ReplicaAnnouncement, Router
from spark_statestore.discovery.records import announcement_record, signed_value
from spark_statestore.discovery.signing import MembershipKey
from spark_statestore.discovery.trust import connect_replica, loopback_identity
from spark_statestore.query import KeyQuery, StateQueryRequest
from spark_statestore.serve.auth import ServeCredentials, new_token
from spark_statestore.store.manifest import Role
from tests.integration.test_discovery import Owner, start_owner

__all__ = ["start_owner"]  # the fixture, used here

pytestmark = pytest.mark.integration


class Trap:
    """A plain TCP listener on loopback recording every connection (the attacker's server)."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self.received: list[bytes] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            with connection:
                connection.settimeout(2)
                try:
                    self.received.append(connection.recv(65536) or b"<connected>")
                except OSError:
                    self.received.append(b"<connected>")

    def close(self) -> None:
        self.socket.close()


@pytest.fixture
def owner(
    kafka_broker: object,
    make_topic: Callable[..., str],
    start_owner: Callable[..., Owner],
    tmp_path: Path,
) -> dict[str, str]:
    """A real follower owner serving on loopback with a shared token file."""
    bootstrap = kafka_broker.bootstrap_servers  # type: ignore[attr-defined]
    changelog = make_topic(2, suffix="-changelog")
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    producer.produce(changelog, key=b"k", value=b"real")
    assert producer.flush(30) == 0
    token = new_token()
    token_file = tmp_path / "token"
    token_file.write_text(token)
    start_owner("store", bootstrap, changelog, serveTokenFile=str(token_file))
    return {"bootstrap": bootstrap, "changelog": changelog, "token": token}


def _last_record(bootstrap: str, topic: str) -> tuple[bytes, bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "trust-test"})
    try:
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        consumer.assign([TopicPartition(topic, 0, high - 1)])
        message = consumer.poll(30)
        assert message is not None and message.error() is None
        assert message.timestamp()[0] == TIMESTAMP_LOG_APPEND_TIME
        return message.key(), message.value()
    finally:
        consumer.close()


def test_a_writer_of_the_replicas_topic_cannot_take_over_routing(owner: dict[str, str]) -> None:
    bootstrap, changelog = owner["bootstrap"], owner["changelog"]
    topic = changelog + REPLICAS_SUFFIX
    trap = Trap()
    credentials = ServeCredentials(owner["token"])
    with ReplicaRegistry(bootstrap, changelog) as registry:
        found = registry.wait_for(lambda view: len(view.replicas) == 1, timeout_s=30)
        assert found is not None, f"the real replica was not seen: {registry.view()}"
        (real,) = found.replicas
        assert real.loopback == loopback_identity()

        # The topic judges time by the broker's clock.
        admin = AdminClient({"bootstrap.servers": bootstrap})
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        configs = admin.describe_configs([resource])[resource].result(30)
        assert configs["message.timestamp.type"].value == "LogAppendTime"

        real_key, real_value = _last_record(bootstrap, topic)
        forged = replace(
            real,
            replica_id="evil",
            role=Role.LEADER,
            location=f"grpc://127.0.0.1:{trap.port}",
            started_ms=int(time.time() * 1000) + 10**9,
            heartbeat_ms=int(time.time() * 1000) + 10**9,
            partitions=1,
            held_partitions=(0,),
            lags={},
        )
        stranger = MembershipKey.generate()
        future_ms = int(time.time() * 1000) + 10**9
        envelope = json.loads(real_value)
        records = [
            (b"evil", forged.to_bytes()),  # unsigned
            (b"evil", announcement_record(forged, stranger)),  # a key readers do not hold
            (b"evil", real_value),  # the real replica's signed record under another id
            (b"evil", json.dumps({**envelope, "key_id": stranger.key_id}).encode()),
            (real_key, None),  # a tombstone anyone may write
            # A future heartbeat, the producer's timestamp far ahead too: the broker's
            # append time decides (and the unknown key refuses it first).
            (
                real_key,
                announcement_record(
                    replace(real, heartbeat_ms=real.heartbeat_ms + 10**9), stranger
                ),
            ),
        ]
        producer = Producer({"bootstrap.servers": bootstrap})
        for key, value in records:
            producer.produce(topic, key=key, value=value, timestamp=future_ms)
        assert producer.flush(30) == 0
        registry.refresh()
        view = registry.view()
        assert [r.replica_id for r in view.replicas] == [real.replica_id]
        assert view.partitions == 2 and view.leader() is None
        assert registry.malformed >= 5, registry.refusals
        assert sum(registry.refused_counts().values()) == registry.malformed
        assert registry.refused_counts()["unverified"] >= 4, registry.refused_counts()

        request = StateQueryRequest.in_store("any").with_query(KeyQuery.with_key(b"k"))
        with Router(registry.view, lambda r: connect_replica(r, credentials)) as router:
            deadline = time.monotonic() + 30
            while True:
                (answer,) = router.query(request).partition_results.values()
                if (answer.is_success and answer.result == b"real") or time.monotonic() > deadline:
                    break
                registry.refresh()
            assert answer.is_success and answer.result == b"real", answer
    trap.close()
    assert trap.received == []  # nobody dialed the attacker, let alone sent it the token


def test_a_signed_record_replayed_later_or_from_a_clock_far_ahead_is_refused(
    owner: dict[str, str],
) -> None:
    """A replica's own signed announcement is believed only near the broker's append time:
    replayed minutes after it was made, or made by a clock far ahead, it is refused."""
    bootstrap, changelog = owner["bootstrap"], owner["changelog"]
    topic = changelog + REPLICAS_SUFFIX
    key = MembershipKey.default()
    now = int(time.time() * 1000)
    made = ReplicaAnnouncement(
        "replayed",
        changelog,
        Role.LEADER,
        "host-a",
        None,
        2,
        (0, 1),
        heartbeat_ms=now - 120_000,  # captured two minutes ago
        started_ms=now - 130_000,
    )
    ahead = replace(made, replica_id="ahead", heartbeat_ms=now + 3_600_000)
    fresh = replace(made, replica_id="fresh", heartbeat_ms=now)
    producer = Producer({"bootstrap.servers": bootstrap})
    with ReplicaRegistry(bootstrap, changelog) as registry:
        assert registry.wait_for(lambda view: len(view.replicas) == 1, timeout_s=30)
        for announcement in (made, ahead, fresh):
            value = signed_value(
                key, topic, announcement.replica_id.encode(), announcement.to_bytes()
            )
            producer.produce(topic, key=announcement.replica_id.encode(), value=value)
        assert producer.flush(30) == 0
        registry.refresh()
        live = {r.replica_id for r in registry.view().replicas}
        assert "fresh" in live and not {"replayed", "ahead"} & live
        refused = " ".join(registry.refusals)
        assert "'replayed'" in refused and "'ahead'" in refused
