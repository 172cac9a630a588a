"""A live store owner's announcement of itself: the value of a ``<changelog>-replicas`` record.

Every live owner of a store of a changelog (a follower; a leader while it serves) publishes
one :class:`ReplicaAnnouncement` on the changelog's compacted replicas topic, keyed by its
replica id, when it starts and at every heartbeat; a tombstone (null value) when it stops
cleanly. A reader keeps the latest record per key and treats an announcement whose
heartbeat is older than its TTL as gone (its owner was killed or cut off).

The value is compact UTF-8 JSON with a format version; :meth:`ReplicaAnnouncement.from_bytes`
decodes records written by anyone with write access to the topic, so it is strict: a size
limit, every field checked, unknown fields ignored (forward compatible), a newer version
refused.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from spark_statestore.discovery.errors import AnnouncementError, DiscoveryError
from spark_statestore.errors import StateStoreError
from spark_statestore.position import Position
from spark_statestore.query import HostInfo, LagInfo, QueryError
from spark_statestore.serve.protocol import lags_from_dict, lags_to_dict
from spark_statestore.store.manifest import Role

if TYPE_CHECKING:
    from spark_statestore.store import Store

__all__ = [
    "ANNOUNCEMENT_FORMAT_VERSION",
    "MAX_ANNOUNCEMENT_BYTES",
    "REPLICAS_SUFFIX",
    "ReplicaAnnouncement",
    "announce_ttl_ms",
    "host_info_of",
]

REPLICAS_SUFFIX: Final = "-replicas"
"""The replicas topic of changelog ``c`` is ``c + REPLICAS_SUFFIX``."""

ANNOUNCEMENT_FORMAT_VERSION: Final = 2
"""Version 2 adds ``loopback`` and ``withdrawn``; it travels signed
(:mod:`~spark_statestore.discovery.signing`)."""

MAX_ANNOUNCEMENT_BYTES: Final = 1024 * 1024
"""The largest announcement decoded (Kafka's default ``max.message.bytes``)."""

ANNOUNCE_TTL_INTERVALS: Final = 3
"""An announcement is stale after this many heartbeat intervals without a newer one..."""

ANNOUNCE_TTL_SLACK_MS: Final = 2000
"""... and at least this long after the next heartbeat was due: a busy host (a 2-core
machine running Spark's JVMs, a garbage-collection pause) can delay a heartbeat by far more
than a short interval, and a live owner must not be judged gone for it."""


def announce_ttl_ms(interval_ms: int) -> int:
    """The TTL an owner heartbeating every ``interval_ms`` announces: three intervals, at
    least one interval plus :data:`ANNOUNCE_TTL_SLACK_MS` (2 s)."""
    return max(ANNOUNCE_TTL_INTERVALS * interval_ms, interval_ms + ANNOUNCE_TTL_SLACK_MS)


_MAX_TEXT = 4096  # replica ids, hosts, locations
_MAX_KEY_PREFIX = 64 * 1024
_MAX_MS = 2**63 - 1
_REQUIRED = (
    "replica_id",
    "changelog",
    "role",
    "host",
    "location",
    "partitions",
    "held_partitions",
    "key_prefix",
    "position",
    "lags",
    "heartbeat_ms",
    "ttl_ms",
)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _text(value: object, what: str, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if not isinstance(value, str) or not value or len(value) > _MAX_TEXT:
        raise AnnouncementError(
            f"replica announcement: {what} must be a non-empty string of at most {_MAX_TEXT} "
            f"characters, got {value!r:.80}"
        )


def _count(value: object, what: str, low: int, high: int = _MAX_MS) -> None:
    if not _is_int(value) or not low <= value <= high:  # type: ignore[operator]
        raise AnnouncementError(
            f"replica announcement: {what} must be an int in {low}..{high}, got {value!r:.80}"
        )


def host_info_of(location: str) -> HostInfo:
    """The :class:`~spark_statestore.query.HostInfo` of a Flight location such as
    ``grpc://127.0.0.1:41234`` or ``grpc+tls://[::1]:8815``.

    Raises
    ------
    AnnouncementError
        If the location has no host or no valid port.
    """
    try:
        parts = urlsplit(location)
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise AnnouncementError(f"Flight location {location!r:.80} is malformed: {exc}") from exc
    if not parts.scheme.startswith("grpc") or host is None or port is None:
        raise AnnouncementError(
            f"Flight location {location!r:.80} must look like grpc://HOST:PORT or "
            "grpc+tls://HOST:PORT"
        )
    try:
        return HostInfo(host, port)
    except QueryError as exc:
        raise AnnouncementError(f"Flight location {location!r:.80}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class ReplicaAnnouncement:
    """One live store owner, as it describes itself on the replicas topic.

    Parameters
    ----------
    replica_id
        The record key: the store's id (stable over restarts of the same store directory,
        so a restarted owner replaces its own entry).
    changelog
        The changelog topic the store holds.
    role
        ``Role.LEADER`` (the store a sink writes) or ``Role.FOLLOWER``.
    host
        The owner's host name (for people; routing uses ``location``).
    location
        The Arrow Flight location serving the store, None when it does not serve.
    partitions
        The changelog's partition count.
    held_partitions
        The partitions the store holds (all of them unless it is a subset follower).
    key_prefix
        A subset follower's key prefix (only keys starting with it are held), else None.
    position
        The store's position (its input positions).
    lags
        ``{partition: LagInfo}`` of the held partitions (a follower's; a leader has none).
    heartbeat_ms
        When the announcement was made, epoch milliseconds of the owner's clock.
    ttl_ms
        How long after ``heartbeat_ms`` the announcement counts as live without a newer one
        (a few heartbeat intervals).
    started_ms
        When the owner took the store, epoch milliseconds.
    pid
        The owner's process id, 0 when unknown.
    store_name
        The store's name in IQv2 requests on this replica (replicas of one changelog may
        have different names); None when not announced (an older announcer).
    loopback
        The identity of the announcer's loopback interface (:func:`~spark_statestore.
        discovery.loopback.loopback_identity`), required with a loopback ``location``: a reader
        dials a loopback location only when its own loopback is this one (the same machine
        and network namespace), never its own port of that number elsewhere.
    withdrawn
        True in the owner's last announcement, on a clean stop: readers forget the replica
        (a signed withdrawal; a null tombstone, which anyone could write, is not believed).
    seen_ms
        Set by the reader, not announced: when the record was appended by the broker's
        clock (LogAppendTime), no later than when this reader read it. Liveness is measured
        from it when set, else from ``heartbeat_ms``.
    """

    replica_id: str
    changelog: str
    role: Role
    host: str
    location: str | None
    partitions: int
    held_partitions: tuple[int, ...]
    key_prefix: bytes | None = None
    position: Position = field(default_factory=Position.empty)
    lags: Mapping[int, LagInfo] = field(default_factory=dict)
    heartbeat_ms: int = 0
    ttl_ms: int = 15_000
    started_ms: int = 0
    pid: int = 0
    store_name: str | None = None
    loopback: str | None = None
    withdrawn: bool = False
    seen_ms: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        _text(self.replica_id, "replica_id")
        _text(self.changelog, "changelog")
        if not isinstance(self.role, Role):
            raise AnnouncementError(
                f"replica announcement: role must be a Role, got {self.role!r:.80}"
            )
        _text(self.host, "host")
        _text(self.location, "location", optional=True)
        if self.location is not None:
            host_info_of(self.location)
        _count(self.partitions, "partitions", 1, 2**31 - 1)
        held = self.held_partitions
        if isinstance(held, (str, bytes)) or not isinstance(held, (tuple, list)):
            raise AnnouncementError(
                f"replica announcement: held_partitions must be a list, got {held!r:.80}"
            )
        for partition in held:
            _count(partition, "a held partition", 0, self.partitions - 1)
        if not held or len(set(held)) != len(held):
            raise AnnouncementError(
                f"replica announcement: held_partitions must be distinct and not empty, got "
                f"{list(held)!r:.80}"
            )
        object.__setattr__(self, "held_partitions", tuple(sorted(held)))
        prefix = self.key_prefix
        if prefix is not None and (
            not isinstance(prefix, bytes) or not prefix or len(prefix) > _MAX_KEY_PREFIX
        ):
            raise AnnouncementError(
                "replica announcement: key_prefix must be None or 1 to "
                f"{_MAX_KEY_PREFIX} bytes, got {prefix!r:.80}"
            )
        if not isinstance(self.position, Position):
            raise AnnouncementError(
                f"replica announcement: position must be a Position, got {self.position!r:.80}"
            )
        lags = self.lags
        if not isinstance(lags, Mapping) or not all(
            _is_int(p) and isinstance(info, LagInfo) for p, info in lags.items()
        ):
            raise AnnouncementError(
                f"replica announcement: lags must map partitions to LagInfo, got {lags!r:.80}"
            )
        strays = sorted(set(lags) - set(self.held_partitions))
        if strays:
            raise AnnouncementError(
                f"replica announcement: lags of partitions {strays} the replica does not hold"
            )
        object.__setattr__(self, "lags", dict(sorted(lags.items())))
        _count(self.heartbeat_ms, "heartbeat_ms", 0)
        _count(self.ttl_ms, "ttl_ms", 1)
        _count(self.started_ms, "started_ms", 0)
        _count(self.pid, "pid", 0, 2**31 - 1)
        _text(self.store_name, "store_name", optional=True)
        _text(self.loopback, "loopback", optional=True)
        if not isinstance(self.withdrawn, bool):
            raise AnnouncementError(
                f"replica announcement: withdrawn must be true or false, got {self.withdrawn!r:.80}"
            )
        if self.seen_ms is not None:
            _count(self.seen_ms, "seen_ms", 0)

    @classmethod
    def of_store(
        cls, store: Store, *, location: str | None, ttl_ms: int, started_ms: int | None = None
    ) -> ReplicaAnnouncement:
        """The announcement of ``store``, owned by this process and served at ``location``
        (heartbeat 0: the announcer sets it, with the progress, when it publishes).

        Raises
        ------
        DiscoveryError
            If the store has no changelog (a leader that publishes none has no replicas topic).
        """
        from spark_statestore.discovery.loopback import loopback_identity

        manifest = store.manifest
        if manifest.changelog_topic is None:
            raise DiscoveryError(
                f"store {store.path} has no changelog topic, so it has no replicas topic to "
                "announce itself on"
            )
        return cls(
            replica_id=manifest.store_id,
            changelog=manifest.changelog_topic,
            role=manifest.role,
            host=socket.gethostname(),
            location=location,
            partitions=manifest.partitions,
            held_partitions=manifest.holds,
            key_prefix=manifest.key_prefix,
            ttl_ms=ttl_ms,
            started_ms=int(time.time() * 1000) if started_ms is None else started_ms,
            pid=os.getpid(),
            store_name=manifest.name,
            loopback=loopback_identity(),
        )

    # -- derived ----------------------------------------------------------------------------
    @property
    def host_info(self) -> HostInfo | None:
        """Where the replica answers queries, None when it does not serve."""
        return None if self.location is None else host_info_of(self.location)

    def holds(self, partition: int) -> bool:
        """True when the store holds changelog ``partition``."""
        return partition in self.held_partitions

    def holds_key(self, key: bytes, partition: int) -> bool:
        """True when the store holds ``key``, whose changelog partition is ``partition``."""
        prefix = self.key_prefix
        return self.holds(partition) and (prefix is None or key.startswith(prefix))

    def expires_ms(self, ttl_ms: int | None = None) -> int:
        """When the announcement goes stale without a newer one (epoch ms): its
        :attr:`seen_ms` (else its ``heartbeat_ms``) plus its TTL; ``ttl_ms`` overrides the
        announced TTL."""
        since = self.heartbeat_ms if self.seen_ms is None else self.seen_ms
        return since + (self.ttl_ms if ttl_ms is None else ttl_ms)

    def is_live(self, now_ms: int, ttl_ms: int | None = None) -> bool:
        """True while ``now_ms`` is before :meth:`expires_ms`."""
        return now_ms < self.expires_ms(ttl_ms)

    def with_heartbeat(
        self, heartbeat_ms: int, *, position: Position, lags: Mapping[int, LagInfo]
    ) -> ReplicaAnnouncement:
        """This announcement made again at ``heartbeat_ms`` with fresh progress."""
        return replace(self, heartbeat_ms=heartbeat_ms, position=position, lags=lags)

    # -- codec ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON-compatible form (the record value, before encoding)."""
        prefix = self.key_prefix
        return {
            "version": ANNOUNCEMENT_FORMAT_VERSION,
            "replica_id": self.replica_id,
            "changelog": self.changelog,
            "role": self.role.value,
            "host": self.host,
            "location": self.location,
            "partitions": self.partitions,
            "held_partitions": list(self.held_partitions),
            "key_prefix": None if prefix is None else base64.b64encode(prefix).decode("ascii"),
            "position": self.position.to_dict(),
            "lags": lags_to_dict(self.lags),
            "heartbeat_ms": self.heartbeat_ms,
            "ttl_ms": self.ttl_ms,
            "started_ms": self.started_ms,
            "pid": self.pid,
            **({} if self.store_name is None else {"store_name": self.store_name}),
            **({} if self.loopback is None else {"loopback": self.loopback}),
            **({"withdrawn": True} if self.withdrawn else {}),
        }

    def to_bytes(self) -> bytes:
        """The record value: compact UTF-8 JSON.

        Raises
        ------
        AnnouncementError
            If it would be larger than :data:`MAX_ANNOUNCEMENT_BYTES`.
        """
        raw = json.dumps(self.to_dict(), separators=(",", ":")).encode("utf-8")
        if len(raw) > MAX_ANNOUNCEMENT_BYTES:
            raise AnnouncementError(
                f"announcement of replica {self.replica_id!r} is {len(raw)} bytes, over the "
                f"{MAX_ANNOUNCEMENT_BYTES}-byte limit (its position has too many partitions)"
            )
        return raw

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReplicaAnnouncement:
        """Rebuild an announcement from :meth:`to_dict`'s form, checking every field.

        Raises
        ------
        AnnouncementError
            On a newer format version, a missing field or a malformed one.
        """
        if not isinstance(data, Mapping):
            raise AnnouncementError(
                f"replica announcement must be a JSON object, got {type(data).__name__}"
            )
        version = data.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise AnnouncementError(
                f"replica announcement: version must be an int >= 1, got {version!r:.80}"
            )
        if version > ANNOUNCEMENT_FORMAT_VERSION:
            raise AnnouncementError(
                f"replica announcement has format version {version}; this reader understands "
                f"version {ANNOUNCEMENT_FORMAT_VERSION} (a newer spark-statestore wrote it: "
                "upgrade)"
            )
        missing = [name for name in _REQUIRED if name not in data]
        if missing:
            raise AnnouncementError(f"replica announcement misses field(s) {', '.join(missing)}")
        role = data["role"]
        if role not in (Role.LEADER.value, Role.FOLLOWER.value):
            raise AnnouncementError(
                f"replica announcement: role must be 'leader' or 'follower', got {role!r:.80}"
            )
        held = data["held_partitions"]
        if not isinstance(held, list):
            raise AnnouncementError(
                f"replica announcement: held_partitions must be a list, got {held!r:.80}"
            )
        raw_prefix = data["key_prefix"]
        prefix = None
        if raw_prefix is not None:
            if not isinstance(raw_prefix, str) or len(raw_prefix) > 2 * _MAX_KEY_PREFIX:
                raise AnnouncementError(
                    "replica announcement: key_prefix must be base64 text or null, got "
                    f"{raw_prefix!r:.80}"
                )
            try:
                prefix = base64.b64decode(raw_prefix.encode("ascii"), validate=True)
            except (UnicodeEncodeError, binascii.Error) as exc:
                raise AnnouncementError(
                    f"replica announcement: key_prefix is not base64: {exc}"
                ) from exc
        lags = data["lags"]
        if not isinstance(lags, Mapping):
            raise AnnouncementError(
                f"replica announcement: lags must be an object, got {lags!r:.80}"
            )
        try:
            position = Position.from_dict(data["position"])
            parsed_lags = lags_from_dict(lags)
        except StateStoreError as exc:
            raise AnnouncementError(f"replica announcement: {exc}") from exc
        return cls(
            replica_id=data["replica_id"],
            changelog=data["changelog"],
            role=Role(role),
            host=data["host"],
            location=data["location"],
            partitions=data["partitions"],
            held_partitions=tuple(held),
            key_prefix=prefix,
            position=position,
            lags=parsed_lags,
            heartbeat_ms=data["heartbeat_ms"],
            ttl_ms=data["ttl_ms"],
            started_ms=data.get("started_ms", 0),
            pid=data.get("pid", 0),
            store_name=data.get("store_name"),
            loopback=data.get("loopback"),
            withdrawn=data.get("withdrawn", False),
        )

    @classmethod
    def from_bytes(cls, raw: bytes) -> ReplicaAnnouncement:
        """Decode a record value written by :meth:`to_bytes`.

        Raises
        ------
        AnnouncementError
            On a value over :data:`MAX_ANNOUNCEMENT_BYTES`, invalid UTF-8 or JSON, or any
            :meth:`from_dict` error.
        """
        if len(raw) > MAX_ANNOUNCEMENT_BYTES:
            raise AnnouncementError(
                f"replica announcement is {len(raw)} bytes, over the "
                f"{MAX_ANNOUNCEMENT_BYTES}-byte limit"
            )
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise AnnouncementError(f"replica announcement is not valid JSON: {exc}") from exc
        return cls.from_dict(data)
