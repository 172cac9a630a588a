"""The wire form of remote interactive queries: the ``query`` action's body and reply.

A :class:`~spark_statestore.query.StateQueryRequest` travels as JSON, the server runs it
with :meth:`Store.query <spark_statestore.store.Store.query>` and the
:class:`~spark_statestore.query.StateQueryResult` comes back as JSON, so a remote answer is
the local answer: the same values, positions, failure reasons and messages.

Body of the ``query`` action::

    {"request": {"store": name, "query": <query>, "partitions": [0, 2] | null,
                 "position_bound": <position> | null, "active_only": bool,
                 "execution_info": bool},
     "wait_ms": n}

``<query>`` is one of::

    {"type": "key", "key": <key>}
    {"type": "range", "lower": <key> | null, "upper": <key> | null, "descending": bool}
    {"type": "prefix", "prefix": <key>}
    {"type": "raw_key", "key": <key>}
    {"type": "raw_scan", "limit": n | null}
    {"type": "versioned_key", "key": <key>, "as_of": ms | null}
    {"type": "multi_versioned_key", "key": <key>, "from": ms | null, "to": ms | null,
     "ascending": bool}
    {"type": "custom", "class": name, "repr": text}

A ``<key>`` is ``{"bytes": base64}`` (``{"bytearray": base64}`` keeps a bytearray's type for
the messages that quote a query; a memoryview travels as bytes, since its ``repr`` names a
memory address that no other process could reproduce anyway).
The store holds serialized keys and answers a key of any other type with a
``STORE_EXCEPTION`` naming the key's type and ``repr``; such a key, and a
:class:`~spark_statestore.query.CustomQuery` (which no store executes: the answer is
``UNKNOWN_QUERY_TYPE`` quoting its type and ``repr``), travel as ``{"opaque": type name,
"repr": text}`` and are rebuilt on the server as stand-ins with that type name and ``repr``,
so the server's store words the same failure as a local one would.

Reply (``store_id`` lets a client check that the server serves the store it meant;
``store_wide`` says by which rule the store checked its answers against the bound, so that
the client checks them by the same one: true, every entry of the bound applies to every
partition; false, the bound's entries for the result's partition only. An older server sends
no ``store_wide``, and an older client ignores it)::

    {"store_id": id, "store_wide": bool,
     "result": {"partitions": [[p, <result>], ...], "global": <result> | null}}
    <result> = {"value": <value>, "position": <position>, "execution_info": [text, ...],
                "failure": null | {"reason": FailureReason value, "message": text}}
    <value>  = null | {"bytes": base64} | {"pairs": [[key base64, value base64], ...]}
               | {"record": <record>} | {"records": [<record>, ...]}
    <record> = {"value": base64, "timestamp": ms, "valid_to": ms | null}

Decoding is strict on both sides: anything else is a
:class:`~spark_statestore.serve.errors.BadRequestError` naming the field.
"""

from __future__ import annotations

import base64
import binascii
import reprlib
from collections.abc import Mapping
from typing import Any, Final

from spark_statestore.errors import StateStoreError
from spark_statestore.position import Position, PositionBound
from spark_statestore.query import (
    CustomQuery,
    FailureReason,
    KeyQuery,
    MultiVersionedKeyQuery,
    PrefixQuery,
    Query,
    QueryError,
    QueryResult,
    RangeQuery,
    RawKeyQuery,
    RawScanQuery,
    StateQueryRequest,
    StateQueryResult,
    VersionedKeyQuery,
    VersionedRecord,
)
from spark_statestore.serve.errors import BadRequestError
from spark_statestore.serve.protocol import wire_field

__all__ = [
    "MAX_OPAQUE_REPR",
    "decode_query_body",
    "decode_result",
    "encode_query_body",
    "encode_result",
]

MAX_OPAQUE_REPR: Final = 4096
"""The longest ``repr`` of an opaque key or custom query sent (longer ones are cut)."""
_MAX_TYPE_NAME: Final = 200
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_INT32_MAX: Final = 2**31 - 1


# -- requests -------------------------------------------------------------------------------
def encode_query_body(request: StateQueryRequest, wait_ms: int = 0) -> dict[str, Any]:
    """The ``query`` action's body for ``request``, waiting up to ``wait_ms`` for its bound.

    Raises
    ------
    QueryError
        If ``request`` is not a request, or holds a value built around the named
        constructors that cannot travel (a partition beyond int32, a bad ``RawScanQuery``
        limit).
    """
    if not isinstance(request, StateQueryRequest):
        raise QueryError(f"a remote query needs a StateQueryRequest, got {type(request).__name__}")
    for partition in request.partitions or ():
        if partition > _INT32_MAX:
            raise QueryError(f"partition {partition} is beyond int32: no Kafka topic has it")
    return {
        "request": {
            "store": request.store_name,
            "query": _encode_query(request.query),
            "partitions": None if request.partitions is None else sorted(request.partitions),
            "position_bound": request.position_bound.to_dict(),
            "active_only": request.active_only,
            "execution_info": request.execution_info_enabled,
        },
        "wait_ms": wait_ms,
    }


