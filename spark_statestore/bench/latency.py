"""The ``latency`` suite: how soon a follower sees a leader's commit, and its memory in a restore.

Setup (not timed): a real Apache Kafka broker (KRaft, a JVM) runs through
``spark-statestore broker`` in a child process, with two 8-partition changelogs: an empty one
for ``commit_to_visible``, and the ``follower`` suite's, filled by that suite's writer (16-byte
keys, 32-byte values, ``v``/``c`` position headers, lz4, ``batch_records`` records per
transaction; checked to start at offset 0) once the latencies are measured, on an idle broker.

``commit_to_visible``
    A leader publishes single changes (16-byte key, 32-byte value, ``v``/``c`` headers,
    partition ``i % 8``) one after the other, each in its own transaction of a transactional
    confluent-kafka ``Producer``, as a Kafka Streams application with exactly-once does. Two
    observers watch the same commits at the same time: a
    :class:`~spark_statestore.follower.Follower` reading through
    :class:`~spark_statestore.connectors.kafka.follower.source.KafkaChangelogSource` into a
    fresh store on its background thread (``start()``, RUNNING before the first change,
    default chunk and poll settings), and, as the raw limit, a bare read_committed
    ``Consumer`` (the ``follower`` suite's bare-loop settings, every partition assigned,
    ``poll()`` with a :data:`RAW_POLL_TIMEOUT_S` timeout on its own thread). Timed per change
    from ``commit_transaction()`` returning: for the follower, until ``Follower.wait_for``
    returns once the applied offset of the change's partition is past the record's offset
    (from the delivery report), then a ``Store.get`` of the key must read the value; for the
    raw consumer, until its ``poll()`` returned the record. :func:`latency_changes` changes
    are timed, after :data:`WARMUP_CHANGES` untimed ones (a fresh broker's first few dozen
    commits are slower, about 2-3x here, while its JIT warms up). Reported as changes/s = 1000 /
    p50 ms (so the ratio is raw p50 / our p50); p50, p99 and max (nearest rank) of both
    sides, our p50 / raw p50 and the leader's begin-to-commit time are parameters. The goal,
    p50 <= :data:`GOAL_P50_MS` ms and p99 <= :data:`GOAL_P99_MS` ms, is absolute, not a
    ratio: the candidate's description states it and the parameter ``goal_met`` says
    whether the run reached it.
``restore_memory``
    Each round runs, in a fresh ``python -c`` child process, either the ``follower`` suite's
    follower restore (``start_restore`` until RUNNING into a fresh store, stepped on the
    main thread, checked afterwards) or its bare read_committed ``consume()`` +
    ``WriteBatch`` loop over a :func:`restore_records`-record changelog, and reads ``VmHWM``
    (peak RSS) from its ``/proc/<pid>/status`` at the end (``VmRSS`` before the restore, as
    the interpreter's own share). Reported as records/s (timed inside the child, as in the
    ``follower`` suite); each side's peak RSS in MiB (the highest of its rounds) is a
    parameter. Goal: at most :data:`GOAL_PEAK_RSS_MIB` MiB for ours at the bare loop's
    rate, stated and checked as above.

Neither measurement has a ratio target.

Sizes: :data:`DEFAULT_CHANGES` changes (:data:`QUICK_CHANGES` with ``--quick``) and
:data:`DEFAULT_RESTORE_RECORDS` records (:data:`QUICK_RESTORE_RECORDS` with ``--quick``)
unless ``--records`` says otherwise; since
:class:`~spark_statestore.bench.measure.BenchOptions` does not record whether ``--records``
was given, a ``records`` equal to the run's default (quick or not) counts as "not given".
``rounds`` applies to ``restore_memory`` only: the latencies are one run of every change.

Why one module of over 500 lines: its two measurements share one broker, one changelog
and one set of bare-client baselines; a third of it is this description.
"""

from __future__ import annotations

