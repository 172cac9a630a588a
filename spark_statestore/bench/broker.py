"""A local Apache Kafka broker (``spark-statestore broker``) as a child process, for the
suites that measure against Kafka."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from spark_statestore.bench.errors import BenchError

__all__ = ["broker_process"]


@contextmanager
def broker_process(
    suite: str, root: str, topics: Sequence[str], *, brokers: int = 1
) -> Iterator[str]:
    """``spark-statestore broker`` as a child process with ``topics`` (``name:partitions``)
    created, logging to ``<root>/broker.log``; yields its bootstrap servers and stops it
    (SIGTERM, then SIGKILL after 30 s) on exit."""
    log_path = Path(root) / "broker.log"
    command = [sys.executable, "-m", "spark_statestore.cli", "broker", "--brokers", str(brokers)]
    for topic in topics:
        command += ["--topic", topic]
    with log_path.open("w") as log:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline().strip()
            if not first.startswith("bootstrap.servers="):
                raise BenchError(
                    f"bench suite {suite}: the local Kafka broker did not start (it said "
                    f"{first!r}): {log_path.read_text().strip()[-2000:]}"
                )
            yield first.split("=", 1)[1]
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
