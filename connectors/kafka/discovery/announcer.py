"""A live store owner announcing itself on its changelog's replicas topic.

:class:`ReplicaAnnouncer` creates ``<changelog>-replicas`` (compacted, one partition,
``LogAppendTime``: readers judge liveness by the broker's clock) when it is missing,
publishes the owner's :class:`~spark_statestore.discovery.ReplicaAnnouncement`, signed with
its membership key, when it starts and again every heartbeat interval from a daemon thread
(with fresh position and lags), and when it is closed a signed withdrawal followed by a
tombstone (which lets compaction drop the key). An owner that dies without closing leaves
its last announcement, which readers drop once its TTL has passed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException

from spark_statestore.connectors.kafka import clients
from spark_statestore.connectors.kafka.errors import client_error
from spark_statestore.discovery import (
    REPLICAS_SUFFIX,
    DiscoveryError,
    ReplicaAnnouncement,
    announce_ttl_ms,
)
from spark_statestore.discovery.errors import AnnouncementNotDeliveredError
from spark_statestore.discovery.records import announcement_record
from spark_statestore.discovery.signing import MembershipKey
from spark_statestore.errors import StateStoreError
from spark_statestore.position import Position
from spark_statestore.query import LagInfo

if TYPE_CHECKING:
    from spark_statestore.store import Store

__all__ = [
    "REPLICAS_TOPIC_CONFIG",
    "ReplicaAnnouncer",
    "announce_store",
    "ensure_replicas_topic",
]

_log = logging.getLogger(__name__)

REPLICAS_TOPIC_CONFIG: Mapping[str, str] = {
    "cleanup.policy": "compact",
    # Liveness is judged by the broker's clock, not by whoever produced the record.
    "message.timestamp.type": "LogAppendTime",
    # Tombstones of stopped replicas are removed a while after compaction.
    "delete.retention.ms": "3600000",
}
"""The settings a replicas topic is created with."""

Progress = Callable[[], "tuple[Position, Mapping[int, LagInfo]]"]
"""Returns the store's current position and ``{partition: LagInfo}``."""


def ensure_replicas_topic(
    bootstrap_servers: str, changelog: str, config: Mapping[str, Any] | None, timeout_s: float
) -> str:
    """The replicas topic of ``changelog``, created compacted with one partition if missing.

    Raises
    ------
    KafkaClientError
        It cannot be created.
    """
    topic = changelog + REPLICAS_SUFFIX
    if clients.ensure_topic(
        bootstrap_servers,
        config,
        topic,
        partitions=1,
        topic_config=REPLICAS_TOPIC_CONFIG,
        timeout_s=timeout_s,
    ):
        _log.info("created replicas topic %s", topic)
    return topic