import logging
import math
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from spark_statestore.bench.errors import BenchError
from spark_statestore.bench.follower import (
    BROKERS,
    KEY_FORMAT,
    PARTITIONS,
    RESTORE_DEADLINE_S,
    TOPIC,
    VALUE_FORMAT,
    Changelog,
    bare_run,
    c_headers,
    changelog_parameters,
    consumer_settings,
    follower_run,
    produce_changelog,
)
from spark_statestore.bench.measure import BenchOptions, Measurement, interleave
from spark_statestore.connectors.kafka.local.child import broker_child
from spark_statestore.store import Role, Store, StoreOptions, StoreSpec

if TYPE_CHECKING:
    from spark_statestore.follower import Follower

_log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_CHANGES",
    "DEFAULT_RESTORE_RECORDS",
    "GOAL_P50_MS",
    "GOAL_P99_MS",
    "GOAL_PEAK_RSS_MIB",
    "LATENCY_TOPIC",
    "QUICK_CHANGES",
    "QUICK_RESTORE_RECORDS",
    "RAW_POLL_TIMEOUT_S",
    "SUITE",
    "WARMUP_CHANGES",
    "Footprint",
    "RawObserver",
    "distribution",
    "latency_changes",
    "percentile",
    "restore_in_child",
    "restore_records",
    "run_latency_suite",
    "shown",
]

SUITE = "latency"
LATENCY_TOPIC = "bench-latency-changelog"
DEFAULT_CHANGES = 300
"""Timed changes of ``commit_to_visible`` (:data:`QUICK_CHANGES` with ``--quick``)."""
QUICK_CHANGES = 20
DEFAULT_RESTORE_RECORDS = 3_000_000
"""Changelog records of ``restore_memory`` without ``--records``."""
QUICK_RESTORE_RECORDS = 20_000
GOAL_P50_MS = 50.0
GOAL_P99_MS = 200.0
GOAL_PEAK_RSS_MIB = 300.0
WARMUP_CHANGES = 64
"""Untimed changes before the timed ones, 8 per partition."""
RAW_POLL_TIMEOUT_S = 0.1
"""The raw consumer's ``poll()`` timeout; a poll returns at the first record regardless."""
_VISIBLE_TIMEOUT_S = 30.0
_COMMIT_TIMEOUT_S = 30.0
_CHILD = (
    "import sys\n"
    "from spark_statestore.bench.latency import _restore_in_child\n"
    "_restore_in_child(sys.stdin.buffer, sys.stdout.buffer)\n"
)
_SIDES: Mapping[str, Callable[[str, Changelog, str | None], float]] = {
    "follower": follower_run,
    "bare": bare_run,
}


def latency_changes(options: BenchOptions) -> int:
    """Timed changes of ``commit_to_visible``: :data:`QUICK_CHANGES` with ``--quick``, else
    :data:`DEFAULT_CHANGES`."""
    return QUICK_CHANGES if options.quick else DEFAULT_CHANGES


def restore_records(options: BenchOptions) -> int:
    """Changelog records of ``restore_memory``: ``options.records`` when ``--records`` chose
    it, else :data:`QUICK_RESTORE_RECORDS` (``--quick``) or :data:`DEFAULT_RESTORE_RECORDS`."""
    if options.records != BenchOptions.for_run(quick=options.quick).records:
        return options.records
    return QUICK_RESTORE_RECORDS if options.quick else DEFAULT_RESTORE_RECORDS


def run_latency_suite(options: BenchOptions) -> list[Measurement]:
    """Measure commit-to-visible latency against a bare consumer, and the peak memory of a
    restore against the bare consume + WriteBatch loop.

    Parameters
    ----------
    options
        ``quick`` (see :func:`latency_changes`), ``records`` (see :func:`restore_records`), rounds
        and ``batch_records`` (records per transaction of the restored changelog).

    Returns
    -------
    list of Measurement
        ``commit_to_visible`` and ``restore_memory``, without ratio targets.

    Raises
    ------
    BenchError
        If the broker does not start, a change is not visible within 30 s, a restore did not
        restore every record, or a child process failed.
    """
    records = restore_records(options)
    footprints: dict[str, list[Footprint]] = {side: [] for side in _SIDES}
    topics = [f"{LATENCY_TOPIC}:{PARTITIONS}", f"{TOPIC}:{PARTITIONS}"]
    with (
        tempfile.TemporaryDirectory(prefix="spark-statestore-bench-") as root,
        broker_child(
            Path(root) / "broker.log", topics, brokers=BROKERS, who=f"bench suite {SUITE}"
        ) as bootstrap,
    ):
        latencies = _measure_latencies(root, bootstrap, latency_changes(options))
        changelog = produce_changelog(bootstrap, records, options.batch_records)
        rates = interleave(
            {
                side: partial(restore_in_child, side, root, changelog, footprints[side])
                for side in _SIDES
            },
            options.rounds,
        )
    return [
        _latency_measurement(latencies),
        _memory_measurement(changelog, options, rates, footprints),
    ]


