"""Fault fixtures: Kafka clusters of their own, which the tests kill, pause and restart."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from spark_statestore.connectors.kafka.local import LocalKafkaCluster


@pytest.fixture(scope="module")
def lone_broker() -> Iterator[LocalKafkaCluster]:
    """One broker+controller node, for faults that take the whole cluster away (each test
    leaves it running)."""
    with LocalKafkaCluster(brokers=1) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def three_brokers() -> Iterator[LocalKafkaCluster]:
    """Three broker+controller nodes (a controller quorum of three), for leader changes."""
    with LocalKafkaCluster(brokers=3) as cluster:
        yield cluster
