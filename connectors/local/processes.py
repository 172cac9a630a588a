"""What every local JVM cluster (Kafka, Spark) does with its processes: pick free ports, start
a child tied to its parent's life with its output in a log, read that log, signal it."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = [
    "LoggedProcess",
    "descendants",
    "die_with_parent",
    "free_ports",
    "launch",
    "linked_to_parent",
    "log_tail",
    "owned_tempdir",
    "pid_alive",
    "port_taken",
    "remove_stale_tempdirs",
]


def free_ports(host: str, count: int) -> list[int]:
    """``count`` distinct ports the OS calls free on ``host`` right now (the caller's
    processes bind them a moment later; a port someone takes in between fails their start,
    which the caller retries)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            sockets.append(s)
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Ask Linux to SIGKILL this child when the process that started it dies.

    The request survives ``exec`` (of anything but a set-user-ID program), so it also holds
    for a JVM started through ``ip netns exec``, ``unshare``, ``sh`` and ``spark-class``, which
    all exec the next program in the same process.
    """
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def linked_to_parent() -> Callable[[], None] | None:
    """The ``preexec_fn`` for :class:`subprocess.Popen` of a child that must not outlive
    this process (None where Linux's parent-death signal does not exist)."""
    return die_with_parent if sys.platform.startswith("linux") else None


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (any process: pids are reused, so a name that
    carries a pid names a run that may be gone even when this says True)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` in the process tree now, parents before children (empty
    without Linux's ``/proc``)."""
    try:
        entries = [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return []
    children: dict[int, list[int]] = {}
    for child in entries:
        try:
            with open(f"/proc/{child}/stat", encoding="ascii", errors="replace") as handle:
                stat = handle.read()
        except OSError:
            continue  # gone meanwhile
        parent = int(stat[stat.rfind(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(child)
    found: list[int] = []
    pending = [pid]
    while pending:
        below = children.get(pending.pop(0), [])
        found.extend(below)
        pending.extend(below)
    return found


def owned_tempdir(kind: str, owner: str) -> Path:
    """A new temporary directory ``spark-statestore-<kind>-<owner>-*``, where ``owner`` is
    a prefix and this process's pid, so that :func:`remove_stale_tempdirs` can tell when
    its run is gone."""
    return Path(tempfile.mkdtemp(prefix=f"spark-statestore-{kind}-{owner}-"))


def remove_stale_tempdirs(kind: str, prefix: str) -> list[Path]:
    """Remove the :func:`owned_tempdir` directories of ``kind`` whose owner ``<prefix><pid>``
    is gone (a run killed before its cleanup); returns them."""
    pattern = re.compile(rf"spark-statestore-{re.escape(kind)}-{re.escape(prefix)}(\d+)-")
    root = Path(tempfile.gettempdir())
    removed = []
    for entry in root.iterdir():
        match = pattern.match(entry.name)
        if match and entry.is_dir() and not pid_alive(int(match.group(1))):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def launch(
    command: Sequence[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``command`` with its output appended to ``log_path``, no stdin, and tied to
    this process's life (:func:`linked_to_parent`).

    Raises
    ------
    OSError
        The program could not be started (the caller says which process that was).
    """
    with log_path.open("ab") as out:
        return subprocess.Popen(
            list(command),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=None if env is None else dict(env),
            cwd=cwd,
            preexec_fn=linked_to_parent(),
        )


def port_taken(log: str) -> bool:
    """Whether a JVM's log says it could not bind a port another process has."""
    return "Address already in use" in log or "BindException" in log


def log_tail(path: Path, chars: int = 3000) -> str:
    """The end of a log file, for error messages ("" when it cannot be read)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-chars:].strip()


class LoggedProcess:
    """What a local cluster knows of one of its processes (a Kafka node, a Spark daemon):
    the child, where its output goes, and the signals it sends it."""

    process: subprocess.Popen[bytes] | None

    @property
    def log_path(self) -> Path:
        """Where the process's output goes."""
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        """The process id while it runs."""
        return self.process.pid if self.process is not None else None

    def is_running(self) -> bool:
        """True while the process exists (also when paused)."""
        return self.process is not None and self.process.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the process's log, for error messages."""
        return log_tail(self.log_path, chars)

    def signal(self, signum: int) -> None:
        """Send ``signum`` (a process already gone is not an error)."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL the process and reap it."""
        if self.is_running():
            self.signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait()
