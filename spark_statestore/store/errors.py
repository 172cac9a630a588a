"""Errors of the LevelDB store engine.

plyvel's errors are wrapped once, where the store calls LevelDB, and classified there; every
message names the store directory and says what to do.
"""

from __future__ import annotations

from spark_statestore.errors import StateStoreError

__all__ = [
    "InvalidScanError",
    "StoreClosedError",
    "StoreCorruptedError",
    "StoreError",
    "StoreFormatError",
    "StoreIOError",
    "StoreLockedError",
    "StoreMismatchError",
    "StoreNotFoundError",
    "StoreRoleError",
    "TransactionError",
    "UncoveredKeySchemaError",
]

RECOVERY_HINT = (
    "delete the store directory and restore it from its changelog "
    "(a follower rebuilds it by following the changelog from the beginning)"
)


class StoreError(StateStoreError):
    """Root of the store engine's errors; ``path`` is the store directory."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class StoreNotFoundError(StoreError, FileNotFoundError):
    """The directory holds no store and the caller did not ask to create one."""


class StoreCorruptedError(StoreError):
    """LevelDB reported corruption, or the store's metadata cannot be decoded."""


class StoreIOError(StoreError, OSError):
    """The disk refused a read or write (full, too large, permissions, a failing device).

    The store keeps its last complete commit: a commit that fails this way is either all
    there or not at all when the store is next opened.
    """


class StoreFormatError(StoreError):
    """The store was written by a newer (or unknown) on-disk format version."""


class StoreMismatchError(StoreError, ValueError):
    """The store exists but belongs to another changelog topic, partition count or name."""


class StoreRoleError(StoreError):
    """A leader write into a follower store, a follower into a leader store, or a write
    through a read-only handle."""


class StoreLockedError(StoreError):
    """Another live process (or another handle in this process) owns the store.

    ``owner`` is the :class:`~spark_statestore.store.ownership.OwnerInfo` read from
    ``_owner.json``, or None when the owner has not written it yet.
    """

    def __init__(self, message: str, path: str | None = None, owner: object = None) -> None:
        super().__init__(message, path)
        self.owner = owner


class StoreClosedError(StoreError):
    """The store handle (or a snapshot of it) was used after ``close()``."""


class TransactionError(StoreError):
    """A transaction was used in a state that does not allow the call (see its ``state``)."""


class InvalidScanError(StoreError, ValueError):
    """A :class:`~spark_statestore.store.scan.ScanSpec` (or its JSON form) is malformed:
    wrong types, negative limits, unknown JSON fields, bad base64."""


class UncoveredKeySchemaError(StoreError, LookupError):
    """A lookup encoded its keys under some registry schema ids, but the snapshot holds keys
    framed with another (or not framed): the lookup cannot say a key is absent."""

    def __init__(self, message: str, ids: frozenset[int | None], path: str | None = None) -> None:
        super().__init__(message, path)
        self.ids = ids
        """The other ids found (None: keys that are not framed)."""
