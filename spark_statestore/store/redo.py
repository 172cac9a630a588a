"""Spilled transactions and chunked commits under a redo marker.

A transaction past its memory budget moves its writes into a *redo file*: a scratch LevelDB
under ``<store>/_redo/<txn id>/`` that keeps the latest write of each key in key order, so the
transaction can still read its own writes. Committing it:

1. writes the remaining in-memory writes into the redo file and makes it durable: every
   spill write is synced (LevelDB syncs only the log a synced write goes to, so one synced
   write at the end would leave earlier logs to the page cache), then the redo file's
   directory entries;
2. writes the *redo marker* (``m:redo``) into the store: which redo file, and the metadata
   (position, offsets, commit record, sequence) the commit will end with;
3. applies the redo file to the store in chunks of ``chunk_bytes``, each chunk synced (with
   the store's ``sync`` option) before the next is written;
4. writes the metadata and deletes the marker in one synced batch, then removes the redo
   file.

Readers of the store keep the snapshot taken before step 3 until step 4 is done, so no reader
observes part of the transaction. A crash, an exception or an I/O error during steps 2-4
leaves the marker and the redo file (from step 2 on the redo file belongs to the store, not
to the transaction): the next open re-applies the redo file from the start (every entry is
the key's final state, so applying twice is harmless) before anything else. A redo file
without a marker belongs to a transaction that never committed and is deleted.

Everything here runs inside the store's :class:`~spark_statestore.store.gate.Gate`, which
translates LevelDB's and the disk's errors into store errors.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_statestore.store.crash import crash_point
from spark_statestore.store.errors import (
    RECOVERY_HINT,
    StoreCorruptedError,
    StoreError,
    StoreIOError,
)
from spark_statestore.store.files import fsync_dir, make_private_dir
from spark_statestore.store.gate import Gate
from spark_statestore.store.layout import DATA_START, HISTORY_STOP, META_REDO, iterate
from spark_statestore.store.leveldb import binding

if TYPE_CHECKING:
    import plyvel

__all__ = ["REDO_DIR", "RedoMarker", "SpillArea", "apply_redo", "remove_stray_redo"]

REDO_DIR = "_redo"
_PUT = b"P"
_DELETE = b"D"
_SEALED = b"~sealed"  # outside the data namespace: never applied


class SpillArea:
    """The redo file of one transaction: its spilled writes, readable in key order."""

    def __init__(self, store_path: str, txn_id: str, gate: Gate, sync: bool) -> None:
        leveldb = binding()

        self.relpath = os.path.join(REDO_DIR, txn_id)
        self.path = os.path.join(store_path, self.relpath)
        self._store_path = store_path
        self._gate = gate
        self._sync = sync
        self._handed_over = False
        with gate:
            make_private_dir(os.path.dirname(self.path))
            shutil.rmtree(self.path, ignore_errors=True)
            self._db: plyvel.DB | None = leveldb.DB(self.path, create_if_missing=True)

    @property
    def db(self) -> plyvel.DB:
        if self._db is None:
            raise StoreError(f"redo file {self.path} is closed", self.path)
        return self._db

    def write(self, entries: Mapping[bytes, bytes | None]) -> None:
        """Spill ``entries`` (data key -> envelope, or None for a delete)."""
        with self._gate, self.db.write_batch(sync=self._sync) as batch:
            for key, envelope in entries.items():
                batch.put(key, _DELETE if envelope is None else _PUT + envelope)

    def get(self, key: bytes) -> tuple[bool, bytes | None]:
        """``(found, envelope-or-None-for-delete)`` of data key ``key``."""
        with self._gate:
            raw = self.db.get(key)
        if raw is None:
            return False, None
        return True, (raw[1:] if raw[:1] == _PUT else None)

    def entries(
        self, start: bytes, stop: bytes, include_stop: bool, reverse: bool
    ) -> Iterator[tuple[bytes, bytes | None]]:
        for key, raw in iterate(self.db, start, stop, include_stop, reverse, self._gate):
            yield key, (raw[1:] if raw[:1] == _PUT else None)

    def seal(self) -> None:
        """Make the redo file durable: its last write synced (earlier spill writes were
        synced as they were made), then the directory entries down to the store's."""
        with self._gate:
            self.db.put(_SEALED, b"1", sync=True)
            fsync_dir(self.path)
            fsync_dir(os.path.dirname(self.path))
            fsync_dir(self._store_path)

    def hand_over(self) -> None:
        """The store's redo marker is about to name this redo file: from now on only the
        store's recovery may delete it (:meth:`discard` only closes it)."""
        self._handed_over = True

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def discard(self) -> None:
        """Close the redo file and delete it, unless the store's marker names it."""
        self.close()
        if not self._handed_over:
            shutil.rmtree(self.path, ignore_errors=True)


