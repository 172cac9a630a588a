"""Fixtures of the tests that scrape our metrics endpoints with a real Prometheus server
(:mod:`tests.prometheus_server`).

Without the binary (``bash scripts/prometheus.sh`` builds it; ``make setup`` runs that) those
tests are skipped, saying so, unless ``SPARK_STATESTORE_REQUIRE_PROMETHEUS`` is set: then a
missing binary fails them, so that a CI that means to run them cannot pass without.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.prometheus_server import (
    REQUIRE_PROMETHEUS_ENV,
    PrometheusServer,
    ScrapeJob,
    prometheus_binary_path,
)

__all__ = ["make_prometheus", "prometheus_binary"]


@pytest.fixture(scope="session")
def prometheus_binary() -> Path:
    """The Prometheus executable; skips the test when it is not built (fails instead when
    ``SPARK_STATESTORE_REQUIRE_PROMETHEUS`` is set)."""
    binary = prometheus_binary_path()
    if os.access(binary, os.X_OK):
        return binary
    reason = (
        f"no Prometheus binary at {binary}: build it with `bash scripts/prometheus.sh` "
        "(Go from the module proxy; 5 to 10 minutes, once)"
    )
    if os.environ.get(REQUIRE_PROMETHEUS_ENV):
        pytest.fail(f"{reason}; {REQUIRE_PROMETHEUS_ENV} is set, so this is a failure")
    pytest.skip(reason)


@pytest.fixture
def make_prometheus(
    prometheus_binary: Path,
) -> Iterator[Callable[..., PrometheusServer]]:
    """Factory: ``make_prometheus(ScrapeJob.of(...), ..., scrape_interval_s=1.0)`` starts a
    Prometheus server scraping those jobs and waits until it is ready; each is closed (and
    its storage removed) when the test ends."""
    started: list[PrometheusServer] = []

    def start(*jobs: ScrapeJob, scrape_interval_s: float = 1.0) -> PrometheusServer:
        server = PrometheusServer(
            prometheus_binary, list(jobs), scrape_interval_s=scrape_interval_s
        )
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.close()
