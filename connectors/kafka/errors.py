"""Errors of the Kafka bindings.

librdkafka failures are wrapped once, here at the adapter, so callers can catch
:class:`~spark_statestore.errors.StateStoreError` and still reach the underlying error code.
:func:`kafka_error_of`, :func:`describe_error` and :func:`is_transient` find, render and
classify the ``KafkaError`` behind a confluent-kafka exception for the modules that wrap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_statestore.changelog.errors import ChangelogFormatError
from spark_statestore.errors import StateStoreError

if TYPE_CHECKING:
    from confluent_kafka import KafkaError

__all__ = [
    "BrokerStartError",
    "DataLossError",
    "JarsMissingError",
    "JavaNotFoundError",
    "KafkaClientError",
    "LocalKafkaError",
    "ProducerFencedError",
    "ProgressRecordError",
    "StreamsAppError",
    "TransactionTimeoutError",
    "client_error",
    "describe_error",
    "is_transient",
    "kafka_error_of",
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


class TransactionTimeoutError(KafkaClientError):
    """A batch's transaction lived longer than the producer's ``transaction.timeout.ms``, so
    the transaction coordinator aborted it. Publishing the same batch again fails the same
    way: the timeout must be raised, or the batches made smaller.

    Attributes
    ----------
    batch_id
        The micro-batch whose transaction was aborted.
    changes
        How many changes had been produced when the timeout was detected.
    elapsed_s
        How long the transaction had been open.
    timeout_ms
        The producer's ``transaction.timeout.ms``.
    """

    def __init__(
        self,
        message: str,
        *,
        batch_id: int,
        changes: int,
        elapsed_s: float,
        timeout_ms: int,
        code: int | None = None,
    ) -> None:
        super().__init__(message, code)
        self.batch_id = batch_id
        self.changes = changes
        self.elapsed_s = elapsed_s
        self.timeout_ms = timeout_ms


class ProgressRecordError(ChangelogFormatError):
    """A sink's progress record is malformed (bad JSON, a missing field, a field of the
    wrong type)."""


class LocalKafkaError(StateStoreError, RuntimeError):
    """A local Kafka cluster (``spark-statestore broker``) could not be started or controlled."""


class StreamsAppError(LocalKafkaError):
    """The interop Kafka Streams app did not start, failed, or did not answer in time."""


class JarsMissingError(LocalKafkaError):
    """The jars a JVM process needs were never resolved (``spark-statestore jars``)."""


class JavaNotFoundError(LocalKafkaError):
    """No Java 17+ runtime was found (``JAVA_HOME`` or ``java`` on PATH)."""


class BrokerStartError(LocalKafkaError):
    """A Kafka node did not start; the message says why and what to do.

    Attributes
    ----------
    port_taken
        True when the node could not bind its port (another process has it).
    """

    def __init__(self, message: str, *, port_taken: bool = False) -> None:
        super().__init__(message)
        self.port_taken = port_taken


# -- for the modules that wrap client errors ---------------------------------------


def kafka_error_of(exc: BaseException | None) -> KafkaError | None:
    """The KafkaError of ``exc`` or of an exception it was raised from.

    confluent-kafka raises a fatal error (a fenced producer) out of ``poll()``/``flush()``
    while it serves delivery reports, which then surfaces as a ``SystemError`` whose cause is
    the ``KafkaException``; looking down the chain finds it.
    """
    # Imported here, not at the top: this module loads without confluent-kafka (the CLI's
    # broker and jars commands, the engine's error types).
    from confluent_kafka import KafkaError, KafkaException

    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
            return exc.args[0]
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def is_transient(error: KafkaError) -> bool:
    """True for a request error that a broker coming back or a leader moving ends: a
    broker that went away (killed, restarted, paused past a timeout), a leader that moved.
    Worth asking again after a metadata refresh; anything else (a deleted topic, a refused
    authorization, a fatal error) is for the caller to report."""
    from confluent_kafka import KafkaError

    if error.fatal():
        return False
    return error.retriable() or error.code() in (
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._DESTROY_BROKER,
        KafkaError._RESOLVE,
        KafkaError._TIMED_OUT,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
    )


def client_error(exc: BaseException, what: str, hint: str = "") -> KafkaClientError:
    """The :class:`KafkaClientError` for a confluent-kafka failure ``exc``: ``what`` failed,
    librdkafka's description, then ``hint`` (e.g. ``"; check the kafka.* options"``), with
    the error code when there is one. The caller raises it ``from exc``."""
    error = kafka_error_of(exc)
    return KafkaClientError(
        f"{what}: {describe_error(error, exc)}{hint}", error.code() if error is not None else None
    )


def describe_error(error: KafkaError | None, exc: BaseException | None = None) -> str:
    """``error``'s text and name, else ``exc``'s text."""
    if error is not None:
        return f"{error.str()} ({error.name()})"
    return str(exc) if exc is not None else "unknown error"
