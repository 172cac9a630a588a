"""Errors of the checkpoint filesystem layer (reading a query's ``checkpointLocation``).

:class:`CheckpointLocationError` is raised while the options are parsed (the query has not
written anything yet): the location or the settings for its filesystem cannot be used.
:class:`CheckpointReadError` is raised when a file of the checkpoint cannot be read.
Both are :class:`~spark_statestore.connectors.spark.errors.SinkError`.
"""

from __future__ import annotations

from spark_statestore.connectors.spark.errors import SinkError
from spark_statestore.errors import OptionError

__all__ = ["CheckpointLocationError", "CheckpointReadError"]


class CheckpointLocationError(SinkError, OptionError):
    """``checkpointLocation`` (or a filesystem option) names a location the sink cannot read:
    a malformed URI, a scheme it has no filesystem for, a missing NameNode address."""


class CheckpointReadError(SinkError):
    """A file of the query's checkpoint could not be read through its filesystem.

    Attributes
    ----------
    missing : bool
        True when the filesystem answered that the file does not exist (as opposed to a
        refused, unreachable or failing filesystem).
    """

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing
