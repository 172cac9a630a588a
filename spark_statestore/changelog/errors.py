"""Errors of the changelog wire format.

:class:`ChangelogFormatError` is the one error type the changelog decoders document: a
decoder either returns a value or raises it (or a subclass), never ``IndexError``,
``struct.error`` or ``UnicodeDecodeError``. It carries the changelog record's location
(``topic``, ``partition``, ``offset``) when the caller knows it.
"""

from __future__ import annotations

from typing import TypeVar

from spark_statestore.errors import StateStoreError

__all__ = [
    "ChangelogFormatError",
    "MissingPositionHeaderError",
    "PartitionerError",
    "PositionHeaderError",
]

_E = TypeVar("_E", bound="ChangelogFormatError")


def _describe_location(topic: str | None, partition: int | None, offset: int | None) -> str:
    parts = []
    if topic is not None:
        parts.append(f"topic {topic}")
    if partition is not None:
        parts.append(f"partition {partition}")
    if offset is not None:
        parts.append(f"offset {offset}")
    return " ".join(parts)


class ChangelogFormatError(StateStoreError, ValueError):
    """A changelog record (key, value or header) does not follow the Kafka Streams format.

    Also raised when a value cannot be *encoded* in that format (an out-of-range window
    start, a partition that does not fit an int32).

    Parameters
    ----------
    reason
        What is wrong, without the location.
    topic, partition, offset
        Where the offending record is, when known. The message ends with
        ``"at topic t partition 3 offset 17"`` (only the known parts).

    Attributes
    ----------
    reason : str
        The message without the location.
    topic : str or None
    partition : int or None
    offset : int or None
    """

    def __init__(
        self,
        reason: str,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        self.reason = reason
        self.topic = topic
        self.partition = partition
        self.offset = offset
        location = _describe_location(topic, partition, offset)
        # args holds the full message: BaseException pickling rebuilds the error from args
        # and restores reason/topic/partition/offset from __dict__.
        super().__init__(f"{reason} at {location}" if location else reason)

    def at(
        self: _E,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> _E:
        """A copy of this error (same type and reason) with its location filled in.

        Parts already known are kept unless given again. Use it where a decoder that does not
        know the record's location is called: ``raise exc.at(topic, partition, offset) from
        exc.__cause__``.
        """
        located = type(self)(
            self.reason,
            topic=self.topic if topic is None else topic,
            partition=self.partition if partition is None else partition,
            offset=self.offset if offset is None else offset,
        )
        located.__cause__ = self.__cause__
        return located


class PositionHeaderError(ChangelogFormatError):
    """The position headers (``v``/``c``) of a changelog record are malformed."""


class MissingPositionHeaderError(PositionHeaderError):
    """A record declares consistency information (``v`` = 0) but has no ``c`` header.

    Kafka Streams fails the same way ("Consistency is enabled but the changelog contains
    records without consistency information").
    """


class PartitionerError(StateStoreError, ValueError):
    """A partitioner was called with an invalid partition count."""
