"""The follower's Kafka read-ahead is bounded in total, whatever the partition count."""

from __future__ import annotations

import pytest

from spark_statestore.connectors.kafka.follower.source import (
    READ_AHEAD_BYTES,
    read_ahead_settings,
)

BASE = {"bootstrap.servers": "b", "fetch.max.bytes": 32 * 1024 * 1024}


@pytest.mark.parametrize("partitions", [1, 2, 8, 64])
def test_partitions_share_one_budget(partitions: int) -> None:
    settings = read_ahead_settings(BASE, {}, partitions)
    per_partition = settings["queued.max.messages.kbytes"] * 1024
    assert per_partition * partitions <= READ_AHEAD_BYTES
    assert settings["fetch.max.bytes"] <= per_partition
    assert BASE["fetch.max.bytes"] == 32 * 1024 * 1024  # the caller's dict is not changed


def test_each_partition_keeps_a_useful_minimum() -> None:
    settings = read_ahead_settings(BASE, {}, 10_000)
    assert settings["queued.max.messages.kbytes"] == 1024
    assert settings["fetch.max.bytes"] == 1024 * 1024


def test_the_users_own_limit_wins() -> None:
    user = {"queued.max.messages.kbytes": 500_000}
    settings = read_ahead_settings({**BASE, **user}, user, 8)
    assert settings["queued.max.messages.kbytes"] == 500_000
    assert settings["fetch.max.bytes"] == 32 * 1024 * 1024