# -- commit_to_visible --------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Latencies:
    """Per timed change, in commit order: milliseconds from ``commit_transaction()``
    returning to visibility in the follower's store and to the raw consumer's poll, and
    of the leader's transaction itself."""

    follower_ms: tuple[float, ...]
    raw_ms: tuple[float, ...]
    commit_ms: tuple[float, ...]
    warmup: int
    poll_timeout_s: float
    chunk_records: int


class RawObserver:
    """A bare read_committed consumer of ``topic`` polling on its own thread, noting when each
    record arrives, by ``(partition, offset)`` or, with ``by_key``, by its key; from the
    start of the topic, or with ``from_end`` from the end offsets it reads first."""

    def __init__(
        self,
        bootstrap: str,
        topic: str = LATENCY_TOPIC,
        *,
        by_key: bool = False,
        from_end: bool = False,
        suite: str = SUITE,
    ) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self._topic = topic
        self._by_key = by_key
        self._suite = suite
        self._consumer = Consumer(consumer_settings(bootstrap, "latency-raw"))
        starts = {
            p: self._consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            if from_end
            else 0
            for p in range(PARTITIONS)
        }
        self._consumer.assign([TopicPartition(topic, p, o) for p, o in starts.items()])
        self._arrivals: dict[Any, float] = {}
        self._arrived = threading.Condition()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="bench-latency-raw", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from confluent_kafka import KafkaError

        try:
            while not self._stop.is_set():
                message = self._consumer.poll(RAW_POLL_TIMEOUT_S)
                if message is None:
                    continue
                at = time.perf_counter()
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise BenchError(f"bench suite {self._suite}: the raw consumer failed: {error}")
                where = message.key() if self._by_key else (message.partition(), message.offset())
                with self._arrived:
                    self._arrivals[where] = at
                    self._arrived.notify_all()
        except BaseException as exc:  # re-raised by wait_arrival in the measuring thread
            self._error = exc
            with self._arrived:
                self._arrived.notify_all()

    def wait_arrival(self, where: Any, timeout_s: float) -> float:
        """When (``perf_counter``) the record at ``where`` (``(partition, offset)``, or its
        key) arrived."""
        with self._arrived:
            self._arrived.wait_for(
                lambda: self._error is not None or where in self._arrivals, timeout_s
            )
            if self._error is not None:
                raise BenchError(
                    f"bench suite {self._suite}: the raw consumer failed"
                ) from self._error
            if where not in self._arrivals:
                raise BenchError(
                    f"bench suite {self._suite}: the raw consumer did not see {where!r} of "
                    f"{self._topic} within {timeout_s:.0f} s of its commit"
                )
            return self._arrivals.pop(where)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(RAW_POLL_TIMEOUT_S * 50)
        self._consumer.close()


