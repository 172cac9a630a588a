"""Files and directories of a store: owner-only permissions and durable directory entries.

A store directory holds the store's data and its owner's credentials (``_serve.json``), and
any local user who can open ``_owner.lock`` could hold a lock on it and keep every owner
out. So the store directory and everything spark-statestore creates in it are owner-only
(directories 0700, files 0600) whatever the umask: behind a 0700 directory, the files
LevelDB creates with its own modes are out of other users' reach too.

A new file or directory survives a power cut only once the directory holding its name is
synced: :func:`fsync_dir` does that.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "fsync_dir",
    "make_private_dir",
    "open_private",
    "write_private_json",
]

DIR_MODE = 0o700
FILE_MODE = 0o600


def make_private_dir(path: str) -> None:
    """Create ``path`` (and missing parents) and make ``path`` itself owner-only.

    An existing directory that this user owns is narrowed to 0700 too; one owned by someone
    else is left as it is (the store's ownership lock is the protection there).
    """
    os.makedirs(path, mode=DIR_MODE, exist_ok=True)
    with contextlib.suppress(PermissionError):
        if os.stat(path).st_mode & 0o777 != DIR_MODE:
            os.chmod(path, DIR_MODE)


def open_private(path: str, flags: int) -> int:
    """``os.open`` creating ``path`` owner-only (0600) whatever the umask."""
    fd = os.open(path, flags, FILE_MODE)
    try:
        if os.fstat(fd).st_mode & 0o777 != FILE_MODE:
            with contextlib.suppress(PermissionError):  # another user's file: theirs to set
                os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def fsync_dir(path: str) -> None:
    """Make the names in directory ``path`` durable (new files, renames, removals)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_private_json(target: str, data: Any) -> str:
    """Write ``data`` as JSON to ``target``, owner-only (0600) and atomically (a reader sees
    the old file or the whole new one); returns ``target``."""
    temporary = f"{target}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # O_CREAT's mode does not apply to an existing leftover
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            fd = -1
            json.dump(data, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    finally:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    return target
