"""Fixtures of the integration tests: ``spark-statestore serve`` as a child process."""

from __future__ import annotations

import select
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., tuple[subprocess.Popen[str], str]]]:
    """Factory: start ``spark-statestore serve PATH``; returns the process and its location.
    Processes still running at the end are stopped (SIGTERM)."""
    started: list[subprocess.Popen[str]] = []

    def start(path: Path, *flags: str) -> tuple[subprocess.Popen[str], str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "spark_statestore.cli", "serve", str(path), *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
        )
        started.append(proc)
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "serve printed nothing in 60 s"
        line = proc.stdout.readline()
        assert line.startswith("serving store inventory "), (line, proc.stderr.read())
        return proc, line.rsplit(" at ", 1)[1].strip()

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
