"""The store host's changelog publishing while a batch's tasks stage it
(connectors/kafka/sink/streamed.py), against a real broker, without Spark: attempts stage
their rows as the host stages them (``StagingArea.stage`` with the publisher called after each
chunk), then the commit's ``publish_staged``. What is committed as streamed must be exactly
the attempts the commit names, at the offsets it reports; anything else is published again in
commit order, and an abandoned transaction never becomes visible."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

from spark_statestore.connectors.kafka.sink.streamed import ChangelogTarget, StreamedChangelog
from spark_statestore.position import Position
from spark_statestore.sink.changes import StagedBatch, StagedPublication
from spark_statestore.sink.staging import StagedFile, StagingArea, staged_schema
from tests.kafka_util import settled_changelog

pytestmark = pytest.mark.integration

APP = "streamed"
PARTITIONS = 3
BUDGET = 64 * 1024 * 1024


@pytest.fixture
def changelog(kafka_broker: Any, make_topic: Callable[..., str]) -> str:
    topic = f"{APP}-{make_topic(partitions=PARTITIONS, suffix='-changelog')}"
    kafka_broker.create_topic(topic, PARTITIONS, compacted=False)
    kafka_broker.create_topic(f"{topic}-progress", 1)
    return topic


@pytest.fixture
def publisher(kafka_broker: Any, changelog: str) -> Iterator[StreamedChangelog]:
    target = ChangelogTarget.of(kafka_broker.bootstrap_servers, changelog, APP, {}, "store-1")
    made = StreamedChangelog(target, idle_abort_s=0.5)
    yield made
    made.close()


def rows(keys: list[bytes], tag: bytes, offset: int = 0) -> pa.RecordBatch:
    count = len(keys)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array([tag + b"-" + k for k in keys], pa.binary()),
            pa.array(["input"] * count, pa.string()),
            pa.array([0] * count, pa.int32()),
            pa.array(range(offset, offset + count), pa.int64()),
            pa.array([1_000] * count, pa.int64()),
        ],
        schema=staged_schema(),
    )


def expecting(publisher: StreamedChangelog, tmp_path: Any) -> StagingArea:
    """A store's staging area, its publisher ready and expecting batch 1 of query q1 (as after
    the commit of batch 0)."""
    publisher.published_batch()
    publisher.expect("q1", 1, Position.from_map({}), BUDGET)
    return StagingArea(tmp_path / "store")


def stage(
    publisher: StreamedChangelog,
    staging: StagingArea,
    batch_id: int,
    partition_id: int,
    chunks: list[pa.RecordBatch],
    attempt: int = 0,
) -> StagedFile:
    """One task attempt's stream, as the store host handles it."""
    handle = publisher.join("q1", batch_id, partition_id, attempt)
    produce = None if handle is None else (lambda b, m: publisher.produce(handle, b, m))
    staged = staging.stage("q1", batch_id, partition_id, attempt, chunks, produce)
    if handle is not None:
        publisher.staged(handle, staged)
    return staged


def commit(
    publisher: StreamedChangelog, staging: StagingArea, batch_id: int, files: list[StagedFile]
) -> StagedPublication:
    batch = StagedBatch("store-1", "q1", batch_id, files, [], Position.from_map({"input": {0: 99}}))
    return publisher.publish_staged(staging, batch)


def check(
    bootstrap: str,
    changelog: str,
    publication: StagedPublication,
    staging: StagingArea,
    files: list[StagedFile],
) -> None:
    """Each staged row is in the changelog exactly at the partition and offset reported, and
    the changelog (a fresh one) holds nothing else."""
    records = {(r.partition, r.offset): r for r in settled_changelog(bootstrap, changelog)}
    seen = 0
    for staged, (parts, offsets) in zip(files, publication.files, strict=True):
        written = [row for b in staging.read(staged) for row in b.to_pylist()]
        for row, part, offset in zip(written, list(parts), list(offsets), strict=True):
            record = records[(int(part), int(offset))]
            assert (record.key, record.value) == (row["key"], row["value"])
            seen += 1
    assert seen == len(records), "the changelog holds other records than the batch's"


