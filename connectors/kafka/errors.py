"""Errors of the Kafka bindings.

librdkafka failures are wrapped once, here at the adapter, so callers can catch
:class:`~spark_statestore.errors.StateStoreError` and still reach the underlying error code.
The private helpers :func:`_kafka_error` and :func:`_describe` find and render the
``KafkaError`` behind a confluent-kafka exception for the modules that do the wrapping.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_statestore.errors import StateStoreError

if TYPE_CHECKING:
    from confluent_kafka import KafkaError

__all__ = [
    "DataLossError",
    "EmbeddedBrokerError",
    "KafkaClientError",
    "LibrdkafkaNotFoundError",
    "ProducerFencedError",
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


class ProducerFencedError(KafkaClientError):
    """Another writer initialized the same transactional id, so this one may not commit.

    Attributes
    ----------
    transactional_id
        The contested transactional id.
    """

    def __init__(self, message: str, transactional_id: str, code: int | None = None) -> None:
        super().__init__(message, code)
        self.transactional_id = transactional_id


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


# -- helpers for the modules that wrap client errors ---------------------------------------


def _kafka_error(exc: BaseException | None) -> KafkaError | None:
    """The KafkaError of ``exc`` or of an exception it was raised from.

    confluent-kafka raises a fatal error (a fenced producer) out of ``poll()``/``flush()``
    while it serves delivery reports, which then surfaces as a ``SystemError`` whose cause is
    the ``KafkaException``; looking down the chain finds it.
    """
    # Imported here, not at the top: this module must load without confluent-kafka, so
    # that a missing client surfaces as LibrdkafkaNotFoundError (with its install hint).
    from confluent_kafka import KafkaError, KafkaException

    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
            return exc.args[0]
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def _describe(error: KafkaError | None, exc: BaseException | None = None) -> str:
    if error is not None:
        return f"{error.str()} ({error.name()})"
    return str(exc) if exc is not None else "unknown error"
