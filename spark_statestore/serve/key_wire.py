"""The compact binary form of single-key remote queries: the ``query_key`` action.

A point lookup is the hot remote call (routed lookups, enrichment), and in the JSON form of
:mod:`~spark_statestore.serve.query_wire` a lookup spent more time in encoding and strict
decoding (base64, JSON, field checks per partition) than in the store. This form carries a
:class:`~spark_statestore.query.KeyQuery` or :class:`~spark_statestore.query.RawKeyQuery`
whose key is ``bytes``, with every request option (partitions, position bound, active only,
execution info, wait), and its :class:`~spark_statestore.query.StateQueryResult`: the same
answer, only smaller. Every other request travels as JSON (the ``query`` action); a client
whose server does not know ``query_key`` (an older version) falls back to it.

Body of ``query_key`` (integers big-endian, unsigned)::

    u8  version (1)
    u8  query type: 0 KeyQuery, 1 RawKeyQuery
    u8  flags: 1 active only, 2 execution info, 4 partitions follow, 8 position bound follows,
        16 the reply says the bound rule (a reply of version 2)
    u64 wait_ms (<= 2**63 - 1)
    u16 length + UTF-8 store name
    u32 length + key bytes
    [u32 count (>= 1) + count x u32 partition (ascending, each <= 2**31 - 1)]     flag 4
    [u32 length + the bound's position as offsets JSON (Position.to_json)]          flag 8

Reply::

    u8  version (1; 2 when the request had flag 16)
    u16 length + UTF-8 store id
    [u8 the rule its answers were checked against the bound by: 1 store-wide (every entry
        of the bound applies to every partition), 0 the bound's entries for the result's
        partition]                                                                 version 2
    u16 count + count x (u32 length + offsets JSON): the distinct positions of the results
    u32 count + count x (u32 partition + <result>), partitions ascending
    u8  1 when a global <result> follows, else 0
    <result> = u16 index of its position, u8 outcome, u32 payload length,
               u16 execution info line count, the payload,
               per info line: u32 length + UTF-8 text
    outcome 0: a success without a value (None), empty payload; 1: a success, the payload
               is the value; 2: a failure, the payload is u8 length + ASCII
               FailureReason value, then the UTF-8 message

The asker checks each answer's position against the request's bound by that rule
(:meth:`~spark_statestore.query.StateQueryResult.checked_against`). An older client never sets
flag 16, so it never gets a reply of version 2; an older server refuses the flag as unknown
(a ``BadRequestError``), and the client asks again without it (its replies then say no rule).

Decoding is strict: a wrong version, unknown flag or outcome, a field cut short, bytes left
over, text that is not UTF-8 or a position that is not offsets JSON is a
:class:`~spark_statestore.serve.errors.BadRequestError` naming the field.
"""

from __future__ import annotations

import itertools
import reprlib
import struct
from typing import Any, Final

from spark_statestore.errors import StateStoreError
from spark_statestore.position import Position, PositionBound
from spark_statestore.query import (
    FailureReason,
    KeyQuery,
    QueryError,
    QueryResult,
    RawKeyQuery,
    StateQueryRequest,
    StateQueryResult,
)
from spark_statestore.serve.errors import BadRequestError

__all__ = [
    "KEY_WIRE_VERSION",
    "RULE_REPLY_VERSION",
    "decode_key_query",
    "decode_key_reply",
    "encode_key_query",
    "encode_key_reply",
    "travels_compact",
]

KEY_WIRE_VERSION: Final = 1
"""The version byte that opens a ``query_key`` body and a reply without the bound rule."""
RULE_REPLY_VERSION: Final = 2
"""The version byte of a reply that says the bound rule (to a request with flag 16)."""

_INT32_MAX: Final = 2**31 - 1
_INT64_MAX: Final = 2**63 - 1
_ACTIVE_ONLY, _EXECUTION_INFO, _PARTITIONS, _BOUND, _RULE = 1, 2, 4, 8, 16
_FLAGS: Final = _ACTIVE_ONLY | _EXECUTION_INFO | _PARTITIONS | _BOUND | _RULE
_QUERY_TYPES: Final = (KeyQuery, RawKeyQuery)
_NO_VALUE, _VALUE, _FAILURE = 0, 1, 2
_REASONS: Final = {reason.value.encode("ascii"): reason for reason in FailureReason}

_HEAD = struct.Struct(">BBBQH")  # version, query type, flags, wait_ms, store name length
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U8_U16 = struct.Struct(">BH")
# A result's head: [partition], position index, outcome, payload length, info line count.
_PARTITION_HEAD = struct.Struct(">IHBIH")
_GLOBAL_HEAD = struct.Struct(">HBIH")

