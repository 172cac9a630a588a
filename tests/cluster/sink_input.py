"""Ground truth for the sink on a cluster: an input topic of upserts and deletes (what Spark's
Kafka source reads on the executors), and the checks every sink test makes against it: the
store is the fold of the committed input, the changelog holds each row once, one progress
record per batch."""

from __future__ import annotations

import itertools
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from spark_statestore.connectors.kafka.sink.progress import parse_progress_message
from spark_statestore.connectors.spark.leader.remote import stop_sink_server
from spark_statestore.store import Store
from tests.cluster.changelog import fold, java_partitioned_producer
from tests.integration.test_spark_follower import wait_for_owner_exit
from tests.kafka_util import settled_changelog, wait_until_settled

FORMAT = "spark_statestore"
_apps = itertools.count()


@dataclass(frozen=True)
class InputRow:
    key: bytes
    value: bytes | None
    partition: int
    offset: int


@dataclass
class SinkInput:
    """An input topic, and every row produced to it (keys placed by Kafka's Java
    partitioner, so each key's writes are in one partition, in order)."""

    bootstrap: str
    topic: str
    rows: list[InputRow] = field(default_factory=list)
    _producer: Any = field(default=None, repr=False)

    def produce(self, changes: list[tuple[bytes, bytes | None]]) -> None:
        if self._producer is None:
            self._producer = java_partitioned_producer(self.bootstrap)
        acked: list[InputRow] = []

        def delivered(error: Any, message: Any) -> None:
            assert error is None, error
            acked.append(
                InputRow(message.key(), message.value(), message.partition(), message.offset())
            )

        for key, value in changes:
            self._producer.produce(self.topic, key=key, value=value, on_delivery=delivered)
        assert self._producer.flush(30) == 0
        self.rows.extend(sorted(acked, key=lambda r: (r.partition, r.offset)))

    def stream(self, spark: Any) -> Any:
        """The input as the sink takes it: key, value and the record's metadata."""
        return (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("subscribe", self.topic)
            .option("startingOffsets", "earliest")
            .load()
            .select("key", "value", "topic", "partition", "offset", "timestamp")
        )

    @property
    def fold(self) -> dict[bytes, bytes]:
        """The store the rows make (each key's writes are in one partition, in order)."""
        return fold(
            (r.key, r.value) for r in sorted(self.rows, key=lambda r: (r.partition, r.offset))
        )

    @property
    def position(self) -> dict[str, dict[int, int]]:
        last: dict[int, int] = {}
        for row in self.rows:
            last[row.partition] = max(last.get(row.partition, -1), row.offset)
        return {self.topic: last}


def upserts(round_: int, count: int = 20) -> list[tuple[bytes, bytes | None]]:
    """Every key ``k00..`` set to ``<round>-<i>``."""
    return [(b"k%02d" % i, b"%d-%d" % (round_, i)) for i in range(count)]


def changes(round_: int, count: int = 20) -> list[tuple[bytes, bytes | None]]:
    """Every third key deleted, the others updated."""
    return [(b"k%02d" % i, None if i % 3 == 0 else b"%d-%d" % (round_, i)) for i in range(count)]


def sink_changelog(kafka: Any, partitions: int = 2) -> tuple[str, str]:
    """A fresh application id and its changelog ``<app>-store-changelog`` (with its
    ``-progress`` topic), not compacted, so it reads back record for record."""
    app = f"cluster-app-{os.getpid()}-{next(_apps)}"
    changelog = f"{app}-store-changelog"
    kafka.create_topic(changelog, partitions, compacted=False)
    kafka.create_topic(f"{changelog}-progress", 1)
    return app, changelog


def committed_batches(checkpoint: Path) -> list[int]:
    """The batch ids in Spark's commit log."""
    directory = checkpoint / "commits"
    return sorted(int(name) for name in os.listdir(directory) if name.isdigit())


def store_content(path: Path) -> dict[bytes, bytes]:
    """The store's data, read on the driver once no process owns it (a sink's store server
    is stopped first)."""
    stop_sink_server(str(path))
    wait_for_owner_exit(path)
    with Store.open(path) as store, store.snapshot() as snapshot:
        return dict(snapshot.items())


def progress_batches(bootstrap: str, changelog: str) -> list[int]:
    """The batch id of every committed progress record of ``changelog``, in order."""
    topic = f"{changelog}-progress"
    (end,) = wait_until_settled(bootstrap, topic).values()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "cluster-tests-progress",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    batches: list[int] = []
    deadline = time.monotonic() + 60
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        # The log end counts each transaction's commit marker too, which is never delivered:
        # read until the consumer's position (which steps over markers) reaches it.
        while consumer.position([TopicPartition(topic, 0)])[0].offset < end:
            assert time.monotonic() < deadline, f"{topic}: {batches} read, end {end} not reached"
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                batches.append(parse_progress_message(message, topic).batch_id)
    finally:
        consumer.close()
    return batches


def assert_exactly_once(
    source: SinkInput, store: Path, checkpoint: Path, changelog: str | None
) -> None:
    """Once the sink query has stopped: the store is the fold of the committed input (all of
    it), at the input's position, its last commit Spark's last committed batch; with a
    ``changelog``, it holds every input row exactly once and nothing else (folding to the
    store), and one progress record per committed batch."""
    batches = committed_batches(checkpoint)
    content = store_content(store)
    assert content == source.fold
    with Store.open(store) as opened:
        metadata = opened.metadata
    assert metadata.position.to_map() == source.position
    assert metadata.commit_record is not None and metadata.commit_record.batch_id == batches[-1]
    if changelog is None:
        return
    assert_published_once(source.bootstrap, changelog, source, content)
    assert progress_batches(source.bootstrap, changelog) == batches


def assert_published_once(
    bootstrap: str, changelog: str, source: SinkInput, content: dict[bytes, bytes]
) -> None:
    """The changelog holds every input row exactly once (and nothing else), and folds to the
    store's content."""
    published = settled_changelog(bootstrap, changelog)
    assert Counter((r.key, r.value) for r in published) == Counter(
        (row.key, row.value) for row in source.rows
    )
    # Partition by partition, each in offset order: each key's writes in their order.
    assert fold((r.key, r.value) for r in published) == content