def decode_query_body(body: Mapping[str, Any]) -> tuple[StateQueryRequest, int]:
    """``(request, wait_ms)`` from a ``query`` action's body.

    Raises
    ------
    BadRequestError
        On a missing, unknown or malformed field.
    """
    _only(body, {"request", "wait_ms"}, "query body")
    wait_ms = body.get("wait_ms", 0)
    if isinstance(wait_ms, bool) or not isinstance(wait_ms, int) or not 0 <= wait_ms <= _INT64_MAX:
        raise BadRequestError(f'action "query": wait_ms must be an int >= 0, got {wait_ms!r}')
    data = wire_field(body, "request", dict, what="query body")
    _only(
        data,
        {"store", "query", "partitions", "position_bound", "active_only", "execution_info"},
        "query request",
    )
    partitions = wire_field(data, "partitions", list, optional=True, what="query request")
    for partition in partitions or ():
        if type(partition) is int and partition > _INT32_MAX:
            raise BadRequestError(f'action "query": partition {partition} is beyond int32')
    raw_bound = wire_field(data, "position_bound", dict, optional=True, what="query request")
    try:
        bound = PositionBound.from_dict(raw_bound)
        request = StateQueryRequest(
            wire_field(data, "store", str, what="query request"),
            _decode_query(wire_field(data, "query", dict, what="query request")),
            None if partitions is None else frozenset(partitions),
            bound,
            wire_field(data, "active_only", bool, what="query request"),
            wire_field(data, "execution_info", bool, what="query request"),
        )
    except BadRequestError:
        raise
    except (StateStoreError, TypeError) as exc:  # QueryError, InvalidPositionError, unhashable
        raise BadRequestError(f'action "query": malformed request: {exc}') from exc
    return request, wait_ms


def _encode_query(query: Query) -> dict[str, Any]:
    if isinstance(query, KeyQuery):
        return {"type": "key", "key": _encode_key(query.key)}
    if isinstance(query, RangeQuery):
        return {
            "type": "range",
            "lower": None if query.lower is None else _encode_key(query.lower),
            "upper": None if query.upper is None else _encode_key(query.upper),
            "descending": bool(query.descending),
        }
    if isinstance(query, PrefixQuery):
        return {"type": "prefix", "prefix": _encode_key(query.prefix)}
    if isinstance(query, RawKeyQuery):
        return {"type": "raw_key", "key": _encode_key(query.key)}
    if isinstance(query, RawScanQuery):
        return {"type": "raw_scan", "limit": _check_limit(query.limit, QueryError)}
    if isinstance(query, VersionedKeyQuery):
        return {
            "type": "versioned_key",
            "key": _encode_key(query.key),
            "as_of": query.as_of_timestamp,
        }
    if isinstance(query, MultiVersionedKeyQuery):
        return {
            "type": "multi_versioned_key",
            "key": _encode_key(query.key),
            "from": query.from_timestamp,
            "to": query.to_timestamp,
            "ascending": bool(query.ascending),
        }
    # A CustomQuery: no store executes it; its type name and repr word the answer.
    return {"type": "custom", "class": type(query).__name__, "repr": _repr(query)}


