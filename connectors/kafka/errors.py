"""Errors of the Kafka bindings.

librdkafka failures are wrapped once, here at the adapter, so callers can catch
:class:`~spark_statestore.errors.StateStoreError` and still reach the underlying error code.
"""

from __future__ import annotations

from spark_statestore.errors import StateStoreError

__all__ = ["EmbeddedBrokerError", "KafkaClientError", "LibrdkafkaNotFoundError"]


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