def _measure_latencies(root: str, bootstrap: str, timed_changes: int) -> _Latencies:
    """Publish :data:`WARMUP_CHANGES` warm-up changes and ``timed_changes`` timed ones, one
    transaction each, and time when the follower and the raw consumer see each."""
    from spark_statestore.connectors.kafka.follower.source import KafkaChangelogSource
    from spark_statestore.follower import Follower, FollowerState

    spec = StoreSpec(Role.FOLLOWER, LATENCY_TOPIC, PARTITIONS)
    path = os.path.join(root, "latency-follower")
    with Store.open(path, spec, purpose="spark-statestore bench") as store:
        source = KafkaChangelogSource(bootstrap, LATENCY_TOPIC)
        try:
            follower = Follower(store, source)  # what a user gets: default chunk and poll
        except BaseException:
            source.close()
            raise
        try:
            follower.start()
            follower.wait_running(_VISIBLE_TIMEOUT_S)
            if follower.state is not FollowerState.RUNNING:
                raise BenchError(
                    f"bench suite {SUITE}: the follower of the empty {LATENCY_TOPIC} is "
                    f"{follower.state.value}, not RUNNING, after {_VISIBLE_TIMEOUT_S:.0f} s"
                )
            raw = RawObserver(bootstrap)
            try:
                samples = _publish_and_observe(
                    bootstrap, store, follower, raw, WARMUP_CHANGES + timed_changes
                )
            finally:
                raw.close()
        finally:
            follower.stop()
        poll_timeout_s, chunk_records = follower.poll_timeout_s, follower.chunk_records
    timed_samples = samples[WARMUP_CHANGES:]
    return _Latencies(
        follower_ms=tuple(s[0] for s in timed_samples),
        raw_ms=tuple(s[1] for s in timed_samples),
        commit_ms=tuple(s[2] for s in timed_samples),
        warmup=WARMUP_CHANGES,
        poll_timeout_s=poll_timeout_s,
        chunk_records=chunk_records,
    )


