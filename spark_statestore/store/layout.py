"""On-disk layout of a store: key namespaces and the value envelope (docs/store.md, "On disk").

One store is one LevelDB database. User data lives under the data namespace ``b"d" + key``;
a versioned store keeps its other versions under the history namespace ``b"h"``
(:mod:`~spark_statestore.store.versions`); the store's metadata lives under ``b"m:" + name``.
Every data value is an *envelope*::

    byte 0      envelope version (0, or 1 with headers)
    bytes 1-4   int32 big-endian  changelog partition of the write (-1: unknown)
    bytes 5-12  int64 big-endian  changelog offset of the write      (-1: unknown)
    bytes 13-20 int64 big-endian  record timestamp, epoch millis     (-1: none)
    bytes 21-   the value bytes

Version 1 keeps the headers of the write's changelog record (Kafka Streams 4.3 header-aware
stores log a record's headers as the changelog record's headers, KIP-1271) between the
fixed fields and the value; a record without headers keeps version 0, byte for byte::

    bytes 21-24 int32 big-endian  H, the byte length of the headers
    bytes 25-   H bytes: per header, in the record's order: int32 big-endian key length,
                UTF-8 key, int32 big-endian value length (-1: null value), value bytes
    then        the value bytes

Deletes remove the record; no tombstone is kept locally.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from spark_statestore.store.errors import StoreCorruptedError
from spark_statestore.store.gate import Gate, gated_chunks

DATA_PREFIX: Final = b"d"
DATA_START: Final = b"d"
DATA_STOP: Final = b"e"  # first key after the data namespace
HISTORY_PREFIX: Final = b"h"  # versioned stores: every version but the latest value
HISTORY_STOP: Final = b"i"  # first key after the history namespace
META_PREFIX: Final = b"m:"

# Metadata keys.
META_MANIFEST: Final = b"m:manifest"  # StoreManifest JSON: format, role, topic, partitions
META_POSITION: Final = b"m:position"  # Position JSON (offsets JSON shape)
META_OFFSETS: Final = b"m:offsets"  # {"partition": next changelog offset} JSON
META_COMMIT: Final = b"m:commit"  # CommitRecord JSON (sink: query id, batch id, offsets)
META_SEQ: Final = b"m:seq"  # number of commits so far, decimal ASCII
META_REDO: Final = b"m:redo"  # redo marker JSON while a chunked commit is being applied
META_PENDING: Final = b"m:pending"  # a deferred commit not yet applied (store.deferred)
META_STREAM_TIME: Final = b"m:stream_time"  # versioned: {"partition": observed stream time}
META_STORE_WIDE: Final = b"m:store_wide"  # present: the position holds for every partition

ENVELOPE_VERSION: Final = 0
ENVELOPE_HEADERS_VERSION: Final = 1  # an envelope with the record's headers
NO_VALUE: Final = -1  # "unknown" partition / offset, "no" timestamp

Headers = tuple[tuple[str, "bytes | None"], ...]
"""A record's headers: ``(key, value)`` pairs in record order (keys repeat; values may be
null), as confluent-kafka gives them."""

# Format byte 0 is a pad byte: struct writes it as 0, which is ENVELOPE_VERSION.
_HEADER: Final = struct.Struct(">xiqq")
HEADER_SIZE: Final = _HEADER.size
pack_header = _HEADER.pack
_unpack_header = _HEADER.unpack_from
_INT32: Final = struct.Struct(">i")
_HEADERS_AT: Final = HEADER_SIZE + _INT32.size  # where a version 1 envelope's headers start


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One record of a store: the latest write of ``key``, with where it came from.

    Parameters
    ----------
    key, value
        The user key and value bytes.
    partition, offset
        The changelog partition and offset of the write (None when unknown, e.g. a sink that
        publishes no changelog has no offsets).
    timestamp
        The record timestamp in epoch milliseconds, or None.
    headers
        The headers of the write's changelog record that the store keeps (a follower keeps
        all but the ``v``/``c`` position headers); ``()`` when it had none.
    """

    key: bytes
    value: bytes
    partition: int | None
    offset: int | None
    timestamp: int | None
    headers: Headers = ()


def pack_headers_envelope(partition: int, offset: int, timestamp: int, headers: Headers) -> bytes:
    """The start of a version 1 envelope (everything before the value); ``headers`` must not
    be empty (a record without headers keeps a version 0 envelope).

    Raises
    ------
    struct.error, TypeError, ValueError
        A field does not fit its type, or a header key is not text or its value not bytes.
    """
    parts: list[bytes] = []
    for name, value in headers:
        encoded = name.encode("utf-8")
        parts += (_INT32.pack(len(encoded)), encoded)
        if value is None:
            parts.append(_INT32.pack(-1))
        else:
            parts += (_INT32.pack(len(value)), bytes(value))
    block = b"".join(parts)
    fixed = bytearray(pack_header(partition, offset, timestamp))
    fixed[0] = ENVELOPE_HEADERS_VERSION
    return bytes(fixed) + _INT32.pack(len(block)) + block