def _decode_query(data: Mapping[str, Any]) -> Query:
    kind = wire_field(data, "type", str, what="query")
    what = f"{kind!r} query"
    if kind == "key":
        _only(data, {"type", "key"}, what)
        return KeyQuery(_decode_key(wire_field(data, "key", dict, what=what), what))
    if kind == "range":
        _only(data, {"type", "lower", "upper", "descending"}, what)
        lower = wire_field(data, "lower", dict, optional=True, what=what)
        upper = wire_field(data, "upper", dict, optional=True, what=what)
        return RangeQuery(
            None if lower is None else _decode_key(lower, what),
            None if upper is None else _decode_key(upper, what),
            wire_field(data, "descending", bool, what=what),
        )
    if kind == "prefix":
        _only(data, {"type", "prefix"}, what)
        return PrefixQuery(_decode_key(wire_field(data, "prefix", dict, what=what), what))
    if kind == "raw_key":
        _only(data, {"type", "key"}, what)
        return RawKeyQuery(_decode_key(wire_field(data, "key", dict, what=what), what))
    if kind == "raw_scan":
        _only(data, {"type", "limit"}, what)
        return RawScanQuery(_check_limit(wire_field(data, "limit", int, optional=True, what=what)))
    if kind == "versioned_key":
        _only(data, {"type", "key", "as_of"}, what)
        return VersionedKeyQuery(
            _decode_key(wire_field(data, "key", dict, what=what), what), _time(data, "as_of", what)
        )
    if kind == "multi_versioned_key":
        _only(data, {"type", "key", "from", "to", "ascending"}, what)
        return MultiVersionedKeyQuery(
            _decode_key(wire_field(data, "key", dict, what=what), what),
            _time(data, "from", what),
            _time(data, "to", what),
            wire_field(data, "ascending", bool, what=what),
        )
    if kind == "custom":
        _only(data, {"type", "class", "repr"}, what)
        return _stand_in(  # type: ignore[no-any-return]
            wire_field(data, "class", str, what=what),
            wire_field(data, "repr", str, what=what),
            CustomQuery,
            what,
        )
    raise BadRequestError(
        f"unknown query type {reprlib.repr(kind)}; expected key, range, prefix, raw_key, "
        "raw_scan, versioned_key, multi_versioned_key or custom"
    )


def _encode_key(key: object) -> dict[str, Any]:
    if isinstance(key, bytearray):
        return {"bytearray": _b64(bytes(key))}
    if isinstance(key, (bytes, memoryview)):
        return {"bytes": _b64(bytes(key))}
    return {"opaque": type(key).__name__, "repr": _repr(key)}


def _decode_key(data: Mapping[str, Any], what: str) -> Any:
    if "opaque" in data:
        _only(data, {"opaque", "repr"}, f"{what}'s opaque key")
        return _stand_in(
            wire_field(data, "opaque", str, what=what),
            wire_field(data, "repr", str, what=what),
            object,
            what,
        )
    if set(data) == {"bytes"}:
        return _unb64(data["bytes"], what)
    if set(data) == {"bytearray"}:
        return bytearray(_unb64(data["bytearray"], what))
    raise BadRequestError(
        f'the {what} has a malformed key {reprlib.repr(data)}; expected {{"bytes": base64}}, '
        '{"bytearray": base64} or {"opaque": type name, "repr": text}'
    )


def _stand_in(name: str, text: str, base: type, what: str) -> Any:
    """An object whose type is named ``name`` and whose ``repr`` is ``text``: what a store
    quotes when it refuses a non-bytes key or an unknown query type."""
    if not name.isidentifier() or len(name) > _MAX_TYPE_NAME:
        raise BadRequestError(f"the {what} names a type {reprlib.repr(name)}: not an identifier")
    if len(text) > MAX_OPAQUE_REPR:
        raise BadRequestError(
            f"the {what}'s repr has {len(text)} characters, over {MAX_OPAQUE_REPR}"
        )
    stand_in = type(name, (base,), {"__slots__": (), "__repr__": lambda self: text})
    return stand_in()


def _repr(value: object) -> str:
    text = repr(value)
    return text if len(text) <= MAX_OPAQUE_REPR else text[: MAX_OPAQUE_REPR - 3] + "..."


def _check_limit(limit: object, error: type[Exception] = BadRequestError) -> int | None:
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= _INT64_MAX:
        raise error(f"a raw_scan limit must be an int in [1, 2**63), got {reprlib.repr(limit)}")
    return limit


def _time(data: Mapping[str, Any], name: str, what: str) -> int | None:
    value = wire_field(data, name, int, optional=True, what=what)
    if value is not None and not _INT64_MIN <= value <= _INT64_MAX:
        raise BadRequestError(f"the {what}'s {name!r} is outside the int64 range: {value}")
    return value  # type: ignore[no-any-return]


# -- results --------------------------------------------------------------------------------
def encode_result(result: StateQueryResult[Any]) -> dict[str, Any]:
    """The ``query`` action's reply for ``result``."""
    return {
        "partitions": [[p, _encode_one(r)] for p, r in result.partition_items],
        "global": None if result.global_result is None else _encode_one(result.global_result),
    }


def decode_result(data: Mapping[str, Any]) -> StateQueryResult[Any]:
    """The :class:`StateQueryResult` of a ``query`` reply.

    Raises
    ------
    BadRequestError
        On a malformed reply.
    """
    _only(data, {"partitions", "global"}, "query reply")
    items = []
    for item in wire_field(data, "partitions", list, what="query reply"):
        if not isinstance(item, list) or len(item) != 2:
            raise BadRequestError(f"malformed partition result {reprlib.repr(item)}")
        partition, raw = item
        if isinstance(partition, bool) or not isinstance(partition, int):
            raise BadRequestError(f"malformed partition number {reprlib.repr(partition)}")
        if not 0 <= partition <= _INT32_MAX:
            raise BadRequestError(f"partition number {partition} is out of range")
        if not isinstance(raw, dict):
            raise BadRequestError(f"malformed result of partition {partition}")
        items.append((partition, _decode_one(raw, f"result of partition {partition}")))
    raw_global = wire_field(data, "global", dict, optional=True, what="query reply")
    try:
        return StateQueryResult(
            tuple(items), None if raw_global is None else _decode_one(raw_global, "global result")
        )
    except StateStoreError as exc:
        raise BadRequestError(f"malformed query reply: {exc}") from exc


