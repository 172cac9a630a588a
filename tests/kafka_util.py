"""Helpers for tests that write to a real Kafka cluster.

A transaction's commit returns once its coordinator has logged the decision; the markers
that make it readable under read_committed land on the partitions a moment later. A test
that writes and then expects a reader to see the write waits for that first, on Kafka's
own last stable offsets, never on a sleep.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from spark_statestore.changelog import ChangelogRecord


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
    stable: dict[int, int] = {}
    try:
        for partition, offset in last_offsets.items():
            tp = TopicPartition(topic, partition)
            while True:
                _low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
                if high > offset:
                    stable[partition] = high
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"{topic}-{partition}: offset {offset} not readable under "
                        f"read_committed after {timeout_s} s (last stable offset {high})"
                    )
                # The markers are on their way; ask again in a moment.
                threading.Event().wait(0.005)
    finally:
        consumer.close()
    return stable


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
    deadline = time.monotonic() + timeout_s
    try:
        tp = TopicPartition(topic, partition)
        while True:
            low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
            if low > 0:
                return low, high
            if time.monotonic() > deadline:
                raise AssertionError(f"retention deleted nothing of {topic}-{partition} yet")
            # The broker's retention check runs every second.
            threading.Event().wait(0.1)
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
        ends: dict[int, int] = {}
        for partition in sorted(partitions):
            tp = TopicPartition(topic, partition)
            while True:
                stable = committed.get_watermark_offsets(tp, timeout=10, cached=False)[1]
                high = uncommitted.get_watermark_offsets(tp, timeout=10, cached=False)[1]
                if stable == high:
                    ends[partition] = high
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"{topic}-{partition}: a transaction is still undecided after "
                        f"{timeout_s} s (last stable offset {stable}, high watermark {high})"
                    )
                threading.Event().wait(0.005)
        return ends
    finally:
        committed.close()
        uncommitted.close()


def settled_changelog(bootstrap: str, topic: str, **kwargs: Any) -> list[ChangelogRecord]:
    """Every committed record of ``topic`` (``tail_changelog``), read once the transactions
    already committed or aborted have their markers, so a commit that just returned is in."""
    from spark_statestore.connectors.kafka.tail import tail_changelog

    wait_until_settled(bootstrap, topic)
    return list(tail_changelog(bootstrap, topic, **kwargs))
