"""Reading a changelog's replicas topic: who serves the store, what each holds, how far behind.

:class:`ReplicaRegistry` reads ``<changelog>-replicas`` with read_committed from the
beginning, keeps the latest announcement per key, forgets a key at its tombstone, and gives
the live ones as a :class:`~spark_statestore.discovery.ReplicaSet` (announcements older than
the TTL left out) for KIP-535's ``metadata_for_key``, ``all_metadata`` and lags.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from spark_statestore.connectors.kafka import clients
from spark_statestore.connectors.kafka.errors import KafkaClientError, describe_error
from spark_statestore.discovery import (
    REPLICAS_SUFFIX,
    AnnouncementError,
    ReplicaAnnouncement,
    ReplicaSet,
)
from spark_statestore.query import KeyQueryMetadata, LagInfo

__all__ = ["ReplicaRegistry"]

_log = logging.getLogger(__name__)

_CONSUME_BATCH = 500
_MAX_WAIT_STEP_S = 1.0  # re-reads the end offsets at least this often while waiting


class ReplicaRegistry:
    """The replicas of one changelog's store, as announced on its replicas topic.

    Parameters
    ----------
    bootstrap_servers, config
        The changelog's cluster and the user's ``kafka.*`` settings.
    changelog
        The changelog topic whose replicas to find.
    ttl_s
        Overrides every announcement's own TTL: an announcement older than this is stale.
    timeout_s
        How long one :meth:`refresh` may take to read up to the topic's end.
    clock
        Epoch seconds (the announcers' heartbeat times are epoch milliseconds).

    Notes
    -----
    One thread at a time: it holds one Kafka consumer and the announcements it has read.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        changelog: str,
        *,
        config: Mapping[str, Any] | None = None,
        ttl_s: float | None = None,
        timeout_s: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.changelog = changelog
        self.topic = changelog + REPLICAS_SUFFIX
        self.ttl_ms = None if ttl_s is None else int(ttl_s * 1000)
        self.timeout_s = timeout_s
        self._clock = clock
        self._consumer: Consumer = clients.consumer(
            bootstrap_servers,
            config,
            group="spark-statestore-replicas",
            what=f"replicas topic {self.topic!r}",
        )
        self._next: dict[int, int] = {}
        self._latest: dict[bytes, ReplicaAnnouncement] = {}
        self.malformed = 0

    # -- KIP-535 ----------------------------------------------------------------------------
    def replicas(self) -> ReplicaSet:
        """The live replicas, after reading the topic up to its current end."""
        self.refresh()
        return self.view()

    def metadata_for_key(self, key: bytes) -> KeyQueryMetadata:
        """``KafkaStreams#queryMetadataForKey``: see :meth:`ReplicaSet.metadata_for_key`."""
        return self.replicas().metadata_for_key(key)

    def all_metadata(self) -> tuple[ReplicaAnnouncement, ...]:
        """Every live replica (``streamsMetadataForStore``)."""
        return self.replicas().all_metadata()

    def lags(self) -> dict[str, dict[int, LagInfo]]:
        """``{replica id: {partition: LagInfo}}`` of every live replica."""
        return self.replicas().lags()

    # -- reading ----------------------------------------------------------------------------
    def view(self) -> ReplicaSet:
        """The live replicas among what has been read so far (no Kafka request)."""
        now_ms = int(self._clock() * 1000)
        return ReplicaSet.of(
            self.changelog, self._latest.values(), now_ms=now_ms, ttl_ms=self.ttl_ms
        )

    def refresh(self) -> None:
        """Read the replicas topic up to its current end.

        A missing topic means no replica has announced yet. Malformed records are counted
        (:attr:`malformed`) and logged with their offset, never fatal: anyone who may write
        the topic could have written them.

        Raises
        ------
        KafkaClientError
            The topic cannot be read within the timeout.
        """
        if not self._assigned():
            return
        ends = {
            p: clients.watermarks(self._consumer, self.topic, p, self.timeout_s)[1]
            for p in self._next
        }
        deadline = time.monotonic() + self.timeout_s
        while any(self._next[p] < end for p, end in ends.items()):
            left = deadline - time.monotonic()
            if left <= 0:
                behind = {p: f"{self._next[p]}/{e}" for p, e in ends.items()}
                raise KafkaClientError(
                    f"reading replicas topic {self.topic!r} made no progress in "
                    f"{self.timeout_s:.0f} s (partition: offset/end {behind}); check that the "
                    "brokers are reachable"
                )
            self._consume(min(left, 0.5))

    def wait_for(
        self, predicate: Callable[[ReplicaSet], bool], timeout_s: float
    ) -> ReplicaSet | None:
        """Wait until ``predicate(live replicas)`` holds; that set, or None on timeout.

        Re-checked whenever announcements or tombstones arrive and whenever an announcement
        reaches its TTL.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            self.refresh()
            view = self.view()
            if predicate(view):
                return view
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            step = min(left, _MAX_WAIT_STEP_S)
            expiry = view.next_expiry_ms(self.ttl_ms)
            if expiry is not None:
                step = min(step, max(0.0, expiry / 1000 - self._clock()) + 0.001)
            if self._assigned():
                self._consume(step)  # returns as soon as a record arrives
            else:
                time.sleep(step)  # no topic yet: nothing to block on but time

    def _assigned(self) -> bool:
        if self._next:
            return True
        count = clients.partition_count(self._consumer, self.topic, self.timeout_s)
        if count is None:
            return False
        self._next = dict.fromkeys(range(count), 0)
        self._consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in self._next])
        return True

    def _consume(self, timeout_s: float) -> None:
        for message in self._consumer.consume(_CONSUME_BATCH, timeout=timeout_s):
            error = message.error()
            partition: int = message.partition()  # type: ignore[assignment]
            offset: int = message.offset()  # type: ignore[assignment]
            if error is None:
                self._apply(message, partition, offset)
                self._next[partition] = max(self._next[partition], offset + 1)
            elif error.code() == KafkaError._PARTITION_EOF:
                self._next[partition] = max(self._next[partition], offset)
            else:
                raise KafkaClientError(
                    f"reading {self.topic}-{partition} failed: {describe_error(error)}",
                    error.code(),
                )
        # The position moves past offsets compaction removed and transaction markers.
        for tp in self._consumer.position([TopicPartition(self.topic, p) for p in self._next]):
            if tp.offset >= 0:
                self._next[tp.partition] = max(self._next[tp.partition], tp.offset)

    def _apply(self, message: Message, partition: int, offset: int) -> None:
        key = message.key()
        value = message.value()
        if key is None:
            self._skip(partition, offset, "it has no key")
            return
        if value is None:
            self._latest.pop(key, None)
            return
        try:
            announcement = ReplicaAnnouncement.from_bytes(value)
        except AnnouncementError as exc:
            self._skip(partition, offset, str(exc))
            return
        if announcement.replica_id.encode("utf-8") != key:
            self._skip(partition, offset, f"its key is not replica {announcement.replica_id!r}")
            return
        if announcement.changelog != self.changelog:
            self._skip(partition, offset, f"it announces changelog {announcement.changelog!r}")
            return
        self._latest[key] = announcement

    def _skip(self, partition: int, offset: int, why: str) -> None:
        self.malformed += 1
        _log.warning("skipping replica record %s-%d@%d: %s", self.topic, partition, offset, why)

    def close(self) -> None:
        """Close the consumer (idempotent)."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None  # type: ignore[assignment]

    def __enter__(self) -> ReplicaRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