def _encode_one(result: QueryResult[Any]) -> dict[str, Any]:
    failure = None
    if result.failure_reason is not None:
        failure = {"reason": result.failure_reason.value, "message": result.failure_message}
    return {
        "value": _encode_value(result.value),
        "position": result.position.to_dict(),
        "execution_info": list(result.execution_info),
        "failure": failure,
    }


def _decode_one(data: Mapping[str, Any], what: str) -> QueryResult[Any]:
    _only(data, {"value", "position", "execution_info", "failure"}, what)
    info = wire_field(data, "execution_info", list, what=what)
    failure = wire_field(data, "failure", dict, optional=True, what=what)
    reason = message = None
    if failure is not None:
        _only(failure, {"reason", "message"}, f"{what}'s failure")
        try:
            reason = FailureReason(wire_field(failure, "reason", str, what=what))
        except ValueError:
            raise BadRequestError(
                f"the {what} has an unknown failure reason {reprlib.repr(failure['reason'])}"
            ) from None
        message = wire_field(failure, "message", str, what=what)
    try:
        return QueryResult(
            _decode_value(data.get("value"), what),
            Position.from_dict(wire_field(data, "position", dict, what=what)),
            tuple(info),
            reason,
            message,
        )
    except BadRequestError:
        raise
    except StateStoreError as exc:
        raise BadRequestError(f"malformed {what}: {exc}") from exc


def _encode_value(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return {"bytes": _b64(value)}
    if isinstance(value, VersionedRecord):
        return {"record": _encode_record(value)}
    if isinstance(value, list):
        if value and isinstance(value[0], VersionedRecord):
            return {"records": [_encode_record(r) for r in value]}
        return {"pairs": [[_b64(k), _b64(v)] for k, v in value]}
    raise BadRequestError(f"cannot send a query result of type {type(value).__name__}")


def _decode_value(data: Any, what: str) -> Any:
    if data is None:
        return None
    if not isinstance(data, dict) or len(data) != 1:
        raise BadRequestError(f"the {what} has a malformed value {reprlib.repr(data)}")
    ((kind, raw),) = data.items()
    if kind == "bytes":
        return _unb64(raw, what)
    if kind == "record":
        return _decode_record(raw, what)
    if not isinstance(raw, list):
        raise BadRequestError(f"the {what}'s {kind!r} must be a list")
    if kind == "records":
        return [_decode_record(r, what) for r in raw]
    if kind == "pairs":
        pairs = []
        for pair in raw:
            if not isinstance(pair, list) or len(pair) != 2:
                raise BadRequestError(f"the {what} has a malformed pair {reprlib.repr(pair)}")
            pairs.append((_unb64(pair[0], what), _unb64(pair[1], what)))
        return pairs
    raise BadRequestError(f"the {what} has a value of unknown kind {reprlib.repr(kind)}")


def _encode_record(record: VersionedRecord) -> dict[str, Any]:
    return {"value": _b64(record.value), "timestamp": record.timestamp, "valid_to": record.valid_to}


def _decode_record(data: Any, what: str) -> VersionedRecord:
    if not isinstance(data, dict):
        raise BadRequestError(f"the {what} has a malformed versioned record")
    _only(data, {"value", "timestamp", "valid_to"}, f"{what}'s versioned record")
    timestamp = _time(data, "timestamp", what)
    if timestamp is None:
        raise BadRequestError(f"the {what}'s versioned record has no timestamp")
    return VersionedRecord(
        _unb64(data.get("value"), what), timestamp, _time(data, "valid_to", what)
    )


# -- helpers --------------------------------------------------------------------------------
def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any, what: str) -> bytes:
    if not isinstance(text, str):
        raise BadRequestError(f"the {what} has {reprlib.repr(text)} where base64 text belongs")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error, ValueError) as exc:
        raise BadRequestError(f"the {what} has malformed base64 ({exc})") from exc


def _only(data: Mapping[str, Any], allowed: set[str], what: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise BadRequestError(
            f"the {what} has unknown fields {reprlib.repr(unknown)}; expected {sorted(allowed)}"
        )
