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

from confluent_kafka import Consumer, Message

from spark_statestore.connectors.kafka import clients
from spark_statestore.connectors.kafka.errors import KafkaClientError
from spark_statestore.connectors.kafka.sink.progress import (
    PROGRESS_SUFFIX,
    parse_progress_message,
)
from spark_statestore.connectors.kafka.sink.ranges import read_ranges
from spark_statestore.position import Position

__all__ = ["KafkaBatchProgress"]

_WINDOW = 16
"""Offsets read back from the progress topic's end by the first step (a batch takes two:
its record and its transaction marker)."""


class KafkaBatchProgress:
    """The latest batch of a sink's changelog, from its progress topic.

    Parameters
    ----------
    bootstrap_servers, changelog, config
        The changelog's cluster, topic and the user's ``kafka.*`` settings.
    timeout_s
        How long one read of the progress topic may take.
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
        self._consumer: Consumer | None = clients.consumer(
            bootstrap_servers,
            config,
            group="spark-statestore-progress",
            what=f"progress topic {self.topic!r}",
        )

    def sample(self) -> tuple[Position, dict[int, int]]:
        """``(position, ends)`` of the latest committed batch: its records' position (empty
        when its writer recorded none) and its changelog partitions' end offsets; nothing
        (empty, empty) before the first batch.

        Raises
        ------
        KafkaClientError
            The progress topic cannot be read.
        ProgressRecordError
            Its latest record is malformed (the error names its offset).
        """
        consumer = self._consumer
        if consumer is None:
            raise KafkaClientError(f"the reader of progress topic {self.topic!r} is closed")
        low, end = clients.watermarks(consumer, self.topic, 0, self._timeout_s)
        window = _WINDOW
        while end > low:
            start = max(low, end - window)
            latest: Message | None = None
            for message in read_ranges(
                consumer,
                self.topic,
                {0: (start, end)},
                fail_on_data_loss=False,  # older records are not needed
                timeout_s=self._timeout_s,
            ):
                latest = message
            if latest is not None:
                return _sample_of(latest, self.topic)
            end, window = start, window * 4
        return Position.empty(), {}

    def close(self) -> None:
        """Release the consumer (idempotent)."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()


def _sample_of(message: Message, topic: str) -> tuple[Position, dict[int, int]]:
    record = parse_progress_message(message, topic)
    position = record.position if record.position is not None else Position.empty()
    return position, dict(record.changelog_end_offsets)