class ReplicaAnnouncer:
    """Publishes one replica's announcement on start, every ``interval_s``, and a withdrawal
    on :meth:`close`.

    Parameters
    ----------
    bootstrap_servers, config
        The changelog's cluster and the user's ``kafka.*`` settings.
    announcement
        The replica's announcement; its ``ttl_ms`` should be a few ``interval_s``.
    progress
        Called at each heartbeat for the store's current position and lags.
    interval_s
        Seconds between heartbeats.
    timeout_s
        How long creating the topic may take. Delivering an announcement or the withdrawal
        waits at most this and the announcement's TTL (past its TTL a record no longer
        matters: the first one's delivery is then left to the heartbeats, a withdrawal to
        the readers' TTL).
    key
        The membership key announcements are signed with (None: this user's default key,
        created when missing: :meth:`MembershipKey.default`).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        announcement: ReplicaAnnouncement,
        progress: Progress,
        *,
        config: Mapping[str, Any] | None = None,
        interval_s: float = 5.0,
        timeout_s: float = 30.0,
        key: MembershipKey | None = None,
    ) -> None:
        if not interval_s > 0:
            raise DiscoveryError(f"the heartbeat interval must be > 0 s, got {interval_s!r}")
        self.bootstrap_servers = bootstrap_servers
        self.announcement = announcement
        self.topic = announcement.changelog + REPLICAS_SUFFIX
        self._progress = progress
        self._config = dict(config or {})
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.membership_key = MembershipKey.default() if key is None else key
        self.heartbeats = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._producer: Any = None
        self._lock = threading.Lock()

    @property
    def key(self) -> bytes:
        """The record key: the replica id in UTF-8."""
        return self.announcement.replica_id.encode("utf-8")

    def start(self) -> None:
        """Create the topic if missing, publish the first announcement (delivered when this
        returns) and start the heartbeat thread (idempotent).

        Raises
        ------
        KafkaClientError
            The topic cannot be created or the announcement not delivered.
        """
        if self._thread is not None:
            return
        ensure_replicas_topic(
            self.bootstrap_servers, self.announcement.changelog, self._config, self.timeout_s
        )
        self._producer = clients.producer(
            self.bootstrap_servers,
            {"acks": "all", "linger.ms": 0, **self._config},
            what=f"replicas topic {self.topic!r}",
        )
        try:
            self.announce()
        except AnnouncementNotDeliveredError as exc:
            # Kafka is slow, not refusing: the heartbeats deliver it (the record stays queued)
            _log.warning("%s; the heartbeats go on announcing it", exc)
        self._thread = threading.Thread(
            target=self._run, name=f"announcer-{self.topic}", daemon=True
        )
        self._thread.start()

    def announce(self) -> ReplicaAnnouncement:
        """Publish the announcement now, with the current progress, and wait for delivery.

        Raises
        ------
        KafkaClientError
            It was not delivered within the timeout.
        """
        position, lags = self._progress()
        current = self.announcement.with_heartbeat(
            int(time.time() * 1000), position=position, lags=lags
        )
        self._send(announcement_record(current, self.membership_key))
        self.announcement = current
        self.heartbeats += 1
        return current

    @property
    def delivery_timeout_s(self) -> float:
        """How long a record's delivery is awaited: the timeout, at most the TTL."""
        return min(self.timeout_s, self.announcement.ttl_ms / 1000)

    def _send(self, *values: bytes | None) -> None:
        """Produce ``values`` in order and wait for their delivery (at most
        :attr:`delivery_timeout_s` for all of them)."""
        failures: list[Any] = []

        def delivered(error: Any, _message: Any) -> None:
            if error is not None:
                failures.append(error)

        with self._lock:
            producer = self._producer
            if producer is None:
                raise DiscoveryError(f"the announcer of {self.topic!r} is not started")
            try:
                for value in values:
                    producer.produce(self.topic, key=self.key, value=value, on_delivery=delivered)
                left = producer.flush(self.delivery_timeout_s)
            except KafkaException as exc:
                raise client_error(exc, f"cannot announce on {self.topic!r}") from exc
        what = "a withdrawal" if len(values) > 1 else "an announcement"
        if left and not failures:
            raise AnnouncementNotDeliveredError(
                f"{what} of replica {self.announcement.replica_id!r} on {self.topic!r} was not "
                f"delivered in {self.delivery_timeout_s:g} s (its TTL)"
            )
        if failures:
            reason = failures[0]
            raise DiscoveryError(
                f"{what} of replica {self.announcement.replica_id!r} on {self.topic!r} "
                f"failed: {reason}"
            )

    def _run(self) -> None:
        # Beats fall due on a fixed cadence from the start, not an interval after the
        # previous beat returned: a slow beat (the lags' Kafka request, a delivery on a busy
        # broker) does not push every later one back. Beats missed entirely are not made up.
        due = time.monotonic() + self.interval_s
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            now = time.monotonic()
            late = now - due
            if late > self.interval_s:
                _log.info(
                    "replica heartbeat on %s is %.1f s late (interval %g s): this host is busy",
                    self.topic,
                    late,
                    self.interval_s,
                )
            due += self.interval_s
            if due <= now:
                due = now + self.interval_s
            try:
                self.announce()
            except StateStoreError as exc:
                # A missed heartbeat is not the owner's failure: it stays live until its TTL,
                # and the next beat announces it again.
                _log.warning("replica heartbeat on %s failed: %s", self.topic, exc)

    def close(self) -> None:
        """Stop the heartbeats and publish a signed withdrawal and a tombstone (idempotent);
        one that cannot be delivered is logged: readers drop the replica after its TTL
        anyway."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s)
            self._thread = None
        if self._producer is None:
            return
        try:
            withdrawn = replace(
                self.announcement, heartbeat_ms=int(time.time() * 1000), withdrawn=True
            )
            self._send(announcement_record(withdrawn, self.membership_key), None)
        except StateStoreError as exc:  # the TTL covers an undelivered withdrawal
            _log.warning("replica withdrawal on %s failed: %s", self.topic, exc)
        finally:
            self._producer = None


def announce_store(
    store: Store,
    location: str,
    lags: Callable[[], Mapping[int, LagInfo]],
    *,
    bootstrap_servers: str,
    config: Mapping[str, Any] | None,
    interval_ms: int,
    key_file: str | None = None,
) -> ReplicaAnnouncer | None:
    """Start announcing the open ``store``, served at ``location``, with its position and
    ``lags()`` at each heartbeat, signed with the membership key in ``key_file`` (option
    ``announceKeyFile``; None: this user's default key); None (with a warning) when Kafka
    refuses: the owner works without being discoverable.

    Raises
    ------
    DiscoveryError
        If ``key_file`` cannot be read or holds no membership key.
    """
    key = None if key_file is None else MembershipKey.load(key_file, "'announceKeyFile'")
    announcer = ReplicaAnnouncer(
        bootstrap_servers,
        ReplicaAnnouncement.of_store(store, location=location, ttl_ms=announce_ttl_ms(interval_ms)),
        lambda: (store.metadata.position, lags()),
        config=config,
        interval_s=interval_ms / 1000,
        key=key,
    )
    try:
        announcer.start()
    except StateStoreError as exc:
        _log.warning(
            "%s store %s at %s is not discoverable: announcing it on %s failed: %s "
            "(set option 'announce' to 'false' to not try)",
            store.manifest.role.value,
            store.path,
            location,
            announcer.topic,
            exc,
        )
        announcer.close()
        return None
    return announcer