@dataclass(frozen=True, slots=True)
class RedoMarker:
    """The store's promise that a sealed redo file must be applied, and how to finish."""

    redo_path: str  # relative to the store directory
    metadata: Mapping[str, str]  # metadata key (latin-1) -> value (latin-1) to write last

    def to_json(self) -> bytes:
        return json.dumps({"redo_path": self.redo_path, "metadata": dict(self.metadata)}).encode()

    @classmethod
    def from_json(cls, raw: bytes, store_path: str) -> RedoMarker:
        try:
            data: Any = json.loads(raw)
            marker = cls(str(data["redo_path"]), dict(data["metadata"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreCorruptedError(
                f"store {store_path}: its redo marker cannot be decoded ({exc}); {RECOVERY_HINT}",
                store_path,
            ) from exc
        return marker

    @classmethod
    def for_metadata(cls, redo_path: str, metadata: Mapping[bytes, bytes]) -> RedoMarker:
        encoded = {k.decode("latin-1"): v.decode("latin-1") for k, v in metadata.items()}
        return cls(redo_path, encoded)

    def metadata_items(self) -> list[tuple[bytes, bytes]]:
        return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in self.metadata.items()]


def apply_redo(
    db: plyvel.DB,
    store_path: str,
    marker: RedoMarker,
    chunk_bytes: int,
    sync: bool,
    spill: SpillArea | None = None,
) -> None:
    """Steps 3-4 above: apply the redo file in chunks, then the metadata, drop the marker.

    Called inside the store's gate. ``sync`` syncs each chunk; the last batch (metadata and
    the marker's removal) is always synced, since the redo file is removed right after it.
    """
    leveldb = binding()
    owned = spill is None
    if spill is not None:
        redo_db = spill.db
    else:
        full = os.path.join(store_path, marker.redo_path)
        if not os.path.isdir(full):
            raise StoreCorruptedError(
                f"store {store_path}: a chunked commit was interrupted and its redo file "
                f"{full} is missing, so the commit cannot be completed; {RECOVERY_HINT}",
                store_path,
            )
        try:
            redo_db = leveldb.DB(full, create_if_missing=False)
        except leveldb.IOError as exc:
            raise StoreIOError(
                f"store {store_path}: the redo file {full} of an interrupted chunked commit "
                f"cannot be read ({exc}); free space or fix the permissions and open the "
                "store again: the commit is completed then",
                store_path,
            ) from exc
        except leveldb.Error as exc:
            raise StoreCorruptedError(
                f"store {store_path}: the redo file {full} of an interrupted chunked commit "
                f"cannot be opened ({exc}); {RECOVERY_HINT}",
                store_path,
            ) from exc
    try:
        chunk = db.write_batch(sync=sync)
        size = chunks = 0
        # The data and history namespaces (a versioned store's history records spill too).
        with redo_db.iterator(start=DATA_START, stop=HISTORY_STOP) as it:
            for key, raw in it:
                if raw[:1] == _PUT:
                    chunk.put(key, raw[1:])
                else:
                    chunk.delete(key)
                size += len(key) + len(raw)
                if size >= chunk_bytes:
                    chunk.write()
                    chunks += 1
                    crash_point(f"redo.after_chunk.{chunks}")
                    chunk = db.write_batch(sync=sync)
                    size = 0
        chunk.write()
        crash_point("redo.before_metadata")
        with db.write_batch(sync=True) as final:
            for key, value in marker.metadata_items():
                final.put(key, value)
            final.delete(META_REDO)
        crash_point("redo.after_metadata")
    finally:
        if owned:
            redo_db.close()
    if spill is not None:
        spill.close()
    shutil.rmtree(os.path.join(store_path, marker.redo_path), ignore_errors=True)


def remove_stray_redo(store_path: str) -> list[str]:
    """Delete redo files of transactions that never committed; returns what was removed."""
    root = os.path.join(store_path, REDO_DIR)
    removed = []
    if os.path.isdir(root):
        for name in sorted(os.listdir(root)):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
            removed.append(os.path.join(REDO_DIR, name))
    return removed
