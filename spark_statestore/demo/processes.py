"""The processes the demo starts besides Spark: the other application, and stopping it.

The broker is started through :func:`~spark_statestore.connectors.kafka.local.child.broker_child`,
as the bench starts its own.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from spark_statestore.demo.errors import DemoError
from spark_statestore.demo.output import say
from spark_statestore.position import Position

__all__ = ["AppProcess", "app_process"]


class AppProcess:
    """The other application's process: phases go in on stdin, its report comes back."""

    def __init__(self, proc: subprocess.Popen[str], log_path: Path) -> None:
        self._proc = proc
        self._log_path = log_path

    def run_phase(self, phase: int) -> Position:
        """Let the app write ``phase``; returns where its committed records went (the
        changelog partition -> offset of the last record of the phase)."""
        stdin, stdout = self._proc.stdin, self._proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write(f"{phase}\n")
        stdin.flush()
        for line in stdout:
            if line.startswith(f"done {phase} "):
                return Position.from_json(line.split(" ", 2)[2])
            say(f"app | {line.rstrip()}")
        raise DemoError(
            f"the application process exited with {self._proc.wait()} during phase {phase}; "
            f"see {self._log_path}"
        )


@contextmanager
def app_process(workdir: Path, bootstrap: str) -> Iterator[AppProcess]:
    """Run the other application (:mod:`spark_statestore.demo.app`) as a child, logging to
    ``app.log``; on exit its input is closed (it flushes and exits) and it is stopped."""
    log_path = workdir / "app.log"
    cmd = [sys.executable, "-m", "spark_statestore.demo.app", "--bootstrap-servers", bootstrap]
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file, text=True
        )
        try:
            yield AppProcess(proc, log_path)
        finally:
            assert proc.stdin is not None
            proc.stdin.close()  # end of input: the app flushes and exits
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                from spark_statestore.connectors.kafka.local.child import stop_child

                stop_child(proc)
            assert proc.stdout is not None
            proc.stdout.close()
