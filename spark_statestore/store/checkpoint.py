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
lock on ``_readers/<id>.lock``; a copy whose lock is free belongs to a process that died
and is deleted by the next checkpoint (or :func:`remove_stale_checkpoints`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import uuid
from collections.abc import Iterator

from spark_statestore.store.errors import StoreIOError
from spark_statestore.store.files import make_private_dir, open_private
from spark_statestore.store.spec import StoreOptions
from spark_statestore.store.store import DB_DIR, Store

__all__ = ["READERS_DIR", "reader_checkpoint", "remove_stale_checkpoints"]

READERS_DIR = "_readers"
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

    Raises
    ------
    StoreError
        What :meth:`Store.open` raises for the store (a subclass); :class:`StoreIOError` if
        the copy cannot be made (e.g. a full disk).
    """
    store_path = os.path.abspath(os.fspath(path))
    options = options or StoreOptions()
    remove_stale_checkpoints(store_path)
    copy_id = uuid.uuid4().hex
    readers = os.path.join(store_path, READERS_DIR)
    copy = os.path.join(readers, copy_id)
    lock_fd = _hold(readers, copy_id)
    try:
        commit = _copy(store_path, copy, purpose, options)
        with Store.open(copy, purpose=f"{purpose} (checkpoint)") as store:
            _log.info("reading a checkpoint of %s at commit %d (%s)", store_path, commit, copy_id)
            yield store
    finally:
        shutil.rmtree(copy, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_lock_path(readers, copy_id))
        os.close(lock_fd)


def remove_stale_checkpoints(store_path: str) -> list[str]:
    """Delete the checkpoints of ``store_path`` whose reader is gone; returns their ids."""
    readers = os.path.join(store_path, READERS_DIR)
    try:
        names = os.listdir(readers)
    except FileNotFoundError:
        return []
    removed = []
    for name in sorted(names):
        if name.endswith(".lock"):
            continue
        fd = _try_lock(readers, name)
        if fd is None:
            continue  # a live reader's
        try:
            shutil.rmtree(os.path.join(readers, name), ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(_lock_path(readers, name))
        finally:
            os.close(fd)
        removed.append(name)
        _log.info("store %s: removed the checkpoint %s of a reader that is gone", store_path, name)
    return removed


def _lock_path(readers: str, copy_id: str) -> str:
    return os.path.join(readers, f"{copy_id}.lock")


def _hold(readers: str, copy_id: str) -> int:
    """Create and lock ``<copy_id>.lock`` before the copy exists, so it never looks stale."""
    try:
        make_private_dir(readers)
        fd = open_private(_lock_path(readers, copy_id), os.O_RDWR | os.O_CREAT)
    except OSError as exc:
        raise StoreIOError(f"cannot create a checkpoint in {readers}: {exc}", readers) from exc
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a fresh uuid: nobody else has it
    return fd


def _try_lock(readers: str, name: str) -> int | None:
    """The locked lock file of checkpoint ``name`` if its reader is gone, else None."""
    try:
        fd = open_private(_lock_path(readers, name), os.O_RDWR | os.O_CREAT)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _copy(store_path: str, copy: str, purpose: str, options: StoreOptions) -> int:
    """Steps 1-3 of the module doc; returns the commit the copy holds."""
    store = Store.open(store_path, purpose=f"{purpose} (making a checkpoint)", options=options)
    commit = store.metadata.commit_seq
    lock = store._close_database()
    assert lock is not None
    try:
        source = os.path.join(store_path, DB_DIR)
        target = os.path.join(copy, DB_DIR)
        make_private_dir(target)
        for name in sorted(os.listdir(source)):
            if name in _NOT_COPIED:
                continue
            if name.endswith(_IMMUTABLE):
                os.link(os.path.join(source, name), os.path.join(target, name))
            else:
                shutil.copyfile(os.path.join(source, name), os.path.join(target, name))
    except OSError as exc:
        shutil.rmtree(copy, ignore_errors=True)
        raise StoreIOError(
            f"store {store_path}: cannot make a checkpoint in {copy} ({exc}); free space or "
            "fix the permissions of the store directory",
            store_path,
        ) from exc
    except BaseException:
        shutil.rmtree(copy, ignore_errors=True)
        raise
    finally:
        lock.release()
    return commit
