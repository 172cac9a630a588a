"""A follower of a *sink's* changelog never claims a batch's position before it has applied
the whole batch.

The sink writes every record of a batch with the batch's (cumulative) position in its ``c``
header, and a batch's records span the changelog's partitions (and may exceed a chunk). A
follower that merged a chunk's ``c`` headers into the store's position would claim a batch's
position from a chunk holding part of it (one partition's records whose transaction markers
arrived first, or a restore chunk that ends inside a batch), and a read bounded by that
position would be answered from a store that lacks the batch's other writes. Kafka Streams'
own changelogs do not have this shape (a task's changelog partition carries the positions of
its own input partition, record by record). So a follower of a changelog with a progress
topic takes its position from whole batches (``connectors/kafka/follower/batches.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_statestore.changelog import partition_for_key
from spark_statestore.connectors.kafka.follower.source import KafkaChangelogSource
from spark_statestore.connectors.kafka.sink.publisher import KafkaChangelogPublisher
from spark_statestore.follower import Follower
from spark_statestore.position import Position, PositionBound
from spark_statestore.sink.commit import BatchToCommit, commit_batch
from spark_statestore.sink.staging import StagingArea, staged_schema
from spark_statestore.store import Role, Store, StoreSpec

pytestmark = pytest.mark.integration

PARTITIONS = 2


def test_a_bounded_read_never_misses_a_write_of_a_partly_applied_batch(
    kafka_broker: Any, make_topic: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    changelog = f"holes-{make_topic(partitions=1)}-changelog"
    kafka_broker.create_topic(changelog, PARTITIONS, compacted=False)
    kafka_broker.create_topic(f"{changelog}-progress", 1)
    first, second = (
        b"k-first",
        next(k for k in (b"k%d" % n for n in range(100)) if partition_for_key(k, PARTITIONS) == 1),
    )
    assert partition_for_key(first, PARTITIONS) == 0
    # One batch: one input record per key, both in input partition 0 (offsets 0 and 1).
    leader_path = tmp_path / "leader"
    rows = pa.RecordBatch.from_pydict(
        {
            "key": [first, second],
            "value": [b"1", b"2"],
            "topic": ["orders", "orders"],
            "partition": [0, 0],
            "offset": [0, 1],
            "timestamp": [None, None],
        },
        schema=staged_schema(),
    )
    staged = StagingArea(leader_path).stage("q", 0, 0, 0, [rows])
    publisher = KafkaChangelogPublisher(bootstrap, changelog, application_id="holes")
    try:
        spec = StoreSpec(Role.LEADER, changelog, PARTITIONS)
        with Store.open(leader_path, spec) as leader:
            commit_batch(
                leader,
                StagingArea(leader_path),
                BatchToCommit("q", 0, [staged], None, False),
                publisher,
            )
            written = leader.metadata.position
    finally:
        publisher.close()
    assert written == Position.from_map({"orders": {0: 1}})

    # A follower that has applied one record of the batch (a chunk of one record).
    spec = StoreSpec(Role.FOLLOWER, changelog, PARTITIONS)
    with Store.open(tmp_path / "replica", spec) as replica:
        source = KafkaChangelogSource(bootstrap, changelog)
        follower = Follower(replica, source, chunk_records=1)
        try:
            while follower.records_applied == 0:
                follower.step()
            assert follower.records_applied == 1
            with replica.snapshot() as snapshot:
                missing = second if snapshot.get(first) is not None else first
                assert snapshot.get(missing) is None  # the batch's other write is not applied
            # The store does not claim the batch's position: a read bounded by it (Spark's
            # snapshot reader, enrich, a pin) waits or refuses instead of missing the write.
            bound = PositionBound.at(written)
            assert not bound.permits(replica.metadata.position), replica.metadata.position
            assert replica.metadata.position == Position.empty()
            # Once the whole batch is applied, the store has the batch's position.
            while follower.records_applied < 2 or replica.metadata.position != written:
                follower.step()
            with replica.snapshot() as snapshot:
                assert snapshot.get(missing) is not None and bound.permits(snapshot.position)
        finally:
            follower.stop()
            source.close()
