"""The Confluent wire format every registry serializer writes (Confluent's, Apicurio's in its
Confluent-compatible mode, the serdes of most Kafka clients).

A framed value is::

    byte 0        magic, always 0
    bytes 1-4     the schema id, a big-endian signed 32-bit int (ids are >= 0 in practice)
    Protobuf only the message indexes: a zig-zag varint count, then that many zig-zag
                  varint indexes (the path to the message type in the .proto file);
                  the single byte 0 stands for [0], the first message
    the rest      the payload (Avro binary, Protobuf binary, JSON text)

The parsers here are strict: anything else fails with :class:`FrameError` saying what is
wrong at which byte; they never guess.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from spark_statestore.schemas.errors import FrameError

__all__ = [
    "FRAME_HEADER_BYTES",
    "MAGIC_BYTE",
    "Frame",
    "encode_frame",
    "parse_frame",
    "parse_message_indexes",
]

MAGIC_BYTE = 0
FRAME_HEADER_BYTES = 5
_MAX_INDEXES = 1024  # far beyond any real .proto nesting; bounds a hostile count
_MAX_VARINT_BYTES = 10


@dataclass(frozen=True, slots=True)
class Frame:
    """A parsed frame: the writer's schema id and where the payload starts."""

    schema_id: int
    payload_offset: int = FRAME_HEADER_BYTES
    message_indexes: tuple[int, ...] | None = None
    """Protobuf's path to the message type; None for the other formats."""


def parse_frame(data: bytes | bytearray | memoryview) -> Frame:
    """The schema id of a framed Avro or JSON Schema value.

    Raises
    ------
    FrameError
        Fewer than 5 bytes, or a first byte other than 0.
    """
    if len(data) < FRAME_HEADER_BYTES:
        raise FrameError(
            f"{len(data)} byte(s) are too short for a schema-registry frame (a magic byte "
            "and a 4-byte schema id): not written by a registry serializer"
        )
    if data[0] != MAGIC_BYTE:
        raise FrameError(
            f"magic byte 0x{data[0]:02x} where a schema-registry frame has 0x00: not written "
            "by a registry serializer (or by one that puts the schema id in a header)"
        )
    (schema_id,) = struct.unpack_from(">i", data, 1)
    return Frame(schema_id)


def parse_message_indexes(data: bytes | bytearray | memoryview) -> Frame:
    """The schema id and message indexes of a framed Protobuf value.

    Raises
    ------
    FrameError
        As :func:`parse_frame`, and for a truncated, negative or oversized index list.
    """
    frame = parse_frame(data)
    offset = FRAME_HEADER_BYTES
    count, offset = _zigzag_varint(data, offset, "the message index count")
    if count == 0:
        return Frame(frame.schema_id, offset, (0,))
    if not 0 < count <= _MAX_INDEXES:
        raise FrameError(
            f"message index count {count} at byte {FRAME_HEADER_BYTES} is not between 1 "
            f"and {_MAX_INDEXES}: not a Protobuf frame"
        )
    indexes = []
    for number in range(count):
        index, offset = _zigzag_varint(data, offset, f"message index {number}")
        if index < 0:
            raise FrameError(f"message index {number} is negative ({index})")
        indexes.append(index)
    return Frame(frame.schema_id, offset, tuple(indexes))


def encode_frame(
    schema_id: int, payload: bytes, message_indexes: tuple[int, ...] | None = None
) -> bytes:
    """The framed value a registry serializer writes for ``payload`` under ``schema_id``
    (with Protobuf's ``message_indexes``; ``(0,)`` is written as the single byte 0)."""
    if not -(2**31) <= schema_id < 2**31:
        raise FrameError(f"schema id {schema_id} does not fit the frame's 32-bit field")
    head = struct.pack(">bi", MAGIC_BYTE, schema_id)
    if message_indexes is None:
        return head + payload
    if message_indexes == (0,):
        return head + b"\x00" + payload
    parts = [_encode_zigzag(len(message_indexes))]
    parts += [_encode_zigzag(index) for index in message_indexes]
    return head + b"".join(parts) + payload


def _zigzag_varint(data: bytes | bytearray | memoryview, offset: int, what: str) -> tuple[int, int]:
    value = 0
    for shift_count in range(_MAX_VARINT_BYTES):
        if offset >= len(data):
            raise FrameError(f"the frame ends inside {what} (byte {offset}): truncated")
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << (7 * shift_count)
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), offset
    raise FrameError(f"{what} is a varint longer than {_MAX_VARINT_BYTES} bytes")


def _encode_zigzag(value: int) -> bytes:
    number = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = number & 0x7F
        number >>= 7
        if number:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
