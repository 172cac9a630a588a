"""The ``c`` header's value: a :class:`~spark_statestore.position.Position` as bytes.

Kafka Streams serializes a store's position with
``org.apache.kafka.streams.state.internals.PositionSerde`` (version 0, big-endian)::

    int8 version=0 | int32 topic count
    per topic:     int32 UTF-8 name length | name | int32 partition count
    per partition: int32 partition | int64 offset

``PositionSerde.serialize`` sizes its buffer in *bits* (``Byte.SIZE``, ``Integer.SIZE``,
``Long.SIZE``), so the bytes on the wire end with zero padding after the declared entries.
:func:`decode_position` therefore stops after the declared entries and ignores what follows.
The header rules around it (``v``, missing and unknown versions) are in
:mod:`~spark_statestore.changelog.headers`.
"""

from __future__ import annotations

import struct

from spark_statestore.changelog.errors import ChangelogFormatError, PositionHeaderError
from spark_statestore.position import Position

__all__ = ["SERDE_VERSION", "decode_entries", "decode_position", "encode_position"]

SERDE_VERSION = 0
"""The ``PositionSerde`` version this codec reads and writes (the value's first byte)."""

_INT32 = struct.Struct(">i")
_PARTITION_OFFSET = struct.Struct(">iq")  # 12 bytes, no alignment padding with ">"
_MAX_INT32 = 2**31 - 1
_MAX_INT64 = 2**63 - 1
# Smallest possible encoding of one topic: name length, a one-byte name, partition count.
_MIN_TOPIC_BYTES = 4 + 1 + 4
_ENTRY_BYTES = _PARTITION_OFFSET.size


# -- Position <-> bytes -------------------------------------------------------------------


def encode_position(position: Position, *, pad_like_kafka_streams: bool = False) -> bytes:
    """Serialize a position like Kafka Streams' ``PositionSerde`` (version 0).

    Parameters
    ----------
    position
        The position to encode. Topics are written in sorted order.
    pad_like_kafka_streams
        False (default) writes the exact bytes. True appends the trailing zero bytes that
        ``PositionSerde.serialize`` sends, because it sizes its buffer in bits: the result
        is ``8 + 32 + sum(32 + len(name) + 32 + 96 * partitions)`` bytes long. Readers must
        accept both; use True to reproduce Kafka Streams' wire bytes exactly.

    Returns
    -------
    bytes
        The value of a ``c`` header.

    Raises
    ------
    ChangelogFormatError
        If a partition does not fit an int32, an offset does not fit an int64, or a topic
        name is not encodable as UTF-8 (a lone surrogate).
    """
    # Grouped by topic in first-seen order: sorted for Positions from the named constructors.
    groups: dict[str, list[tuple[int, int]]] = {}
    for topic, partition, offset in position.entries:
        if not 0 <= partition <= _MAX_INT32 or not 0 <= offset <= _MAX_INT64:
            raise ChangelogFormatError(
                f"cannot encode position entry {topic}-{partition} at offset {offset}: the "
                f"partition must fit an int32 and the offset an int64, both >= 0"
            )
        group = groups.get(topic)
        if group is None:
            group = groups[topic] = []
        group.append((partition, offset))

    parts = [bytes([SERDE_VERSION]), _INT32.pack(len(groups))]
    padded_size = 8 + 32
    for topic, offsets in groups.items():
        try:
            name = topic.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ChangelogFormatError(
                f"cannot encode position topic {topic!r} as UTF-8: {exc.reason}"
            ) from exc
        if not name:
            raise ChangelogFormatError("cannot encode a position with an empty topic name")
        parts.append(_INT32.pack(len(name)))
        parts.append(name)
        parts.append(_INT32.pack(len(offsets)))
        parts.extend(_PARTITION_OFFSET.pack(p, o) for p, o in offsets)
        padded_size += 32 + len(name) + 32 + 96 * len(offsets)
    if pad_like_kafka_streams:
        parts.append(bytes(padded_size - sum(map(len, parts))))
    return b"".join(parts)


def decode_position(
    data: bytes | bytearray | memoryview | None,
    *,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
) -> Position:
    """Parse a ``c`` header value (``PositionSerde`` version 0).

    Decoding stops after the declared entries; trailing bytes of any value are ignored, as
    Kafka Streams does (its own writer pads with zeros). Everything else is strict.

    Parameters
    ----------
    data
        The header value.
    topic, partition, offset
        The changelog record's location, only used in error messages.

    Returns
    -------
    Position
        The decoded position (entries sorted, one per topic-partition).

    Raises
    ------
    PositionHeaderError
        On a missing value, an unknown serde version, truncated data (a count or length
        running past the end), negative or impossible counts, an empty or non-UTF-8 topic
        name, a negative partition or offset, or the same topic-partition listed twice with
        different offsets. No other exception escapes for bytes-like input.
    """
    try:
        return _decode_position(data)
    except PositionHeaderError as exc:
        if topic is None and partition is None and offset is None:
            raise
        raise exc.at(topic, partition, offset) from exc.__cause__


