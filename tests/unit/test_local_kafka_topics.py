"""Creating a topic on the local Kafka survives what a fresh cluster's client does.

The fault tests' three-node cluster once failed its first create_topic with _DESTROY_BROKER
("Broker handle destroyed without termination"): librdkafka drops the bootstrap broker's
handle once it has learned the brokers' ids, failing the request in flight. That is no
answer from Kafka; the request is asked again (and, having maybe created the topic, an
"already exists" then is success)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from spark_statestore.connectors.kafka.errors import LocalKafkaError
from spark_statestore.connectors.kafka.local import LocalKafkaCluster


class _Admin:
    """Answers create_topics with the given errors in turn (None: created)."""

    def __init__(self, *errors: int | None) -> None:
        self.errors = list(errors)
        self.calls = 0

    def create_topics(self, topics: list[Any], **_: Any) -> dict[str, Future[None]]:
        self.calls += 1
        future: Future[None] = Future()
        code = self.errors.pop(0)
        if code is None:
            future.set_result(None)
        else:
            future.set_exception(KafkaException(KafkaError(code)))
        return {topics[0].topic: future}


def cluster_with(admin: _Admin, monkeypatch: pytest.MonkeyPatch) -> LocalKafkaCluster:
    cluster = LocalKafkaCluster(brokers=3)
    monkeypatch.setattr(cluster, "admin", lambda: admin)
    monkeypatch.setattr(cluster, "_wait_for_leaders", lambda *args: None)
    return cluster


def test_a_dropped_broker_handle_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    admin = _Admin(KafkaError._DESTROY_BROKER, None)
    cluster_with(admin, monkeypatch).create_topic("t-changelog", 3)
    assert admin.calls == 2


def test_already_existing_after_a_lost_answer_is_success(monkeypatch: pytest.MonkeyPatch) -> None:
    admin = _Admin(KafkaError._DESTROY_BROKER, KafkaError.TOPIC_ALREADY_EXISTS)
    cluster_with(admin, monkeypatch).create_topic("t", 1)
    assert admin.calls == 2


@pytest.mark.parametrize(
    "code", [KafkaError.TOPIC_ALREADY_EXISTS, KafkaError.INVALID_REPLICATION_FACTOR]
)
def test_an_answer_from_kafka_fails_at_once(code: int, monkeypatch: pytest.MonkeyPatch) -> None:
    admin = _Admin(code)
    with pytest.raises(LocalKafkaError, match="could not create topic 't'"):
        cluster_with(admin, monkeypatch).create_topic("t", 1)
    assert admin.calls == 1
