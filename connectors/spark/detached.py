"""Server processes the driver-side code starts detached from itself (the store host, the
sink's store server): started in a session of their own so that they outlive the short-lived
Python process that starts them, given their start request on stdin, and heard from once on
stdout (the handshake: ``{"ready": ...}`` or ``{"error": ...}``)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from typing import IO, Any, Protocol

from spark_statestore.connectors.spark.driver import ProcessId

__all__ = [
    "DetachedServer",
    "handshake_channel",
    "read_handshake",
    "serve_detached",
    "start_detached",
    "wait_until_stopped",
    "watched_driver",
]


def start_detached(
    module: str, request: dict[str, Any], log_path: str, timeout_s: float
) -> tuple[dict[str, Any], subprocess.Popen[bytes]]:
    """Start ``python -m module`` detached, logging to ``log_path`` (owner-only, appended),
    send it ``request`` and return its handshake and the process."""
    from spark_statestore.store.files import open_private

    log = open_private(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", module],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,  # outlives the process that starts it and its group
            close_fds=True,
        )
    finally:
        os.close(log)
    assert process.stdin is not None and process.stdout is not None
    with contextlib.suppress(BrokenPipeError):
        process.stdin.write(json.dumps(request).encode() + b"\n")
        process.stdin.close()
    reply = read_handshake(process, timeout_s)
    process.stdout.close()
    return reply, process


def read_handshake(process: subprocess.Popen[bytes], timeout_s: float) -> dict[str, Any]:
    """A started server process's first line on stdout (its handshake), decoded; its exit
    or a timeout as an error."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            process.kill()
            return {"error": f"no answer within {timeout_s:.0f} s (killed it)"}
        ready, _, _ = select.select([process.stdout], [], [], left)
        if not ready:
            continue
        chunk = os.read(process.stdout.fileno(), 4096)
        if not chunk:
            code = process.wait()
            return {"error": f"it exited with code {code} before it served"}
        line += chunk
    try:
        reply = json.loads(line)
    except ValueError:
        reply = None
    return reply if isinstance(reply, dict) else {"error": f"bad handshake {line[:200]!r}"}


def handshake_channel() -> IO[str]:
    """In a detached server: the stdout pipe its starter reads the handshake from, with the
    process's own stdout sent to /dev/null (nothing else may write to the handshake pipe)."""
    handshake = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    return handshake


def watched_driver(request: dict[str, Any]) -> ProcessId | None:
    """The Spark driver JVM a start request says to watch (None: none).

    Raises
    ------
    ValueError
        If it is gone already: a server never outlives its driver, even briefly.
    """
    raw = request.get("watch")
    watch = None if raw is None else ProcessId(int(raw[0]), str(raw[1]))
    if watch is not None and not watch.alive():
        raise ValueError(f"the Spark driver (pid {watch.pid}) is gone")
    return watch


WATCH_INTERVAL_S = 0.5
"""How often a detached server checks that the Spark driver JVM it watches is alive."""


def wait_until_stopped(
    stopped: Any,
    watch: ProcessId | None,
    name: str,
    *,
    also: Callable[[], bool] | None = None,
) -> None:
    """Return once the event ``stopped`` is set, ``watch`` (the Spark driver JVM) is gone,
    or ``also()`` (checked as often as the driver, e.g. an idle timeout) says to stop."""
    import logging

    while not stopped.wait(WATCH_INTERVAL_S):
        if watch is not None and not watch.alive():
            logging.getLogger(__name__).info(
                "%s: the Spark driver (pid %d) is gone: stopping", name, watch.pid
            )
            return
        if also is not None and also():
            return


class DetachedServer(Protocol):
    """What :func:`serve_detached` runs: a server that stops when ``stopped`` is set."""

    @property
    def stopped(self) -> Any: ...  # a threading.Event

    def run(self, watch: ProcessId | None) -> None: ...

    def close(self) -> None: ...


def serve_detached(
    name: str,
    start: Callable[[dict[str, Any]], DetachedServer],
    ready: Callable[[DetachedServer], dict[str, Any]],
) -> int:
    """The main function of a detached server process called ``name`` (for its log): reads
    its start request (one JSON line) from stdin, starts the server with ``start(request)``,
    answers ``ready(server)`` or ``{"error": message}`` on stdout, then serves until it is
    stopped (SIGTERM, SIGINT) or the driver it watches is gone. Returns the exit code."""
    import logging
    import signal

    from spark_statestore.connectors.spark.worker_gc import claim_process, freeze_long_lived
    from spark_statestore.errors import OptionError
    from spark_statestore.logs import configure_logging

    # Its stderr is its log file: INFO unless $SPARK_STATESTORE_LOG_LEVEL says otherwise,
    # JSON lines with $SPARK_STATESTORE_LOG_FORMAT=json, each line naming the process.
    refused: OptionError | None = None
    try:
        configure_logging(default_level=logging.INFO, process=name)
    except OptionError as exc:  # logs as text, and the start fails saying why
        configure_logging(logging.INFO, "text", process=name)
        refused = exc
    log = logging.getLogger(__name__)
    handshake = handshake_channel()
    try:
        if refused is not None:
            raise refused
        request = json.loads(sys.stdin.readline())
        watch = watched_driver(request)
        server = start(request)
    except Exception as exc:  # whatever keeps it from serving is its starter's answer
        log.error("%s cannot start: %s", name, exc)
        handshake.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
        handshake.close()
        return 1
    # The modules and the server live as long as the process: collections skip them.
    claim_process()
    freeze_long_lived()
    try:
        handshake.write(json.dumps(ready(server)) + "\n")
        handshake.close()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: server.stopped.set())
        server.run(watch)
    finally:
        server.close()
    return 0
