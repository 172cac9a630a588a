"""Shared fixtures: the embedded Kafka broker, topic factories, child-process helpers."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Soak variants run only when asked for (``make soak``), never in CI's ``make test``."""
    if os.environ.get("SPARK_STATESTORE_SOAK") == "1":
        return
    skip = pytest.mark.skip(reason="soak variant: run it with `make soak`")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[object]:
    """One embedded 3-broker Kafka cluster for the whole test session."""
    from spark_statestore.connectors.kafka.embedded import EmbeddedBroker

    broker = EmbeddedBroker(brokers=3)
    try:
        yield broker
    finally:
        broker.close()


_topic_counter = itertools.count()


@pytest.fixture
def make_topic(kafka_broker: object, request: pytest.FixtureRequest) -> Callable[..., str]:
    """Factory: ``make_topic(partitions=1, suffix="")`` creates a fresh, uniquely named topic."""

    def factory(partitions: int = 1, suffix: str = "") -> str:
        base = request.node.name.replace("[", "-").replace("]", "").replace("/", "-")[:60]
        name = f"{base}-{next(_topic_counter)}{suffix}"
        kafka_broker.create_topic(name, partitions)  # type: ignore[attr-defined]
        return name

    return factory


def run_python(
    code: str, *args: str, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (a separate process) and capture its output."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO_ROOT,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"child process failed with {proc.returncode}\nstdout:\n{proc.stdout}\n"
            f"stderr:\n{proc.stderr}"
        )
    return proc
