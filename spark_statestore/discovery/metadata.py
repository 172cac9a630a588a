"""KIP-535 metadata computed from the live announcements of a changelog's replicas.

:class:`ReplicaSet` is what a reader of the replicas topic knows at one instant: the live
replica of each id. It answers Kafka Streams' questions the way Kafka Streams does, for
replicas that announce themselves through Kafka instead of through a consumer group:

* :meth:`ReplicaSet.metadata_for_key` is ``KafkaStreams#queryMetadataForKey``: the key's
  partition by Kafka's default partitioner, the active (leader) host when one is alive and
  the standby hosts (followers holding that partition and the key);
* :meth:`ReplicaSet.all_metadata` is ``KafkaStreams#streamsMetadataForStore``: every live
  replica with what it holds;
* :meth:`ReplicaSet.lags` is ``allLocalStorePartitionLags`` for every replica at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from spark_statestore.changelog import partition_for_key
from spark_statestore.discovery.announcement import ReplicaAnnouncement
from spark_statestore.discovery.errors import DiscoveryError
from spark_statestore.query import HostInfo, KeyQueryMetadata, LagInfo
from spark_statestore.store.manifest import Role

__all__ = ["ReplicaSet"]


@dataclass(frozen=True, slots=True)
class ReplicaSet:
    """The live replicas of one changelog's store, as announced.

    Parameters
    ----------
    changelog
        The changelog topic.
    replicas
        The live announcements (one per replica id); build it with :meth:`of`.
    refused
        Why the reader refused the last few records of the replicas topic (unsigned, a
        signature that does not verify, a clock off), for messages when none is live.
    """

    changelog: str
    replicas: tuple[ReplicaAnnouncement, ...]
    refused: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        changelog: str,
        announcements: Iterable[ReplicaAnnouncement],
        *,
        now_ms: int,
        ttl_ms: int | None = None,
        partitions: int | None = None,
    ) -> ReplicaSet:
        """The replicas of ``changelog`` among ``announcements`` that are live at ``now_ms``.

        Announcements of another changelog are left out, and so are withdrawn ones and
        those whose liveness time (the broker's append time, as the reader saw it, else the
        heartbeat) is older than their TTL (``ttl_ms`` overrides each one's own). With
        ``partitions`` (the changelog's partition count, as Kafka says), announcements that
        give another count are left out (made before the changelog was re-created: their
        partitions would not be the key's); without it the live announcements must agree.

        Raises
        ------
        DiscoveryError
            If two announcements have the same replica id, or, without ``partitions``, the
            live ones give different partition counts.
        """
        live: dict[str, ReplicaAnnouncement] = {}
        for announcement in announcements:
            if announcement.replica_id in live:
                raise DiscoveryError(
                    f"replica {announcement.replica_id!r} of {changelog!r} is given twice"
                )
            if (
                announcement.changelog == changelog
                and not announcement.withdrawn
                and announcement.is_live(now_ms, ttl_ms)
            ):
                live[announcement.replica_id] = announcement
        if partitions is not None:
            live = {k: a for k, a in live.items() if a.partitions == partitions}
        else:
            counts = sorted({a.partitions for a in live.values()})
            if len(counts) > 1:
                raise DiscoveryError(
                    f"the live replicas of {changelog!r} announce different partition counts "
                    f"{counts}: the changelog was re-created; give its partition count (the "
                    "registry reads it from Kafka)"
                )
        return cls(changelog, tuple(live[k] for k in sorted(live)))

    @property
    def partitions(self) -> int | None:
        """The changelog's partition count as the replicas announce it (None: no replica)."""
        return self.replicas[0].partitions if self.replicas else None

    def replica(self, replica_id: str) -> ReplicaAnnouncement | None:
        """The live replica ``replica_id``, or None."""
        return next((r for r in self.replicas if r.replica_id == replica_id), None)

    def leader(self) -> ReplicaAnnouncement | None:
        """The live leader replica that serves (the most recently started one, should an old
        owner's announcement not have expired yet), else None."""
        leaders = [r for r in self.replicas if r.role is Role.LEADER and r.location is not None]
        return max(leaders, key=lambda r: (r.started_ms, r.heartbeat_ms), default=None)

    def all_metadata(self) -> tuple[ReplicaAnnouncement, ...]:
        """Every live replica, by replica id (``streamsMetadataForStore``)."""
        return self.replicas

    def metadata_for_key(self, key: bytes) -> KeyQueryMetadata:
        """Which replicas can answer for ``key``, the serialized key as the changelog's
        records carry it (``queryMetadataForKey``).

        ``partition`` is Kafka's default partitioner's (``murmur2(key) % partitions``, as
        the changelog's writers partition); ``active`` the serving leader's host when one
        is alive; ``standbys`` the serving followers that hold the partition and, for a
        key-prefix subset, the key. :meth:`KeyQueryMetadata.not_available` when no replica
        is live (the partition count is then unknown).
        """
        count = self.partitions
        if count is None:
            return KeyQueryMetadata.not_available()
        partition = partition_for_key(key, count)
        leader = self.leader()
        active = leader.host_info if leader is not None else None
        standbys: set[HostInfo] = set()
        for replica in self.replicas:
            if replica.role is not Role.FOLLOWER or not replica.holds_key(key, partition):
                continue
            host = replica.host_info
            if host is not None and host != active:
                standbys.add(host)
        return KeyQueryMetadata(active, frozenset(standbys), partition)

    def lags(self) -> dict[str, dict[int, LagInfo]]:
        """``{replica id: {partition: LagInfo}}`` of every live replica, as last announced
        (a leader has no lag and reports none)."""
        return {r.replica_id: dict(r.lags) for r in self.replicas}

    def partition_lags(self) -> dict[int, Mapping[str, LagInfo]]:
        """``{partition: {replica id: LagInfo}}``: who holds each partition, how far behind."""
        table: dict[int, dict[str, LagInfo]] = {}
        for replica in self.replicas:
            for partition, info in replica.lags.items():
                table.setdefault(partition, {})[replica.replica_id] = info
        return dict(sorted(table.items()))

    def next_expiry_ms(self, ttl_ms: int | None = None) -> int | None:
        """When the first of these replicas goes stale without a new heartbeat (epoch ms)."""
        return min((r.expires_ms(ttl_ms) for r in self.replicas), default=None)
