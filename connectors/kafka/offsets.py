"""Asking Kafka where a partition begins and ends, through leader changes and restarts."""

from __future__ import annotations

import contextlib
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition

from spark_statestore.connectors.kafka.errors import (
    KafkaClientError,
    _describe,
    _is_transient,
    _kafka_error,
)

__all__ = ["watermarks"]

_WATERMARK_ATTEMPT_S = 5.0


def watermarks(consumer: Consumer, topic: str, partition: int, timeout_s: float) -> tuple[int, int]:
    """``(earliest, end)`` of a partition; ``end`` is the last stable offset (read_committed).

    A client asks the leader it last heard of; after a leader change or a broker restart
    that request can wait out its whole timeout. So each attempt is short, and a transient
    failure refreshes the topic's metadata before the next one, until ``timeout_s``.
    """
    tp = TopicPartition(topic, partition)
    deadline = time.monotonic() + timeout_s
    while True:
        attempt = max(0.1, min(_WATERMARK_ATTEMPT_S, deadline - time.monotonic()))
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=attempt)
            return int(low), int(high)
        except KafkaException as exc:
            error = _kafka_error(exc)
            if error is None or not _is_transient(error) or time.monotonic() >= deadline:
                raise KafkaClientError(
                    f"cannot read the offsets of {topic}-{partition}: {_describe(error, exc)}",
                    error.code() if error is not None else None,
                ) from exc
        with contextlib.suppress(KafkaException):
            consumer.list_topics(topic, timeout=max(0.1, min(attempt, deadline - time.monotonic())))
