"""Checkpoints: a reader's private copy of a store's latest commit, made in milliseconds.

LevelDB lets one process open a database, so a process that reads a store nobody serves
must own it, and a long read (a Spark task scanning a large store) would keep every writer
out: a sink's commit waiting on it failed its streaming query. A checkpoint, in the spirit
of RocksDB's, owns the store only while it copies it:

1. open the store (read-only: this completes an interrupted commit, so the files hold one
   consistent commit), close its database and keep the ownership lock, so the files are at
   rest and no writer runs;
2. hard-link every table file (immutable in LevelDB: never rewritten, only deleted) and copy
   the few mutable ones (``CURRENT``, ``MANIFEST-*``, the log, which the open in step 1 has
   just emptied into a table) into ``<store>/_readers/<id>/db/`` (same file system, so hard
   links work);
3. give the store back, and open the copy as a store of its own.

The reader then reads the copy for as long as it likes while writers own the real store;
the copy is deleted when the reader is done. While it exists, the reader holds an exclusive
lock on ``_readers/<id>.lock``, taken (while owning the store) before the copy is made; a
copy or a lock file whose lock is free belongs to a process that died and is deleted by the
next checkpoint (or :func:`~spark_statestore.store.readers.remove_stale_checkpoints`,
which opening a store runs).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Iterator

from spark_statestore.store.errors import StoreIOError
from spark_statestore.store.files import make_private_dir, open_private
from spark_statestore.store.readers import (
    READERS_DIR,
    hold_checkpoint,
    remove_checkpoint,
    remove_stale_checkpoints,
)
from spark_statestore.store.spec import StoreOptions
from spark_statestore.store.store import DB_DIR, Store

__all__ = ["READERS_DIR", "reader_checkpoint", "remove_stale_checkpoints"]

_IMMUTABLE = (".ldb", ".sst")
_NOT_COPIED = ("LOCK", "LOG", "LOG.old")

_log = logging.getLogger(__name__)


@contextlib.contextmanager
def reader_checkpoint(
    path: str | os.PathLike[str], *, purpose: str, options: StoreOptions | None = None
) -> Iterator[Store]:
    """A read-only :class:`Store` over a private copy of the store at ``path``.

    The store is owned only while it is copied (``options.owner_wait_seconds`` says how
    long to wait for a writer that owns it); the copy is deleted on exit.

    Parameters
    ----------
    path
        The store directory.
    purpose
        What the reader does, for ``_owner.json`` (of the store while it is copied, then of
        the copy).
    options
        :class:`StoreOptions` for opening the store and the copy (waits, cache).

    Raises
    ------
    StoreError
        What :meth:`Store.open` raises for the store (a subclass: not found, locked by a
        writer past the wait, corrupted, ...); :class:`StoreIOError` if the copy cannot be
        made (e.g. a full disk).
    """
    store_path = os.path.abspath(os.fspath(path))
    options = options or StoreOptions()
    remove_stale_checkpoints(store_path)
    readers = os.path.join(store_path, READERS_DIR)
    copy_id, lock_fd, commit = _make_copy(store_path, readers, purpose, options)
    try:
        copy = os.path.join(readers, copy_id)
        with Store.open(copy, purpose=f"{purpose} (checkpoint)", options=options) as store:
            _log.info("reading a checkpoint of %s at commit %d (%s)", store_path, commit, copy_id)
            yield store
    finally:
        remove_checkpoint(readers, copy_id, lock_fd)


def _make_copy(
    store_path: str, readers: str, purpose: str, options: StoreOptions
) -> tuple[str, int, int]:
    """Steps 1-3 of the module doc; the copy's id, its held lock and the commit it holds."""
    store = Store.open(store_path, purpose=f"{purpose} (making a checkpoint)", options=options)
    commit = store.metadata.commit_seq
    lock = store.close_database()
    assert lock is not None  # a handle just opened
    try:
        # Only now, while owning the store: a reader that waited for a writer and was
        # killed meanwhile leaves nothing behind.
        copy_id, lock_fd = hold_checkpoint(readers)
        try:
            _copy_database(store_path, os.path.join(readers, copy_id))
        except BaseException:
            remove_checkpoint(readers, copy_id, lock_fd)
            raise
    finally:
        lock.release()
    return copy_id, lock_fd, commit


def _copy_database(store_path: str, copy: str) -> None:
    source = os.path.join(store_path, DB_DIR)
    target = os.path.join(copy, DB_DIR)
    try:
        make_private_dir(copy)
        make_private_dir(target)
        for name in sorted(os.listdir(source)):
            if name in _NOT_COPIED:
                continue
            if name.endswith(_IMMUTABLE):
                os.link(os.path.join(source, name), os.path.join(target, name))
            else:
                _copy_private(os.path.join(source, name), os.path.join(target, name))
    except OSError as exc:
        raise StoreIOError(
            f"store {store_path}: cannot make a checkpoint in {copy} ({exc}); free space or "
            "fix the permissions of the store directory",
            store_path,
        ) from exc


def _copy_private(source: str, target: str) -> None:
    """Copy a file into an owner-only (0600) new file."""
    with open(source, "rb") as src:
        fd = open_private(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        with os.fdopen(fd, "wb") as dst:
            shutil.copyfileobj(src, dst)
