"""What a store is (its manifest) and what its last commit recorded (its metadata).

Both are JSON under the metadata namespace (see :mod:`spark_statestore.store.layout`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from spark_statestore.errors import InvalidPositionError
from spark_statestore.position import Position
from spark_statestore.store.errors import RECOVERY_HINT, StoreCorruptedError, StoreFormatError

__all__ = ["FORMAT_VERSION", "CommitRecord", "Role", "StoreManifest", "StoreMetadata"]

FORMAT_VERSION = 2
"""The newest on-disk format this code understands; stores with a larger one are refused.

Version 1 is a key-value store; version 2 a versioned store (its history namespace and
stream times), written only for those, so older code refuses to open a versioned store as
a key-value one."""

KEY_VALUE_FORMAT_VERSION = 1
VERSIONED_FORMAT_VERSION = 2


class Role(str, Enum):
    """Who writes a store: a ``leader`` (our sink) or a ``follower`` of a changelog."""

    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass(frozen=True, slots=True)
class StoreManifest:
    """The identity of a store, written once at creation and checked on every open.

    Parameters
    ----------
    format_version
        The on-disk format version.
    role
        Leader or follower; fixed for the store's lifetime.
    changelog_topic
        The changelog the store follows (follower) or publishes (leader); None for a leader
        that publishes no changelog.
    partitions
        The changelog's partition count (the store's partitions).
    name
        The store name queries address it by.
    store_id
        A random id, unique per store directory (changelog progress records carry it).
    created_at
        Creation time, ISO 8601 UTC.
    held_partitions
        The partitions a subset follower holds; None: all of them.
    key_prefix
        The key prefix a subset follower keeps; None: every key.
    history_retention_ms
        A versioned store's history retention (:mod:`~spark_statestore.store.versions`);
        None for a key-value store.
    """

    format_version: int
    role: Role
    changelog_topic: str | None
    partitions: int
    name: str
    store_id: str
    created_at: str
    held_partitions: tuple[int, ...] | None = None
    key_prefix: bytes | None = None
    history_retention_ms: int | None = None

    @property
    def versioned(self) -> bool:
        """True for a versioned store."""
        return self.history_retention_ms is not None

    @property
    def holds(self) -> tuple[int, ...]:
        """The changelog partitions whose data the store holds."""
        if self.held_partitions is None:
            return tuple(range(self.partitions))
        return self.held_partitions

    @property
    def is_subset(self) -> bool:
        """True for a follower of part of its changelog (some partitions or a key prefix)."""
        return self.held_partitions is not None or self.key_prefix is not None

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "format_version": self.format_version,
                "role": self.role.value,
                "changelog_topic": self.changelog_topic,
                "partitions": self.partitions,
                "name": self.name,
                "store_id": self.store_id,
                "created_at": self.created_at,
                "held_partitions": (
                    None if self.held_partitions is None else list(self.held_partitions)
                ),
                "key_prefix": None if self.key_prefix is None else self.key_prefix.hex(),
                **(
                    {}
                    if self.history_retention_ms is None
                    else {"history_retention_ms": self.history_retention_ms}
                ),
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes, path: str) -> StoreManifest:
        """Decode and check a manifest; newer formats raise :class:`StoreFormatError`."""
        data = _load_object(raw, "manifest", path)
        version = data.get("format_version")
        if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
            raise StoreFormatError(
                f"store {path} has on-disk format version {version}, newer than the "
                f"{FORMAT_VERSION} this spark-statestore understands: upgrade "
                f"spark-statestore, or {RECOVERY_HINT}",
                path,
            )
        try:
            manifest = cls(
                format_version=_typed(data, "format_version", int),
                role=Role(data.get("role")),
                changelog_topic=data.get("changelog_topic"),
                partitions=_typed(data, "partitions", int),
                name=_typed(data, "name", str),
                store_id=_typed(data, "store_id", str),
                created_at=_typed(data, "created_at", str),
                held_partitions=_held_partitions(data.get("held_partitions")),
                key_prefix=_key_prefix(data.get("key_prefix")),
                history_retention_ms=_retention(data.get("history_retention_ms")),
            )
        except (TypeError, ValueError) as exc:
            raise _corrupt(path, "manifest", exc) from exc
        if (manifest.format_version >= VERSIONED_FORMAT_VERSION) != manifest.versioned:
            raise _corrupt(
                path,
                "manifest",
                ValueError("format version 2 is a versioned store's, with a history retention"),
            )
        if manifest.format_version < 1 or manifest.partitions < 1:
            raise _corrupt(path, "manifest", ValueError(f"impossible values in {data}"))
        if manifest.changelog_topic is not None and not isinstance(manifest.changelog_topic, str):
            raise _corrupt(path, "manifest", TypeError("changelog_topic is not a string"))
        return manifest


@dataclass(frozen=True, slots=True)
class CommitRecord:
    """What a sink commit recorded, atomically with its data (the generic commit slot).

    Parameters
    ----------
    query_id
        The writing query's id (or the batch writer's ``txnAppId``).
    batch_id
        The committed micro-batch id (or ``txnVersion``).
    source_offsets
        The batch's source offsets as read from Spark's offset log (JSON-compatible, opaque
        to the store).
    changelog_end_offsets
        ``{partition: next offset}`` of the changelog after the batch was published.
    """

    query_id: str
    batch_id: int
    source_offsets: Any = None
    changelog_end_offsets: Mapping[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.query_id, str):
            raise TypeError(f"CommitRecord query_id must be a str, got {self.query_id!r}")
        if isinstance(self.batch_id, bool) or not isinstance(self.batch_id, int):
            raise TypeError(f"CommitRecord batch_id must be an int, got {self.batch_id!r}")
        offsets = {}
        for partition, offset in dict(self.changelog_end_offsets).items():
            if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
                raise TypeError(f"changelog partition must be an int >= 0, got {partition!r}")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise TypeError(f"changelog offset must be an int >= 0, got {offset!r}")
            offsets[partition] = offset
        object.__setattr__(self, "changelog_end_offsets", offsets)
        json.dumps(self.source_offsets)  # refuse what cannot be stored, at the caller

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form (changelog partitions as text), as stored and as served."""
        return {
            "query_id": self.query_id,
            "batch_id": self.batch_id,
            "source_offsets": self.source_offsets,
            "changelog_end_offsets": {
                str(p): o for p, o in sorted(self.changelog_end_offsets.items())
            },
        }

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes, path: str) -> CommitRecord:
        data = _load_object(raw, "commit record", path)
        try:
            ends = data.get("changelog_end_offsets") or {}
            return cls(
                query_id=_typed(data, "query_id", str),
                batch_id=_typed(data, "batch_id", int),
                source_offsets=data.get("source_offsets"),
                changelog_end_offsets={int(p): o for p, o in ends.items()},
            )
        except (TypeError, ValueError, AttributeError) as exc:
            raise _corrupt(path, "commit record", exc) from exc


