"""Replica discovery through Kafka and KIP-535 key metadata.

Every live owner of a store of a changelog announces itself on the changelog's compacted
replicas topic (``<changelog>-replicas``, key = replica id, value = a
:class:`ReplicaAnnouncement`); a tombstone on a clean stop, and an announcement older than
its TTL counts as gone. :class:`ReplicaSet` holds the live replicas a reader found and
answers ``metadata_for_key``, ``all_metadata`` and ``lags`` (KIP-535); a :class:`Router`
sends IQv2 requests to the replicas that can answer them, failing over, and a
:class:`RoutedScan` reads large scans from them in pages of pinned snapshots. The Kafka side (the
announcer and the registry reading the topic) is in
``spark_statestore.connectors.kafka.discovery``.
"""

from spark_statestore.discovery.announcement import (
    ANNOUNCEMENT_FORMAT_VERSION,
    MAX_ANNOUNCEMENT_BYTES,
    REPLICAS_SUFFIX,
    ReplicaAnnouncement,
    host_info_of,
)
from spark_statestore.discovery.errors import AnnouncementError, DiscoveryError, RoutedScanError
from spark_statestore.discovery.metadata import ReplicaSet
from spark_statestore.discovery.router import Router, merged_rows
from spark_statestore.discovery.scan import RoutedScan

__all__ = [
    "ANNOUNCEMENT_FORMAT_VERSION",
    "MAX_ANNOUNCEMENT_BYTES",
    "REPLICAS_SUFFIX",
    "AnnouncementError",
    "DiscoveryError",
    "ReplicaAnnouncement",
    "ReplicaSet",
    "RoutedScan",
    "RoutedScanError",
    "Router",
    "host_info_of",
    "merged_rows",
]
