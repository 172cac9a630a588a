"""Building Kafka clients (connectors/kafka/clients.py): no broker is contacted here."""

from __future__ import annotations

import pytest

from spark_statestore.connectors.kafka import clients
from spark_statestore.connectors.kafka.errors import KafkaClientError
from spark_statestore.connectors.kafka.tail import tail_changelog

_NOWHERE = "127.0.0.1:1"


def test_a_reading_consumer_refuses_another_isolation_level() -> None:
    with pytest.raises(KafkaClientError, match=r"changelog 'c'.*read_committed.*read_uncommitted"):
        clients.consumer(
            _NOWHERE, {"isolation.level": "read_uncommitted"}, group="g", what="changelog 'c'"
        )
    consumer = clients.consumer(
        _NOWHERE, {"isolation.level": "read_committed"}, group="g", what="changelog 'c'"
    )
    consumer.close()


def test_tail_reads_committed_records_only() -> None:
    # tail let a kafka setting switch its consumer to read_uncommitted (it printed records of
    # open and aborted transactions as if committed).
    with pytest.raises(KafkaClientError, match="read_committed"):
        next(tail_changelog(_NOWHERE, "t", consumer_config={"isolation.level": "read_uncommitted"}))


def test_refused_settings_name_what_the_client_was_for() -> None:
    with pytest.raises(KafkaClientError, match=r"consumer settings for changelog 'c'"):
        clients.consumer(_NOWHERE, {"no.such.setting": "1"}, group="g", what="changelog 'c'")
    with pytest.raises(KafkaClientError, match=r"producer settings for changelog 'c'"):
        clients.producer(_NOWHERE, {"no.such.setting": "1"}, what="changelog 'c'")


def test_clients_reconnect_quickly_unless_the_user_says_otherwise() -> None:
    """A fresh client's first request waits about reconnect.backoff.ms; ours default to
    10 ms (a sink commit makes fresh clients every micro-batch); kafka.* settings win."""
    settings = clients.consumer_settings("127.0.0.1:9", None, group="g", what="w")
    assert settings["reconnect.backoff.ms"] == 10
    chosen = clients.consumer_settings(
        "127.0.0.1:9", {"reconnect.backoff.ms": 500}, group="g", what="w"
    )
    assert chosen["reconnect.backoff.ms"] == 500