def envelope_value(raw: bytes) -> bytes:
    """The value bytes of envelope ``raw`` (either version; checked by :func:`decode_record`)."""
    if raw[0] == ENVELOPE_VERSION:
        return raw[HEADER_SIZE:]
    return raw[_HEADERS_AT + _INT32.unpack_from(raw, HEADER_SIZE)[0] :]


def checked_value(key: bytes, raw: bytes, path: str | None = None) -> bytes:
    """The value bytes of envelope ``raw`` stored under user key ``key``, checked as
    :func:`decode_record` checks it (a :class:`StoreCorruptedError` naming the key)."""
    if len(raw) >= HEADER_SIZE and raw[0] == ENVELOPE_VERSION:
        return raw[HEADER_SIZE:]
    return decode_record(key, raw, path).value  # headers, or not an envelope: named


def decode_record(key: bytes, raw: bytes, path: str | None = None) -> StoredRecord:
    """Decode the envelope ``raw`` stored under user key ``key``."""
    version = raw[0] if raw else None
    if len(raw) < HEADER_SIZE or version not in (ENVELOPE_VERSION, ENVELOPE_HEADERS_VERSION):
        raise _bad_envelope(key, raw, path, f"version byte {raw[:1].hex() or 'missing'}")
    partition, offset, timestamp = _unpack_header(raw)
    headers: Headers = ()
    value = raw[HEADER_SIZE:]
    if version == ENVELOPE_HEADERS_VERSION:
        headers, value = _decode_headers(key, raw, path)
    return StoredRecord(
        key,
        value,
        None if partition < 0 else partition,
        None if offset < 0 else offset,
        None if timestamp < 0 else timestamp,
        headers,
    )


def _decode_headers(key: bytes, raw: bytes, path: str | None) -> tuple[Headers, bytes]:
    """The headers and the value of a version 1 envelope."""
    if len(raw) < _HEADERS_AT:
        raise _bad_envelope(key, raw, path, "headers length missing")
    (length,) = _INT32.unpack_from(raw, HEADER_SIZE)
    end = _HEADERS_AT + length
    if length < 0 or end > len(raw):
        raise _bad_envelope(key, raw, path, f"headers of {length} bytes")
    headers: list[tuple[str, bytes | None]] = []
    at = _HEADERS_AT
    try:
        while at < end:
            (size,) = _INT32.unpack_from(raw, at)
            if size < 0 or at + 4 + size > end:
                raise ValueError(f"header key of {size} bytes")
            name = raw[at + 4 : at + 4 + size].decode("utf-8")
            at += 4 + size
            (size,) = _INT32.unpack_from(raw, at)
            if size < -1 or at + 4 + max(size, 0) > end:
                raise ValueError(f"header value of {size} bytes")
            value = None if size == -1 else raw[at + 4 : at + 4 + size]
            at += 4 + max(size, 0)
            headers.append((name, value))
    except (struct.error, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise _bad_envelope(key, raw, path, f"headers unreadable at byte {at}: {exc}") from None
    return tuple(headers), raw[end:]


def _bad_envelope(key: bytes, raw: bytes, path: str | None, what: str) -> StoreCorruptedError:
    return StoreCorruptedError(
        f"store {path}: the value of key {key[:64]!r} is not a valid envelope "
        f"({len(raw)} bytes, {what}); the store is corrupted or was written by another "
        "program",
        path,
    )


def envelope_header(raw: bytes) -> tuple[int, int, int]:
    """``(partition, offset, timestamp)`` of envelope ``raw``, -1 for unknown."""
    result: tuple[int, int, int] = _unpack_header(raw)
    return result


def data_bounds(
    lower: bytes | None, upper: bytes | None, prefix: bytes | None = None
) -> tuple[bytes, bytes, bool]:
    """LevelDB ``(start, stop, include_stop)`` of the user keys in ``[lower, upper]`` (both
    inclusive, None: open) or starting with ``prefix``."""
    if prefix is not None:
        if lower is not None or upper is not None:
            raise ValueError("give either a key prefix or range bounds, not both")
        start = DATA_PREFIX + bytes(prefix)
        trimmed = start.rstrip(b"\xff")
        return start, trimmed[:-1] + bytes([trimmed[-1] + 1]), False
    start = DATA_START if lower is None else DATA_PREFIX + bytes(lower)
    if upper is None:
        return start, DATA_STOP, False
    return start, DATA_PREFIX + bytes(upper), True


def iterate(
    source: Any, start: bytes, stop: bytes, include_stop: bool, reverse: bool, gate: Gate
) -> Iterator[tuple[bytes, bytes]]:
    """``(key, value)`` of a plyvel DB/snapshot between ``start`` (inclusive) and ``stop``,
    read through the store's ``gate`` (see :mod:`~spark_statestore.store.gate`).

    plyvel 1.5 drops the key equal to ``start`` from a reverse scan when it is the first key
    the scan reaches, so reverse scans are bounded by ``stop`` only and end here instead.
    """
    if not reverse:
        yield from gated_chunks(
            gate, lambda: source.iterator(start=start, stop=stop, include_stop=include_stop)
        )
        return
    for item in gated_chunks(
        gate, lambda: source.iterator(stop=stop, include_stop=include_stop, reverse=True)
    ):
        if item[0] < start:
            return
        yield item
