"""The wire protocol of the store server: tickets, action bodies and results, errors.

Everything is UTF-8 JSON. Shared by :mod:`~spark_statestore.serve.server` and
:mod:`~spark_statestore.serve.client`, so both sides agree on one encoding.

Tickets (``do_get``)::

    {"snapshot_id": "<id>" | null, "scan": <ScanSpec.to_dict()>}

Actions (``do_action``; the body is a JSON object, the result one JSON object)::

    pin       {}                   -> {"snapshot_id": "<id>", "metadata": <description>}
    release   {"snapshot_id": ...} -> {"released": true | false}
    describe  {}                   -> <description> + {"lags": ..., "owner": ..., "pins": n}
    stats     {}                   -> {"rows_examined": n, "rows_returned": n, "requests": n}

A *description* of a committed state::

    {"store": name, "store_id": id, "path": dir, "changelog_topic": topic | null,
     "partitions": n, "held_partitions": [0, 2] | null, "key_prefix": "<hex>" | null,
     "role": "leader" | "follower",
     "position": {"topic": {"0": 42}}, "changelog_offsets": {"0": 12},
     "commit_seq": n, "commit_record": {...} | null}

``lags`` is ``{"0": {"current": a, "end": b, "lag": b - a}}`` per partition (the fields of
:class:`~spark_statestore.query.LagInfo`: current and end offset positions, offset lag), or
null when the server has no lag provider.

Failed calls carry ``{"kind": <ServeError kind>, "message": text}`` in the Flight error's
``extra_info``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from spark_statestore.integer_spec import INT64_MAX, ascii_integer
from spark_statestore.position import Position
from spark_statestore.query import LagInfo
from spark_statestore.serve.errors import BadRequestError
from spark_statestore.store.manifest import StoreManifest, StoreMetadata
from spark_statestore.store.scan import InvalidScanError, ScanSpec

__all__ = [
    "ACTIONS",
    "ACTION_DESCRIBE",
    "ACTION_PIN",
    "ACTION_RELEASE",
    "ACTION_STATS",
    "MAX_PIN_WAIT_S",
    "MAX_REQUEST_BYTES",
    "ScanTicket",
    "decode_error_info",
    "decode_object",
    "describe_state",
    "encode_error_info",
    "encode_object",
    "lags_from_dict",
    "lags_to_dict",
    "offsets_from_dict",
    "position_from_dict",
]

ACTION_PIN: Final = "pin"
ACTION_RELEASE: Final = "release"
ACTION_DESCRIBE: Final = "describe"
ACTION_STATS: Final = "stats"
ACTIONS: Final = (ACTION_PIN, ACTION_RELEASE, ACTION_DESCRIBE, ACTION_STATS)

MAX_PIN_WAIT_S: Final = 600.0
"""The longest a ``pin`` waits for its position bound (a longer ``wait_ms`` waits this long)."""
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
def describe_state(path: str, manifest: StoreManifest, metadata: StoreMetadata) -> dict[str, Any]:
    """The JSON description of one committed state of a store (see the module docstring)."""
    record = metadata.commit_record
    return {
        "store": manifest.name,
        "store_id": manifest.store_id,
        "path": path,
        "changelog_topic": manifest.changelog_topic,
        "partitions": manifest.partitions,
        "held_partitions": None
        if manifest.held_partitions is None
        else list(manifest.held_partitions),
        "key_prefix": None if manifest.key_prefix is None else manifest.key_prefix.hex(),
        "role": manifest.role.value,
        "created_at": manifest.created_at,
        "position": metadata.position.to_dict(),
        "changelog_offsets": {str(p): o for p, o in sorted(metadata.changelog_offsets.items())},
        "commit_seq": metadata.commit_seq,
        "commit_record": None if record is None else json.loads(record.to_json()),
    }


def position_from_dict(description: Mapping[str, Any]) -> Position:
    """The :class:`Position` of a description (validated like any position JSON)."""
    return Position.from_dict(description.get("position", {}))


def offsets_from_dict(description: Mapping[str, Any]) -> dict[int, int]:
    """The ``{partition: next offset}`` changelog offsets of a description."""
    offsets = description.get("changelog_offsets") or {}
    if not isinstance(offsets, dict):
        raise BadRequestError(f"changelog_offsets must be an object, got {offsets!r}")
    return {
        _partition(p, "changelog_offsets"): _offset(o, "changelog_offsets")
        for p, o in offsets.items()
    }


def _partition(text: Any, what: str) -> int:
    """A partition key of a JSON object: ASCII digits only (``int()`` also reads '٣')."""
    number = ascii_integer(text) if isinstance(text, str) else None
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