_POSITION_CACHE_SIZE: Final = 256
# Positions repeat from call to call (a store's position changes once per commit): their
# offsets JSON is made once per position on the server and parsed once per text on the
# client. Bounded; a full cache is emptied (a dict's operations are atomic under the GIL).
_position_texts: dict[Position, bytes] = {}
_positions: dict[bytes, Position] = {}


def travels_compact(request: object) -> bool:
    """Whether ``request`` has this form: a :class:`StateQueryRequest` of a
    :class:`KeyQuery` or :class:`RawKeyQuery` whose key is ``bytes`` (a ``bytearray`` key
    keeps its type in JSON, where the store's messages may quote it)."""
    if type(request) is not StateQueryRequest:
        return False
    query: Any = request.query
    return type(query) in _QUERY_TYPES and type(query.key) is bytes


# -- requests -------------------------------------------------------------------------------
def encode_key_query(
    request: StateQueryRequest, wait_ms: int = 0, *, with_rule: bool = True
) -> bytes:
    """The ``query_key`` body of ``request`` (see :func:`travels_compact`), waiting up to
    ``wait_ms`` for its bound; ``with_rule``: asking for the bound rule in the reply (flag
    16; a server older than it refuses it).

    Raises
    ------
    QueryError
        If ``request`` does not travel in this form, or asks for a partition beyond int32.
    """
    if not travels_compact(request):
        raise QueryError(
            "the compact form carries a KeyQuery or RawKeyQuery with a bytes key, got "
            f"{type(request).__name__}"
        )
    query: Any = request.query
    flags = (
        (_ACTIVE_ONLY if request.active_only else 0)
        | (_EXECUTION_INFO if request.execution_info_enabled else 0)
        | (_RULE if with_rule else 0)
    )
    store = request.store_name.encode()
    key: bytes = query.key
    tail = b""
    if request.partitions is not None:
        partitions = sorted(request.partitions)
        if partitions[-1] > _INT32_MAX:
            raise QueryError(f"partition {partitions[-1]} is beyond int32: no Kafka topic has it")
        flags |= _PARTITIONS
        tail = struct.pack(f">I{len(partitions)}I", len(partitions), *partitions)
    bound = request.position_bound.position
    if bound is not None:
        flags |= _BOUND
        text = bound.to_json().encode()
        tail += _U32.pack(len(text)) + text
    return b"".join(
        (
            _HEAD.pack(
                KEY_WIRE_VERSION,
                0 if type(query) is KeyQuery else 1,
                flags,
                wait_ms,
                len(store),
            ),
            store,
            _U32.pack(len(key)),
            key,
            tail,
        )
    )


def decode_key_query(body: bytes) -> tuple[StateQueryRequest, int, bool]:
    """``(request, wait_ms, with_rule)`` from a ``query_key`` body; ``with_rule``: the reply
    is to say the bound rule (:func:`encode_key_reply`).

    Raises
    ------
    BadRequestError
        On a malformed body.
    """
    if len(body) < _HEAD.size:
        raise BadRequestError(f'action "query_key": the body has {len(body)} bytes, too short')
    version, kind, flags, wait_ms, size = _HEAD.unpack_from(body)
    if version != KEY_WIRE_VERSION:
        raise BadRequestError(
            f'action "query_key": version {version}; this server reads version {KEY_WIRE_VERSION}'
        )
    if kind > 1:
        raise BadRequestError(f'action "query_key": unknown query type {kind}')
    if flags & ~_FLAGS:
        raise BadRequestError(f'action "query_key": unknown flags {flags:#04x}')
    if wait_ms > _INT64_MAX:
        raise BadRequestError(f'action "query_key": wait_ms {wait_ms} is beyond int64')
    reader = _Reader(body, _HEAD.size, 'action "query_key"')
    store = reader.text(size, "store name")
    key = reader.blob(reader.u32("key length"), "key")
    partitions = None
    if flags & _PARTITIONS:
        count = reader.u32("partition count")
        if count == 0:
            raise BadRequestError('action "query_key": the partitions must not be empty')
        raw = reader.blob(4 * count, "partitions")
        numbers = struct.unpack(f">{count}I", raw)
        for before, after in itertools.pairwise(numbers):
            if after <= before:
                raise BadRequestError('action "query_key": partitions must be ascending, once')
        if numbers[-1] > _INT32_MAX:
            raise BadRequestError(f'action "query_key": partition {numbers[-1]} is beyond int32')
        partitions = frozenset(numbers)
    bound = PositionBound.unbounded()
    if flags & _BOUND:
        text = reader.blob(reader.u32("position bound length"), "position bound")
        bound = PositionBound.at(_position(text, 'action "query_key"\'s position bound'))
    reader.end()
    try:
        request = StateQueryRequest(
            store,
            KeyQuery(key) if kind == 0 else RawKeyQuery(key),
            partitions,
            bound,
            bool(flags & _ACTIVE_ONLY),
            bool(flags & _EXECUTION_INFO),
        )
    except StateStoreError as exc:  # QueryError: e.g. an empty store name
        raise BadRequestError(f'action "query_key": malformed request: {exc}') from exc
    return request, wait_ms, bool(flags & _RULE)


