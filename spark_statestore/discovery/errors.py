"""Errors of replica discovery."""

from __future__ import annotations

from spark_statestore.errors import StateStoreError

__all__ = [
    "AnnouncementError",
    "AnnouncementNotDeliveredError",
    "DiscoveryError",
    "UnverifiableReplicaError",
]


class DiscoveryError(StateStoreError):
    """Replica discovery failed (announcing a replica, or reading who announced)."""


class AnnouncementError(DiscoveryError, ValueError):
    """A replica announcement is malformed (bad JSON, a missing field, a wrong type, too
    large, a newer format version)."""


class UnverifiableReplicaError(DiscoveryError):
    """A replica's announced location is one the reader cannot verify, so it is not sent the
    credential (a plain location beyond this host's loopback, TLS without configured roots,
    a unix socket)."""


class AnnouncementNotDeliveredError(DiscoveryError):
    """An announcement was still queued when its wait (at most its TTL) ended: Kafka is
    slow, not refusing it."""
