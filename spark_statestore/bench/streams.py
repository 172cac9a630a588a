"""The ``streams`` suite: our follower against Kafka Streams itself, on Kafka Streams' changelog.

Setup (not timed): a real Apache Kafka broker (KRaft, a JVM) runs through
``spark-statestore broker`` in a child process, with an 8-partition orders topic. A
transactional confluent-kafka producer writes
:func:`~spark_statestore.bench.follower.follower_records` orders (one per customer: 16-byte
keys ``cust-<11 digits>``, 8-byte big-endian amounts, partition ``i % 8``, ``batch_records``
per transaction). The repository's Kafka Streams app
(``interop/kafka-streams``, through :class:`~spark_statestore.bench.streams_peer.StreamsPeer`
and :class:`~spark_statestore.connectors.kafka.local.streams_app.StreamsApp`, with only its
``totals`` store: ``--stores totals``, exactly-once v2, position headers on, commit interval
:data:`~spark_statestore.bench.streams_peer.COMMIT_INTERVAL_MS` ms) builds its RocksDB store
from them. Once its consumer group has committed every order (sampled with
:class:`~spark_statestore.connectors.kafka.follower.leader.KafkaLeaderProgress`), the app,
still running, serves ``commit_to_visible``; when it has committed those orders too it is
stopped cleanly. Its changelog ``bench-streams-totals-changelog`` then holds one record per
customer, written by Kafka Streams itself; that topic is what both sides restore.

``restore_vs_kafka_streams``
    Records/s of our follower's restore (the ``follower`` suite's: a
    :class:`~spark_statestore.follower.Follower` through
    :class:`~spark_statestore.connectors.kafka.follower.source.KafkaChangelogSource` into a
    fresh store, ``start_restore`` until RUNNING, checked afterwards) against Kafka Streams
    restoring the same changelog into its RocksDB store: each round deletes the app's state
    directory, waits until the consumer group of the previous run is empty (its member's
    session, :data:`~spark_statestore.bench.streams_peer.SESSION_TIMEOUT_MS` ms, has
    expired; not timed) and starts the app again.
    Timed inside the JVM by Kafka Streams' own ``StateRestoreListener``: from the first
    ``onRestoreStart`` to the last ``onRestoreEnd`` of the store's partitions (the app prints
    them with the JVM's clock, see
    :func:`~spark_statestore.bench.streams_peer.restore_timing`). The records Kafka Streams
    reports restored must equal the changelog's, and the app's IQv2 ``KeyQuery`` of the last
    customer of every partition must answer its amount.
``restore_vs_kafka_streams_startup``
    The same rounds, Kafka Streams timed from ``KafkaStreams#start()`` to the RUNNING state
    (group join, assignment, restore), as a user sees a restart.
``commit_to_visible``
    With the app RUNNING on its built store and a follower RUNNING on a fresh store (its restore
    not timed): an order for a new customer, one transaction each, partition ``i % 8``, after
    :data:`WARMUP_CHANGES` untimed ones per side. Timed from the producer's
    ``commit_transaction()`` returning until the change is visible: alternately (so the two
    never compete for the CPU) in Kafka Streams, by its IQv2 ``KeyQuery`` on the ``totals``
    store asked again and again until it answers the amount (Kafka Streams answers from its
    store and cache, before its own exactly-once commit), and in a RUNNING follower's store, by
    ``Follower.wait_for`` re-checked at every follower commit until the store's position (the
    ``c`` headers) has reached the order's offset, then a ``Store.get`` must read the amount
    (after Kafka Streams committed its changelog transaction). On the follower's orders a bare
    read_committed consumer of the changelog (the latency suite's
    :class:`~spark_statestore.bench.latency.RawObserver`, from the changelog's end) also notes
    when Kafka Streams' record of the order arrives: the earliest any replica could see it
    (``changelog_raw_*``). Reported as changes/s = 1000 / p50 ms; p50, p99, max of each are
    parameters.

``read_your_writes_<shape>`` and ``read_your_writes_<shape>_topology``
    Read-your-writes against Kafka Streams topologies of several sub-topologies
    (:mod:`~spark_statestore.bench.streams_shapes`): the interop jar's ``ShapesApp`` (every
    shape, exactly-once v2, no position headers) under background load, each store followed
    by the Spark follower source's driver runtime with ``leaderApplicationId``, without and
    with ``leaderTopology``. Timed from a probe's delivery until ``connect().query`` answers
    under the probe's offset as bound (and holds its effect, else the suite fails), beside
    the same probe's effect arriving in the changelog read read_committed (the floor).

No measurement has a target: they are reported for information.

Sizes: as the ``follower`` suite, :data:`~spark_statestore.bench.follower.DEFAULT_RECORDS`
orders unless ``--records`` (or ``--quick``) says otherwise; :data:`DEFAULT_CHANGES` timed
changes per side (:data:`QUICK_CHANGES` with ``--quick``).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_statestore.bench.errors import BenchError
from spark_statestore.bench.follower import (
    BROKERS,
    PARTITIONS,
    RESTORE_DEADLINE_S,
    follower_records,
    follower_run,
)
from spark_statestore.bench.latency import RawObserver, distribution, percentile, shown
from spark_statestore.bench.measure import BenchOptions, Measurement, interleave
from spark_statestore.bench.streams_peer import (
    CHANGELOG,
    COMMIT_INTERVAL_MS,
    KEY_FORMAT,
    LONG,
    ORDERS_TOPIC,
    STORE,
    SUITE,
    Orders,
    StreamsPeer,
    StreamsRestore,
)
from spark_statestore.bench.streams_shapes import measure_read_your_writes
from spark_statestore.connectors.kafka.local.child import broker_child

if TYPE_CHECKING:
    from spark_statestore.connectors.kafka.local.streams_app import StreamsApp

__all__ = [
    "DEFAULT_CHANGES",
    "DEFAULT_RYW_TRIALS",
    "QUICK_CHANGES",
    "QUICK_RYW_TRIALS",
    "SUITE",
    "WARMUP_CHANGES",
    "run_streams_suite",
    "streams_changes",
]

DEFAULT_CHANGES = 100
"""Timed changes per side of ``commit_to_visible`` (:data:`QUICK_CHANGES` with ``--quick``)."""
QUICK_CHANGES = 5
DEFAULT_RYW_TRIALS = 100
"""Probes per shape and mode of the ``read_your_writes_*`` rows (:data:`QUICK_RYW_TRIALS`
with ``--quick``)."""
QUICK_RYW_TRIALS = 3
WARMUP_CHANGES = 8
"""Untimed changes per side before the timed ones."""
LATENCY_KEY_FORMAT = b"late-%011d"
_VISIBLE_TIMEOUT_S = 30.0


def ryw_trials(options: BenchOptions) -> int:
    """Probes per shape and mode of the ``read_your_writes_*`` rows."""
    return QUICK_RYW_TRIALS if options.quick else DEFAULT_RYW_TRIALS


def streams_changes(options: BenchOptions) -> int:
    """Timed changes per side of ``commit_to_visible``."""
    return QUICK_CHANGES if options.quick else DEFAULT_CHANGES


# -- the suite ----------------------------------------------------------------------------
def run_streams_suite(options: BenchOptions) -> list[Measurement]:
    """Measure our follower against Kafka Streams on Kafka Streams' changelog: restore and
    commit-to-visible latency.

    Parameters
    ----------
    options
        Rounds, ``records`` (orders, one per customer: see
        :func:`~spark_statestore.bench.follower.follower_records`), ``batch_records`` (orders
        per producer transaction) and ``quick``.

    Returns
    -------
    list of Measurement
        ``restore_vs_kafka_streams``, ``restore_vs_kafka_streams_startup`` and
        ``commit_to_visible``, without targets.

    Raises
    ------
    BenchError
        If the broker or the app does not start, a side did not restore every record, or a
        change is not visible within 30 s.
    """
    records = follower_records(options)
    with (
        tempfile.TemporaryDirectory(prefix="spark-statestore-bench-") as root,
        broker_child(
            Path(root) / "broker.log",
            [f"{ORDERS_TOPIC}:{PARTITIONS}"],
            brokers=BROKERS,
            who=f"bench suite {SUITE}",
        ) as bootstrap,
    ):
        peer = StreamsPeer(Path(root), bootstrap)
        orders = peer.produce_orders(records, options.batch_records)
        latencies: list[_Latencies] = []
        changelog = peer.build(
            orders, partial(_measure_latencies, peer, streams_changes(options), latencies)
        )
        ryw = measure_read_your_writes(bootstrap, Path(root), ryw_trials(options), SUITE)
        restores: list[StreamsRestore] = []
        rates = interleave(
            {
                "follower": partial(follower_run, root, changelog),
                "kafka_streams": partial(peer.restore_run, changelog, restores),
            },
            options.rounds,
        )
    common: dict[str, Any] = {
        "records": changelog.records,
        "partitions": PARTITIONS,
        "orders": records,
        "orders_per_transaction": options.batch_records,
        "changelog": f"{CHANGELOG}, written by Kafka Streams (exactly-once v2, v/c headers)",
        "changelog_end_offsets": sum(changelog.end_offsets.values()),
        "key_bytes": len(KEY_FORMAT % 0),
        "value_bytes": LONG.size,
        "kafka_streams_store": "totals: Stores.persistentKeyValueStore (RocksDB), alone",
        "kafka_streams_build_s": round(peer.build_seconds, 3),
        "broker": "Apache Kafka (KRaft, one local node), child process",
        "rounds": options.rounds,
    }
    restore_rounds = {
        "kafka_streams_restore_s": [round(r.restore_s, 3) for r in restores],
        "kafka_streams_start_to_running_s": [round(r.start_to_running_s, 3) for r in restores],
        "kafka_streams_restored": restores[-1].restored,
    }
    follower_side = "Follower + KafkaChangelogSource restore to RUNNING"
    return [
        Measurement(
            suite=SUITE,
            name="restore_vs_kafka_streams",
            unit="records/s",
            candidate=follower_side,
            baseline="Kafka Streams restoring its RocksDB store (first onRestoreStart to last "
            "onRestoreEnd, timed in the JVM)",
            candidate_rates=tuple(rates["follower"]),
            baseline_rates=tuple(rates["kafka_streams"]),
            target=None,
            parameters={**common, **restore_rounds},
        ),
        Measurement(
            suite=SUITE,
            name="restore_vs_kafka_streams_startup",
            unit="records/s",
            candidate=follower_side,
            baseline="Kafka Streams restarted on an empty state dir: start() to RUNNING "
            "(timed in the JVM)",
            candidate_rates=tuple(rates["follower"]),
            baseline_rates=tuple(changelog.records / r.start_to_running_s for r in restores),
            target=None,
            parameters={**common, **restore_rounds},
        ),
        _latency_measurement(latencies[0], common),
        *ryw,
    ]


@dataclass(frozen=True, slots=True)
class _Latencies:
    streams_ms: tuple[float, ...]
    follower_ms: tuple[float, ...]
    changelog_ms: tuple[float, ...]
    """Of the follower's orders: until a bare read_committed consumer of the changelog got
    Kafka Streams' record of it."""