# -- replies --------------------------------------------------------------------------------
def encode_key_reply(
    store_id: str, result: StateQueryResult[Any], store_wide: bool | None = None
) -> bytes:
    """The ``query_key`` reply: ``result`` of the store ``store_id``, and, unless None (to a
    request without flag 16), whether its answers were checked store-wide.

    Raises
    ------
    BadRequestError
        If a result holds a value that is not bytes (no key query answers with one).
    """
    indexes: dict[Position, int] = {}
    texts: list[bytes] = []
    parts: list[bytes] = []
    for partition, item in result.partition_items:
        _encode_one(item, _PARTITION_HEAD, (partition,), indexes, texts, parts)
    if result.global_result is None:
        parts.append(b"\x00")
    else:
        parts.append(b"\x01")
        _encode_one(result.global_result, _GLOBAL_HEAD, (), indexes, texts, parts)
    ident = store_id.encode()
    if store_wide is None:
        head = [_U8_U16.pack(KEY_WIRE_VERSION, len(ident)), ident]
    else:
        head = [_U8_U16.pack(RULE_REPLY_VERSION, len(ident)), ident, _U8.pack(store_wide)]
    head.append(_U16.pack(len(texts)))
    for text in texts:
        head += (_U32.pack(len(text)), text)
    head.append(_U32.pack(len(result.partition_items)))
    return b"".join(head + parts)


def _encode_one(
    item: QueryResult[Any],
    layout: struct.Struct,
    partition: tuple[int, ...],
    indexes: dict[Position, int],
    texts: list[bytes],
    parts: list[bytes],
) -> None:
    position = item.position
    index = indexes.get(position)
    if index is None:
        index = indexes[position] = len(texts)
        texts.append(_position_text(position))
    reason, value, info = item.failure_reason, item.value, item.execution_info
    if reason is not None:
        code = reason.value.encode("ascii")
        payload = b"%c%s%s" % (len(code), code, (item.failure_message or "").encode())
        outcome = _FAILURE
    elif value is None:
        payload, outcome = b"", _NO_VALUE
    elif type(value) is bytes:
        payload, outcome = value, _VALUE
    else:
        raise BadRequestError(
            f"cannot send a key query result of type {type(value).__name__} in the compact form"
        )
    parts += (layout.pack(*partition, index, outcome, len(payload), len(info)), payload)
    for line in info:
        data = line.encode()
        parts += (_U32.pack(len(data)), data)


def decode_key_reply(reply: bytes) -> tuple[str, StateQueryResult[Any], bool | None]:
    """``(store id, result, store_wide)`` from a ``query_key`` reply; ``store_wide`` is None
    in a reply of version 1 (which says no bound rule).

    Raises
    ------
    BadRequestError
        On a malformed reply.
    """
    reader = _Reader(reply, 0, "query_key reply")
    version = reader.u8("version")
    if version not in (KEY_WIRE_VERSION, RULE_REPLY_VERSION):
        raise BadRequestError(
            f"query_key reply: version {version}; this client reads versions "
            f"{KEY_WIRE_VERSION} and {RULE_REPLY_VERSION}"
        )
    store_id = reader.text(reader.u16("store id length"), "store id")
    store_wide = None
    if version == RULE_REPLY_VERSION:
        rule = reader.u8("bound rule")
        if rule > 1:
            raise BadRequestError(f"query_key reply: bound rule {rule}; expected 0 or 1")
        store_wide = rule == 1
    positions = [
        _position(reader.blob(reader.u32("position length"), "position"), "query_key reply")
        for _ in range(reader.u16("position count"))
    ]
    # Results with the same position and no value nor info are equal: decoded once.
    absent: dict[int, QueryResult[Any]] = {}
    items = []
    for _ in range(reader.u32("result count")):
        partition, index, outcome, size, lines = reader.unpack(_PARTITION_HEAD, "result head")
        if partition > _INT32_MAX:
            raise BadRequestError(f"query_key reply: partition number {partition} is beyond int32")
        if outcome == _NO_VALUE and not (size or lines) and index in absent:
            items.append((partition, absent[index]))
            continue
        item = _decode_one(reader, positions, index, outcome, size, lines)
        if outcome == _NO_VALUE and not lines:
            absent[index] = item
        items.append((partition, item))
    global_result = None
    flag = reader.u8("global flag")
    if flag == 1:
        global_result = _decode_one(reader, positions, *reader.unpack(_GLOBAL_HEAD, "global"))
    elif flag != 0:
        raise BadRequestError(f"query_key reply: global flag {flag}; expected 0 or 1")
    reader.end()
    try:
        return store_id, StateQueryResult(tuple(items), global_result), store_wide
    except StateStoreError as exc:  # QueryError: a partition given twice
        raise BadRequestError(f"malformed query_key reply: {exc}") from exc


