"""Replica discovery on Kafka: the announcer a live store owner runs and the registry that
reads a changelog's ``<changelog>-replicas`` topic (see :mod:`spark_statestore.discovery`)."""

from spark_statestore.connectors.kafka.discovery.announcer import (
    REPLICAS_TOPIC_CONFIG,
    ReplicaAnnouncer,
    announce_store,
    ensure_replicas_topic,
)
from spark_statestore.connectors.kafka.discovery.registry import ReplicaRegistry

__all__ = [
    "REPLICAS_TOPIC_CONFIG",
    "ReplicaAnnouncer",
    "ReplicaRegistry",
    "announce_store",
    "ensure_replicas_topic",
]
