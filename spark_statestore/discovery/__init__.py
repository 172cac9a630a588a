"""Replica discovery through Kafka and KIP-535 key metadata.

Every live owner of a store of a changelog announces itself on the changelog's compacted
replicas topic (``<changelog>-replicas``, key = replica id, value = a signed
:class:`ReplicaAnnouncement`); a signed withdrawal on a clean stop, and an announcement
older than its TTL (by the broker's clock) counts as gone. :class:`ReplicaSet` holds the
live replicas a reader found and answers ``metadata_for_key``, ``all_metadata`` and
``lags`` (KIP-535); a :class:`Router` sends IQv2 requests to the replicas that can answer
them, failing over. Announcements are signed with a :class:`MembershipKey` and believed
only under the reader's :class:`MembershipKeys`; :func:`connect_replica` sends the
replicas' token only to a location it can verify; a :class:`RoutedScan` reads large
scans in pages of pinned snapshots. The Kafka side (the announcer and the
registry reading the topic) is in ``spark_statestore.connectors.kafka.discovery``.
"""

from spark_statestore.discovery.announcement import (
    ANNOUNCEMENT_FORMAT_VERSION,
    MAX_ANNOUNCEMENT_BYTES,
    REPLICAS_SUFFIX,
    ReplicaAnnouncement,
    announce_ttl_ms,
    host_info_of,
)
from spark_statestore.discovery.errors import (
    AnnouncementError,
    DiscoveryError,
    RoutedScanError,
    UnverifiableReplicaError,
)
from spark_statestore.discovery.metadata import ReplicaSet
from spark_statestore.discovery.router import Router, merged_rows
from spark_statestore.discovery.scan import RoutedScan
from spark_statestore.discovery.signing import MembershipKey, MembershipKeys
from spark_statestore.discovery.trust import connect_replica

__all__ = [
    "ANNOUNCEMENT_FORMAT_VERSION",
    "MAX_ANNOUNCEMENT_BYTES",
    "REPLICAS_SUFFIX",
    "AnnouncementError",
    "DiscoveryError",
    "MembershipKey",
    "MembershipKeys",
    "ReplicaAnnouncement",
    "ReplicaSet",
    "RoutedScan",
    "RoutedScanError",
    "Router",
    "UnverifiableReplicaError",
    "announce_ttl_ms",
    "connect_replica",
    "host_info_of",
    "merged_rows",
]
