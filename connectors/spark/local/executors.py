"""The executors of a local Spark cluster, found as processes on the Workers' hosts, and
killed for real (SIGKILL) by the crash tests."""

from __future__ import annotations

import contextlib
import os
import select
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from spark_statestore.connectors.local.processes import log_tail
from spark_statestore.connectors.spark.errors import LocalSparkError
from spark_statestore.connectors.spark.local.daemons import SparkDaemon

__all__ = ["SparkExecutor", "executors_of", "kill_executor"]

_EXECUTOR = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


@dataclass(frozen=True)
class SparkExecutor:
    """An executor JVM running on a Worker's host.

    Attributes
    ----------
    worker
        The index of the Worker (and host) it runs on.
    pid
        Its process id (PIDs are not namespaced: this process sees the same).
    executor_id, app_id
        Spark's names for it.
    directory
        Its folder in the Worker's ``work/`` (``stdout``, ``stderr``).
    """

    worker: int
    pid: int
    executor_id: str
    app_id: str
    directory: Path

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the executor's stderr (its log)."""
        return log_tail(self.directory / "stderr", chars)


def executors_of(workers: Sequence[SparkDaemon]) -> list[SparkExecutor]:
    """The executor JVMs (``CoarseGrainedExecutorBackend``) running on the hosts of
    ``workers`` now, in Worker order."""
    found = []
    for index, worker in enumerate(workers):
        assert worker.host is not None
        for pid in worker.host.pids():
            args = _command_line(pid)
            if _EXECUTOR not in args:
                continue
            executor_id, app_id = _argument(args, "--executor-id"), _argument(args, "--app-id")
            directory = worker.work_dir / app_id / executor_id
            found.append(SparkExecutor(index, pid, executor_id, app_id, directory))
    return found


def kill_executor(executor: SparkExecutor, timeout_s: float = 30.0) -> None:
    """SIGKILL ``executor`` and wait until its process is gone (its Worker then reports it
    lost and starts another).

    Raises
    ------
    LocalSparkError
        The process still exists ``timeout_s`` after the signal.
    """
    try:
        fd = os.pidfd_open(executor.pid)
    except ProcessLookupError:
        return
    try:
        with contextlib.suppress(ProcessLookupError):
            os.kill(executor.pid, signal.SIGKILL)
        ready, _, _ = select.select([fd], [], [], timeout_s)
        if not ready:
            raise LocalSparkError(
                f"executor {executor.executor_id} (pid {executor.pid}) on worker "
                f"{executor.worker} did not exit within {timeout_s:.0f} s of SIGKILL"
            )
    finally:
        os.close(fd)


def _command_line(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _argument(args: list[str], name: str) -> str:
    try:
        return args[args.index(name) + 1]
    except (ValueError, IndexError):
        return "?"
