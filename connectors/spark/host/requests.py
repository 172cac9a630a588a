"""What the store host checks in every request: JSON bodies of bounded size, store paths that
are absolute and normalized, and the error a refused request gets."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_REQUEST_BYTES", "POSITION_METADATA", "bad_request", "decode_request", "store_path"]

MAX_REQUEST_BYTES = 64 * 1024
POSITION_METADATA = b"spark_statestore.position"
"""Schema metadata of a scan or lookup reply: the snapshot's position (offsets JSON)."""


def bad_request(message: str) -> Exception:
    """The error of a request the host refuses (a ``BadRequestError``)."""
    from spark_statestore.serve.errors import BadRequestError

    return BadRequestError(message)


def store_path(request: Mapping[str, Any]) -> str:
    """The request's store directory: an absolute, normalized path."""
    store = request.get("store")
    if not isinstance(store, str) or not os.path.isabs(store) or "\0" in store:
        raise bad_request(f"the store must be an absolute path, got {str(store)[:200]!r}")
    if os.path.normpath(store) != store.rstrip("/") or store.rstrip("/") == "":
        raise bad_request(f"the store path {store[:200]!r} is not normalized")
    return store.rstrip("/")


def decode_request(raw: bytes, what: str) -> dict[str, Any]:
    """A request's JSON object (at most :data:`MAX_REQUEST_BYTES`)."""
    if len(raw) > MAX_REQUEST_BYTES:
        raise bad_request(f"{what}: request of {len(raw)} bytes, more than {MAX_REQUEST_BYTES}")
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise bad_request(f"{what}: not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise bad_request(f"{what}: not a JSON object")
    return data
