"""Errors of replica discovery."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spark_statestore.errors import StateStoreError

__all__ = [
    "AnnouncementError",
    "AnnouncementNotDeliveredError",
    "DiscoveryError",
    "RoutedScanError",
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


class RoutedScanError(DiscoveryError):
    """A routed scan could not read some partitions: no replica could pin a snapshot for
    them, or one failed in the middle and none could continue from there.

    ``failures`` holds the last routing's failed result of each partition (as
    ``Router.query`` gives them: reason and message naming the replicas asked); empty when
    the scan gave up for another reason (the message says which).
    """

    def __init__(self, message: str, failures: Mapping[int, Any]) -> None:
        super().__init__(message)
        self.failures = dict(failures)
