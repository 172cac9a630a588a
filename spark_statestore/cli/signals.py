"""Stopping a long-running command (``broker``, ``serve``) on SIGINT or SIGTERM, shared by
the parser's module and the commands' modules."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

__all__ = ["catch_stop_signals"]


def catch_stop_signals() -> Callable[[], int]:
    """Take over SIGINT and SIGTERM now; the returned function blocks until one of them
    arrives (also one that arrived before it was called) and returns its number."""
    received: list[int] = []
    done = threading.Event()

    def handler(signum: int, _frame: object) -> None:
        received.append(signum)
        done.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)

    def wait() -> int:
        while not done.wait(timeout=1.0):
            pass
        return received[0]

    return wait