def _measure_latencies(
    peer: StreamsPeer, changes: int, latencies: list[_Latencies], app: StreamsApp
) -> Orders:
    """Orders for new customers, alternately observed in the running ``app`` and in our
    follower; appends the samples to ``latencies`` and returns the orders."""
    from confluent_kafka import KafkaException, Producer

    from spark_statestore.connectors.kafka.follower.source import KafkaChangelogSource
    from spark_statestore.follower import Follower
    from spark_statestore.store import Role, Store, StoreSpec

    path = peer.root / "latency-follower"
    producer = Producer(
        {
            "bootstrap.servers": peer.bootstrap,
            "transactional.id": f"spark-statestore-bench-{ORDERS_TOPIC}-latency",
        }
    )
    samples: dict[str, list[float]] = {"streams": [], "follower": [], "changelog": []}
    orders = Orders(2 * (WARMUP_CHANGES + changes))
    try:
        spec = StoreSpec(Role.FOLLOWER, CHANGELOG, PARTITIONS)
        with Store.open(str(path), spec, purpose="spark-statestore bench") as store:
            follower = Follower(store, KafkaChangelogSource(peer.bootstrap, CHANGELOG))
            try:
                follower.start()
                if not follower.wait_running(RESTORE_DEADLINE_S):
                    raise BenchError(f"bench suite {SUITE}: the follower did not restore")
                # Started once the app is idle: it reads only what the orders below cause.
                raw = RawObserver(
                    peer.bootstrap, CHANGELOG, by_key=True, from_end=True, suite=SUITE
                )
                try:
                    producer.init_transactions(30)
                    for i in range(orders.records):
                        _sample(i, app, follower, store, raw, producer, orders, samples)
                finally:
                    raw.close()
            finally:
                follower.stop()
    except KafkaException as exc:
        raise BenchError(f"bench suite {SUITE}: an order's transaction failed: {exc}") from exc
    latencies.append(
        _Latencies(
            tuple(samples["streams"]), tuple(samples["follower"]), tuple(samples["changelog"])
        )
    )
    return orders


