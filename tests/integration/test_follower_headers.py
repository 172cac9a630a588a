"""A follower keeps each key's latest changelog record headers (all but ``v``/``c``) in its
store, against a real broker; the snapshot reader returns them with ``includeHeaders``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from spark_statestore.connectors.kafka.follower.source import KafkaChangelogSource
from spark_statestore.follower import Follower, FollowerState
from spark_statestore.serve import StoreServer
from spark_statestore.store import Role, Store, StoreSpec
from tests.kafka_util import wait_until_settled

pytestmark = pytest.mark.integration

# (key, value, headers) in changelog order, all in partition 0.
CHANGES: list[tuple[bytes, bytes | None, list[tuple[str, bytes | None]]]] = [
    (b"a1", b"1", [("h", b"a1")]),
    (b"b1", b"1", [("h", b"old"), ("dup", b"x")]),
    (b"b2", b"1", []),
    (b"b1", b"2", [("h", b"new"), ("dup", b"x"), ("dup", None)]),  # the latest write wins
    (b"b3", b"1", [("h", b"gone")]),
    (b"b3", None, []),  # deleted: nothing kept
    (b"a2", b"1", [("h", b"a2")]),
    (b"b4", b"1", [("h", b"dropped")]),
    (b"b4", b"2", []),  # the latest write had none
]
EXPECTED = {
    b"a1": (("h", b"a1"),),
    b"a2": (("h", b"a2"),),
    b"b1": (("h", b"new"), ("dup", b"x"), ("dup", None)),
    b"b2": (),
    b"b4": (),
}


def follow(path: Path, bootstrap: str, topic: str, key_prefix: bytes | None) -> dict[bytes, Any]:
    spec = StoreSpec(Role.FOLLOWER, topic, 1, key_prefix=key_prefix)
    with Store.open(path, spec) as store:
        follower = Follower(store, KafkaChangelogSource(bootstrap, topic))
        while follower.state is not FollowerState.RUNNING:
            follower.step()
        follower.stop()
        with store.snapshot() as snapshot:
            return {record.key: record.headers for record in snapshot.records()}


def test_the_follower_keeps_the_latest_record_headers(
    spark: Any, kafka_broker: Any, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = make_topic(partitions=1, suffix="-changelog")
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value, headers in CHANGES:
        producer.produce(topic, key=key, value=value, partition=0, headers=headers)
    assert producer.flush(30) == 0
    wait_until_settled(bootstrap, topic)

    assert follow(tmp_path / "all", bootstrap, topic, None) == EXPECTED
    # A subset store skips records: the headers stay with their own records.
    subset = follow(tmp_path / "b", bootstrap, topic, b"b")
    assert subset == {k: v for k, v in EXPECTED.items() if k.startswith(b"b")}

    def read_headers() -> dict[bytes, Any]:
        rows = (
            spark.read.format("spark_statestore")
            .option("keyFormat", "string")
            .option("includeHeaders", "true")
            .load(str(tmp_path / "all"))
            .collect()
        )
        return {
            r["key"].encode(): tuple(
                (h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"]
            )
            for r in rows
        }

    assert read_headers() == EXPECTED  # the store read directly
    with Store.open(tmp_path / "all", purpose="headers test") as store, StoreServer(store):
        assert read_headers() == EXPECTED  # through its owner's Flight server
    plain = spark.read.format("spark_statestore").load(str(tmp_path / "all"))
    assert plain.columns == ["key", "value", "partition", "offset", "timestamp"]
