"""The wire form of a key lookup (``do_exchange``): a batch of keys in, their rows out, in
Arrow, with no JSON or base64 per key.

A lookup is one Flight ``DoExchange`` call:

- the descriptor is a command, the JSON object
  ``{"lookup": 1, "position_bound": <position> (optional), "wait_ms": n (optional)}``: the
  server first waits up to ``wait_ms`` for a commit whose position permits the bound, as a
  ``pin`` does (the caller checks the position it gets);
- the client writes the keys as record batches of one binary column (any name), then ends
  its side;
- the server answers with the rows of the keys that exist in one snapshot (schema
  :func:`~spark_statestore.store.snapshot.arrow_schema`, keys ascending, each key once), and
  says which snapshot in the reply schema's metadata: its position (JSON), the store id and
  the commit.

The same rows as a ``do_get`` of ``ScanSpec.for_keys(keys)``, a pinned snapshot and its
release, in one call instead of three, without the per-key base64 and JSON of a scan
ticket's key list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from spark_statestore.errors import StateStoreError
from spark_statestore.position import Position, PositionBound
from spark_statestore.serve.errors import BadRequestError, ServeError
from spark_statestore.serve.protocol import MAX_PIN_WAIT_S, decode_object, encode_object

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "LOOKUP_COMMIT",
    "LOOKUP_POSITION",
    "LOOKUP_STORE_ID",
    "LookupReply",
    "LookupRequest",
    "bound_and_wait",
    "reply_schema",
]

LOOKUP_POSITION: Final = b"spark_statestore.position"
LOOKUP_STORE_ID: Final = b"spark_statestore.store_id"
LOOKUP_COMMIT: Final = b"spark_statestore.commit_seq"
_FIELDS: Final = frozenset({"lookup", "position_bound", "wait_ms"})


@dataclass(frozen=True, slots=True)
class LookupRequest:
    """A lookup's command: the bound to wait for (None: none) and how long, in ms."""

    bound: PositionBound | None = None
    wait_ms: int = 0

    @property
    def wait_s(self) -> float:
        """The wait, in seconds, capped at :data:`MAX_PIN_WAIT_S`."""
        return 0.0 if self.bound is None else min(self.wait_ms / 1000.0, MAX_PIN_WAIT_S)

    def to_bytes(self) -> bytes:
        body: dict[str, Any] = {"lookup": 1, "wait_ms": self.wait_ms}
        if self.bound is not None:
            body["position_bound"] = self.bound.to_dict()
        return encode_object(body)

    @classmethod
    def from_bytes(cls, raw: bytes) -> LookupRequest:
        """Decode a command.

        Raises
        ------
        BadRequestError
            On malformed JSON, an unknown field, or a bad bound or wait.
        """
        data = decode_object(raw, "lookup command")
        unknown = sorted(set(data) - _FIELDS)
        if unknown or data.get("lookup") != 1:
            raise BadRequestError(
                f"lookup command {str(data)[:200]!r} is not "
                '{"lookup": 1, "position_bound": {...} (optional), "wait_ms": n (optional)}'
            )
        return cls(*bound_and_wait(data, "lookup"))


def bound_and_wait(body: Mapping[str, Any], what: str) -> tuple[PositionBound | None, int]:
    """The optional ``{"position_bound": <offsets JSON object>, "wait_ms": n}`` of a pin or
    a lookup (``what``, for messages): the bound (None: none) and the wait in ms.

    Raises
    ------
    BadRequestError
        If ``wait_ms`` is not an int >= 0 or the bound is not an offsets JSON object.
    """
    raw_bound = body.get("position_bound")
    wait_ms = body.get("wait_ms", 0)
    if isinstance(wait_ms, bool) or not isinstance(wait_ms, int) or wait_ms < 0:
        raise BadRequestError(f"{what}: wait_ms must be an int >= 0, got {wait_ms!r}")
    if raw_bound is None:
        return None, wait_ms
    if not isinstance(raw_bound, dict):
        raise BadRequestError(
            f"{what}: position_bound must be an offsets JSON object, got {raw_bound!r}"
        )
    try:
        bound = PositionBound.from_dict(raw_bound)
    except StateStoreError as exc:
        raise BadRequestError(f"{what}: bad position_bound: {exc}") from exc
    return bound, wait_ms


def reply_schema(position: Position, store_id: str, commit_seq: int) -> pa.Schema:
    """The reply's schema: the scan schema, with the snapshot it read in its metadata."""
    from spark_statestore.store.snapshot import arrow_schema

    return arrow_schema().with_metadata(
        {
            LOOKUP_POSITION: position.to_json().encode(),
            LOOKUP_STORE_ID: store_id.encode(),
            LOOKUP_COMMIT: str(commit_seq).encode(),
        }
    )


@dataclass(frozen=True, slots=True)
class LookupReply:
    """The snapshot a lookup read: its position, store id and commit."""

    position: Position
    store_id: str
    commit_seq: int

    @classmethod
    def from_metadata(cls, metadata: Mapping[bytes, bytes] | None, location: str) -> LookupReply:
        """Decode a reply schema's metadata.

        Raises
        ------
        ServeError
            If the server did not say which snapshot it read, or said it malformed.
        """
        metadata = metadata or {}
        try:
            position = Position.from_json(metadata[LOOKUP_POSITION].decode("utf-8"))
            store_id = metadata[LOOKUP_STORE_ID].decode("utf-8")
            commit_seq = int(metadata[LOOKUP_COMMIT])
        except (KeyError, ValueError, UnicodeDecodeError, StateStoreError) as exc:
            raise ServeError(
                f"store server {location} answered a lookup without saying which snapshot "
                f"it read ({type(exc).__name__}: {exc}); is it another program?",
                location,
            ) from exc
        return cls(position, store_id, commit_seq)