def test_a_batch_whose_tasks_streamed_is_committed_as_streamed(
    publisher: StreamedChangelog, kafka_broker: Any, changelog: str, tmp_path: Any
) -> None:
    staging = StagingArea(tmp_path / "store")
    assert publisher.published_batch() is None
    publisher.expect("q1", 1, Position.from_map({"input": {0: 9}}), BUDGET)
    first = stage(publisher, staging, 1, 0, [rows([b"a", b"b"], b"0"), rows([b"c"], b"0", 2)])
    second = stage(publisher, staging, 1, 1, [rows([b"d", b"e", b"f"], b"1", 10)])
    publication = commit(publisher, staging, 1, [first, second])
    assert publisher.streamed_batches == 1 and publisher.republished_batches == 0
    assert sum(publication.ends.values()) >= 6
    check(kafka_broker.bootstrap_servers, changelog, publication, staging, [first, second])
    published = publisher.published_batch()
    assert published is not None and (published.query_id, published.batch_id) == ("q1", 1)


def test_an_attempt_spark_did_not_commit_makes_the_batch_publish_again(
    publisher: StreamedChangelog, kafka_broker: Any, changelog: str, tmp_path: Any
) -> None:
    staging = expecting(publisher, tmp_path)
    stage(publisher, staging, 1, 0, [rows([b"a"], b"first")], attempt=0)
    retried = stage(publisher, staging, 1, 0, [rows([b"a"], b"retry")], attempt=1)
    publication = commit(publisher, staging, 1, [retried])
    assert (publisher.streamed_batches, publisher.republished_batches) == (0, 1)
    records = settled_changelog(kafka_broker.bootstrap_servers, changelog)
    # Only the committed attempt's row: the streamed transaction was aborted.
    assert [(r.key, r.value) for r in records] == [(b"a", b"retry-a")]
    check(kafka_broker.bootstrap_servers, changelog, publication, staging, [retried])


def test_keys_several_tasks_wrote_out_of_commit_order_make_the_batch_publish_again(
    publisher: StreamedChangelog, kafka_broker: Any, changelog: str, tmp_path: Any
) -> None:
    staging = expecting(publisher, tmp_path)
    # Task 1 (later in commit order) streams "k" first, task 0 after it: the changelog's last
    # record of k would be task 0's, the commit applies task 1's last.
    later = stage(publisher, staging, 1, 1, [rows([b"k"], b"later")])
    earlier = stage(publisher, staging, 1, 0, [rows([b"k"], b"earlier")])
    commit(publisher, staging, 1, [earlier, later])
    assert (publisher.streamed_batches, publisher.republished_batches) == (0, 1)
    records = settled_changelog(kafka_broker.bootstrap_servers, changelog)
    assert [(r.key, r.value) for r in records] == [(b"k", b"earlier-k"), (b"k", b"later-k")]


def test_an_abandoned_streamed_transaction_is_aborted_and_never_visible(
    publisher: StreamedChangelog, kafka_broker: Any, changelog: str, tmp_path: Any
) -> None:
    import time

    staging = expecting(publisher, tmp_path)
    stage(publisher, staging, 1, 0, [rows([b"x", b"y"], b"lost")])
    assert publisher.describe()["streaming"]["open"] is True
    deadline = time.monotonic() + 30
    while publisher.describe()["streaming"]["open"] and time.monotonic() < deadline:
        publisher.check_idle()  # the host's upkeep thread calls it every few seconds
        time.sleep(0.1)
    assert publisher.describe()["streaming"]["failed"].startswith("no task streamed")
    # The changelog's readers are not held back, and nothing of the batch is visible.
    assert settled_changelog(kafka_broker.bootstrap_servers, changelog) == []
