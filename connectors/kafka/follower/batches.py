"""How far a sink's changelog holds whole batches: its progress topic, read by a follower.

Every record of a sink's batch carries the batch's position in its ``c`` header, and a batch
spans the changelog's partitions, so a follower that merged the headers of the records it
has applied would claim a batch's position as soon as it applied one of its records. A
follower of a changelog that has a ``<changelog>-progress`` topic (a sink's) therefore takes
its position from there instead (:class:`KafkaBatchProgress`, a
:class:`~spark_statestore.follower.LeaderProgress`): the latest batch's position, granted
once the follower has applied the batch's partitions up to their end offsets, both written
in the progress record of the same Kafka transaction as the batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from spark_statestore.connectors.kafka import clients
from spark_statestore.connectors.kafka.errors import KafkaClientError, describe_error
from spark_statestore.connectors.kafka.sink.progress import (
    PROGRESS_SUFFIX,
    parse_progress_message,
)
from spark_statestore.position import Position

__all__ = ["KafkaBatchProgress"]

_WINDOW = 1024
"""Offsets before the progress topic's end where the tail starts (a batch takes two, its
record and its transaction marker; aborted attempts take more)."""
_DRAIN = 1024


class KafkaBatchProgress:
    """The latest batch of a sink's changelog, tailing its progress topic.

    One consumer, assigned once near the topic's end, keeps fetching in the background;
    :meth:`sample` takes what has arrived without waiting, so the follower thread never
    blocks on it.

    Parameters
    ----------
    bootstrap_servers, changelog, config
        The changelog's cluster, topic and the user's ``kafka.*`` settings.
    timeout_s
        How long finding the progress topic's end may take.

    Raises
    ------
    KafkaClientError
        The progress topic's end cannot be read.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        changelog: str,
        *,
        config: Mapping[str, Any] | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.topic = changelog + PROGRESS_SUFFIX
        self._timeout_s = timeout_s
        consumer = clients.consumer(
            bootstrap_servers,
            config,
            group="spark-statestore-progress",
            what=f"progress topic {self.topic!r}",
        )
        try:
            low, end = clients.watermarks(consumer, self.topic, 0, timeout_s)
            consumer.assign([TopicPartition(self.topic, 0, max(low, end - _WINDOW))])
        except BaseException:
            consumer.close()
            raise
        self._consumer: Consumer | None = consumer

    def sample(self) -> tuple[Position, dict[int, int]] | None:
        """``(position, ends)`` of the latest committed batch read since the last call: its
        records' position (empty when its writer recorded none) and its changelog
        partitions' end offsets; None when no batch has arrived since.

        Raises
        ------
        KafkaClientError
            The progress topic cannot be read.
        ProgressRecordError
            A progress record is malformed (the error names its offset).
        """
        consumer = self._consumer
        if consumer is None:
            raise KafkaClientError(f"the reader of progress topic {self.topic!r} is closed")
        latest = None
        for message in consumer.consume(_DRAIN, timeout=0):
            error = message.error()
            if error is None:
                latest = _sample_of(message, self.topic)
            elif error.code() == KafkaError._AUTO_OFFSET_RESET:
                # Older records were deleted (retention, compaction): restart at the start.
                low, _ = clients.watermarks(consumer, self.topic, 0, self._timeout_s)
                consumer.assign([TopicPartition(self.topic, 0, low)])
            elif error.code() != KafkaError._PARTITION_EOF:
                raise KafkaClientError(
                    f"reading progress topic {self.topic!r} failed: {describe_error(error)}",
                    error.code(),
                )
        return latest

    def note(self) -> str | None:
        """Nothing: a progress topic that cannot be read fails the follower (see
        :meth:`sample`)."""
        return None

    def close(self) -> None:
        """Release the consumer (idempotent)."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()


def _sample_of(message: Message, topic: str) -> tuple[Position, dict[int, int]]:
    record = parse_progress_message(message, topic)
    position = record.position if record.position is not None else Position.empty()
    return position, dict(record.changelog_end_offsets)
