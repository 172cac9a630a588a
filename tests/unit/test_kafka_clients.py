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


def test_settings_only_kafkas_java_client_has_are_named_with_what_to_give_instead() -> None:
    """Spark's Kafka source takes the Java client's settings; librdkafka refuses them."""
    java = {"sasl.jaas.config": "org.apache...PlainLoginModule required;"}
    with pytest.raises(KafkaClientError) as refused:
        clients.consumer(_NOWHERE, java, group="g", what="changelog 'c'")
    message = str(refused.value)
    assert "consumer settings for changelog 'c'" in message
    assert "instead of kafka.sasl.jaas.config, give kafka.sasl.mechanism" in message
    assert "kafka.sasl.username and kafka.sasl.password" in message
    truststore = {"ssl.truststore.location": "/etc/kafka/truststore.jks"}
    with pytest.raises(KafkaClientError, match=r"instead of kafka\.ssl\.truststore\.location, "):
        clients.producer(_NOWHERE, truststore, what="changelog 'c'")
    with pytest.raises(KafkaClientError, match=r"kafka\.ssl\.ca\.location"):
        clients.admin(_NOWHERE, truststore)
    assert clients.settings_hint({"no.such.setting": "1"}) == "; check the kafka.* options"


def test_a_request_nobody_answers_says_why_when_librdkafka_told() -> None:
    """Nothing listens on port 1: the request fails as a transport failure, and the cause
    (the refused connection, reported apart) is in the error with the options to check."""
    producer = clients.producer(_NOWHERE, {"log_level": 0}, what="changelog 'c'")
    with pytest.raises(KafkaClientError) as failed:
        clients.partition_count(producer, "t", timeout_s=0.5)
    message = str(failed.value)
    assert message.startswith("cannot read the metadata of topic 't': ")
    assert "; librdkafka reported while connecting: " in message
    assert "Connection refused" in message and message.count("(_TRANSPORT)") == 2
    assert message.endswith("check kafka.bootstrap.servers and kafka.security.protocol")
    cause = clients.unreachable_cause({"bootstrap.servers": _NOWHERE, "client.id": "x"}, 2.0)
    assert cause is not None and "Connection refused" in cause[0]
    # A client made elsewhere (no settings kept): the request's own error, as before.
    from confluent_kafka import Producer

    bare = Producer({"bootstrap.servers": _NOWHERE, "log_level": 0})
    with pytest.raises(KafkaClientError, match=r"; check kafka\.bootstrap\.servers$"):
        clients.partition_count(bare, "t", timeout_s=0.5)


def test_the_hint_follows_what_librdkafka_reported() -> None:
    """A failed TLS handshake is reported as _SSL or as _TRANSPORT (a fresh-clone run got
    the latter, and the hint named kafka.bootstrap.servers instead of the CA)."""
    from confluent_kafka import KafkaError

    handshake = (
        "b/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate verify failed"
    )
    for code in (KafkaError._SSL, KafkaError._TRANSPORT):
        assert "kafka.ssl.ca.location" in clients._cause_hint(KafkaError(code, handshake))
    refused = KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: Invalid")
    assert "kafka.sasl.password" in clients._cause_hint(refused)
    plain = "SSL handshake failed: Disconnected: connecting to a PLAINTEXT broker listener?"
    hint = clients._cause_hint(KafkaError(KafkaError._TRANSPORT, plain))
    assert hint == "check kafka.security.protocol: that listener does not speak TLS"
    down = KafkaError(
        KafkaError._TRANSPORT, "Connect to ipv4#127.0.0.1:1 failed: Connection refused"
    )
    assert clients._cause_hint(down) == "check kafka.bootstrap.servers and kafka.security.protocol"
