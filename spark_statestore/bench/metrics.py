"""The ``metrics`` suite: what serving metrics costs the paths they watch, with a scraper
scraping the endpoint every :data:`SCRAPE_INTERVAL_S` seconds during each timed run.

Both rows run the same path with and without metrics in one run, interleaved, on the
workloads of the suites they come from; target :data:`METRICS_TARGET` (DESIGN §13: a metric
costs nothing measurable on the hot paths).

``restore_metrics``
    Records/s of the ``follower`` suite's restore (a
    :class:`~spark_statestore.follower.Follower` restoring a fresh store to RUNNING from a
    real broker's changelog) with its :class:`~spark_statestore.metrics.FollowerMetrics` and
    :class:`~spark_statestore.metrics.StoreMetrics` served by a
    :class:`~spark_statestore.metrics.MetricsServer` in the same process and scraped, against
    the same restore without them. A scrape asks Kafka for the end offsets (at most every
    5 s), as Prometheus' would.
``sink_metrics``
    Rows/s of the ``sink`` suite's stream into ``writeStream.format("spark_statestore")``
    with a changelog and ``serve=true`` and ``metricsPort=0`` (the sink's store server serves
    its commits', store's and Flight server's metrics; the scraper finds the endpoint in the
    server's record once the first commit started it), against the same runs without
    ``metricsPort``. Each run with metrics is checked: the endpoint reported every
    micro-batch committed.

The scraper runs in the bench's process and reads each answer whole without parsing it (a
real Prometheus parses in its own process); how many scrapes each run made is a parameter.
Size: the ``follower`` suite's and the ``sink`` suite's (``--records``, ``--quick``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

from spark_statestore.bench.errors import BenchError
from spark_statestore.bench.follower import (
    PARTITIONS,
    TOPIC,
    changelog_parameters,
    follower_records,
    follower_run,
    produce_changelog,
)
from spark_statestore.bench.measure import BenchOptions, Measurement, interleave
from spark_statestore.bench.sink import (
    APPLICATION_ID,
    CHANGELOG_PARTITIONS,
    QUICK_BATCHES,
    WARMUP_RECORDS,
    Changelogs,
    sink_records,
    sink_run,
    write_stream,
)
from spark_statestore.bench.spark import spark_session
from spark_statestore.connectors.kafka.local.child import broker_child

__all__ = ["METRICS_TARGET", "SCRAPE_INTERVAL_S", "SUITE", "Scraper", "run_metrics_suite"]

_log = logging.getLogger(__name__)

SUITE = "metrics"
METRICS_TARGET = 0.97
"""A path with its metrics served and scraped should keep 97 % of its rate without them."""
SCRAPE_INTERVAL_S = 1.0
"""How often the scraper scrapes (Prometheus' default is every 15 s: this is 15 times
harsher)."""
_FIND_INTERVAL_S = 0.1
_BATCHES = 10


class Scraper:
    """A thread scraping ``url()`` every ``interval_s`` seconds while the block runs (the
    first time as soon as ``url()`` names an endpoint, None until then).

    Attributes
    ----------
    scrapes
        How many scrapes answered.
    """

    def __init__(self, url: Callable[[], str | None], interval_s: float = SCRAPE_INTERVAL_S):
        self._url = url
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-scraper", daemon=True)
        self._failure: BaseException | None = None
        self.scrapes = 0
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._failure is not None and exc[0] is None:
            raise BenchError(
                f"bench suite {SUITE}: a scrape failed: {self._failure}"
            ) from self._failure

    def scrape(self, url: str) -> str:
        """One scrape's text."""
        with self._opener.open(url, timeout=30) as answer:
            text: str = answer.read().decode()
        return text

    def _run(self) -> None:
        # A first look even when the block is over at once: a known endpoint is scraped.
        while True:
            url = self._url()
            if url is not None:
                try:
                    self.scrape(url)
                except OSError as exc:
                    self._failure = exc
                    return
                self.scrapes += 1
            if self._stop.wait(_FIND_INTERVAL_S if url is None else self._interval_s):
                return


def _samples(text: str, name: str) -> float:
    """The sum of the samples called ``name`` in a scrape's text (parsed by the Prometheus
    client's own parser)."""
    from prometheus_client.parser import text_string_to_metric_families

    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    )


@contextlib.contextmanager
def _follower_scraped(scrapes: list[int], follower: Any) -> Iterator[None]:
    """The follower's metrics served and scraped while the block runs."""
    from prometheus_client.registry import CollectorRegistry

    from spark_statestore.metrics import FollowerMetrics, MetricsServer, StoreMetrics

    registry = CollectorRegistry()
    FollowerMetrics(follower, registry)
    StoreMetrics(follower.store, registry)
    with MetricsServer(registry) as server:
        with Scraper(lambda: server.url) as scraper:
            yield
        applied = _samples(
            scraper.scrape(server.url), "spark_statestore_follower_records_applied_total"
        )
    if applied != follower.records_applied:
        raise BenchError(
            f"bench suite {SUITE}: the follower's endpoint reported {applied:,.0f} records "
            f"applied, the follower {follower.records_applied:,}"
        )
    scrapes.append(scraper.scrapes)


def _sink_metrics_url(output: str) -> str | None:
    """The metrics URL in the record of the sink's store server of ``output``, once it runs."""
    from spark_statestore.connectors.spark.leader.protocol import read_server_record

    record = read_server_record(output)
    return None if record is None else record.metrics_url