def _sample(
    i: int,
    app: StreamsApp,
    follower: Any,
    store: Any,
    raw: RawObserver,
    producer: Any,
    orders: Orders,
    samples: dict[str, list[float]],
) -> None:
    """Order ``i``: even ones observed in the app, odd ones in the follower (and by the bare
    consumer of the changelog); samples in milliseconds after the warm-up."""
    partition, key, amount = i % PARTITIONS, LATENCY_KEY_FORMAT % i, i + 1
    offset, committed = _order(producer, partition, key, amount)
    orders.last_offsets[partition] = offset
    timed = i >= 2 * WARMUP_CHANGES
    if i % 2 == 0:
        visible = _visible_in_app(app, key, amount)
        if timed:
            samples["streams"].append((visible - committed) * 1000)
        return
    visible = _visible_in_follower(follower, store, partition, offset, key, amount)
    arrived = raw.wait_arrival(key, _VISIBLE_TIMEOUT_S)
    if timed:
        samples["follower"].append((visible - committed) * 1000)
        samples["changelog"].append((arrived - committed) * 1000)


def _order(producer: Any, partition: int, key: bytes, amount: int) -> tuple[int, float]:
    """One order in its own transaction: its offset, and when ``commit_transaction()``
    returned (``perf_counter``)."""
    delivered: list[tuple[Any, Any]] = []
    producer.begin_transaction()
    producer.produce(
        ORDERS_TOPIC,
        key=key,
        value=LONG.pack(amount),
        partition=partition,
        on_delivery=lambda err, msg: delivered.append((err, msg)),
    )
    producer.commit_transaction(_VISIBLE_TIMEOUT_S)
    committed = time.perf_counter()
    if len(delivered) != 1 or delivered[0][0] is not None:
        raise BenchError(f"bench suite {SUITE}: an order was committed undelivered: {delivered}")
    return int(delivered[0][1].offset()), committed