@dataclass(frozen=True, slots=True)
class StoreMetadata:
    """The metadata of one committed state of a store (what a snapshot corresponds to).

    Parameters
    ----------
    position
        The merged position of the input behind the store's content (KIP-796).
    changelog_offsets
        ``{partition: next changelog offset}`` applied (follower) or published (leader).
    commit_record
        The last sink commit record, or None.
    commit_seq
        How many commits the store has had; identifies the committed state.
    store_wide
        The position holds for the whole store, every partition: a store partition is not
        the input partition of the same number (a leader, our sink: its commits are atomic
        across partitions; a follower of a sink's changelog, which takes positions from
        whole batches). Otherwise (a follower of Kafka Streams' changelog) store partition
        *n* holds input partition *n*, and an IQv2 bound applies per partition, by number.
    """

    position: Position
    changelog_offsets: Mapping[int, int]
    commit_record: CommitRecord | None
    commit_seq: int
    store_wide: bool = False


def encode_offsets(offsets: Mapping[int, int]) -> bytes:
    return json.dumps({str(p): o for p, o in sorted(offsets.items())}).encode()


def decode_offsets(raw: bytes | None, path: str) -> dict[int, int]:
    if raw is None:
        return {}
    data = _load_object(raw, "changelog offsets", path)
    try:
        offsets = {int(p): o for p, o in data.items()}
    except ValueError as exc:
        raise _corrupt(path, "changelog offsets", exc) from exc
    for offset in offsets.values():
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise _corrupt(path, "changelog offsets", ValueError(f"bad offset {offset!r}"))
    return offsets


def decode_position(raw: bytes | None, path: str) -> Position:
    if raw is None:
        return Position.empty()
    try:
        return Position.from_json(raw)
    except InvalidPositionError as exc:
        raise _corrupt(path, "position", exc) from exc


def decode_seq(raw: bytes | None, path: str) -> int:
    if raw is None:
        return 0
    try:
        return int(raw)
    except ValueError as exc:
        raise _corrupt(path, "commit sequence", exc) from exc


def _load_object(raw: bytes, what: str, path: str) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _corrupt(path, what, exc) from exc
    if not isinstance(data, dict):
        raise _corrupt(path, what, TypeError(f"not a JSON object: {raw[:80]!r}"))
    return data


def _typed(data: Mapping[str, Any], name: str, kind: type) -> Any:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise TypeError(f"{name} must be {kind.__name__}, got {value!r}")
    return value


def _held_partitions(raw: Any) -> tuple[int, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(
        isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in raw
    ):
        raise TypeError(f"held_partitions must be a list of partitions, got {raw!r}")
    return tuple(raw)


def _retention(raw: Any) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise ValueError(f"history_retention_ms must be an int >= 0, got {raw!r}")
    return raw


def _key_prefix(raw: Any) -> bytes | None:
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise TypeError(f"key_prefix must be hex text, got {raw!r}")
    return bytes.fromhex(raw)


def _corrupt(path: str, what: str, exc: BaseException) -> StoreCorruptedError:
    return StoreCorruptedError(
        f"store {path}: its {what} metadata cannot be decoded ({exc}); the store is "
        f"corrupted: {RECOVERY_HINT}",
        path,
    )
