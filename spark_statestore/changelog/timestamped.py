"""Timestamped key-value stores (``TimestampedKeyValueStore``).

On the changelog the value is the plain value and the value's timestamp is the Kafka record
timestamp. Inside Kafka Streams' store the value is a ``ValueAndTimestamp`` serialized by
``org.apache.kafka.streams.state.internals.ValueAndTimestampSerializer``: an int64 big-endian
timestamp followed by the raw value bytes; a null value stays null (no timestamp).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from spark_statestore.changelog.errors import ChangelogFormatError

if TYPE_CHECKING:
    from spark_statestore.changelog.record import ChangelogRecord

__all__ = [
    "decode_value_and_timestamp",
    "encode_value_and_timestamp",
    "timestamped_from_changelog",
]

_TIMESTAMP = struct.Struct(">q")
_TIMESTAMP_SIZE = _TIMESTAMP.size
_MIN_INT64, _MAX_INT64 = -(2**63), 2**63 - 1


def encode_value_and_timestamp(value: bytes | None, timestamp: int) -> bytes | None:
    """Serialize like ``ValueAndTimestampSerializer``: ``int64 timestamp | value``.

    Returns
    -------
    bytes or None
        None when ``value`` is None (a deleted value has no timestamp).

    Raises
    ------
    ChangelogFormatError
        If ``timestamp`` does not fit an int64.
    """
    if value is None:
        return None
    if not _MIN_INT64 <= timestamp <= _MAX_INT64:
        raise ChangelogFormatError(f"value timestamp {timestamp} does not fit an int64")
    return b"".join((_TIMESTAMP.pack(timestamp), value))


def decode_value_and_timestamp(
    data: bytes | bytearray | None,
) -> tuple[bytes | None, int | None]:
    """Split a serialized ``ValueAndTimestamp`` into ``(value, timestamp)``.

    Returns
    -------
    tuple
        ``(value, timestamp)``, or ``(None, None)`` when ``data`` is None.

    Raises
    ------
    ChangelogFormatError
        If ``data`` is shorter than the 8-byte timestamp. Use ``exc.at(...)`` to add the
        record's location.
    """
    if data is None:
        return None, None
    if len(data) < _TIMESTAMP_SIZE:
        raise ChangelogFormatError(
            f"timestamped value is {len(data)} bytes, shorter than its 8-byte timestamp; is "
            f"this a timestamped store's value?"
        )
    (timestamp,) = _TIMESTAMP.unpack_from(data)
    return bytes(data[_TIMESTAMP_SIZE:]), timestamp


def timestamped_from_changelog(record: ChangelogRecord) -> tuple[bytes | None, int | None]:
    """The ``(value, timestamp)`` of a timestamped store's changelog record.

    The changelog value is the plain value and its timestamp is the record timestamp
    (Kafka Streams' ``RecordConverters.rawValueToTimestampedValue``). A tombstone gives
    ``(None, None)``, as a null ``ValueAndTimestamp``.
    """
    if record.value is None:
        return None, None
    return record.value, record.timestamp