def _publish_and_observe(
    bootstrap: str, store: Store, follower: Follower, raw: RawObserver, count: int
) -> list[tuple[float, float, float]]:
    """``count`` changes, one transaction each: ``(follower ms, raw ms, commit ms)`` each."""
    from confluent_kafka import KafkaException, Producer

    # commit_transaction() flushes whatever linger.ms holds back, so linger costs nothing.
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"spark-statestore-bench-{LATENCY_TOPIC}",
            "compression.type": "lz4",
        }
    )
    headers = c_headers()
    delivered: list[tuple[Any, Any]] = []
    samples = []
    try:
        producer.init_transactions(_COMMIT_TIMEOUT_S)
        for i in range(count):
            partition = i % PARTITIONS
            key, value = KEY_FORMAT % i, VALUE_FORMAT % i
            delivered.clear()
            begin = time.perf_counter()
            producer.begin_transaction()
            producer.produce(
                LATENCY_TOPIC,
                key=key,
                value=value,
                partition=partition,
                timestamp=int(time.time() * 1000),
                headers=[("v", b"\x00"), ("c", headers[partition](i // PARTITIONS))],
                on_delivery=lambda err, msg: delivered.append((err, msg)),
            )
            producer.commit_transaction(_COMMIT_TIMEOUT_S)
            committed = time.perf_counter()
            offset = _delivered_offset(delivered, partition)
            if not follower.wait_for(partial(_past, partition, offset), _VISIBLE_TIMEOUT_S):
                raise BenchError(
                    f"bench suite {SUITE}: the follower did not apply {LATENCY_TOPIC}-"
                    f"{partition} offset {offset} within {_VISIBLE_TIMEOUT_S:.0f} s of its "
                    f"commit (lags {follower.lags()})"
                )
            visible = time.perf_counter()
            found = store.get(key)
            if found != value:
                raise BenchError(
                    f"bench suite {SUITE}: the follower applied {LATENCY_TOPIC}-{partition} "
                    f"offset {offset} but key {key!r} reads {found!r}, expected {value!r}"
                )
            arrived = raw.wait_arrival((partition, offset), _VISIBLE_TIMEOUT_S)
            samples.append(
                (
                    (visible - committed) * 1000,
                    (arrived - committed) * 1000,
                    (committed - begin) * 1000,
                )
            )
    except KafkaException as exc:
        raise BenchError(
            f"bench suite {SUITE}: the leader's transaction to {LATENCY_TOPIC} failed: {exc}"
        ) from exc
    return samples


def _delivered_offset(delivered: list[tuple[Any, Any]], partition: int) -> int:
    """The offset of the committed transaction's one record, from its delivery report
    (``commit_transaction()`` flushes, which serves it)."""
    if len(delivered) != 1 or delivered[0][0] is not None:
        raise BenchError(
            f"bench suite {SUITE}: the change to {LATENCY_TOPIC}-{partition} was committed "
            f"without a clean delivery report: {delivered}"
        )
    offset: int = delivered[0][1].offset()
    return offset


def _past(partition: int, offset: int, applied: Mapping[int, int]) -> bool:
    return applied.get(partition, 0) > offset


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (``0 < q <= 1``) of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def distribution(values: Sequence[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(values, 0.50), 2),
        "p99_ms": round(percentile(values, 0.99), 2),
        "max_ms": round(max(values), 2),
    }


def shown(d: Mapping[str, float]) -> str:
    """A :func:`distribution` in words: ``p50 3.1 ms, p99 9.8 ms, max 12.0 ms``."""
    return f"p50 {d['p50_ms']:.1f} ms, p99 {d['p99_ms']:.1f} ms, max {d['max_ms']:.1f} ms"


def _latency_measurement(latencies: _Latencies) -> Measurement:
    ours, raw = distribution(latencies.follower_ms), distribution(latencies.raw_ms)
    goal = f"goal p50 <= {GOAL_P50_MS:.0f} ms, p99 <= {GOAL_P99_MS:.0f} ms"

    # The percentiles are taken from the unrounded samples, the rates likewise.
    our_p50 = percentile(latencies.follower_ms, 0.50)
    raw_p50 = percentile(latencies.raw_ms, 0.50)
    return Measurement(
        suite=SUITE,
        name="commit_to_visible",
        unit="changes/s (1000 / p50 ms)",
        candidate=f"leader commit to visible in a RUNNING Follower's store: {shown(ours)} ({goal})",
        baseline=f"leader commit to a bare read_committed Consumer.poll(): {shown(raw)}",
        candidate_rates=(1000 / our_p50,),
        baseline_rates=(1000 / raw_p50,),
        target=None,
        parameters={
            "changes": len(latencies.follower_ms),
            "warmup_changes": latencies.warmup,
            "partitions": PARTITIONS,
            "key_bytes": len(KEY_FORMAT % 0),
            "value_bytes": len(VALUE_FORMAT % 0),
            "headers": "v, c (padded like Kafka Streams)",
            "transactions": "one per change, transactional confluent-kafka Producer, lz4",
            "timed": "commit_transaction() returning to Follower.wait_for() returning (then "
            "a Store.get confirms) / to the raw consumer's poll() returning the record",
            "observers": "follower and raw consumer watch the same commits at the same time",
            "percentiles": "nearest rank",
            **{f"candidate_{k}": v for k, v in ours.items()},
            **{f"baseline_{k}": v for k, v in raw.items()},
            "p50_over_raw": round(our_p50 / raw_p50, 3),
            "leader_commit_p50_ms": round(percentile(latencies.commit_ms, 0.50), 2),
            "goal_p50_ms": GOAL_P50_MS,
            "goal_p99_ms": GOAL_P99_MS,
            "goal_met": our_p50 <= GOAL_P50_MS
            and percentile(latencies.follower_ms, 0.99) <= GOAL_P99_MS,
            "follower_poll_timeout_s": latencies.poll_timeout_s,
            "follower_chunk_records": latencies.chunk_records,
            "raw_poll_timeout_s": RAW_POLL_TIMEOUT_S,
            "sync": StoreOptions().sync,
            "brokers": BROKERS,
            "broker": "Apache Kafka (KRaft, one local node), child process",
            "rounds": 1,
        },
    )


# -- restore_memory -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Footprint:
    """What one restore in a child process measured."""

    rate: float
    """Records/s."""
    start_rss_kib: int
    """``VmRSS`` before the restore (the interpreter and its imports)."""
    peak_rss_kib: int
    """``VmHWM`` at the end of the restore."""

    @property
    def start_rss_mib(self) -> float:
        """:attr:`start_rss_kib` in MiB, to a tenth."""
        return round(self.start_rss_kib / 1024, 1)

    @property
    def peak_rss_mib(self) -> float:
        """:attr:`peak_rss_kib` in MiB, to a tenth."""
        return round(self.peak_rss_kib / 1024, 1)


def restore_in_child(
    side: str,
    root: str,
    changelog: Changelog,
    footprints: list[Footprint],
    keep: str | None = None,
    *,
    suite: str = SUITE,
) -> float:
    """Run ``side``'s restore (``"follower"`` or ``"bare"``) in a fresh child process; note
    its footprint, return its rate. ``keep``: restore into that new directory and keep it."""
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=pickle.dumps((side, root, changelog, keep)),
        capture_output=True,
        timeout=RESTORE_DEADLINE_S + 60,
    )
    if proc.returncode != 0:
        raise BenchError(
            f"bench suite {suite}: the {side} restore in a child process exited "
            f"{proc.returncode}: {proc.stderr.decode(errors='replace').strip()[-2000:]}"
        )
    footprint = pickle.loads(proc.stdout)
    if not isinstance(footprint, Footprint):
        raise BenchError(f"bench suite {suite}: the {side} child returned {footprint!r}")
    footprints.append(footprint)
    _log.info(
        "bench suite %s: %s restore %.0f records/s, peak RSS %.0f MiB",
        suite,
        side,
        footprint.rate,
        footprint.peak_rss_kib / 1024,
    )
    return footprint.rate


def _restore_in_child(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """The child's side of :func:`restore_in_child`: read ``(side, root, changelog, keep)``,
    restore, write a :class:`Footprint`."""
    side, root, changelog, keep = pickle.load(stdin)
    start = _status_kib("VmRSS")
    rate = _SIDES[side](root, changelog, keep)
    pickle.dump(Footprint(rate, start, _status_kib("VmHWM")), stdout)
    stdout.flush()


def _status_kib(field: str) -> int:
    """A ``kB`` field of this process's ``/proc/<pid>/status``."""
    path = f"/proc/{os.getpid()}/status"
    try:
        with open(path) as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1])
    except OSError as exc:
        raise BenchError(f"bench suite {SUITE}: cannot read {path} (Linux only): {exc}") from exc
    raise BenchError(f"bench suite {SUITE}: {path} has no {field}")


def _memory_measurement(
    changelog: Changelog,
    options: BenchOptions,
    rates: Mapping[str, list[float]],
    footprints: Mapping[str, list[Footprint]],
) -> Measurement:
    peak = {side: max(f.peak_rss_mib for f in footprints[side]) for side in _SIDES}
    start = {side: max(f.start_rss_mib for f in footprints[side]) for side in _SIDES}
    where = "in a child process"
    return Measurement(
        suite=SUITE,
        name="restore_memory",
        unit="records/s",
        candidate=f"Follower + KafkaChangelogSource restore {where}: peak RSS "
        f"{peak['follower']:.0f} MiB (goal <= {GOAL_PEAK_RSS_MIB:.0f} MiB at the same rate)",
        baseline=f"bare read_committed consume() + plyvel WriteBatch loop {where}: peak RSS "
        f"{peak['bare']:.0f} MiB",
        candidate_rates=tuple(rates["follower"]),
        baseline_rates=tuple(rates["bare"]),
        target=None,
        parameters={
            **changelog_parameters(changelog, options),
            "measured": "VmHWM of /proc/<pid>/status at the end of the restore, a fresh "
            "`python -c` child per round; VmRSS before the restore as start_rss",
            "candidate_peak_rss_mib": peak["follower"],
            "baseline_peak_rss_mib": peak["bare"],
            "candidate_start_rss_mib": start["follower"],
            "baseline_start_rss_mib": start["bare"],
            "candidate_peak_rss_mib_rounds": [f.peak_rss_mib for f in footprints["follower"]],
            "baseline_peak_rss_mib_rounds": [f.peak_rss_mib for f in footprints["bare"]],
            "peak_rss_over_bare": round(peak["follower"] / peak["bare"], 3),
            "goal_peak_rss_mib": GOAL_PEAK_RSS_MIB,
            "goal_met": peak["follower"] <= GOAL_PEAK_RSS_MIB,
            "store_cache_bytes": StoreOptions().cache_bytes,
        },
    )
