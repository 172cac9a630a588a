"""Errors of the Spark connector (follower source, snapshot reader, sink).

:class:`SparkSourceError` is the root of every error the Spark connector raises on purpose;
it derives from :class:`~spark_statestore.errors.StateStoreError`. Option problems also
derive from :class:`~spark_statestore.errors.OptionError` (a ``ValueError``).
:class:`LocalSparkError` is the root of the errors of local Spark processes (the standalone
cluster, the Connect server).
"""

from __future__ import annotations

from spark_statestore.errors import OptionError, StateStoreError

__all__ = [
    "ConnectServerError",
    "DDLError",
    "DecodeError",
    "EncodeError",
    "LocalSparkError",
    "NotUpToBoundError",
    "SinkError",
    "SparkClusterStartError",
    "SparkSourceError",
    "StaleSnapshotError",
]


class SparkSourceError(StateStoreError):
    """Root of the errors raised by the Spark connector."""


class DDLError(SparkSourceError, OptionError):
    """A Spark DDL schema string (``valueSchema``, ``keySchema``) could not be parsed.

    Also raised when a schema cannot be rendered back to DDL.

    Parameters
    ----------
    message
        The full message: what was expected, where, and the offending text.
    position
        The 0-based character offset in the DDL string where parsing failed, when known.

    Attributes
    ----------
    position : int or None
    """

    def __init__(self, message: str, *, position: int | None = None) -> None:
        super().__init__(message)
        self.position = position


class DecodeError(SparkSourceError, ValueError):
    """A key or value could not be decoded with the configured ``keyFormat``/``valueFormat``.

    Raised in FAILFAST mode only; in PERMISSIVE mode the value becomes null and is counted.

    Parameters
    ----------
    message
        The full message: the record's location, the format, the byte length, what to do.
    index
        The position of the value in the decoded batch.

    Attributes
    ----------
    index : int
    """

    def __init__(self, message: str, *, index: int) -> None:
        super().__init__(message)
        self.index = index


class EncodeError(SparkSourceError, ValueError):
    """A filter literal cannot be encoded to the stored bytes, so the filter is not pushable."""


class SinkError(SparkSourceError):
    """The sink cannot take this input or commit this batch."""


class StaleSnapshotError(SparkSourceError):
    """The store is behind what the read demands (``positionBound`` or ``maxLag``)."""


class NotUpToBoundError(StaleSnapshotError):
    """The store has not reached ``positionBound`` (within ``positionBoundTimeoutMs``)."""


class LocalSparkError(StateStoreError, RuntimeError):
    """A local Spark standalone cluster (:mod:`~spark_statestore.connectors.spark.local`)
    could not be started or controlled."""


class SparkClusterStartError(LocalSparkError):
    """The Master, a Worker or an executor of a local Spark cluster did not come up; the
    message has the end of its log.

    Attributes
    ----------
    port_taken
        True when the Master could not bind its port (another process took it).
    """

    def __init__(self, message: str, *, port_taken: bool = False) -> None:
        super().__init__(message)
        self.port_taken = port_taken


class ConnectServerError(LocalSparkError):
    """A local Spark Connect server (:mod:`spark_statestore.connectors.spark.local.connect`)
    did not start, or its process is gone; the message has the end of its log."""
