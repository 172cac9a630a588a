"""Errors of the Kafka bindings.

librdkafka failures are wrapped once, here at the adapter, so callers can catch
:class:`~spark_statestore.errors.StateStoreError` and still reach the underlying error code.
"""

from __future__ import annotations

from spark_statestore.errors import StateStoreError

__all__ = [
    "DataLossError",
    "EmbeddedBrokerError",
    "KafkaClientError",
    "LibrdkafkaNotFoundError",
]


class KafkaClientError(StateStoreError, RuntimeError):
    """A Kafka client operation failed.

    Attributes
    ----------
    code
        The librdkafka / Kafka protocol error code when known, else None.
    """

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class DataLossError(KafkaClientError):
    """Offsets a reader needed are gone from the topic (retention, compaction of a
    non-compacted range, or a deleted and re-created topic).

    Attributes
    ----------
    topic, partition
        Where the data was lost.
    wanted
        The offset the reader needed next.
    available
        ``(low, high)`` watermarks of the partition when the loss was detected.
    """

    def __init__(
        self, message: str, topic: str, partition: int, wanted: int, available: tuple[int, int]
    ) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.wanted = wanted
        self.available = available


class EmbeddedBrokerError(StateStoreError, RuntimeError):
    """The embedded (mock) Kafka broker could not be started or controlled.

    Attributes
    ----------
    code
        The librdkafka error code returned by the mock API when there is one.
    """

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class LibrdkafkaNotFoundError(EmbeddedBrokerError):
    """The librdkafka shared library (or its mock-cluster symbols) could not be loaded."""
