"""A store's ``_readers/`` directory: the checkpoints of its readers and their locks.

A checkpoint (:mod:`~spark_statestore.store.checkpoint`) is ``_readers/<id>/``, held by an
exclusive lock on ``_readers/<id>.lock`` for as long as its reader reads it; a copy or a lock
file whose lock is free belongs to a process that died. Opening a store
(:meth:`~spark_statestore.store.Store.open`) removes those, and so does the next checkpoint.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import uuid

from spark_statestore.store.errors import StoreIOError
from spark_statestore.store.files import make_private_dir, open_private

__all__ = ["READERS_DIR", "hold_checkpoint", "remove_checkpoint", "remove_stale_checkpoints"]

READERS_DIR = "_readers"
_LOCK_SUFFIX = ".lock"
_HOLD_ATTEMPTS = 5

_log = logging.getLogger(__name__)


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
        remove_checkpoint(readers, copy_id, fd)
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


def remove_checkpoint(readers: str, copy_id: str, lock_fd: int) -> None:
    """Delete checkpoint ``copy_id``, then its lock file, then let go of the lock."""
    try:
        shutil.rmtree(os.path.join(readers, copy_id), ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_lock_path(readers, copy_id))
    finally:
        os.close(lock_fd)


def hold_checkpoint(readers: str) -> tuple[str, int]:
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