@contextlib.contextmanager
def _sink_scraped(scrapes: list[int], batches: int, output: str) -> Iterator[None]:
    """The sink's store server's metrics scraped while the block runs; then checked: it
    reported ``batches`` micro-batches committed."""
    with Scraper(partial(_sink_metrics_url, output)) as scraper:
        yield
    url = _sink_metrics_url(output)
    if url is None:
        raise BenchError(f"bench suite {SUITE}: the sink's store server recorded no metrics URL")
    committed = _samples(scraper.scrape(url), "spark_statestore_sink_batches_committed_total")
    if committed != batches:
        raise BenchError(
            f"bench suite {SUITE}: the sink's endpoint reported {committed:.0f} batches "
            f"committed, Spark committed {batches}"
        )
    scrapes.append(scraper.scrapes)


def run_metrics_suite(options: BenchOptions) -> list[Measurement]:
    """Measure the follower's restore and the served sink with and without their metrics.

    Parameters
    ----------
    options
        Rounds and sizes (as the ``follower`` and ``sink`` suites read them).

    Returns
    -------
    list of Measurement
        ``restore_metrics`` and ``sink_metrics``, target :data:`METRICS_TARGET`.

    Raises
    ------
    BenchError
        If the broker or Spark does not start, a run fails its checks, or an endpoint did not
        report what the run did.
    """
    rounds = options.rounds
    batches = QUICK_BATCHES if options.quick else _BATCHES
    topics = [f"{APPLICATION_ID}-metrics-{n}-changelog" for n in range(2 * (rounds + 1))]
    specs = [f"{TOPIC}:{PARTITIONS}"] + [
        spec
        for topic in topics
        for spec in (f"{topic}:{CHANGELOG_PARTITIONS}", f"{topic}-progress:1")
    ]
    follower_scrapes: list[int] = []
    sink_scrapes: list[int] = []
    with (
        tempfile.TemporaryDirectory(prefix="spark-statestore-bench-") as root,
        broker_child(Path(root) / "broker.log", specs, who=f"bench suite {SUITE}") as bootstrap,
    ):
        changelog = produce_changelog(
            bootstrap, follower_records(options), options.batch_records, suite=SUITE
        )
        restore = interleave(
            {
                "metrics": partial(
                    follower_run,
                    root,
                    changelog,
                    during=partial(_follower_scraped, follower_scrapes),
                ),
                "plain": partial(follower_run, root, changelog),
            },
            rounds,
        )
        stream = write_stream(os.path.join(root, "input"), sink_records(options), batches)
        warmup = write_stream(
            os.path.join(root, "warmup"), min(WARMUP_RECORDS, stream.records), QUICK_BATCHES
        )
        start = time.perf_counter()
        with spark_session() as (spark, startup_s, _started):
            _log.info("bench suite %s: Spark session ready in %.1f s", SUITE, startup_s)
            changelogs = Changelogs(bootstrap, topics)

            def sides(data: Any, scrapes: list[int]) -> dict[str, Callable[[], float]]:
                run = partial(sink_run, spark, root, data, "store", changelogs, serve=True)
                return {
                    "metrics": partial(
                        run,
                        options={"metricsPort": "0"},
                        during=partial(_sink_scraped, scrapes, data.batches),
                    ),
                    "plain": run,
                }

            for warm in sides(warmup, []).values():
                warm()
            sink = interleave(sides(stream, sink_scrapes), rounds)
        _log.info("bench suite %s: sink runs took %.1f s", SUITE, time.perf_counter() - start)
    scraping = {"scrape_interval_s": SCRAPE_INTERVAL_S, "rounds": rounds}
    every = f"scraped every {SCRAPE_INTERVAL_S:g} s"
    restore_parameters = changelog_parameters(changelog, options)
    sink_parameters = {
        "records": stream.records,
        "distinct_keys": stream.keys,
        "micro_batches": stream.batches,
        "changelog_partitions": CHANGELOG_PARTITIONS,
        "spark_startup_s": round(startup_s, 3),
        "timed": "writeStream.start() to processAllAvailable(), fresh checkpoint, store and "
        "changelog; the server started by the first commit",
    }
    return [
        _measurement(
            ("restore_metrics", "records/s"),
            f"Follower restore with its metrics served and {every}",
            "the same restore without metrics",
            restore,
            {**restore_parameters, **scraping, "scrapes_per_run": follower_scrapes},
        ),
        _measurement(
            ("sink_metrics", "rows/s"),
            "writeStream.format('spark_statestore') with a changelog, serve=true and "
            f"metricsPort=0, {every}",
            "the same without metricsPort",
            sink,
            {**sink_parameters, **scraping, "scrapes_per_run": sink_scrapes},
        ),
    ]


def _measurement(
    what: tuple[str, str],
    candidate: str,
    baseline: str,
    rates: dict[str, list[float]],
    parameters: dict[str, Any],
) -> Measurement:
    """The row ``what`` (name, unit): the ``metrics`` runs against the ``plain`` ones."""
    name, unit = what
    return Measurement(
        suite=SUITE,
        name=name,
        unit=unit,
        candidate=candidate,
        baseline=baseline,
        candidate_rates=tuple(rates["metrics"]),
        baseline_rates=tuple(rates["plain"]),
        target=METRICS_TARGET,
        parameters=parameters,
    )
