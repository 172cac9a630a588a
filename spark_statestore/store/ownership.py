"""Single ownership of a store directory: an OS lock plus ``_owner.json``.

LevelDB lets one process open a database. The process that holds a store open is its
*owner*: it holds an exclusive ``flock`` on ``<store>/_owner.lock`` for as long as the store is
open (the kernel releases it when the process dies, even on SIGKILL) and describes itself in
``<store>/_owner.json`` (pid, host, role, purpose, start time and, once it serves one, a Flight
location). Anyone else reads ``_owner.json`` to learn who owns the store; an ``_owner.json``
left behind by a dead process is stale and the next owner replaces it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone

from spark_statestore.store.errors import StoreLockedError
from spark_statestore.store.files import open_private

__all__ = [
    "CLOSING_WAIT_S",
    "OWNER_FILE",
    "OwnerInfo",
    "OwnerLock",
    "live_owner",
    "read_owner",
    "wait_for_exit",
    "wait_for_release",
]

OWNER_FILE = "_owner.json"
LOCK_FILE = "_owner.lock"
_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OwnerInfo:
    """Who owns a store (the content of ``_owner.json``).

    Parameters
    ----------
    pid, host
        The owning process and the host it runs on.
    role
        ``leader``, ``follower`` or ``reader`` (a process that opened the store to read it).
    purpose
        What the owner is doing, for humans (e.g. ``follower source of query 3f2a...``).
    started_at
        When it took ownership, ISO 8601 UTC.
    flight_location
        The Arrow Flight location serving this store, once there is one.
    serves
        The owner will serve the store over Flight (a follower query): until
        ``flight_location`` is set it is starting up, and a reader should wait for it rather
        than for the store to be free.
    closing
        The owner is closing the store (:meth:`~spark_statestore.store.Store.close_in_background`):
        it gives it up in a moment, so whoever wants it waits for that (up to
        :data:`CLOSING_WAIT_S`) rather than failing at once.
    """

    pid: int
    host: str
    role: str
    purpose: str
    started_at: str
    flight_location: str | None = None
    serves: bool = False
    closing: bool = False

    @classmethod
    def for_this_process(cls, role: str, purpose: str, *, serves: bool = False) -> OwnerInfo:
        return cls(
            pid=os.getpid(),
            host=socket.gethostname(),
            role=role,
            purpose=purpose,
            started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            serves=serves,
        )

    def is_this_process(self) -> bool:
        return self.pid == os.getpid() and self.host == socket.gethostname()

    def is_alive_here(self) -> bool:
        """True when the owner runs on this host and its pid is alive."""
        if self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def describe(self) -> str:
        where = f", serving at {self.flight_location}" if self.flight_location else ""
        return (
            f"pid {self.pid} on {self.host} ({self.role}: {self.purpose or 'no purpose given'}, "
            f"since {self.started_at}{where})"
        )


def read_owner(path: str) -> OwnerInfo | None:
    """The ``_owner.json`` of store ``path`` (possibly stale), or None if absent/unreadable."""
    try:
        with open(os.path.join(path, OWNER_FILE), encoding="utf-8") as handle:
            data = json.load(handle)
        return OwnerInfo(
            pid=int(data["pid"]),
            host=str(data["host"]),
            role=str(data["role"]),
            purpose=str(data.get("purpose", "")),
            started_at=str(data.get("started_at", "")),
            flight_location=data.get("flight_location"),
            serves=data.get("serves") is True,
            closing=data.get("closing") is True,
        )
    except (OSError, ValueError, KeyError, TypeError):
        # Missing, half-written by a process killed mid-write, or foreign: not an owner.
        return None


CLOSING_WAIT_S = 60.0
"""How long :meth:`OwnerLock.acquire` waits for an owner that says it is closing the store
(whatever the caller's ``owner_wait_seconds``): a commit process flushing the store's
memtable into a table, well under a second for a 100,000-change batch."""

_UNDESCRIBED = OwnerInfo(-1, "?", "unknown", "starting up", "")
"""What :func:`live_owner` answers while the lock is held and ``_owner.json`` says nothing: an
owner starting up, or one releasing the store (it removes the file, then unlocks)."""


def live_owner(path: str) -> OwnerInfo | None:
    """The owner of store ``path`` if a live process holds it open, else None.

    Probes the lock without keeping it: a shared lock attempt fails exactly when an owner
    holds the exclusive lock.
    """
    lock_path = os.path.join(path, LOCK_FILE)
    try:
        fd = os.open(lock_path, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):  # no store there (or a file): no owner
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return read_owner(path) or _UNDESCRIBED
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


_HOLDERS: dict[str, int] = {}
"""Store directory -> the thread of this process that acquired its ownership (see
:meth:`OwnerLock.acquire`: another thread waits for the holder, as for another process)."""
_HOLDERS_LOCK = threading.Lock()


class OwnerLock:
    """The exclusive ownership of one store directory, held until :meth:`release`."""

    def __init__(self, path: str, info: OwnerInfo, fd: int) -> None:
        self.path = path
        self.info = info
        self._fd: int | None = fd

    @classmethod
    def acquire(
        cls,
        path: str,
        info: OwnerInfo,
        wait_seconds: float = 2.0,
        *,
        owner_wait_seconds: float = 0.0,
    ) -> OwnerLock:
        """Take ownership of store directory ``path`` (which must exist).

        A live owner fails with :class:`StoreLockedError`, at once or after waiting up to
        ``owner_wait_seconds`` for it to close the store. While the lock is held by a process
        that has not described itself (one that is starting up, or a short
        :func:`live_owner` probe) this retries for up to ``wait_seconds``.
        """
        fd = open_private(os.path.join(path, LOCK_FILE), os.O_RDWR | os.O_CREAT)
        try:
            started = time.monotonic()
            deadline = started + wait_seconds
            owner_deadline = started + owner_wait_seconds
            pause = 0.005
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    owner = read_owner(path)
                    with _HOLDERS_LOCK:
                        holder = _HOLDERS.get(path)
                    if (
                        owner is not None
                        and owner.is_this_process()
                        and holder in (None, threading.get_ident())
                    ):
                        # The same thread would wait for itself. Another thread of this
                        # process (concurrent readers taking checkpoints) is waited for below,
                        # as another process would be.
                        raise StoreLockedError(
                            f"store {path} is already open in this process "
                            f"({owner.describe()}); use that Store handle or close it first",
                            path,
                            owner,
                        ) from None
                    now = time.monotonic()
                    live = owner is not None and owner.is_alive_here()
                    closing = live and owner is not None and owner.closing
                    if (
                        (closing and now >= started + max(owner_wait_seconds, CLOSING_WAIT_S))
                        or (live and not closing and now >= owner_deadline)
                        or (not live and now >= deadline)
                    ):
                        who = owner.describe() if owner else "a process that did not say who"
                        raise StoreLockedError(
                            f"store {path} is owned by {who}; one process at a time may open "
                            "a store: read it through its owner, stop the owner, or use "
                            "another path",
                            path,
                            owner,
                        ) from None
                    # flock has no timeout: retry with a growing back-off until a deadline.
                    time.sleep(pause)
                    pause = min(pause * 2, 0.2)
        except BaseException:
            os.close(fd)
            raise
        stale = read_owner(path)
        if stale is not None:
            _log.warning("store %s: replacing the stale owner file of %s", path, stale.describe())
        lock = cls(path, info, fd)
        lock._write(info)
        with _HOLDERS_LOCK:
            _HOLDERS[path] = threading.get_ident()
        return lock

    def update(self, **changes: object) -> OwnerInfo:
        """Rewrite ``_owner.json`` with ``changes`` (e.g. ``flight_location=...``)."""
        self.info = replace(self.info, **changes)  # type: ignore[arg-type]
        self._write(self.info)
        return self.info

    def _write(self, info: OwnerInfo) -> None:
        target = os.path.join(self.path, OWNER_FILE)
        tmp = f"{target}.{os.getpid()}.tmp"
        fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(asdict(info), handle, sort_keys=True)
        os.replace(tmp, target)

    def release(self) -> None:
        """Remove ``_owner.json`` and give up the lock (idempotent)."""
        if self._fd is None:
            return
        with _HOLDERS_LOCK:
            _HOLDERS.pop(self.path, None)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.path, OWNER_FILE))
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None


def wait_for_exit(pid: int, timeout_s: float) -> bool:
    """Whether process ``pid`` (e.g. a store's owner) exits, or has, within ``timeout_s``: a
    pidfd turns readable when it does."""
    import select

    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], timeout_s)
        return bool(ready)
    finally:
        os.close(fd)


def wait_for_release(path: str, pid: int, timeout_s: float) -> bool:
    """Whether process ``pid`` gives up its ownership of store ``path``, or has, within
    ``timeout_s``: the store is free, or owned by another process that described itself.

    An owner that has not described itself counts as ``pid``: a process releasing a store
    removes ``_owner.json`` just before it unlocks (:meth:`OwnerLock.release`).
    """
    deadline = time.monotonic() + timeout_s
    pause = 0.005
    while True:
        owner = live_owner(path)
        if owner is None or (owner.pid != pid and owner != _UNDESCRIBED):
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        # flock has no timeout and no wake-up: poll with a growing pause.
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.05)
