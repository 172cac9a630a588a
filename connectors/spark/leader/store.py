"""The sink's leader store and changelog publisher, as every committer opens them.

A micro-batch is committed either by the commit process itself (:func:`commit_here`) or, with
option ``serve``, by the sink's store server (:mod:`.server`), which keeps both open across
batches. Both open the store and the publisher here, so they agree on the store's spec and on
how long to wait for a reader that owns the store briefly.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark_statestore.connectors.kafka.sink.publisher import KafkaChangelogPublisher
    from spark_statestore.connectors.spark.host.publishing import HostPublisher
    from spark_statestore.connectors.spark.host.record import HostRef
    from spark_statestore.connectors.spark.options import SinkOptions
    from spark_statestore.sink.commit import BatchToCommit, CommitOutcome
    from spark_statestore.sink.stats import SinkStats
    from spark_statestore.store import Store

__all__ = ["changelog_publisher", "commit_here", "open_leader_store"]

LOCK_WAIT_S = 30.0
OWNER_WAIT_S = 120.0
"""Readers of a store nobody serves own it briefly (a private checkpoint): wait for them."""


def changelog_publisher(
    options: SinkOptions,
    stats: SinkStats | None = None,
    host: tuple[HostRef, str] | None = None,
) -> KafkaChangelogPublisher | HostPublisher | None:
    """The publisher of the sink's changelog, or None when it publishes none; ``stats``
    counts what it publishes (the sink's store server's, for its metrics). With the
    driver's store ``host`` (its ref and commit token: ``HostRecord.for_commits``), the host
    publishes (while the tasks stage, when it can)."""
    if options.changelog is None:
        return None
    from spark_statestore.connectors.kafka.sink.publisher import KafkaChangelogPublisher

    assert options.bootstrap_servers is not None and options.application_id is not None
    if host is not None and options.publish_while_staging:
        from spark_statestore.connectors.spark.host.publishing import HostPublisher

        return HostPublisher(
            host[0],
            host[1],
            os.path.abspath(options.path),
            options.bootstrap_servers,
            options.changelog,
            application_id=options.application_id,
            config=options.kafka,
            stats=stats,
        )
    return KafkaChangelogPublisher(
        options.bootstrap_servers,
        options.changelog,
        application_id=options.application_id,
        config=options.kafka,
        stats=stats,
    )


def open_leader_store(
    options: SinkOptions, partitions: int, *, purpose: str, serves: bool = False
) -> Store:
    """Open (create when missing) the sink's store as the leader of ``partitions``."""
    from spark_statestore.store import Role, Store, StoreOptions, StoreSpec

    settings: dict[str, Any] = {
        "lock_wait_seconds": LOCK_WAIT_S,
        "owner_wait_seconds": OWNER_WAIT_S,
    }
    if options.uncommitted_max_bytes is not None:
        settings["uncommitted_max_bytes"] = options.uncommitted_max_bytes
    return Store.open(
        options.path,
        StoreSpec(Role.LEADER, options.changelog, partitions),
        purpose=purpose,
        options=StoreOptions(**settings),
        serves=serves,
    )


def commit_here(options: SinkOptions, batch: BatchToCommit) -> CommitOutcome:
    """Commit ``batch`` in this process: open the store and the publisher, commit, close."""
    from spark_statestore.connectors.spark.host.launch import driver_store_host
    from spark_statestore.sink.commit import commit_batch
    from spark_statestore.sink.staging import StagingArea

    # The driver's store host publishes the changelog, while the tasks stage, when asked to.
    publishes_there = options.changelog is not None and options.publish_while_staging
    record = driver_store_host() if publishes_there else None
    publisher = changelog_publisher(options, host=None if record is None else record.for_commits())
    try:
        partitions = 1 if publisher is None else publisher.partition_count()
        purpose = f"spark_statestore sink commit (pid {os.getpid()})"
        store = open_leader_store(options, partitions, purpose=purpose)
        try:
            # The batch's staged files (and, with a changelog, its records' coordinates, once
            # its Kafka transaction committed) are committed as a promise the store keeps,
            # applied on the closing thread below while Spark goes on.
            return commit_batch(store, StagingArea(options.path), batch, publisher, defer=True)
        finally:
            # Spark reuses the commit process for the next micro-batch: closing while its
            # tasks run keeps the next commit's open from replaying this one's log.
            store.close_in_background()
    finally:
        if publisher is not None:
            publisher.close()