def decode_entries(
    data: bytes | bytearray | memoryview | None,
) -> list[tuple[str, int, int]]:
    """The sorted, unique ``(topic, partition, offset)`` entries of a ``c`` header value."""
    if data is None:
        raise PositionHeaderError("position header 'c' has no value (null)")
    if not isinstance(data, (bytes, bytearray)):
        try:
            data = bytes(memoryview(data))
        except TypeError:
            raise PositionHeaderError(
                f"position header 'c' must be bytes, got {type(data).__name__}"
            ) from None
    size = len(data)
    if size == 0:
        raise PositionHeaderError("position header 'c' is empty")
    version = data[0]
    if version != SERDE_VERSION:
        raise PositionHeaderError(
            f"position header 'c' has unknown PositionSerde version {version} (this reader "
            f"understands version {SERDE_VERSION}); upgrade spark-statestore"
        )
    if size < 5:
        raise _truncated("the topic count", 1, size)
    (topics,) = _INT32.unpack_from(data, 1)
    if topics <= 0:
        if topics == 0:
            return []
        raise PositionHeaderError(f"position header 'c' has a negative topic count {topics}")
    pos = 5
    # Reject hostile counts before looping: each topic needs at least _MIN_TOPIC_BYTES.
    if topics * _MIN_TOPIC_BYTES > size - pos:
        raise PositionHeaderError(
            f"position header 'c' declares {topics} topics but only {size - pos} bytes "
            f"follow (truncated or corrupt)"
        )
    entries: list[tuple[str, int, int]] = []
    for _ in range(topics):
        if pos + 4 > size:
            raise _truncated("a topic name length", pos, size)
        (name_length,) = _INT32.unpack_from(data, pos)
        pos += 4
        if name_length <= 0:
            raise PositionHeaderError(
                f"position header 'c' has an invalid topic name length {name_length} at "
                f"byte {pos - 4} (a topic name is never empty)"
            )
        name_end = pos + name_length
        if name_end + 4 > size:
            raise _truncated(f"a topic name of {name_length} bytes", pos, size)
        try:
            name = data[pos:name_end].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PositionHeaderError(
                f"position header 'c' has a topic name that is not valid UTF-8 at byte {pos}"
            ) from exc
        (count,) = _INT32.unpack_from(data, name_end)
        pos = name_end + 4
        if count < 0:
            raise PositionHeaderError(
                f"position header 'c' has a negative partition count {count} for topic {name!r}"
            )
        end = pos + count * _ENTRY_BYTES
        if end > size:
            raise _truncated(f"{count} partition offsets of topic {name!r}", pos, size)
        if count == 1:
            p, o = _PARTITION_OFFSET.unpack_from(data, pos)
            if p < 0 or o < 0:
                raise _negative(name, p, o)
            entries.append((name, p, o))
        else:
            for p, o in _PARTITION_OFFSET.iter_unpack(memoryview(data)[pos:end]):
                if p < 0 or o < 0:
                    raise _negative(name, p, o)
                entries.append((name, p, o))
        pos = end
    if len(entries) > 1:
        entries.sort()
        entries = _drop_duplicates(entries)
    return entries


def _decode_position(data: bytes | bytearray | memoryview | None) -> Position:
    # Entries are validated by decode_entries exactly as Position.from_map validates them
    # (non-empty topic, partition and offset >= 0, offset within int64) and sorted.
    return Position(tuple(decode_entries(data)))


def _drop_duplicates(entries: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    unique = [entries[0]]
    for entry in entries[1:]:
        previous = unique[-1]
        if entry[0] == previous[0] and entry[1] == previous[1]:
            if entry[2] != previous[2]:
                raise PositionHeaderError(
                    f"position header 'c' lists {entry[0]}-{entry[1]} twice with different "
                    f"offsets ({previous[2]} and {entry[2]})"
                )
            continue
        unique.append(entry)
    return unique


def _truncated(what: str, at: int, size: int) -> PositionHeaderError:
    return PositionHeaderError(
        f"position header 'c' is truncated: {what} at byte {at} runs past its end ({size} bytes)"
    )


def _negative(topic: str, partition: int, offset: int) -> PositionHeaderError:
    return PositionHeaderError(
        f"position header 'c' has a negative partition or offset for topic {topic!r}: "
        f"partition {partition}, offset {offset}"
    )
