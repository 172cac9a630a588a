"""Helpers for tests that write to a real Kafka cluster.

A transaction's commit returns once its coordinator has logged the decision; the markers
that make it readable under read_committed land on the partitions a moment later. A test
that writes and then expects a reader to see the write waits for that first, on Kafka's
own last stable offsets, never on a sleep.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from confluent_kafka import Consumer, Producer, TopicPartition

from spark_statestore.changelog import ChangelogRecord

if TYPE_CHECKING:
    from spark_statestore.store import Store

T = TypeVar("T")


def poll_until(
    check: Callable[[], T | None],
    *,
    timeout_s: float,
    interval_s: float,
    failure: Callable[[], str],
) -> T:
    """Ask ``check`` again every ``interval_s`` until it returns a value (not None), and
    return that; after ``timeout_s`` fail with ``failure()``.

    For states that a Kafka cluster reaches on its own (markers landing, retention,
    compaction, metadata spreading to every broker): there is nothing to wait on but the
    cluster's own answer, so the test asks again.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(failure())
        threading.Event().wait(interval_s)


def wait_until_readable(
    bootstrap: str, topic: str, last_offsets: Mapping[int, int], timeout_s: float = 30.0
) -> dict[int, int]:
    """Wait until a read_committed reader can read up to ``{partition: offset}`` inclusive
    (every partition's last stable offset is past it); returns those LSOs."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tests-readable",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    deadline = time.monotonic() + timeout_s
    try:
        return {
            partition: _stable_past(
                consumer, TopicPartition(topic, partition), offset, deadline, timeout_s
            )
            for partition, offset in last_offsets.items()
        }
    finally:
        consumer.close()


def _stable_past(
    consumer: Consumer, tp: TopicPartition, offset: int, deadline: float, timeout_s: float
) -> int:
    """The partition's last stable offset once it is past ``offset`` (by ``deadline``, the
    end of the caller's ``timeout_s``)."""
    seen = {"high": -1}

    def readable() -> int | None:
        seen["high"] = consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1]
        return seen["high"] if seen["high"] > offset else None

    return poll_until(
        readable,
        timeout_s=max(0.0, deadline - time.monotonic()),
        interval_s=0.005,  # the markers are on their way
        failure=lambda: (
            f"{tp.topic}-{tp.partition}: offset {offset} not readable under read_committed "
            f"after {timeout_s} s (last stable offset {seen['high']})"
        ),
    )


RETENTION_CONFIG = {
    "cleanup.policy": "delete",
    # The smallest segments Kafka allows and a size bound: the broker's retention check
    # (every second on the test cluster) deletes the oldest segments past 1 MiB.
    "segment.bytes": "1048576",
    "retention.bytes": "1048576",
}
"""Topic settings under which real retention removes old offsets within a few seconds."""


