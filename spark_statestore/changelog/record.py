"""The changelog record model: one Kafka record of a state store's changelog topic."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from spark_statestore.changelog.errors import ChangelogFormatError
from spark_statestore.changelog.headers import (
    Headers,
    HeaderStatus,
    read_position_headers,
)
from spark_statestore.changelog.missing_position import OnMissingPosition
from spark_statestore.position import Position

__all__ = ["ChangelogRecord", "TimestampType"]


class TimestampType(enum.IntEnum):
    """Kafka record timestamp types, numbered as confluent-kafka reports them.

    ``confluent_kafka.TIMESTAMP_NOT_AVAILABLE`` (0), ``TIMESTAMP_CREATE_TIME`` (1),
    ``TIMESTAMP_LOG_APPEND_TIME`` (2).
    """

    NOT_AVAILABLE = 0
    CREATE_TIME = 1
    LOG_APPEND_TIME = 2


_TIMESTAMP_TYPES = tuple(TimestampType)


@dataclass(frozen=True, slots=True)
class ChangelogRecord:
    """One record of a changelog topic: an upsert (value) or a delete (tombstone).

    Build one from a consumed Kafka message with :meth:`from_parts`, which applies the
    position header rules.

    Parameters
    ----------
    topic, partition, offset
        Where the record is in the changelog.
    key
        The serialized store key; changelog keys are never null.
    value
        The serialized value, or None for a tombstone (delete).
    timestamp
        The Kafka record timestamp in epoch milliseconds (-1 when not available).
    timestamp_type
        How Kafka assigned ``timestamp``.
    position
        The store position of the ``c`` header, or None when the record carries none.
    headers
        All headers of the record, as ``(key, value)`` pairs, in order.
    position_status
        What the position headers said; :meth:`from_parts` sets it. Constructed directly,
        a record with a position gets ``POSITION``.

    Raises
    ------
    ChangelogFormatError
        If ``key`` is None (the message names the record's location).
    """

    topic: str
    partition: int
    offset: int
    key: bytes
    value: bytes | None
    timestamp: int = -1
    timestamp_type: TimestampType = TimestampType.NOT_AVAILABLE
    position: Position | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    position_status: HeaderStatus = HeaderStatus.NO_POSITION

    def __post_init__(self) -> None:
        if self.key is None:
            raise _null_key(self.topic, self.partition, self.offset)
        if self.position is not None:
            if self.position_status is HeaderStatus.NO_POSITION:
                object.__setattr__(self, "position_status", HeaderStatus.POSITION)
            elif self.position_status is not HeaderStatus.POSITION:
                raise ChangelogFormatError(
                    f"a changelog record with a position cannot have position_status "
                    f"{self.position_status.name}",
                    topic=self.topic,
                    partition=self.partition,
                    offset=self.offset,
                )
        elif self.position_status is HeaderStatus.POSITION:
            raise ChangelogFormatError(
                "a changelog record with position_status POSITION needs a position",
                topic=self.topic,
                partition=self.partition,
                offset=self.offset,
            )

    @classmethod
    def from_parts(
        cls,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        *,
        timestamp: int = -1,
        timestamp_type: int = TimestampType.NOT_AVAILABLE,
        headers: Headers | None = None,
        on_missing: OnMissingPosition = OnMissingPosition.FAIL,
    ) -> ChangelogRecord:
        """Build a record from the parts of a consumed message, decoding its position.

        Parameters
        ----------
        topic, partition, offset, key, value
            As consumed (``Message.topic()``, ``.partition()``, ...).
        timestamp, timestamp_type
            ``Message.timestamp()`` gives ``(timestamp_type, timestamp)``.
        headers
            ``Message.headers()``: ``(key, value)`` pairs or None.
        on_missing
            What to do with malformed or missing position headers: ``FAIL`` raises,
            ``SKIP`` keeps the record without a position and sets ``position_status`` to
            ``SKIPPED`` so the caller can count it. See
            :func:`~spark_statestore.changelog.headers.read_position_headers`.

        Raises
        ------
        ChangelogFormatError
            A null key, an unknown timestamp type, or (with ``OnMissingPosition.FAIL``)
            malformed position headers; the message and attributes carry the location.
        """
        if key is None:
            raise _null_key(topic, partition, offset)
        if 0 <= timestamp_type <= 2:
            kind = _TIMESTAMP_TYPES[timestamp_type]
        else:
            raise ChangelogFormatError(
                f"unknown timestamp type {timestamp_type} (expected 0, 1 or 2)",
                topic=topic,
                partition=partition,
                offset=offset,
            )
        pairs: tuple[tuple[str, bytes | None], ...] = tuple(headers) if headers else ()
        decision = read_position_headers(
            pairs,
            on_missing=on_missing,
            topic=topic,
            partition=partition,
            offset=offset,
        )
        return cls(
            topic,
            partition,
            offset,
            key,
            value,
            timestamp,
            kind,
            decision.position,
            pairs,
            decision.status,
        )

    @property
    def is_tombstone(self) -> bool:
        """True when the record deletes its key (null value)."""
        return self.value is None

    @property
    def op(self) -> str:
        """``"delete"`` for a tombstone, else ``"upsert"`` (the change feed's ``op`` column)."""
        return "delete" if self.value is None else "upsert"


def _null_key(topic: str, partition: int, offset: int) -> ChangelogFormatError:
    return ChangelogFormatError(
        "changelog record has a null key (state store changelog keys are never null; is this "
        "a changelog topic?)",
        topic=topic,
        partition=partition,
        offset=offset,
    )
