"""Read-your-writes trials against Kafka Streams topologies of several sub-topologies.

One trial: produce one input record (a *probe*) to an app of the interop jar's ``ShapesApp``,
take its offset as the bound (``{topic: {partition: offset}}``), read the follower's replica of
a store under that bound through one *surface* (``connect().query``, the
:class:`~spark_statestore.discovery.Router`, the Spark reader, the ``query`` command), and
check that the answer holds the probe's effect. A *stale* trial is an answer granted under
the bound that does not hold it: a wrong answer. A refusal (``NOT_UP_TO_BOUND`` after the
wait) is not stale, it is counted apart.

Each shape's probes are built so that the effect is known without asking the app: the
``regroup``, ``joined`` and ``chained`` counts of the run's own prefix and the ``windowed``
count of each probe's own window (by its producer timestamp) grow by one per probe; the
``fkjoined`` row of each new shipment appears. Background load (:class:`BackgroundLoad`)
writes other keys meanwhile.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from spark_statestore.bench.latency import distribution, shown
from spark_statestore.position import Position, PositionBound
from spark_statestore.query import KeyQuery, PrefixQuery, StateQueryRequest

__all__ = [
    "BackgroundLoad",
    "Probe",
    "ShapeProbes",
    "TrialResult",
    "Trials",
    "ask_cli",
    "ask_client",
    "ask_spark",
    "describe",
    "run_trials",
]

WINDOW_MS = 60_000
"""The size of the app's tumbling windows (``windowed``); a probe counts in its own."""


@dataclass(frozen=True, slots=True)
class Probe:
    """One input record and how to find its effect.

    Parameters
    ----------
    role
        The input topic's role (``orders``, ``shipments``, ...).
    key, value
        The record.
    timestamp
        Its timestamp (ms), or None for the producer's clock.
    lookup
        The store key to read (a key-value store), or the user key of a window store.
    expected
        What the answer must hold: a count at least this (counts), or this value.
    window
        The start of the probe's window (a window store), else None.
    """

    role: str
    key: bytes
    value: bytes
    timestamp: int | None
    lookup: bytes
    expected: int | bytes
    window: int | None = None


def _long(value: bytes) -> int:
    return int(struct.unpack(">q", value)[0])


class ShapeProbes:
    """The probes of one shape in one run (``tag`` keeps runs and shapes apart).

    Parameters
    ----------
    shape
        One of the interop app's shapes.
    tag
        A prefix no other key of the run starts with (letters and digits only).
    """

    def __init__(self, shape: str, tag: str) -> None:
        self.shape = shape
        self.tag = tag
        self._count = 0
        self._per_window: dict[int, int] = {}

    @property
    def window_store(self) -> bool:
        """Whether the store is a window store (read by user key and window)."""
        return self.shape == "windowed"

    def setup(self) -> list[tuple[str, bytes, bytes]]:
        """Records to produce (and let the app apply) before the first probe."""
        if self.shape == "joined":
            return [("labels", self.tag.encode(), b"PROBE")]
        if self.shape == "fkjoined":
            return [("customers", f"{self.tag}c".encode(), b"probe-region")]
        return []

    def next(self) -> Probe:
        """The next probe: its effect is the store's state once it has been applied."""
        self._count += 1
        n = self._count
        if self.shape == "fkjoined":
            shipment = f"{self.tag}s{n}".encode()
            customer = f"{self.tag}c"
            return Probe(
                "shipments",
                shipment,
                customer.encode(),
                None,
                shipment,
                f"probe-region/{customer}".encode(),
            )
        key = f"{self.tag}:{n}".encode()
        one = struct.pack(">q", 1)
        if not self.window_store:
            return Probe("orders", key, one, None, self.tag.encode(), n)
        # The producer's clock: the app drops records of windows its stream time has closed.
        timestamp = int(time.time() * 1000)
        window = timestamp // WINDOW_MS * WINDOW_MS
        self._per_window[window] = self._per_window.get(window, 0) + 1
        expected = self._per_window[window]
        return Probe("orders", key, one, timestamp, self.tag.encode(), expected, window)

    def in_changelog(self, probe: Probe, key: bytes, value: bytes | None) -> bool:
        """Whether the changelog record ``key``/``value`` is the probe's effect (the store's
        record after it was applied)."""
        if value is None:
            return False
        if isinstance(probe.expected, bytes):
            return key == probe.lookup and value == probe.expected
        if self.window_store:
            assert probe.window is not None
            window_key = probe.lookup + struct.pack(">q", probe.window)
            matches = key.startswith(window_key) and len(key) == len(window_key) + 4
        else:
            matches = key == probe.lookup
        return matches and len(value) == 8 and _long(value) == probe.expected

    def holds(self, probe: Probe, values: list[bytes]) -> bool:
        """Whether the values read for ``probe.lookup`` hold its effect."""
        if isinstance(probe.expected, bytes):
            return probe.expected in values
        return sum(_long(v) for v in values) >= probe.expected