def wait_for_retention(
    bootstrap: str, topic: str, partition: int = 0, timeout_s: float = 60.0
) -> tuple[int, int]:
    """Wait until retention has deleted the first offsets of ``topic``-``partition``
    (its log start offset is above 0); returns its ``(low, high)`` watermarks."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tests-retention"})
    tp = TopicPartition(topic, partition)

    def deleted() -> tuple[int, int] | None:
        low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
        return (int(low), int(high)) if low > 0 else None

    try:
        return poll_until(
            deleted,
            timeout_s=timeout_s,
            interval_s=0.1,  # the broker's retention check runs every second
            failure=lambda: f"retention deleted nothing of {topic}-{partition} yet",
        )
    finally:
        consumer.close()


def wait_until_settled(bootstrap: str, topic: str, timeout_s: float = 30.0) -> dict[int, int]:
    """Wait until no transaction is undecided on any partition of ``topic`` (the last stable
    offset equals the high watermark everywhere); returns those offsets per partition.

    Only for topics with no transaction left open on purpose: it waits for the markers of
    transactions already committed or aborted.
    """
    committed = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tests-settled",
            "isolation.level": "read_committed",
        }
    )
    uncommitted = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tests-settled",
            "isolation.level": "read_uncommitted",
        }
    )
    deadline = time.monotonic() + timeout_s
    try:
        partitions = committed.list_topics(topic, timeout=10).topics[topic].partitions
        return {
            p: _decided(committed, uncommitted, TopicPartition(topic, p), deadline, timeout_s)
            for p in sorted(partitions)
        }
    finally:
        committed.close()
        uncommitted.close()


def fence_transactions(bootstrap: str, transactional_id: str, timeout_s: float = 60.0) -> None:
    """Settle ``transactional_id``'s last transaction as a restarted producer would: its
    InitProducerId fences the id's producer, and Kafka answers it only once the transaction
    it had is decided, its markers written (a commit it accepted) or aborted (one left open).

    Kafka answers ``commitTransaction`` once the commit is logged on the transaction
    coordinator, before the markers reach the partitions: a read_committed read right after
    a commit returned misses it (one read in three, measured on a local broker). A check
    of what a killed or exited writer committed settles first, as the restarted writer does.
    Only for a writer that is dead or done: a live one is fenced.
    """
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    try:
        producer.init_transactions(timeout_s)
    finally:
        producer.flush(0)


def settled_progress(bootstrap: str, changelog: str, store_id: str) -> Any:
    """``read_last_progress`` once the progress topic's transactions are decided: a writer
    that just returned from a commit may not have its markers written yet (see
    :func:`fence_transactions`); for a writer still in use, which a fence would kill."""
    from spark_statestore.connectors.kafka.sink.progress import read_last_progress

    wait_until_settled(bootstrap, f"{changelog}-progress")
    return read_last_progress(bootstrap, changelog, store_id)


def settled_changelog(bootstrap: str, topic: str, **kwargs: Any) -> list[ChangelogRecord]:
    """Every committed record of ``topic`` (``tail_changelog``), read once the transactions
    already committed or aborted have their markers, so a commit that just returned is in."""
    from spark_statestore.connectors.kafka.tail import tail_changelog

    wait_until_settled(bootstrap, topic)
    return list(tail_changelog(bootstrap, topic, **kwargs))


def _decided(
    committed: Consumer,
    uncommitted: Consumer,
    tp: TopicPartition,
    deadline: float,
    timeout_s: float,
) -> int:
    """The partition's end once its last stable offset reaches its high watermark (by
    ``deadline``, the end of the caller's ``timeout_s``)."""
    seen = {"stable": -1, "high": -1}

    def settled() -> int | None:
        seen["stable"] = committed.get_watermark_offsets(tp, timeout=10, cached=False)[1]
        seen["high"] = uncommitted.get_watermark_offsets(tp, timeout=10, cached=False)[1]
        return seen["high"] if seen["stable"] == seen["high"] else None

    return poll_until(
        settled,
        timeout_s=max(0.0, deadline - time.monotonic()),
        interval_s=0.005,
        failure=lambda: (
            f"{tp.topic}-{tp.partition}: a transaction is still undecided after {timeout_s} s "
            f"(last stable offset {seen['stable']}, high watermark {seen['high']})"
        ),
    )


@contextlib.contextmanager
def caught_up_follower(
    path: Path,
    bootstrap: str,
    changelog: str,
    partitions: int,
    *,
    history_retention_ms: int | None = None,
) -> Iterator[Store]:
    """A follower store at ``path`` (versioned with ``history_retention_ms``) that has
    restored ``changelog`` to its end (and stopped following), open for the test to read."""
    from spark_statestore.connectors.kafka.follower.source import KafkaChangelogSource
    from spark_statestore.follower import Follower, FollowerState
    from spark_statestore.store import Role, Store, StoreSpec

    spec = StoreSpec(
        Role.FOLLOWER, changelog, partitions, history_retention_ms=history_retention_ms
    )
    with Store.open(path, spec) as replica:
        follower = Follower(replica, KafkaChangelogSource(bootstrap, changelog))
        while follower.state is not FollowerState.RUNNING:
            follower.step()
        follower.stop()
        yield replica
