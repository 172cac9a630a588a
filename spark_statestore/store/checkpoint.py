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
next checkpoint (or :func:`remove_stale_checkpoints`, which opening a store runs).
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
_LOCK_SUFFIX = ".lock"
_IMMUTABLE = (".ldb", ".sst")
_NOT_COPIED = ("LOCK", "LOG", "LOG.old")
_HOLD_ATTEMPTS = 5

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
        _remove(readers, copy_id, lock_fd)


def remove_stale_checkpoints(store_path: str | os.PathLike[str]) -> list[str]:
    """Delete what readers of ``store_path`` that are gone left behind; returns their ids.

    A checkpoint (``_readers/<id>/``) or a lock file without one (``_readers/<id>.lock``, of
    a reader killed while it was deleting its copy) is stale when nobody holds its lock.
    Live readers' checkpoints stay. Best effort: what cannot be removed now stays for the
    next call.
    """
    readers = os.path.join(os.fspath(store_path), READERS_DIR)
    try:
        with os.scandir(readers) as entries:
            found = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
    except FileNotFoundError:
        return []
    except OSError as exc:
        _log.warning("store %s: cannot look for stale checkpoints (%s)", store_path, exc)
        return []
    copies = {name for name, is_dir in found if is_dir}
    locks = {
        name.removesuffix(_LOCK_SUFFIX)
        for name, is_dir in found
        if not is_dir and name.endswith(_LOCK_SUFFIX)
    }
    removed = []
    for copy_id in sorted(copies | locks):
        # A copy's lock file exists as long as the copy does (its reader deletes it last),
        # unless its reader died deleting both: then a fresh one stands in for it.
        fd = _try_lock(readers, copy_id, create=copy_id in copies)
        if fd is None:
            continue  # a live reader's, or gone already
        _remove(readers, copy_id, fd)
        removed.append(copy_id)
        _log.info("store %s: removed checkpoint %s, its reader is gone", store_path, copy_id)
    return removed


def _lock_path(readers: str, copy_id: str) -> str:
    return os.path.join(readers, copy_id + _LOCK_SUFFIX)


def _same_file(path: str, fd: int) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (no remover unlinked it)."""
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _try_lock(readers: str, copy_id: str, *, create: bool) -> int | None:
    """The locked lock file of checkpoint ``copy_id`` if its reader is gone, else None."""
    path = _lock_path(readers, copy_id)
    try:
        fd = open_private(path, os.O_RDWR | (os.O_CREAT if create else 0))
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if _same_file(path, fd):
            return fd
    except OSError:
        pass  # BlockingIOError: a live reader holds it
    os.close(fd)
    return None


def _remove(readers: str, copy_id: str, lock_fd: int) -> None:
    """Delete checkpoint ``copy_id``, then its lock file, then let go of the lock."""
    try:
        shutil.rmtree(os.path.join(readers, copy_id), ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_lock_path(readers, copy_id))
    finally:
        os.close(lock_fd)


def _hold(readers: str) -> tuple[str, int]:
    """A new checkpoint id and its lock, taken before the copy exists (so it never looks
    stale). A remover may unlink a lock file between its creation and its lock (it looks
    like a dead reader's then): the lock is kept only on the file the name still names."""
    try:
        make_private_dir(readers)
        for _ in range(_HOLD_ATTEMPTS):
            copy_id = uuid.uuid4().hex
            fd = open_private(_lock_path(readers, copy_id), os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if _same_file(_lock_path(readers, copy_id), fd):
                    return copy_id, fd
            except BlockingIOError:
                pass  # a remover is about to unlink it: take another id
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
    except OSError as exc:
        raise StoreIOError(
            f"cannot create a checkpoint in {readers} ({exc}); fix the permissions of the "
            "store directory or free space",
            os.path.dirname(readers),
        ) from exc
    raise StoreIOError(
        f"cannot create a checkpoint in {readers}: its lock file was removed under it "
        f"{_HOLD_ATTEMPTS} times; is another program deleting files there?",
        os.path.dirname(readers),
    )


def _make_copy(
    store_path: str, readers: str, purpose: str, options: StoreOptions
) -> tuple[str, int, int]:
    """Steps 1-3 of the module doc; the copy's id, its held lock and the commit it holds."""
    store = Store.open(store_path, purpose=f"{purpose} (making a checkpoint)", options=options)
    commit = store.metadata.commit_seq
    lock = store._close_database()
    assert lock is not None  # a handle just opened
    try:
        # Only now, while owning the store: a reader that waited for a writer and was
        # killed meanwhile leaves nothing behind.
        copy_id, lock_fd = _hold(readers)
        try:
            _copy_database(store_path, os.path.join(readers, copy_id))
        except BaseException:
            _remove(readers, copy_id, lock_fd)
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
