"""Kafka request/response fragments the transaction proxy reads (non-flexible encodings).

Only the fields the proxy needs are decoded; everything else is skipped by the rules of each
message version. Parse failures raise :class:`~.wire.WireError`.
"""

from __future__ import annotations

from spark_statestore.connectors.kafka.embedded.wire import Reader, WireError

__all__ = [
    "FETCH_VERSIONS",
    "LIST_OFFSETS_VERSIONS",
    "TopicPartition",
    "WireError",
    "parse_fetch_request",
    "parse_init_producer_id_request",
    "parse_list_offsets_request",
    "read_producer_id",
    "uvarint",
]

TopicPartition = tuple[str, int]
READ_COMMITTED = 1
LATEST = -1
FETCH_VERSIONS = (4, 11)
LIST_OFFSETS_VERSIONS = (2, 5)


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _body(frame: bytes, flexible: bool = False) -> Reader:
    r = Reader(frame, 8)
    r.string()  # client id (a plain nullable string even in header v2)
    if flexible:
        r.skip_tagged_fields()
    return r


def parse_fetch_request(frame: bytes, version: int) -> dict[TopicPartition, int] | None:
    """Fetch offsets per partition of a read_committed Fetch, else None (pass through)."""
    if not FETCH_VERSIONS[0] <= version <= FETCH_VERSIONS[1]:
        return None
    r = _body(frame)
    r.i32()  # replica id
    r.i32()  # max wait
    r.i32()  # min bytes
    r.i32()  # max bytes
    if r.i8() != READ_COMMITTED:
        return None
    if version >= 7:
        r.i32()  # session id
        r.i32()  # session epoch
    offsets: dict[TopicPartition, int] = {}
    for _ in range(r.array_len()):
        topic = r.string() or ""
        for _ in range(r.array_len()):
            partition = r.i32()
            if version >= 9:
                r.i32()  # current leader epoch
            offsets[(topic, partition)] = r.i64()
            if version >= 5:
                r.i64()  # log start offset
            r.i32()  # partition max bytes
    return offsets


def parse_list_offsets_request(frame: bytes, version: int) -> set[TopicPartition] | None:
    """Partitions asked for their ``latest`` offset under read_committed, else None."""
    if not LIST_OFFSETS_VERSIONS[0] <= version <= LIST_OFFSETS_VERSIONS[1]:
        return None
    r = _body(frame)
    r.i32()  # replica id
    if r.i8() != READ_COMMITTED:
        return None
    latest: set[TopicPartition] = set()
    for _ in range(r.array_len()):
        topic = r.string() or ""
        for _ in range(r.array_len()):
            partition = r.i32()
            if version >= 4:
                r.i32()  # current leader epoch
            if r.i64() == LATEST:
                latest.add((topic, partition))
    return latest or None


def parse_init_producer_id_request(frame: bytes, version: int) -> tuple[str, int] | None:
    """``(transactional id, current producer id or -1)`` of an InitProducerId request.

    None for idempotent (non-transactional) producers.
    """
    flexible = version >= 2
    r = _body(frame, flexible)
    transactional_id = r.compact_string() if flexible else r.string()
    if not transactional_id:
        return None
    r.i32()  # transaction timeout
    current_pid = r.i64() if version >= 3 else -1
    return transactional_id, current_pid


def read_producer_id(version: int, frame: bytes) -> tuple[int, int] | None:
    """``(producer id, epoch)`` of a successful InitProducerId response, else None."""
    r = Reader(frame)
    r.i32()  # correlation id
    if version >= 2:
        r.skip_tagged_fields()  # response header v1
    r.i32()  # throttle
    if r.i16() != 0:
        return None
    return r.i64(), r.i16()
