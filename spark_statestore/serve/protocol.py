"""The wire protocol of the store server: tickets, action bodies and results, errors.

Everything is UTF-8 JSON but the ``query_key`` action's body and result (binary). Shared by
:mod:`~spark_statestore.serve.server` and :mod:`~spark_statestore.serve.client`, so both sides
agree on one encoding.

Tickets (``do_get``; key lookups, ``do_exchange``, are in :mod:`.lookup_wire`)::

    {"snapshot_id": "<id>" | null, "scan": <ScanSpec.to_dict()>}

Actions (``do_action``; the body is a JSON object, the result one JSON object, except
``query_key``'s)::

    pin       {"position_bound": <position> (optional), "wait_ms": n (optional)}
                                   -> {"snapshot_id": "<id>", "metadata": <description>}
    release   {"snapshot_id": ...} -> {"released": true | false}
    describe  {}                   -> <description> + {"lags": ..., "owner": ..., "pins": n,
                                                       "location": ..., "health": ...}
    stats     {}                   -> {"rows_examined": n, "rows_returned": n, "requests": n}
    query     {"request": <StateQueryRequest>, "wait_ms": n}
                                   -> {"store_id": id, "store_wide": bool,
                                       "result": <StateQueryResult>}
                                      (forms in :mod:`~spark_statestore.serve.query_wire`)
    query_key a single-key query and its result in a compact binary form, not JSON
              (:mod:`~spark_statestore.serve.key_wire`)

A *position* is :meth:`~spark_statestore.position.Position.to_dict`'s form,
``{"topic": {"0": 42}}``. A *description* of a committed state
(:meth:`StoreDescription.to_dict`; the ``describe`` reply is :meth:`DescribeReply.to_dict`)::

    {"store": name, "store_id": id, "path": dir, "changelog_topic": topic | null,
     "partitions": n, "held_partitions": [0, 2] | null, "key_prefix": "<hex>" | null,
     "role": "leader" | "follower", "created_at": iso8601,
     "position": <position>, "changelog_offsets": {"0": 12},
     "commit_seq": n, "commit_record": {...} | null,
     "format_version": n, "history_retention_ms": ms | null}

``format_version`` and ``history_retention_ms`` (a versioned store's; null for a key-value
store) may be absent in a description from an older server: they decode as None.

``lags`` is ``{"0": {"current": a, "end": b, "lag": b - a}}`` per partition (the fields of
:class:`~spark_statestore.query.LagInfo`: current and end offset positions, offset lag), or
null when the server has no lag provider.

``health`` is :meth:`~spark_statestore.health.Health.to_dict`'s form (``{"state": "RUNNING",
"reason": text | null, "since": epoch seconds | null, "details": {...}}``), or null (absent
from an older server) when the server has no health provider.

Failed calls carry ``{"kind": <ServeError kind>, "message": text}`` in the Flight error's
``extra_info``.

Why one module of over 500 lines: it is the protocol's one description, each form next to
its encoder and decoder, so that a field added on one side is seen on the other.
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final

from spark_statestore.errors import InvalidPositionError, StateStoreError
from spark_statestore.health import Health
from spark_statestore.integer_spec import INT64_MAX, ascii_integer
from spark_statestore.position import Position
from spark_statestore.query import LagInfo
from spark_statestore.serve.errors import BadRequestError
from spark_statestore.store.errors import InvalidScanError
from spark_statestore.store.manifest import Role, StoreManifest, StoreMetadata
from spark_statestore.store.ownership import OwnerInfo
from spark_statestore.store.scan import ScanSpec

__all__ = [
    "ACTIONS",
    "ACTION_DESCRIBE",
    "ACTION_PIN",
    "ACTION_QUERY",
    "ACTION_QUERY_KEY",
    "ACTION_RELEASE",
    "ACTION_STATS",
    "MAX_PIN_WAIT_S",
    "MAX_REQUEST_BYTES",
    "DescribeReply",
    "ScanTicket",
    "StoreDescription",
    "decode_error_info",
    "decode_object",
    "encode_error_info",
    "encode_object",
    "lags_from_dict",
    "lags_to_dict",
    "wire_field",
]

ACTION_PIN: Final = "pin"
ACTION_RELEASE: Final = "release"
ACTION_DESCRIBE: Final = "describe"
ACTION_STATS: Final = "stats"
ACTION_QUERY: Final = "query"
ACTION_QUERY_KEY: Final = "query_key"
ACTIONS: Final = (
    ACTION_PIN,
    ACTION_RELEASE,
    ACTION_DESCRIBE,
    ACTION_STATS,
    ACTION_QUERY,
    ACTION_QUERY_KEY,
)

MAX_PIN_WAIT_S: Final = 600.0
"""The longest a ``pin`` or ``query`` waits for its position bound (a longer ``wait_ms`` waits
this long)."""
_INT32_MAX: Final = 2**31 - 1
MAX_REQUEST_BYTES: Final = 16 * 1024 * 1024
"""The largest ticket or action body a server accepts by default (a ``keys`` lookup of
100,000 keys of 100 bytes is about 14 MB of base64 JSON)."""


@dataclass(frozen=True, slots=True)
class ScanTicket:
    """A ``do_get`` request: which snapshot to read (None: a fresh one) and what to scan.

    Parameters
    ----------
    snapshot_id
        The id of a pinned snapshot, or None to read the latest commit.
    scan
        The rows to read.
    """

    snapshot_id: str | None
    scan: ScanSpec

    @classmethod
    def for_scan(cls, scan: ScanSpec, snapshot_id: str | None = None) -> ScanTicket:
        """A ticket reading ``scan`` from snapshot ``snapshot_id`` (None: the latest)."""
        if snapshot_id is not None and not isinstance(snapshot_id, str):
            raise BadRequestError(f"snapshot_id must be a str or None, got {snapshot_id!r}")
        if not isinstance(scan, ScanSpec):
            raise BadRequestError(f"a scan ticket needs a ScanSpec, got {scan!r}")
        return cls(snapshot_id, scan)

    def to_bytes(self) -> bytes:
        return encode_object({"snapshot_id": self.snapshot_id, "scan": self.scan.to_dict()})

    @classmethod
    def from_bytes(cls, raw: bytes) -> ScanTicket:
        """Decode a ticket.

        Raises
        ------
        BadRequestError
            On malformed JSON, a missing ``scan`` or a malformed scan spec.
        """
        data = decode_object(raw, "ticket")
        unknown = sorted(set(data) - {"snapshot_id", "scan"})
        if unknown:
            raise BadRequestError(
                f"ticket has unknown fields {unknown}; expected "
                '{"snapshot_id": str | null, "scan": {...}}'
            )
        if "scan" not in data:
            raise BadRequestError('ticket has no "scan" field (a ScanSpec.to_dict() object)')
        try:
            scan = ScanSpec.from_dict(data["scan"])
        except InvalidScanError as exc:
            raise BadRequestError(f"ticket has a malformed scan: {exc}") from exc
        return cls.for_scan(scan, data.get("snapshot_id"))


# -- JSON bodies ----------------------------------------------------------------------------
def encode_object(data: Mapping[str, Any]) -> bytes:
    """Compact UTF-8 JSON of ``data``."""
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def decode_object(raw: bytes, what: str) -> dict[str, Any]:
    """Parse a JSON object (an empty body is ``{}``).

    Raises
    ------
    BadRequestError
        If ``raw`` is not UTF-8 JSON holding an object.
    """
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadRequestError(f"the {what} is not valid JSON ({exc}): {bytes(raw)[:80]!r}") from exc
    if not isinstance(data, dict):
        raise BadRequestError(f"the {what} must be a JSON object, got {bytes(raw)[:80]!r}")
    return data


def encode_error_info(kind: str, message: str) -> bytes:
    """The ``extra_info`` of a failed call."""
    return encode_object({"kind": kind, "message": message})


def decode_error_info(extra_info: bytes | None) -> tuple[str, str] | None:
    """``(kind, message)`` from a failed call's ``extra_info``, or None when it holds none
    (a failure outside the server's handlers, e.g. in gRPC)."""
    if not extra_info:
        return None
    try:
        data = json.loads(extra_info)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    kind, message = data.get("kind"), data.get("message")
    if not isinstance(kind, str) or not isinstance(message, str):
        return None
    return kind, message


# -- descriptions ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StoreDescription:
    """One committed state of a store, as its server describes it (see the module docstring):
    the ``metadata`` of a pin reply and the body of a ``describe`` reply.

    Parameters
    ----------
    store, store_id, path
        The store's name, its random id and its directory on the server's host.
    changelog_topic
        The changelog the store follows or publishes; None for a leader without one.
    partitions
        The changelog's partition count.
    held_partitions
        The partitions a subset follower holds; None: all of them.
    key_prefix
        The key prefix a subset follower keeps; None: every key.
    role
        Leader or follower.
    created_at
        The store's creation time, ISO 8601 UTC.
    position
        The position of the commit.
    changelog_offsets
        ``{partition: next changelog offset}`` of the commit.
    commit_seq
        The commit's sequence number.
    commit_record
        The last sink commit record in
        :meth:`~spark_statestore.store.manifest.CommitRecord.to_dict`'s form, or None.
    format_version
        The store's on-disk format version; None when an older server did not say.
    history_retention_ms
        A versioned store's history retention; None for a key-value store (or when an
        older server did not say: then ``format_version`` is None too).
    """

    store: str
    store_id: str
    path: str
    changelog_topic: str | None
    partitions: int
    held_partitions: tuple[int, ...] | None
    key_prefix: bytes | None
    role: Role
    created_at: str
    position: Position
    changelog_offsets: Mapping[int, int]
    commit_seq: int
    commit_record: Mapping[str, Any] | None
    format_version: int | None = None
    history_retention_ms: int | None = None

    @classmethod
    def of_state(
        cls, path: str, manifest: StoreManifest, metadata: StoreMetadata
    ) -> StoreDescription:
        """The description of the committed state ``metadata`` of the store at ``path``."""
        record = metadata.commit_record
        return cls(
            store=manifest.name,
            store_id=manifest.store_id,
            path=path,
            changelog_topic=manifest.changelog_topic,
            partitions=manifest.partitions,
            held_partitions=manifest.held_partitions,
            key_prefix=manifest.key_prefix,
            role=manifest.role,
            created_at=manifest.created_at,
            position=metadata.position,
            changelog_offsets=dict(metadata.changelog_offsets),
            commit_seq=metadata.commit_seq,
            commit_record=None if record is None else record.to_dict(),
            format_version=manifest.format_version,
            history_retention_ms=manifest.history_retention_ms,
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form sent on the wire; :meth:`from_dict` reads it back."""
        return {
            "store": self.store,
            "store_id": self.store_id,
            "path": self.path,
            "changelog_topic": self.changelog_topic,
            "partitions": self.partitions,
            "held_partitions": None if self.held_partitions is None else list(self.held_partitions),
            "key_prefix": None if self.key_prefix is None else self.key_prefix.hex(),
            "role": self.role.value,
            "created_at": self.created_at,
            "position": self.position.to_dict(),
            "changelog_offsets": {str(p): o for p, o in sorted(self.changelog_offsets.items())},
            "commit_seq": self.commit_seq,
            "commit_record": None if self.commit_record is None else dict(self.commit_record),
            "format_version": self.format_version,
            "history_retention_ms": self.history_retention_ms,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StoreDescription:
        """Decode a description a server sent (fields other than the description's are
        ignored: a ``describe`` reply carries more, see :class:`DescribeReply`).

        Raises
        ------
        BadRequestError
            If a field is missing or malformed.
        """
        if not isinstance(data, Mapping):
            raise BadRequestError(
                f"a store description must be an object, got {reprlib.repr(data)}"
            )
        held = wire_field(data, "held_partitions", list, optional=True)
        prefix = wire_field(data, "key_prefix", str, optional=True)
        record = wire_field(data, "commit_record", dict, optional=True)
        try:
            role = Role(wire_field(data, "role", str))
            position = Position.from_dict(wire_field(data, "position", dict))
            key_prefix = None if prefix is None else bytes.fromhex(prefix)
        except (ValueError, InvalidPositionError) as exc:
            raise BadRequestError(f"malformed store description: {exc}") from exc
        return cls(
            store=wire_field(data, "store", str),
            store_id=wire_field(data, "store_id", str),
            path=wire_field(data, "path", str),
            changelog_topic=wire_field(data, "changelog_topic", str, optional=True),
            partitions=_count(data, "partitions", minimum=1),
            held_partitions=None
            if held is None
            else tuple(_partition(p, "held_partitions", key=False) for p in held),
            key_prefix=key_prefix,
            role=role,
            created_at=wire_field(data, "created_at", str),
            position=position,
            changelog_offsets=_offsets_from_dict(wire_field(data, "changelog_offsets", dict)),
            commit_seq=_count(data, "commit_seq", minimum=0),
            commit_record=record,
            format_version=_optional_count(data, "format_version", minimum=1),
            history_retention_ms=_optional_count(data, "history_retention_ms", minimum=0),
        )


@dataclass(frozen=True, slots=True)
class DescribeReply:
    """The reply of the ``describe`` action: the latest commit and what its server knows now.

    Parameters
    ----------
    description
        The store's latest commit.
    lags
        ``{partition: LagInfo}``, or None when the server has no lag provider.
    owner
        The process owning (and serving) the store.
    pins
        How many snapshots are pinned on the server.
    location
        The server's Flight location.
    health
        The owner's health (:class:`~spark_statestore.health.Health`), or None when the
        server has no health provider (or is older than health reports).
    """

    description: StoreDescription
    lags: Mapping[int, LagInfo] | None
    owner: OwnerInfo
    pins: int
    location: str | None
    health: Health | None = None

    def to_dict(self) -> dict[str, Any]:
        """The description's fields plus ``lags``, ``owner``, ``pins`` and ``location``."""
        return {
            **self.description.to_dict(),
            "lags": None if self.lags is None else lags_to_dict(self.lags),
            "owner": asdict(self.owner),
            "pins": self.pins,
            "location": self.location,
            "health": None if self.health is None else self.health.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DescribeReply:
        """Decode a ``describe`` reply.

        Raises
        ------
        BadRequestError
            If a field is missing or malformed.
        """
        description = StoreDescription.from_dict(data)
        lags = wire_field(data, "lags", dict, optional=True)
        owner = wire_field(data, "owner", dict)
        flight_location = wire_field(owner, "flight_location", str, optional=True, what="owner")
        # An older server sends no health field at all.
        raw_health = wire_field(data, "health", dict, optional=True) if "health" in data else None
        try:
            health = None if raw_health is None else Health.from_dict(raw_health)
        except StateStoreError as exc:
            raise BadRequestError(f"the describe reply's health: {exc}") from None
        return cls(
            description=description,
            lags=None if lags is None else lags_from_dict(lags),
            owner=OwnerInfo(
                pid=wire_field(owner, "pid", int, what="owner"),
                host=wire_field(owner, "host", str, what="owner"),
                role=wire_field(owner, "role", str, what="owner"),
                purpose=wire_field(owner, "purpose", str, what="owner"),
                started_at=wire_field(owner, "started_at", str, what="owner"),
                flight_location=flight_location,
            ),
            pins=_count(data, "pins", minimum=0),
            location=wire_field(data, "location", str, optional=True),
            health=health,
        )


def wire_field(
    data: Mapping[str, Any],
    name: str,
    kind: type,
    *,
    optional: bool = False,
    what: str = "store description",
) -> Any:
    """``data[name]`` when it is a ``kind`` (or None, when ``optional``)."""
    if name not in data:
        raise BadRequestError(f"the {what} has no {name!r} field")
    value = data[name]
    if value is None and optional:
        return None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        kinds = f"{kind.__name__} or null" if optional else kind.__name__
        raise BadRequestError(f"the {what}'s {name!r} must be {kinds}, got {reprlib.repr(value)}")
    return value


def _count(data: Mapping[str, Any], name: str, *, minimum: int) -> int:
    """An integer field of a description, ``>= minimum`` and within an int64."""
    value: int = wire_field(data, name, int)
    if not minimum <= value <= INT64_MAX:
        raise BadRequestError(f"the store description's {name!r} is out of range: {value}")
    return value


def _optional_count(data: Mapping[str, Any], name: str, *, minimum: int) -> int | None:
    """:func:`_count` of a field an older server does not send (absent or null: None)."""
    if data.get(name) is None:
        return None
    return _count(data, name, minimum=minimum)


def _offsets_from_dict(offsets: Mapping[str, Any]) -> dict[int, int]:
    """``{partition: next offset}`` from a description's ``changelog_offsets``."""
    return {
        _partition(p, "changelog_offsets"): _offset(o, "changelog_offsets")
        for p, o in offsets.items()
    }


def _partition(text: Any, what: str, *, key: bool = True) -> int:
    """A partition: the key of a JSON object in ASCII digits only (``int()`` also reads
    '٣'), or with ``key=False`` a JSON integer."""
    if key:
        number = ascii_integer(text) if isinstance(text, str) else None
    else:
        number = None if isinstance(text, bool) or not isinstance(text, int) else text
    if number is None or not 0 <= number <= _INT32_MAX:
        raise BadRequestError(f"{what}: {text!r} is not a partition number")
    return number


def _offset(value: Any, what: str) -> int:
    """A JSON integer offset (not a float, a bool or a string)."""
    if isinstance(value, bool) or not isinstance(value, int) or not -1 <= value <= INT64_MAX:
        raise BadRequestError(f"{what}: {value!r} is not an offset (an integer)")
    return value


def lags_to_dict(lags: Mapping[int, LagInfo]) -> dict[str, dict[str, int]]:
    return {
        str(partition): {
            "current": info.current_offset_position,
            "end": info.end_offset_position,
            "lag": info.offset_lag,
        }
        for partition, info in sorted(lags.items())
    }


def lags_from_dict(data: Mapping[str, Any]) -> dict[int, LagInfo]:
    """Rebuild ``{partition: LagInfo}`` from :func:`lags_to_dict`'s form."""
    lags: dict[int, LagInfo] = {}
    for partition, entry in data.items():
        if not isinstance(entry, dict) or "current" not in entry or "end" not in entry:
            raise BadRequestError(f"malformed lags entry {partition!r}: {entry!r}")
        lags[_partition(partition, "lags")] = LagInfo(
            _offset(entry["current"], "lags"), _offset(entry["end"], "lags")
        )
    return lags