def _decode_one(
    reader: _Reader, positions: list[Position], index: int, outcome: int, size: int, lines: int
) -> QueryResult[Any]:
    if index >= len(positions):
        raise BadRequestError(
            f"query_key reply: position index {index} of {len(positions)} positions"
        )
    payload = reader.blob(size, "result") if size else b""
    value = reason = message = None
    if outcome == _VALUE:
        value = payload
    elif outcome == _FAILURE:
        code = payload[1 : 1 + payload[0]] if payload else b""
        reason = _REASONS.get(code)
        if reason is None:
            raise BadRequestError(f"query_key reply: unknown failure reason {reprlib.repr(code)}")
        message = _text(payload[1 + len(code) :], "failure message")
    elif outcome != _NO_VALUE or size:
        raise BadRequestError(
            f"query_key reply: unknown outcome {outcome} (or a value where none belongs)"
        )
    info: tuple[str, ...] = ()
    if lines:
        info = tuple(
            reader.text(reader.u32("execution info length"), "execution info") for _ in range(lines)
        )
    return QueryResult(value, positions[index], info, reason, message)


class _Reader:
    """Strict reads from ``data``: each names its field when the data ends too soon."""

    __slots__ = ("data", "offset", "what")

    def __init__(self, data: bytes, offset: int, what: str) -> None:
        self.data = data
        self.offset = offset
        self.what = what

    def unpack(self, layout: struct.Struct, field: str) -> tuple[Any, ...]:
        offset = self.offset
        if offset + layout.size > len(self.data):
            raise BadRequestError(f"{self.what}: the data ends within the {field}")
        self.offset = offset + layout.size
        return layout.unpack_from(self.data, offset)

    def u8(self, field: str) -> int:
        return self.unpack(_U8, field)[0]  # type: ignore[no-any-return]

    def u16(self, field: str) -> int:
        return self.unpack(_U16, field)[0]  # type: ignore[no-any-return]

    def u32(self, field: str) -> int:
        return self.unpack(_U32, field)[0]  # type: ignore[no-any-return]

    def blob(self, size: int, field: str) -> bytes:
        offset = self.offset
        end = offset + size
        if end > len(self.data):
            raise BadRequestError(
                f"{self.what}: the {field} needs {size} bytes, {len(self.data) - offset} are left"
            )
        self.offset = end
        return self.data[offset:end]

    def text(self, size: int, field: str) -> str:
        return _text(self.blob(size, field), field, self.what)

    def end(self) -> None:
        left = len(self.data) - self.offset
        if left:
            raise BadRequestError(f"{self.what}: {left} bytes after the end")


def _text(raw: bytes, field: str, what: str = "query_key reply") -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise BadRequestError(f"{what}: the {field} is not UTF-8 ({exc})") from exc


def _position_text(position: Position) -> bytes:
    text = _position_texts.get(position)
    if text is None:
        if len(_position_texts) >= _POSITION_CACHE_SIZE:
            _position_texts.clear()
        text = _position_texts[position] = position.to_json().encode()
    return text


def _position(text: bytes, what: str) -> Position:
    position = _positions.get(text)
    if position is None:
        try:
            position = Position.from_json(text)
        except StateStoreError as exc:  # InvalidPositionError
            raise BadRequestError(f"{what}: malformed position: {exc}") from exc
        if len(_positions) >= _POSITION_CACHE_SIZE:
            _positions.clear()
        _positions[text] = position
    return position
