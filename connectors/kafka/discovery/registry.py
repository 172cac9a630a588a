"""Reading a changelog's replicas topic: who serves the store, what each holds, how far behind.

:class:`ReplicaRegistry` reads ``<changelog>-replicas`` with read_committed from the
beginning and keeps, per key, the latest announcement it can believe:

* signed under one of the reader's membership keys, for that replica id on that topic
  (:mod:`~spark_statestore.discovery.signing`); anything else is refused and counted;
* live by the broker's clock: the topic is created with ``LogAppendTime``, so a record's
  timestamp is when the broker appended it, whatever the announcer's clock says. An
  announcement whose own heartbeat lies further than ``max_skew_s`` from that time is
  refused (an announcer with a wrong clock, or an old record replayed); its liveness runs
  from the append time, never later than when this reader read it. On a topic with
  ``CreateTime`` the signed heartbeat is used instead, clamped the same way;
* judged as of the reader's last complete read: when it asked for the end offsets it then
  read up to. What was appended after that it has not read, so it cannot know that a
  replica stopped announcing since: a reader slow to read (a busy executor) must not judge
  a replica gone at a later time by its clock, when only its own read was late;
* not older than the one it replaces (a replayed earlier announcement of the replica);
* forgotten at the replica's signed withdrawal; a null tombstone, which anyone may write, is
  not believed (compaction uses it; readers wait for the TTL).

The partition count is the changelog topic's own, read from Kafka, not announced. The live
replicas come as a :class:`~spark_statestore.discovery.ReplicaSet` for KIP-535's
``metadata_for_key``, ``all_metadata`` and lags.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    Message,
    TopicPartition,
)

from spark_statestore.connectors.kafka import clients
from spark_statestore.connectors.kafka.errors import KafkaClientError, describe_error
from spark_statestore.discovery import (
    REPLICAS_SUFFIX,
    AnnouncementError,
    ReplicaAnnouncement,
    ReplicaSet,
)
from spark_statestore.discovery.records import verified_announcement
from spark_statestore.discovery.signing import MembershipKeys
from spark_statestore.query import KeyQueryMetadata, LagInfo

__all__ = ["ReplicaRegistry"]

_log = logging.getLogger(__name__)

_CONSUME_BATCH = 500
_MAX_WAIT_STEP_S = 1.0  # re-reads the end offsets at least this often while waiting
DEFAULT_MAX_SKEW_S = 60.0
"""How far an announcement's heartbeat may lie from the broker's append time."""
_REFUSALS_KEPT = 8


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
    keys
        The membership keys announcements must be signed with (None: the public half of
        this user's default key, :meth:`MembershipKeys.default`).
    max_skew_s
        The most an announcement's heartbeat may differ from the broker's append time.

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
        keys: MembershipKeys | None = None,
        max_skew_s: float = DEFAULT_MAX_SKEW_S,
    ) -> None:
        self.changelog = changelog
        self.keys = MembershipKeys.default() if keys is None else keys
        self.max_skew_ms = int(max_skew_s * 1000)
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
        self._as_of_ms: int | None = None  # when the last complete read asked for the ends
        self._partitions: int | None = None
        self._create_time_warned = False
        self.malformed = 0
        """Records refused (unsigned, a bad signature, malformed, a replay, a clock off)."""
        self.refusals: list[str] = []
        """Why the last few records were refused, newest last (for messages)."""
        self._refused: Counter[str] = Counter()
        self._refused_lock = threading.Lock()

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
        """The live replicas among what has been read so far (no Kafka request), judged as
        of the last :meth:`refresh` (when it asked for the end offsets it read up to)."""
        now_ms = int(self._clock() * 1000)
        if self._as_of_ms is not None:
            now_ms = min(now_ms, self._as_of_ms)
        view = ReplicaSet.of(
            self.changelog,
            self._latest.values(),
            now_ms=now_ms,
            ttl_ms=self.ttl_ms,
            partitions=self._partitions,
        )
        why = list(self.refusals)
        if not view.replicas and self._latest:
            newest = max(a.expires_ms(self.ttl_ms) for a in self._latest.values())
            why.append(
                f"{len(self._latest)} verified announcement(s) expired, the last "
                f"{(now_ms - newest) / 1000:.1f} s ago by this host's clock (their TTL after "
                "the broker appended them): their owners stopped announcing, or this host's "
                "clock runs ahead of the brokers'"
            )
        return view if not why else replace(view, refused=tuple(why))

    def refused_counts(self) -> dict[str, int]:
        """Records refused so far by reason: ``unverified`` (unsigned, a signature that does
        not verify under the membership keys, malformed), ``replay``, ``clock_skew``,
        ``other_changelog``, ``malformed`` (no key). Thread-safe (metrics read it)."""
        with self._refused_lock:
            return dict(self._refused)

    def announcements(self) -> tuple[int, tuple[ReplicaAnnouncement, ...]]:
        """``(as of, announcements)``: the newest verified announcement of every replica
        read so far, live, expired or withdrawn (``spark-statestore status`` shows them all),
        by replica id, and the time liveness is judged at (epoch ms, as :meth:`view`)."""
        now_ms = int(self._clock() * 1000)
        if self._as_of_ms is not None:
            now_ms = min(now_ms, self._as_of_ms)
        found = sorted(self._latest.values(), key=lambda a: a.replica_id)
        return now_ms, tuple(found)

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
        count = clients.partition_count(self._consumer, self.changelog, self.timeout_s)
        if count is not None:
            self._partitions = count
        asked_ms = int(self._clock() * 1000)
        if not self._assigned():
            self._as_of_ms = asked_ms
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
        self._as_of_ms = asked_ms

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
            self._skip(partition, offset, "it has no key", "malformed")
            return
        if value is None:
            return  # anyone may write a tombstone: only a signed withdrawal removes a replica
        try:
            announcement = verified_announcement(
                value, keys=self.keys, topic=self.topic, record_key=key
            )
        except AnnouncementError as exc:
            self._skip(partition, offset, str(exc), "unverified")
            return
        if announcement.changelog != self.changelog:
            self._skip(
                partition,
                offset,
                f"it announces changelog {announcement.changelog!r}",
                "other_changelog",
            )
            return
        seen_ms = self._seen_ms(message, announcement, partition, offset)
        if seen_ms is None:
            return
        current = self._latest.get(key)
        if current is not None and (announcement.started_ms, announcement.heartbeat_ms) < (
            current.started_ms,
            current.heartbeat_ms,
        ):
            self._skip(
                partition,
                offset,
                f"it is older than the announcement of replica {announcement.replica_id!r} "
                "read before (a replay)",
                "replay",
            )
            return
        if announcement.withdrawn:
            self._latest.pop(key, None)
            return
        self._latest[key] = replace(announcement, seen_ms=seen_ms)

    def _seen_ms(
        self, message: Message, announcement: ReplicaAnnouncement, partition: int, offset: int
    ) -> int | None:
        """When the record counts as made: the broker's append time (LogAppendTime), else
        the signed heartbeat, never later than now by this reader's clock; None when its
        heartbeat lies too far from the append time (refused)."""
        now_ms = int(self._clock() * 1000)
        kind, stamp = message.timestamp()
        if kind != TIMESTAMP_LOG_APPEND_TIME:
            if not self._create_time_warned:
                self._create_time_warned = True
                _log.warning(
                    "replicas topic %s does not use LogAppendTime: liveness follows the "
                    "announcers' signed clocks; set the topic's message.timestamp.type to "
                    "LogAppendTime",
                    self.topic,
                )
            return min(announcement.heartbeat_ms, now_ms)
        skew = announcement.heartbeat_ms - stamp
        if abs(skew) > self.max_skew_ms:
            self._skip(
                partition,
                offset,
                f"replica {announcement.replica_id!r} made it at {announcement.heartbeat_ms} "
                f"but the broker appended it at {stamp} ({skew / 1000:+.1f} s, more than "
                f"{self.max_skew_ms / 1000:g} s): a replayed record, or the announcer's clock "
                "is off",
                "clock_skew",
            )
            return None
        return min(stamp, now_ms)

    def _skip(self, partition: int, offset: int, why: str, reason: str) -> None:
        with self._refused_lock:
            self._refused[reason] += 1
        self.malformed += 1
        self.refusals = [*self.refusals[-(_REFUSALS_KEPT - 1) :], f"{partition}@{offset}: {why}"]
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
