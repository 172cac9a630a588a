"""A gate for tasks: the first task to reach it is held (it has started, and has yielded
nothing yet) until the test has done what it came for (SIGKILLed that task's executor);
every later task passes. The gate is a TCP server on the driver's address, which every
executor reaches."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any


class Gate:
    """A TCP server on the driver's address: the first task that calls is held (its
    connection stays open, unanswered) until :meth:`close`; every later one is let through.
    """

    def __init__(self, address: str) -> None:
        self._server = socket.create_server((address, 0))
        self.address = (address, int(self._server.getsockname()[1]))
        self.held: list[str] = []
        self._held_socket: socket.socket | None = None
        self._arrived = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="gate", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return  # closed
            caller = connection.recv(64).decode().strip()
            if self._held_socket is None:
                self._held_socket = connection  # no answer: the task waits
                self.held.append(caller)
                self._arrived.set()
            else:
                connection.sendall(b"go")
                connection.close()

    def wait_for_held(self, timeout_s: float) -> str:
        """The address of the host whose task is held."""
        assert self._arrived.wait(timeout_s), "no task reached the gate"
        return self.held[0]

    def close(self) -> None:
        self._server.close()
        if self._held_socket is not None:
            self._held_socket.close()  # a held task still alive gets EOF and fails


def gated(frame: Any, gate: tuple[str, int]) -> Any:
    """``frame`` (batch or streaming), each task calling at ``gate`` before it yields its
    first row (tasks with no rows do not call)."""

    def through_the_gate(batches: Iterator[Any]) -> Iterator[Any]:
        called = False
        for batch in batches:
            if not called:
                called = True
                with socket.create_connection(gate, timeout=600) as connection:
                    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                    probe.connect(gate)
                    connection.sendall(probe.getsockname()[0].encode() + b"\n")
                    probe.close()
                    if connection.recv(2) != b"go":
                        raise RuntimeError("the gate closed on this task")
            yield batch

    return frame.mapInArrow(through_the_gate, frame.schema)
