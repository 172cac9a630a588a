"""The changelog writer's producer on the compiled extension (the fast path of
:class:`~spark_statestore.connectors.kafka.sink.writer.ChangelogWriter`).

The extension's ``Producer`` is librdkafka, as confluent-kafka's is, with the same settings.
It produces a chunk of rows per call and keeps the delivery reports itself (each changelog
partition's last acknowledged offset, the first failed delivery), so no Python call happens
per record. This wrapper gives it the calls the writer makes of a confluent-kafka
``Producer``, and turns the extension's errors into confluent-kafka's
:class:`~confluent_kafka.KafkaException` with the same code and flags (fatal, retriable,
abortable), so the writer classifies them on both paths alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException

__all__ = ["NOT_PLAIN", "QUEUE_FULL", "NativeProducer"]

NOT_PLAIN = 1
"""``produce_rows`` stopped at a row with a field of another type than the plain ones."""
QUEUE_FULL = 2
"""``produce_rows`` stopped at a row because the local queue is full."""

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class _TopicInfo:
    error: KafkaError | None
    partitions: dict[int, None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Metadata:
    topics: dict[str, _TopicInfo]


def _ms(timeout_s: float) -> int:
    return max(0, min(int(timeout_s * 1000), 2**31 - 1))


class NativeProducer:
    """A transactional producer of the extension with confluent-kafka's calls.

    Parameters
    ----------
    extension
        The ``spark_statestore_native`` module.
    settings
        librdkafka properties as strings (no Python callbacks).
    watched
        The topic whose acknowledged partition ends :meth:`take_deliveries` reports.

    Raises
    ------
    KafkaException
        librdkafka refuses the settings (``_INVALID_ARG``).
    """

    def __init__(self, extension: ModuleType, settings: Mapping[str, str], watched: str) -> None:
        self._call_error: type[Exception] = extension.KafkaCallError
        self._producer = self._call(lambda: extension.Producer(list(settings.items()), watched))
        # What clients.unreachable_cause asks a probe with when the brokers do not answer.
        self.kafka_settings: Mapping[str, str] = dict(settings)

    def _call(self, call: Callable[[], _T]) -> _T:
        try:
            return call()
        except self._call_error as exc:
            code, reason, fatal, retriable, abortable = exc.args
            error = KafkaError(
                code, reason, fatal=fatal, retriable=retriable, txn_requires_abort=abortable
            )
            raise KafkaException(error) from None

    # -- confluent-kafka's transactional calls ----------------------------------------------
    def init_transactions(self, timeout: float) -> None:
        self._call(lambda: self._producer.init_transactions(_ms(timeout)))

    def begin_transaction(self) -> None:
        self._call(self._producer.begin_transaction)

    def commit_transaction(self, timeout: float) -> None:
        self._call(lambda: self._producer.commit_transaction(_ms(timeout)))

    def abort_transaction(self, timeout: float) -> None:
        self._call(lambda: self._producer.abort_transaction(_ms(timeout)))

    def poll(self, timeout: float) -> int:
        served: int = self._producer.poll(_ms(timeout))
        return served

    def flush(self, timeout: float) -> int:
        remaining: int = self._producer.flush(_ms(timeout))
        return remaining

    def __len__(self) -> int:
        outstanding: int = self._producer.outstanding()
        return outstanding

    def list_topics(self, topic: str, timeout: float) -> _Metadata:
        """``topic``'s metadata, shaped as the part of confluent-kafka's ``ClusterMetadata``
        that :func:`~spark_statestore.connectors.kafka.clients.partition_count` reads."""
        error, topic_error, count = self._producer.topic_metadata(topic, _ms(timeout))
        if error:
            raise KafkaException(KafkaError(error))
        info = _TopicInfo(
            KafkaError(topic_error) if topic_error else None, dict.fromkeys(range(count))
        )
        return _Metadata({topic: info})

    def close(self) -> None:
        self._producer.close()

    # -- the column calls ---------------------------------------------------------------------
    def produce_rows(
        self,
        topic: str,
        keys: list[Any],
        values: list[Any],
        partitions: list[Any],
        timestamps: list[Any],
        headers: list[tuple[str, bytes]] | None,
        start: int,
    ) -> tuple[int, int]:
        """Produce rows ``start...`` to ``topic``; ``(next row, stop)``: stop 0 when every
        row was produced, :data:`NOT_PLAIN` or :data:`QUEUE_FULL` for the row ``next``.

        Raises
        ------
        KafkaException
            librdkafka refused a record (an unknown partition, a record over
            ``message.max.bytes``, not in a transaction, ...).
        """
        row, stop = self._call(
            lambda: self._producer.produce_rows(
                topic, keys, values, partitions, timestamps, headers, start
            )
        )
        return int(row), int(stop)

    def take_deliveries(self) -> tuple[dict[int, int], tuple[KafkaError, str, int] | None]:
        """The delivery reports served since the last call: ``{partition: highest
        acknowledged offset}`` of the watched topic and the first failed delivery
        ``(error, topic, partition)`` (records purged by an abort are not failures)."""
        ends, failed = self._producer.take_deliveries()
        if failed is None:
            return ends, None
        code, topic, partition = failed
        return ends, (KafkaError(code), topic, partition)