@dataclass(slots=True)
class TrialResult:
    """One trial: the surface, how long the bounded read took, and what it found."""

    surface: str
    latency_ms: float
    stale: bool
    refused: str | None = None


@dataclass
class Trials:
    """The results of a series of trials."""

    results: list[TrialResult] = field(default_factory=list)

    def stale(self, surface: str | None = None) -> int:
        return sum(1 for r in self._of(surface) if r.stale)

    def refused(self, surface: str | None = None) -> int:
        return sum(1 for r in self._of(surface) if r.refused is not None)

    def count(self, surface: str | None = None) -> int:
        return len(self._of(surface))

    def latencies(self, surface: str | None = None) -> list[float]:
        return sorted(r.latency_ms for r in self._of(surface) if r.refused is None)

    def _of(self, surface: str | None) -> list[TrialResult]:
        return [r for r in self.results if surface is None or r.surface == surface]


Ask = Callable[[Probe, Position], "list[bytes] | str"]
"""A surface: the values read for ``probe.lookup`` under the bound, or a refusal's text."""


def _request(probes: ShapeProbes, probe: Probe, store: str, bound: Position) -> Any:
    query: Any
    if probes.window_store:
        assert probe.window is not None
        query = PrefixQuery.with_prefix(probe.lookup + struct.pack(">q", probe.window))
    else:
        query = KeyQuery.with_key(probe.lookup)
    return (
        StateQueryRequest.in_store(store)
        .with_query(query)
        .with_position_bound(PositionBound.at(bound))
    )


def ask_client(client: Any, probes: ShapeProbes, store: str, wait_s: float) -> Ask:
    """A surface of a client with ``query(request, wait_s=)``: a store client
    (``spark_statestore.connect``) or a :class:`~spark_statestore.discovery.Router`."""

    def ask(probe: Probe, bound: Position) -> list[bytes] | str:
        result = client.query(_request(probes, probe, store, bound), wait_s=wait_s)
        values: list[bytes] = []
        for partition_result in result.partition_results.values():
            if not partition_result.is_success:
                return f"{partition_result.failure_reason}: {partition_result.failure_message}"
            answer = partition_result.result
            if answer is None:
                continue
            if isinstance(answer, bytes):
                values.append(answer)
            else:
                values.extend(v for _, v in answer)
        return values

    return ask


def ask_spark(spark: Any, path: str, probes: ShapeProbes, wait_s: float) -> Ask:
    """The Spark snapshot reader with ``positionBound`` and ``positionBoundTimeoutMs``."""

    def ask(probe: Probe, bound: Position) -> list[bytes] | str:
        reader = (
            spark.read.format("spark_statestore")
            .option("keys", json.dumps([probe.lookup.decode()]))
            .option("keyFormat", "string")
            .option("positionBound", bound.to_json())
            .option("positionBoundTimeoutMs", str(int(wait_s * 1000)))
        )
        if probes.window_store:
            reader = reader.option("storeType", "window").option("windowSizeMs", str(WINDOW_MS))
        try:
            rows = reader.load(path).collect()
        except Exception as exc:  # Spark wraps the reader's error; its text says NOT_UP_TO_BOUND
            if "NOT_UP_TO_BOUND" in str(exc):
                return "NOT_UP_TO_BOUND"
            raise
        if probes.window_store:
            rows = [r for r in rows if _ms(r["window_start"]) == probe.window]
        return [bytes(r["value"]) for r in rows]

    return ask


def _ms(value: Any) -> int:
    return int(value.timestamp() * 1000) if hasattr(value, "timestamp") else int(value)


