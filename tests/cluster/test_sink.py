"""The transactional sink and the idempotent batch writer on a cluster: executors on other
hosts produce the rows, the store and the checkpoint stay on the driver's disk. The store
must be the fold of the committed batches, the changelog must hold each batch once.

Acceptance tests of DESIGN §11 (rows reach the store's host over the network): they fail
until the engine stops staging rows on the executors' own disks."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spark_statestore.connectors.spark.leader.remote import stop_sink_server
from spark_statestore.errors import StateStoreError
from spark_statestore.store import Store
from tests.cluster.sink_input import (
    FORMAT,
    SinkInput,
    assert_exactly_once,
    assert_published_once,
    changes,
    committed_batches,
    sink_changelog,
    store_content,
    upserts,
)

pytestmark = [pytest.mark.cluster, pytest.mark.cluster_engine]


def sink_writer(
    spark: Any, source: SinkInput, checkpoint: Path, changelog: tuple[str, str] | None, serve: bool
) -> Any:
    writer = source.stream(spark).writeStream.format(FORMAT)
    writer = writer.option("checkpointLocation", str(checkpoint))
    if changelog is not None:
        app, topic = changelog
        writer = writer.option("kafka.bootstrap.servers", source.bootstrap)
        writer = writer.option("changelog", topic).option("application.id", app)
    if serve:
        writer = writer.option("serve", "true")
    return writer


def run_two_rounds(start: Callable[[], Any], source: SinkInput) -> None:
    """A query over two rounds of input, each processed completely: upserts of every key,
    then updates and deletes."""
    source.produce(upserts(1))
    query = start()
    try:
        query.processAllAvailable()
        source.produce(changes(2))
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()


@pytest.mark.parametrize(
    ("publish", "serve"),
    [(False, False), (True, False), (True, True)],
    ids=["store-only", "changelog", "changelog-served"],
)
def test_each_micro_batch_is_committed_once(
    spark: Any, kafka_broker: Any, make_input: Any, tmp_path: Path, publish: bool, serve: bool
) -> None:
    source = make_input()
    changelog = sink_changelog(kafka_broker) if publish else None
    store, checkpoint = tmp_path / "store", tmp_path / "checkpoint"
    writer = sink_writer(spark, source, checkpoint, changelog, serve)
    try:
        run_two_rounds(lambda: writer.start(str(store)), source)
    finally:
        # The sink's store server outlives the query (until the driver stops): stop it while
        # Kafka is up, so it does not wait on an unreachable broker after the run.
        with contextlib.suppress(StateStoreError):
            stop_sink_server(str(store))
    assert len(committed_batches(checkpoint)) >= 2
    assert_exactly_once(source, store, checkpoint, None if changelog is None else changelog[1])


def test_the_batch_writer_commits_each_version_once(
    spark: Any, kafka_broker: Any, make_input: Any, tmp_path: Path
) -> None:
    source = make_input()
    app, changelog = sink_changelog(kafka_broker)
    store, checkpoint = tmp_path / "store", tmp_path / "checkpoint"
    versions: list[int] = []

    def upsert(df: Any, batch_id: int) -> None:
        for _ in range(2):  # a retried foreachBatch writes the same version twice
            (
                df.write.format(FORMAT)
                .mode("append")
                .option("kafka.bootstrap.servers", source.bootstrap)
                .option("changelog", changelog)
                .option("application.id", app)
                .option("txnAppId", "orders-upserts")
                .option("txnVersion", batch_id)
                .save(str(store))
            )
        versions.append(batch_id)

    writer = (
        source.stream(spark)
        .writeStream.foreachBatch(upsert)
        .option("checkpointLocation", str(checkpoint))
    )
    run_two_rounds(writer.start, source)
    assert len(versions) >= 2
    content = store_content(store)
    assert content == source.fold
    with Store.open(store) as opened:
        record = opened.metadata.commit_record
        assert record is not None
        assert (record.query_id, record.batch_id) == ("orders-upserts", versions[-1])
        assert opened.metadata.commit_seq == len(versions)  # each version once
    assert_published_once(source.bootstrap, changelog, source, content)
