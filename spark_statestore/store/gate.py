"""The one way into LevelDB: calls counted so ``close()`` never frees a database under them,
and LevelDB's errors translated once into the store's.

plyvel releases the GIL inside LevelDB calls, and closing a database while another thread is
inside one of its calls (a ``get``, an iterator step, a write) frees memory that call still
uses: the process dies with SIGSEGV. Every LevelDB call of a store therefore runs inside its
:class:`Gate`: entering counts the call, :meth:`Gate.close` refuses new calls and waits until
the calls in flight have left, and only then is the database closed. Iterators are read in
chunks, each chunk one call (:func:`gated_chunks`), so a reader that stops half-way through
a scan never holds up ``close()``. The one exception: the compiled extension's point reads
(:mod:`~spark_statestore.store.point`) skip the gate, since its database counts its calls
in flight itself and its close waits for them.

Errors leaving a gated call are translated here, and nowhere else: plyvel's
``CorruptionError``, ``IOError`` and ``Error``, its ``RuntimeError`` for a closed database,
and ``OSError`` become :class:`~spark_statestore.store.errors.StoreError` subclasses naming
the store. ``MemoryError`` and ``KeyboardInterrupt`` pass through unchanged: they are the
cause, not a store condition.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from itertools import islice
from types import TracebackType
from typing import Any

from spark_statestore.store.errors import (
    RECOVERY_HINT,
    StoreClosedError,
    StoreCorruptedError,
    StoreError,
    StoreIOError,
)
from spark_statestore.store.leveldb import loaded_bindings

__all__ = ["Gate", "gated_chunks", "translate"]

_FIRST_CHUNK = 16  # items of an iterator's first gated step (point and limit scans stay cheap)
_MAX_CHUNK = 1024  # items of one gated step once a scan is under way


class Gate:
    """Counts a store's LevelDB calls in flight; :meth:`close` waits for them."""

    __slots__ = ("_closed", "_idle", "_inflight", "_lock", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._inflight = 0
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> None:
        with self._lock:
            if self._closed:
                raise self.closed_error()
            self._inflight += 1

    def closed_error(self) -> StoreClosedError:
        return StoreClosedError(f"store {self.path} is closed; open it again", self.path)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with self._lock:
            self._inflight -= 1
            if self._inflight == 0 and self._closed:
                self._idle.notify_all()
        if exc is not None:
            translated = translate(exc, self.path)
            if translated is not None:
                raise translated from exc

    def unless_closed(self, cleanup: Callable[[], object]) -> None:
        """Run ``cleanup`` (closing an iterator or a snapshot) inside the gate, or not at all
        when the store is closed: closing the database has done it already."""
        with self._lock:
            if self._closed:
                return
            self._inflight += 1
        try:
            cleanup()
        finally:
            self.__exit__(None, None, None)

    def close(self) -> None:
        """Refuse new calls and wait until every call in flight has left (idempotent).

        Must not be called from inside the gate (it would wait for itself).
        """
        with self._lock:
            self._closed = True
            while self._inflight:
                self._idle.wait()


def gated_chunks(gate: Gate, open_iterator: Callable[[], Any]) -> Iterator[Any]:
    """The items of the plyvel iterator ``open_iterator()``, each chunk read in one gated call.

    Chunks grow from a few items (a lookup or a small ``limit`` reads little) to
    ``_MAX_CHUNK``. When the store closes meanwhile, the next chunk raises
    :class:`~spark_statestore.store.errors.StoreClosedError`.
    """
    with gate:
        iterator = open_iterator()
    try:
        size = _FIRST_CHUNK
        while True:
            with gate:
                chunk = list(islice(iterator, size))
            if not chunk:
                return
            for item in chunk:
                if gate._closed:  # nothing is read from a closed store, buffered or not
                    raise gate.closed_error()
                yield item
            if size < _MAX_CHUNK:
                size *= 2
    finally:
        gate.unless_closed(iterator.close)


def translate(exc: BaseException, path: str) -> StoreError | None:
    """The store error for ``exc`` raised by a LevelDB call on store ``path``, or None to let
    ``exc`` through (our own errors, ``MemoryError``, ``KeyboardInterrupt``, bugs)."""
    if isinstance(exc, StoreError):
        return None
    bindings = loaded_bindings()
    if any(isinstance(exc, b.CorruptionError) for b in bindings):
        return StoreCorruptedError(
            f"store {path}: LevelDB reports corruption ({exc}); {RECOVERY_HINT}", path
        )
    if isinstance(exc, OSError):  # both bindings' IOError is one
        return StoreIOError(
            f"store {path}: the disk refused a read or write ({exc}); free space or fix "
            "the permissions, then open the store again: it keeps its last complete commit",
            path,
        )
    if any(isinstance(exc, b.Error) for b in bindings):
        return StoreError(f"store {path}: LevelDB error ({exc})", path)
    if isinstance(exc, RuntimeError) and "closed" in str(exc):
        return StoreClosedError(f"store {path} is closed; open it again ({exc})", path)
    return None