def ask_cli(path: str, probes: ShapeProbes, wait_s: float) -> Ask:
    """``spark-statestore query PATH --key K --position-bound B --position-bound-timeout S``
    (``--prefix`` of the user key for a window store), a process per trial."""

    def ask(probe: Probe, bound: Position) -> list[bytes] | str:
        if probes.window_store:
            assert probe.window is not None
            window = probe.lookup.hex() + struct.pack(">q", probe.window).hex()
            lookup = ["--prefix", window]
        else:
            lookup = ["--key", probe.lookup.decode()]
        command = [
            sys.executable,
            "-m",
            "spark_statestore.cli",
            "query",
            path,
            *lookup,
            "--key-format",
            "binary" if probes.window_store else "string",
            "--value-format",
            "binary",
            "--json",
            "--position-bound",
            bound.to_json(),
            "--position-bound-timeout",
            str(wait_s),
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=wait_s + 60)
        if done.returncode == 3:
            return done.stderr.strip() or "NOT_UP_TO_BOUND"
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")
        values = []
        for line in done.stdout.splitlines():
            values.append(bytes.fromhex(json.loads(line)["value"]))
        return values

    return ask


class BackgroundLoad:
    """Other keys written while the trials run, from a thread, until :meth:`stop`.

    Parameters
    ----------
    produce
        ``produce(role, key, value)``: writes one record (the caller's producer, flushed by
        this thread every ``batch`` records).
    flush
        Flushes the producer.
    per_second
        Records per second at most.
    """

    def __init__(
        self,
        produce: Callable[[str, bytes, bytes | None], None],
        flush: Callable[[], object],
        *,
        per_second: float = 500.0,
        batch: int = 25,
    ) -> None:
        self._produce = produce
        self._flush = flush
        self._interval = batch / per_second
        self._batch = batch
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="background-load", daemon=True)
        self.written = 0
        self.error: BaseException | None = None

    def __enter__(self) -> BackgroundLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise RuntimeError("the background load failed") from self.error

    def _run(self) -> None:
        n = 0
        try:
            while not self._stop.wait(self._interval):
                for _ in range(self._batch):
                    n += 1
                    region = f"bg{n % 7}"
                    self._produce("orders", f"{region}:c{n % 50}".encode(), struct.pack(">q", 1))
                    if n % 5 == 0:
                        self._produce(
                            "shipments", f"bgs{n % 300}".encode(), f"bgc{n % 40}".encode()
                        )
                    if n % 11 == 0:
                        self._produce("customers", f"bgc{n % 40}".encode(), region.encode())
                self._flush()
                self.written = n
        except BaseException as exc:  # reported by stop()
            self.error = exc


def run_trials(
    ask: Ask,
    surface: str,
    probes: ShapeProbes,
    produce: Callable[[Probe], tuple[str, int, int]],
    count: int,
    trials: Trials,
    *,
    until_stale: bool = False,
) -> None:
    """``count`` trials through ``ask``; ``produce(probe)`` writes the probe, waits for its
    delivery and returns ``(topic, partition, offset)``. ``until_stale``: stop at the
    first stale answer (the test of the test, on a follower known to grant early)."""
    for _ in range(count):
        probe = probes.next()
        topic, partition, offset = produce(probe)
        bound = Position.from_map({topic: {partition: offset}})
        started = time.perf_counter()
        answer = ask(probe, bound)
        latency = (time.perf_counter() - started) * 1000
        if isinstance(answer, str):
            trials.results.append(TrialResult(surface, latency, False, answer))
            continue
        stale = not probes.holds(probe, answer)
        trials.results.append(TrialResult(surface, latency, stale))
        if stale and until_stale:
            return


def describe(trials: Trials) -> str:
    """One line per surface: trials, stale, refused, p50/p99/max of the answered ones."""
    lines = []
    names = sorted({r.surface for r in trials.results})
    for name in names:
        latencies = trials.latencies(name)
        spread = shown(distribution(latencies)) if latencies else "none answered"
        lines.append(
            f"{name}: {trials.count(name)} trials, {trials.stale(name)} stale, "
            f"{trials.refused(name)} refused; {spread}"
        )
    return "\n".join(lines)
