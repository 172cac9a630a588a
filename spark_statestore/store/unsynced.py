"""Stores written with ``sync=False``: detect a power cut that may have broken them.

Without syncs, a process crash loses nothing (the kernel still holds every write), but a
power cut keeps an arbitrary subset of the unsynced pages: recent commits can be lost, and
since pages are written back in any order, a later commit's metadata can survive while an
earlier commit's data does not. Such a store could answer queries wrongly, so it must not
be opened after a power cut.

A writer opened with ``sync=False`` therefore records the machine's boot id in
``<store>/_unsynced.json`` (synced) before its first unsynced write, and removes it on a
clean close after one synced write has made everything durable. Opening a store whose
``_unsynced.json`` names another boot means the machine went down while unsynced writes
were pending: the open is refused with what to do. (Where the system has no boot id, as
outside Linux, this cannot be told and is documented as not detected.)
"""

from __future__ import annotations

import contextlib
import json
import os

from spark_statestore.store.errors import RECOVERY_HINT, StoreCorruptedError
from spark_statestore.store.files import fsync_dir, open_private

__all__ = ["UNSYNCED_FILE", "boot_id", "check_unsynced", "clear_unsynced", "mark_unsynced"]

UNSYNCED_FILE = "_unsynced.json"
_BOOT_ID = "/proc/sys/kernel/random/boot_id"


def boot_id() -> str | None:
    """This boot of the machine (Linux), or None where the system does not say."""
    try:
        with open(_BOOT_ID, encoding="ascii") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def check_unsynced(path: str) -> bool:
    """Refuse a store that had unsynced writes pending when the machine went down.

    Returns True when unsynced writes of this boot may still be pending (a ``sync=False``
    writer died): the opener makes them durable and clears the record.
    """
    try:
        with open(os.path.join(path, UNSYNCED_FILE), encoding="utf-8") as handle:
            recorded = json.load(handle).get("boot_id")
    except FileNotFoundError:
        return False
    except (OSError, ValueError, AttributeError):
        recorded = "unreadable"
    current = boot_id()
    if current is None or recorded == current:
        return True  # the same boot: only a process died, and the kernel kept its writes
    raise StoreCorruptedError(
        f"store {path} was being written with sync=False when the machine went down (it "
        f"has restarted since: boot {recorded} then, {current} now), so recent commits may "
        f"be lost or only partly on disk; {RECOVERY_HINT}. Write with sync=True (the "
        "default) for stores that must survive a power cut",
        path,
    )


def mark_unsynced(path: str) -> None:
    """Record, durably, that unsynced writes may be pending in this boot."""
    target = os.path.join(path, UNSYNCED_FILE)
    fd = open_private(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump({"boot_id": boot_id(), "pid": os.getpid()}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    fsync_dir(path)


def clear_unsynced(path: str) -> None:
    """Everything written is durable now: drop the record."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(path, UNSYNCED_FILE))
        fsync_dir(path)
