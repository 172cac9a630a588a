"""A real Prometheus server for tests: the binary ``scripts/prometheus.sh`` builds, run as a
child process on a free loopback port, scraping the endpoints a test names every second, and
answering PromQL through its HTTP API.

A test peer someone else wrote: what it stores is what a user's Prometheus would store from
our endpoints (their text format, TLS, bearer token, a target that dies), not what our own
parsing of that text says.

Examples
--------
>>> with PrometheusServer(binary, [ScrapeJob.of("follow", url)]) as prometheus:  # doctest: +SKIP
...     prometheus.wait_for('up{job="follow"}', lambda samples: samples[0].value == 1)
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

from spark_statestore.connectors.local.processes import (
    LoggedProcess,
    free_ports,
    launch,
    owned_tempdir,
    remove_stale_tempdirs,
)
from tests.conftest import REPO_ROOT
from tests.kafka_util import poll_until

__all__ = [
    "PROMETHEUS_ENV",
    "REQUIRE_PROMETHEUS_ENV",
    "PrometheusServer",
    "PrometheusServerError",
    "Sample",
    "ScrapeJob",
    "Target",
    "prometheus_binary_path",
]

log = logging.getLogger(__name__)

PROMETHEUS_ENV = "SPARK_STATESTORE_PROMETHEUS"
"""A Prometheus binary to use instead of the one ``scripts/prometheus.sh`` builds."""

REQUIRE_PROMETHEUS_ENV = "SPARK_STATESTORE_REQUIRE_PROMETHEUS"
"""Set (to anything): a missing Prometheus fails the tests that need it instead of skipping
them."""

_OWNER = "tests"
_START_ATTEMPTS = 3
_STOP_TIMEOUT_S = 10.0

# Loopback is never reached through a proxy, whatever http_proxy says.
_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class PrometheusServerError(RuntimeError):
    """The server could not start, or its API answered with an error (the message has it)."""

    def __init__(self, message: str, *, port_taken: bool = False) -> None:
        super().__init__(message)
        self.port_taken = port_taken


def prometheus_binary_path() -> Path:
    """Where the Prometheus binary is: ``$SPARK_STATESTORE_PROMETHEUS``, else where
    ``scripts/prometheus.sh`` builds it (asked of the script, which holds the version). The
    file may be missing: check before use."""
    override = os.environ.get(PROMETHEUS_ENV)
    if override:
        return Path(override)
    script = REPO_ROOT / "scripts" / "prometheus.sh"
    answer = subprocess.run(
        ["bash", str(script), "--path"], capture_output=True, text=True, timeout=30, check=False
    )
    if answer.returncode != 0 or not answer.stdout.strip():
        raise PrometheusServerError(
            f"`bash {script} --path` failed (exit {answer.returncode}): {answer.stderr.strip()}"
        )
    return Path(answer.stdout.strip())


class Sample(NamedTuple):
    """One element of an instant query's answer: its labels (``__name__`` included when the
    series has one) and its value."""

    labels: dict[str, str]
    value: float


class Target(NamedTuple):
    """One scrape target as ``/api/v1/targets`` reports it."""

    job: str
    scrape_url: str
    health: str
    """``up``, ``down`` or ``unknown`` (not scraped yet)."""
    last_error: str
    labels: dict[str, str]


@dataclass(frozen=True)
class ScrapeJob:
    """One scrape job: the endpoints it scrapes and how it reaches them.

    Prometheus keeps one scheme and one metrics path per job, so every URL of a job must
    share them (``http://127.0.0.1:8000/metrics``, ``https://...``).

    Parameters
    ----------
    name
        The ``job`` label of its series.
    urls
        Full scrape URLs.
    ca_file
        PEM file of the CA that signs the endpoints' certificates (HTTPS).
    token
        A bearer token Prometheus sends (``authorization: {credentials_file: ...}``).
    """

    name: str
    urls: tuple[str, ...]
    ca_file: str | None = None
    token: str | None = field(default=None, repr=False)

    @classmethod
    def of(
        cls, name: str, *urls: str, ca_file: str | Path | None = None, token: str | None = None
    ) -> ScrapeJob:
        """A job scraping ``urls``."""
        return cls(name, tuple(urls), None if ca_file is None else str(ca_file), token)

    def __post_init__(self) -> None:
        if not self.urls:
            raise ValueError(f"scrape job {self.name!r} has no URL")
        shapes = {self._split(url)[0::2] for url in self.urls}
        if len(shapes) > 1:
            raise ValueError(
                f"scrape job {self.name!r} mixes schemes or paths ({', '.join(self.urls)}): "
                "Prometheus keeps one of each per job; give each its own job"
            )

    def _split(self, url: str) -> tuple[str, str, str]:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query:
            raise ValueError(
                f"scrape job {self.name!r}: {url!r} is not an http(s)://host:port/path URL"
            )
        return parts.scheme, parts.netloc, parts.path or "/metrics"

    def to_config(self, token_file: Path | None) -> dict[str, Any]:
        """This job's ``scrape_configs`` entry; the token is read from ``token_file``."""
        scheme, _, path = self._split(self.urls[0])
        config: dict[str, Any] = {
            "job_name": self.name,
            "scheme": scheme,
            "metrics_path": path,
            "static_configs": [{"targets": [self._split(url)[1] for url in self.urls]}],
        }
        if self.ca_file is not None:
            config["tls_config"] = {"ca_file": self.ca_file}
        if token_file is not None:
            config["authorization"] = {"type": "Bearer", "credentials_file": str(token_file)}
        return config


class PrometheusServer(LoggedProcess):
    """A Prometheus server in a child process on loopback, scraping ``jobs``.

    Parameters
    ----------
    binary
        The ``prometheus`` executable (:func:`prometheus_binary_path`).
    jobs
        What it scrapes.
    scrape_interval_s
        How often it scrapes each target (also each scrape's timeout).
    start_timeout_s
        How long :meth:`start` waits for ``/-/ready``.
    """

    def __init__(
        self,
        binary: str | Path,
        jobs: Sequence[ScrapeJob],
        *,
        scrape_interval_s: float = 1.0,
        start_timeout_s: float = 60.0,
    ) -> None:
        names = [job.name for job in jobs]
        if len(set(names)) != len(names):
            raise ValueError(f"scrape job names must differ: {names}")
        self.process: subprocess.Popen[bytes] | None = None
        self._binary = Path(binary)
        self._jobs = list(jobs)
        self._interval_s = scrape_interval_s
        self._start_timeout_s = start_timeout_s
        self._root: Path | None = None
        self._port: int | None = None
        self._closed = False

    # -- facts ----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``: its HTTP API."""
        if self._port is None:
            raise PrometheusServerError("the Prometheus server is not started: call start()")
        return f"http://127.0.0.1:{self._port}"

    @property
    def log_path(self) -> Path:
        """Where the server's output goes."""
        if self._root is None:
            raise PrometheusServerError("the Prometheus server is not started: call start()")
        return self._root / "prometheus.log"

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> PrometheusServer:
        """Write its configuration, start it and wait until ``/-/ready`` answers 200.

        Raises
        ------
        PrometheusServerError
            It exited or was not ready in time; the message has its log's end.
        """
        if self.process is not None:
            raise PrometheusServerError("this PrometheusServer was started already")
        if not os.access(self._binary, os.X_OK):
            raise PrometheusServerError(
                f"no Prometheus binary at {self._binary}: run `bash scripts/prometheus.sh`"
            )
        remove_stale_tempdirs("prometheus", _OWNER)
        self._root = owned_tempdir("prometheus", f"{_OWNER}{os.getpid()}")
        config = self._write_config()
        try:
            for attempt in range(1, _START_ATTEMPTS + 1):
                self._port = free_ports("127.0.0.1", 1)[0]
                try:
                    self._launch(config)
                    break
                except PrometheusServerError as exc:
                    self.kill()
                    if not exc.port_taken or attempt == _START_ATTEMPTS:
                        raise
                    log.info("port %s was taken while Prometheus started; another", self._port)
        except BaseException:
            self.close()
            raise
        log.info("Prometheus up at %s, scraping %s", self.url, [job.name for job in self._jobs])
        return self

    def stop(self, timeout_s: float = _STOP_TIMEOUT_S) -> None:
        """SIGTERM the server; SIGKILL after ``timeout_s``."""
        if not self.is_running():
            return
        assert self.process is not None
        self.signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("Prometheus did not stop in %.0f s; killing it", timeout_s)
            self.kill()

    def close(self) -> None:
        """Stop the server and remove its storage and configuration. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.stop()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)

    def __enter__(self) -> PrometheusServer:
        return self.start() if self.process is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the HTTP API ---------------------------------------------------------------------
    def query(self, promql: str) -> list[Sample]:
        """The answer of an instant query now: one :class:`Sample` per series of a vector, a
        single one with no labels for a scalar.

        Raises
        ------
        PrometheusServerError
            Prometheus refused the query (bad PromQL: its message says why) or answered a
            range vector (``x[1m]``: wrap it in a function).
        """
        data = self._api("/api/v1/query", {"query": promql})
        kind, result = data["resultType"], data["result"]
        if kind == "vector":
            return [Sample(item["metric"], float(item["value"][1])) for item in result]
        if kind == "scalar":
            return [Sample({}, float(result[1]))]
        raise PrometheusServerError(f"{promql!r} answers a {kind}, not an instant vector")

    def wait_for(
        self,
        promql: str,
        predicate: Callable[[list[Sample]], bool],
        *,
        timeout_s: float = 30.0,
        interval_s: float = 0.2,
    ) -> list[Sample]:
        """Ask ``promql`` again every ``interval_s`` until ``predicate`` holds for its answer,
        and return that answer; after ``timeout_s`` fail with the last answer and the state
        of every target."""
        last: list[list[Sample]] = [[]]

        def check() -> list[Sample] | None:
            last[0] = self.query(promql)
            return last[0] if predicate(last[0]) else None

        def failure() -> str:
            targets = "; ".join(
                f"{t.job} {t.scrape_url}: {t.health} {t.last_error!r}" for t in self.targets()
            )
            return (
                f"{promql!r} did not reach the expected answer within {timeout_s} s; "
                f"last answer {last[0]}; targets: {targets}"
            )

        return poll_until(check, timeout_s=timeout_s, interval_s=interval_s, failure=failure)

    def value(self, promql: str) -> float | None:
        """The value of a query that answers one series or a scalar; None when it answers
        nothing (no such series, or a comparison that filtered it out)."""
        samples = self.query(promql)
        if len(samples) > 1:
            raise PrometheusServerError(f"{promql!r} answers {len(samples)} series: {samples}")
        return samples[0].value if samples else None

    def targets(self) -> list[Target]:
        """The active scrape targets and their last scrape's outcome."""
        data = self._api("/api/v1/targets", {"state": "active"})
        return [
            Target(
                job=item["labels"].get("job", item.get("scrapePool", "")),
                scrape_url=item["scrapeUrl"],
                health=item["health"],
                last_error=item["lastError"],
                labels=item["labels"],
            )
            for item in data["activeTargets"]
        ]

    # -- internals ------------------------------------------------------------------------
    def _write_config(self) -> Path:
        assert self._root is not None
        scrape_configs = []
        for number, job in enumerate(self._jobs):
            token_file = None
            if job.token is not None:
                token_file = self._root / f"token-{number}"
                token_file.touch(mode=0o600)
                token_file.write_text(job.token)
            scrape_configs.append(job.to_config(token_file))
        interval = f"{round(self._interval_s * 1000)}ms"
        config = {
            "global": {"scrape_interval": interval, "scrape_timeout": interval},
            "scrape_configs": scrape_configs,
        }
        path = self._root / "prometheus.yml"
        # JSON is YAML (1.2, and in the flow style Prometheus' YAML parser reads), so the
        # standard library writes the configuration.
        path.write_text(json.dumps(config, indent=2))
        return path

    def _command(self, config: Path) -> list[str]:
        assert self._root is not None
        return [
            str(self._binary),
            f"--config.file={config}",
            f"--storage.tsdb.path={self._root / 'data'}",
            f"--web.listen-address=127.0.0.1:{self._port}",
            # Prometheus applies new targets at most every 5 s by default, so the first
            # scrape would wait up to 5 s (a hidden flag, kept since Prometheus 2).
            "--scrape.discovery-reload-interval=200ms",
        ]

    def _launch(self, config: Path) -> None:
        assert self._root is not None
        try:
            self.process = launch(self._command(config), self.log_path, cwd=self._root)
        except OSError as exc:
            raise PrometheusServerError(f"could not start {self._binary}: {exc}") from exc
        self._wait_until_ready()

    def _wait_until_ready(self) -> None:
        """Poll ``/-/ready`` until it answers 200 (TSDB open, configuration loaded); a server
        that exits ends the wait at once with its log."""
        ready_url = f"{self.url}/-/ready"
        last = ["no answer yet"]

        def ready() -> bool | None:
            assert self.process is not None
            if self.process.poll() is not None:
                raise self._start_error()
            try:
                with _direct.open(ready_url, timeout=1.0) as answer:
                    return True if answer.status == 200 else None
            except urllib.error.HTTPError as exc:  # 503 while starting
                last[0] = f"HTTP {exc.code}"
            except OSError as exc:  # refused before it listens
                last[0] = str(exc)
            return None

        def failure() -> str:
            return (
                f"Prometheus was not ready within {self._start_timeout_s:.0f} s ({last[0]} from "
                f"{ready_url}); {self.log_path} ends with:\n{self.log_tail()}"
            )

        try:
            poll_until(ready, timeout_s=self._start_timeout_s, interval_s=0.05, failure=failure)
        except AssertionError as exc:
            raise PrometheusServerError(str(exc)) from None

    def _start_error(self) -> PrometheusServerError:
        tail = self.log_tail()
        code = self.process.returncode if self.process is not None else None
        if "address already in use" in tail:
            return PrometheusServerError(
                f"Prometheus could not listen on 127.0.0.1:{self._port}: taken", port_taken=True
            )
        return PrometheusServerError(
            f"Prometheus exited with code {code} while starting; {self.log_path} ends with:\n{tail}"
        )

    def _api(self, path: str, params: Mapping[str, str]) -> Any:
        """The ``data`` of an API answer; an error answer raises with Prometheus' message."""
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with _direct.open(url, timeout=10.0) as answer:
                body = json.load(answer)
        except urllib.error.HTTPError as exc:  # 400/422/503 carry a JSON error body
            try:
                error = json.loads(exc.read())
                reason = f"{error['errorType']}: {error['error']}"
            except (ValueError, KeyError, TypeError):
                reason = f"HTTP {exc.code}"
            raise PrometheusServerError(f"Prometheus refused {dict(params)}: {reason}") from None
        if body.get("status") != "success":
            raise PrometheusServerError(f"Prometheus answered {body} to {url}")
        return body["data"]