def _visible_in_app(app: StreamsApp, key: bytes, amount: int) -> float:
    """Ask the app's IQv2 KeyQuery until it answers ``amount``; when it did."""
    deadline = time.monotonic() + _VISIBLE_TIMEOUT_S
    while True:
        answer = app.query("key", STORE, key.decode())
        if [r.get("value") for r in answer.get("rows") or []] == [amount]:
            return time.perf_counter()
        if time.monotonic() > deadline:
            raise BenchError(
                f"bench suite {SUITE}: Kafka Streams did not answer {key!r} = {amount} within "
                f"{_VISIBLE_TIMEOUT_S:.0f} s of its commit (last answer {answer})"
            )


def _visible_in_follower(
    follower: Any, store: Any, partition: int, offset: int, key: bytes, amount: int
) -> float:
    """Wait, at each follower commit, until the store's position reaches the order."""

    def reached(_applied: Mapping[int, int]) -> bool:
        seen = store.metadata.position.offset(ORDERS_TOPIC, partition)
        return seen is not None and seen >= offset

    if not follower.wait_for(reached, _VISIBLE_TIMEOUT_S):
        raise BenchError(
            f"bench suite {SUITE}: the follower's position did not reach {ORDERS_TOPIC}-"
            f"{partition} offset {offset} within {_VISIBLE_TIMEOUT_S:.0f} s of its commit"
        )
    visible = time.perf_counter()
    found = store.get(key)
    if found != LONG.pack(amount):
        raise BenchError(
            f"bench suite {SUITE}: the follower reached the order at {ORDERS_TOPIC}-"
            f"{partition} offset {offset} but {key!r} reads {found!r}, expected {amount}"
        )
    return visible


def _latency_measurement(latencies: _Latencies, common: Mapping[str, Any]) -> Measurement:
    ours, theirs = distribution(latencies.follower_ms), distribution(latencies.streams_ms)
    raw = distribution(latencies.changelog_ms)

    our_p50 = percentile(latencies.follower_ms, 0.50)
    their_p50 = percentile(latencies.streams_ms, 0.50)
    return Measurement(
        suite=SUITE,
        name="commit_to_visible",
        unit="changes/s (1000 / p50 ms)",
        candidate=f"order commit to visible in a RUNNING Follower's store: {shown(ours)}",
        baseline=f"order commit to Kafka Streams' IQv2 KeyQuery answering it: {shown(theirs)}",
        candidate_rates=(1000 / our_p50,),
        baseline_rates=(1000 / their_p50,),
        target=None,
        parameters={
            **common,
            "changes": len(latencies.follower_ms),
            "warmup_changes": WARMUP_CHANGES,
            "timed": "the order's commit_transaction() returning to: Follower.wait_for() "
            "seeing the store's position reach the order (then a Store.get confirms) / the "
            "app's IQv2 KeyQuery answering the amount (asked in a loop)",
            "observers": "alternate orders (never both at once); on the follower's orders a "
            "bare read_committed consumer of the changelog (changelog_raw_*) watches too",
            "kafka_streams_commit_interval_ms": COMMIT_INTERVAL_MS,
            "percentiles": "nearest rank",
            **{f"candidate_{k}": v for k, v in ours.items()},
            **{f"baseline_{k}": v for k, v in theirs.items()},
            **{f"changelog_raw_{k}": v for k, v in raw.items()},
            "p50_over_kafka_streams": round(our_p50 / their_p50, 3),
            "rounds": 1,
        },
    )
