"""The follower's Kafka read-ahead is bounded in total, in bytes and in records, whatever the
partition count."""

from __future__ import annotations

import pytest

from spark_statestore.connectors.kafka.follower.source import (
    READ_AHEAD_BYTES,
    READ_AHEAD_RECORDS,
    read_ahead_settings,
)

BASE = {"bootstrap.servers": "b", "fetch.max.bytes": 32 * 1024 * 1024}


@pytest.mark.parametrize("partitions", [1, 2, 8, 64])
def test_partitions_share_one_budget(partitions: int) -> None:
    settings = read_ahead_settings(BASE, {}, partitions)
    per_partition = settings["queued.max.messages.kbytes"] * 1024
    assert per_partition * partitions <= READ_AHEAD_BYTES
    assert settings["fetch.max.bytes"] <= per_partition
    assert settings["queued.min.messages"] * partitions <= READ_AHEAD_RECORDS
    # librdkafka refuses a fetch.max.bytes below message.max.bytes
    assert settings["message.max.bytes"] <= settings["fetch.max.bytes"]
    assert BASE["fetch.max.bytes"] == 32 * 1024 * 1024  # the caller's dict is not changed


def test_each_partition_keeps_a_useful_minimum() -> None:
    settings = read_ahead_settings(BASE, {}, 10_000)
    assert settings["queued.max.messages.kbytes"] == 256
    assert settings["fetch.max.bytes"] == 256 * 1024
    assert settings["queued.min.messages"] == 1_000


def test_the_users_own_limit_wins() -> None:
    user = {"queued.max.messages.kbytes": 500_000}
    settings = read_ahead_settings({**BASE, **user}, user, 8)
    assert settings["queued.max.messages.kbytes"] == 500_000
    assert settings["fetch.max.bytes"] == 32 * 1024 * 1024


def test_the_users_own_record_limit_wins() -> None:
    user = {"queued.min.messages": 7}
    settings = read_ahead_settings({**BASE, **user}, user, 8)
    assert settings["queued.min.messages"] == 7
    assert settings["queued.max.messages.kbytes"] * 1024 * 8 <= READ_AHEAD_BYTES


@pytest.mark.parametrize("partitions", [1, 8, 64, 10_000])
def test_librdkafka_takes_the_settings(partitions: int) -> None:
    from confluent_kafka import Consumer

    settings = read_ahead_settings(BASE, {}, partitions)
    Consumer({**settings, "group.id": "read-ahead"}).close()
