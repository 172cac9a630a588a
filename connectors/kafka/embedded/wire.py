"""Just enough of the Kafka wire protocol for the embedded broker's transaction proxy.

Non-flexible (pre-KIP-482) encodings of the few requests and responses the proxy reads or
rewrites, plus record-batch header scanning. Everything is big-endian. Parsing errors raise
:class:`WireError`; the proxy then passes bytes through untouched rather than guess.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "ApiKey",
    "BatchInfo",
    "Reader",
    "WireError",
    "Writer",
    "scan_batches",
]


class ApiKey:
    """Kafka protocol request keys used by the proxy and by fault injection."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    FIND_COORDINATOR = 10
    API_VERSIONS = 18
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    END_TXN = 26


class WireError(ValueError):
    """A frame did not parse as the expected Kafka message."""


_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")


class Reader:
    """Sequential big-endian reader over one frame."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | memoryview, pos: int = 0) -> None:
        self.buf = memoryview(buf)
        self.pos = pos

    def _take(self, fmt: struct.Struct) -> int:
        if self.pos + fmt.size > len(self.buf):
            raise WireError(f"frame truncated at byte {self.pos}")
        (value,) = fmt.unpack_from(self.buf, self.pos)
        self.pos += fmt.size
        return int(value)

    def i8(self) -> int:
        return self._take(_I8)

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def raw(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise WireError(f"frame truncated at byte {self.pos} (wanted {n} bytes)")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else bytes(self.raw(n)).decode("utf-8", "replace")

    def bytes_(self) -> memoryview | None:
        n = self.i32()
        return None if n < 0 else self.raw(n)

    def array_len(self) -> int:
        n = self.i32()
        if n > len(self.buf):
            raise WireError(f"array length {n} exceeds frame size")
        return n

    def uvarint(self) -> int:
        shift = 0
        value = 0
        while True:
            byte = self._take(_I8) & 0xFF
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise WireError("varint too long")

    def varint(self) -> int:
        raw = self.uvarint()
        return (raw >> 1) ^ -(raw & 1)

    def compact_string(self) -> str | None:
        n = self.uvarint() - 1
        return None if n < 0 else bytes(self.raw(n)).decode("utf-8", "replace")

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.raw(self.uvarint())

    def rest(self) -> memoryview:
        return self.buf[self.pos :]


class Writer:
    """Big-endian writer building one frame body."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def i8(self, v: int) -> Writer:
        self.parts.append(_I8.pack(v))
        return self

    def i16(self, v: int) -> Writer:
        self.parts.append(_I16.pack(v))
        return self

    def i32(self, v: int) -> Writer:
        self.parts.append(_I32.pack(v))
        return self

    def i64(self, v: int) -> Writer:
        self.parts.append(_I64.pack(v))
        return self

    def raw(self, b: bytes | memoryview) -> Writer:
        self.parts.append(bytes(b))
        return self

    def string(self, s: str | None) -> Writer:
        if s is None:
            return self.i16(-1)
        data = s.encode()
        return self.i16(len(data)).raw(data)

    def bytes_(self, b: bytes | memoryview | None) -> Writer:
        if b is None:
            return self.i32(-1)
        return self.i32(len(b)).raw(b)

    def build(self) -> bytes:
        return b"".join(self.parts)


def request_header(api_key: int, api_version: int, correlation_id: int, client_id: str) -> Writer:
    """A non-flexible (v1) request header."""
    return Writer().i16(api_key).i16(api_version).i32(correlation_id).string(client_id)


# -- record batches -------------------------------------------------------------------------

_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")  # v2 record batch header, 61 bytes
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20
CONTROL_ABORT = 0
CONTROL_COMMIT = 1


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """The header facts of one record batch that transaction tracking needs."""

    start: int  # byte position in the records blob
    end: int  # byte position after the batch
    base_offset: int
    last_offset: int
    producer_id: int
    transactional: bool
    control_type: int | None  # CONTROL_ABORT / CONTROL_COMMIT for control batches, else None


def _control_type(blob: memoryview, records_start: int, end: int) -> int:
    """Read the control type from the key of a control batch's single record."""
    r = Reader(blob[:end], records_start)
    r.varint()  # record length
    r.i8()  # attributes
    r.varint()  # timestamp delta
    r.varint()  # offset delta
    key_len = r.varint()
    if key_len < 4:
        raise WireError("control record key too short")
    r.i16()  # control record version
    return r.i16()


def scan_batches(blob: memoryview | bytes) -> tuple[list[BatchInfo], int]:
    """Split a records blob into complete batches.

    Returns the batches and the byte length they cover; a trailing partial batch (a fetch
    response may end mid-batch) is not included.
    """
    view = memoryview(blob)
    batches: list[BatchInfo] = []
    pos = 0
    size = len(view)
    while pos + 12 <= size:
        base_offset, batch_len = struct.unpack_from(">qi", view, pos)
        end = pos + 12 + batch_len
        if batch_len < 0 or end > size:
            break
        magic = view[pos + 16] if pos + 17 <= size else -1
        if magic == 2 and batch_len >= _BATCH_HEADER.size - 12:
            (_, _, _, _, _, attrs, last_delta, _, _, pid, _, _, _) = _BATCH_HEADER.unpack_from(
                view, pos
            )
            control = None
            if attrs & _ATTR_CONTROL:
                control = _control_type(view, pos + _BATCH_HEADER.size, end)
            batches.append(
                BatchInfo(
                    pos,
                    end,
                    base_offset,
                    base_offset + last_delta,
                    pid,
                    bool(attrs & _ATTR_TRANSACTIONAL),
                    control,
                )
            )
        else:
            # Legacy message set (magic 0/1): never transactional; the outer offset is the last.
            batches.append(BatchInfo(pos, end, base_offset, base_offset, -1, False, None))
        pos = end
    return batches, pos
