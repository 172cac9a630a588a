"""Changelog key layouts of Kafka Streams window and session stores.

- Window stores (``org.apache.kafka.streams.state.internals.WindowKeySchema.toStoreKeyBinary``):
  ``key bytes | int64 big-endian window start | int32 big-endian seqnum``.
- Session stores (``org.apache.kafka.streams.state.internals.SessionKeySchema.toBinary``):
  ``key bytes | int64 big-endian window END | int64 big-endian window START`` (end first).

Kafka Streams' ``org.apache.kafka.streams.kstream.Window`` refuses a negative start and an end
before the start; decoding and encoding here refuse the same.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from spark_statestore.changelog.errors import ChangelogFormatError

__all__ = [
    "SessionKey",
    "WindowedKey",
    "decode_session_key",
    "decode_window_key",
    "encode_session_key",
    "encode_window_key",
]

_WINDOW_SUFFIX = struct.Struct(">qi")  # window start, seqnum: 12 bytes
_SESSION_SUFFIX = struct.Struct(">qq")  # window end, window start: 16 bytes
_WINDOW_SUFFIX_SIZE = _WINDOW_SUFFIX.size
_SESSION_SUFFIX_SIZE = _SESSION_SUFFIX.size
_MAX_INT64 = 2**63 - 1
_MIN_INT32, _MAX_INT32 = -(2**31), 2**31 - 1


@dataclass(frozen=True, slots=True)
class WindowedKey:
    """A window store key: the user key, the window start and the duplicate sequence number.

    Attributes
    ----------
    key
        The serialized user key.
    window_start
        Window start, epoch milliseconds (>= 0).
    seqnum
        Kafka Streams' sequence number for stores that retain duplicates (0 otherwise).
    """

    key: bytes
    window_start: int
    seqnum: int = 0

    @classmethod
    def decode(cls, data: bytes | bytearray) -> WindowedKey:
        """Same as :func:`decode_window_key`."""
        return decode_window_key(data)

    def encode(self) -> bytes:
        """Same as :func:`encode_window_key`."""
        return encode_window_key(self.key, self.window_start, self.seqnum)


@dataclass(frozen=True, slots=True)
class SessionKey:
    """A session store key: the user key and the session window's start and end.

    Attributes
    ----------
    key
        The serialized user key.
    window_start, window_end
        Session bounds, epoch milliseconds, ``0 <= window_start <= window_end``.
    """

    key: bytes
    window_start: int
    window_end: int

    @classmethod
    def decode(cls, data: bytes | bytearray) -> SessionKey:
        """Same as :func:`decode_session_key`."""
        return decode_session_key(data)

    def encode(self) -> bytes:
        """Same as :func:`encode_session_key`."""
        return encode_session_key(self.key, self.window_start, self.window_end)


def decode_window_key(data: bytes | bytearray) -> WindowedKey:
    """Split a window store changelog key into key, window start and seqnum.

    Raises
    ------
    ChangelogFormatError
        If ``data`` is shorter than the 12-byte suffix or the window start is negative.
        Use ``exc.at(topic, partition, offset)`` to add the record's location.
    """
    split = len(data) - _WINDOW_SUFFIX_SIZE
    if split < 0:
        raise ChangelogFormatError(
            f"window store key is {len(data)} bytes, shorter than its 12-byte suffix "
            f"(int64 window start, int32 seqnum); is this a window store changelog?"
        )
    start, seqnum = _WINDOW_SUFFIX.unpack_from(data, split)
    if start < 0:
        raise ChangelogFormatError(
            f"window store key has a negative window start {start}; is this a window store "
            f"changelog?"
        )
    return WindowedKey(bytes(data[:split]), start, seqnum)


def encode_window_key(key: bytes, window_start: int, seqnum: int = 0) -> bytes:
    """Build a window store changelog key: ``key | int64 start | int32 seqnum``.

    Raises
    ------
    ChangelogFormatError
        If ``window_start`` is not in ``[0, 2**63 - 1]`` or ``seqnum`` does not fit an int32.
    """
    if not 0 <= window_start <= _MAX_INT64:
        raise ChangelogFormatError(
            f"window start {window_start} must be between 0 and 2**63 - 1 (int64, not negative)"
        )
    if not _MIN_INT32 <= seqnum <= _MAX_INT32:
        raise ChangelogFormatError(f"window key seqnum {seqnum} does not fit an int32")
    return b"".join((key, _WINDOW_SUFFIX.pack(window_start, seqnum)))


def decode_session_key(data: bytes | bytearray) -> SessionKey:
    """Split a session store changelog key into key, window start and window end.

    The suffix is ``int64 end | int64 start``: the end comes first.

    Raises
    ------
    ChangelogFormatError
        If ``data`` is shorter than the 16-byte suffix, the start is negative or the end is
        before the start. Use ``exc.at(topic, partition, offset)`` to add the location.
    """
    split = len(data) - _SESSION_SUFFIX_SIZE
    if split < 0:
        raise ChangelogFormatError(
            f"session store key is {len(data)} bytes, shorter than its 16-byte suffix "
            f"(int64 window end, int64 window start); is this a session store changelog?"
        )
    end, start = _SESSION_SUFFIX.unpack_from(data, split)
    if not 0 <= start <= end:
        raise ChangelogFormatError(
            f"session store key has an invalid window: start {start}, end {end} (need "
            f"0 <= start <= end); is this a session store changelog?"
        )
    return SessionKey(bytes(data[:split]), start, end)


def encode_session_key(key: bytes, window_start: int, window_end: int) -> bytes:
    """Build a session store changelog key: ``key | int64 end | int64 start``.

    Raises
    ------
    ChangelogFormatError
        Unless ``0 <= window_start <= window_end <= 2**63 - 1``.
    """
    if not 0 <= window_start <= window_end <= _MAX_INT64:
        raise ChangelogFormatError(
            f"session window start {window_start}, end {window_end}: need "
            f"0 <= start <= end <= 2**63 - 1"
        )
    return b"".join((key, _SESSION_SUFFIX.pack(window_end, window_start)))
