"""Calls a server answers, counted by kind and status where it answers them
(:class:`CallStats`): one update per call, read by a collector when Prometheus scrapes.

This module imports no Prometheus code: a server counts whether or not anyone serves its
metrics (the store server and the store host count their calls with it; their collectors in
:mod:`spark_statestore.metrics` read it).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence

__all__ = ["ERROR", "OK", "STATUSES", "CallStats"]

OK = "ok"
ERROR = "error"
STATUSES = (OK, ERROR)


class CallStats:
    """Calls by kind (``stage``, ``scan``, ...) and status (``ok``, ``error``), thread-safe.

    Parameters
    ----------
    kinds
        The kinds of call the server answers (reported even before the first call).

    Attributes
    ----------
    observers
        Called with each call's kind and seconds (a latency histogram's).
    """

    def __init__(self, kinds: Sequence[str]) -> None:
        self.kinds = tuple(kinds)
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()
        self.observers: list[Callable[[str, float], None]] = []

    @contextlib.contextmanager
    def call(self, kind: str) -> Iterator[None]:
        """Count and time the call of ``kind`` the block answers: ``error`` when it raises."""
        began = time.monotonic()
        ok = False
        try:
            yield
            ok = True
        finally:
            self.record(kind, ok, time.monotonic() - began)

    def record(self, kind: str, ok: bool, seconds: float) -> None:
        """Count a call of ``kind`` that took ``seconds`` (for calls that end elsewhere than
        where they began: a stream answered by a generator)."""
        with self._lock:
            self._counts[kind, OK if ok else ERROR] += 1
        for observe in self.observers:
            observe(kind, seconds)

    def counts(self) -> dict[tuple[str, str], int]:
        """``{(kind, status): calls}`` now, every kind and status included."""
        with self._lock:
            return {
                (kind, status): self._counts[kind, status]
                for kind in sorted({*self.kinds, *(k for k, _ in self._counts)})
                for status in STATUSES
            }
