"""``spark-statestore broker`` as a child process: how the demo and the bench start Kafka.

The broker runs in a process of its own (its JVMs die with it), so a program that starts
one stops it whatever happens to the program's own Spark session or threads.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from spark_statestore.connectors.kafka.errors import BrokerStartError

__all__ = ["broker_child", "stop_child"]

_STOP_TIMEOUT_S = 30.0


@contextmanager
def broker_child(
    log_path: Path,
    topics: Sequence[str] = (),
    *,
    brokers: int = 1,
    bootstrap_file: Path | None = None,
    who: str = "spark-statestore",
) -> Iterator[str]:
    """Run ``spark-statestore broker`` with ``topics`` (``name:partitions``) created; yields
    its bootstrap servers and stops it on exit (SIGTERM, SIGKILL after 30 s).

    Parameters
    ----------
    log_path
        Where the launcher's own output goes (each Kafka node logs in its data directory).
    topics
        Topics to create before the bootstrap servers are yielded.
    brokers
        How many Kafka nodes.
    bootstrap_file
        Also write ``bootstrap.servers`` there, for other programs to find.
    who
        Names the caller in the error (e.g. ``bench suite sink``).

    Raises
    ------
    BrokerStartError
        The broker did not start; the message quotes what it said and names ``log_path``.
    """
    command = [sys.executable, "-m", "spark_statestore.cli", "broker", "--brokers", str(brokers)]
    for topic in topics:
        command += ["--topic", topic]
    if bootstrap_file is not None:
        command += ["--bootstrap-file", str(bootstrap_file)]
    with log_path.open("w") as log:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline().strip()
            if not first.startswith("bootstrap.servers="):
                raise BrokerStartError(
                    f"{who}: the broker process did not start (it said {first!r}); see "
                    f"{log_path}: {log_path.read_text().strip()[-2000:]}"
                )
            yield first.split("=", 1)[1]
        finally:
            stop_child(proc)
            if proc.stdout is not None:
                proc.stdout.close()


def stop_child(proc: subprocess.Popen[str], timeout_s: float = _STOP_TIMEOUT_S) -> None:
    """Stop a child process: SIGTERM, then SIGKILL if it has not exited after ``timeout_s``."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
