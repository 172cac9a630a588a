"""The ``scale`` suite: how a restore's rate and memory, and lookups and scans, grow with the store.

Setup (not timed): a real Apache Kafka broker (KRaft, a JVM) runs through
``spark-statestore broker`` in a child process. For each partition count of
:data:`PARTITION_COUNTS` and each size of :data:`RESTORE_SIZES`, the ``follower`` suite's
writer fills a changelog of its own (distinct 16-byte keys, 32-byte values, ``v``/``c``
position headers, lz4, ``batch_records`` records per transaction, record ``i`` in partition
``i % partitions``); the topic is deleted once measured, so the disk holds one size at a time.

``restore_<size>_<partitions>p``
    One run each, in fresh ``python -c`` child processes, of the ``follower`` suite's
    follower restore (``start_restore`` until RUNNING into a fresh store, checked
    afterwards) and its bare read_committed ``consume()`` + plyvel ``WriteBatch`` loop, as
    the ``latency`` suite's ``restore_memory`` runs them. Records/s; each side's peak RSS
    (``VmHWM``) is a parameter.
``get_<size>``, ``range100_<size>``, ``full_scan_<size>``
    On the 8-partition stores of the sizes in :data:`LATENCY_SIZES`, kept from the restores
    (the follower's store and the bare loop's plyvel database of the same records):
    ``get`` times :data:`LOOKUPS` point reads of keys drawn at random (seeded) one by one,
    ``Snapshot.get`` against plyvel's ``DB.get`` of the raw key; ``range100`` times
    :data:`RANGES` reads of 100 consecutive keys from a random start, ``scan_batches`` of a
    ``ScanSpec.between`` into Arrow against a plyvel iterator into a list; both reported
    as operations/s = 1 / p50, with p50, p99 and max (nearest rank) as parameters.
    ``full_scan`` reads every row once, ``scan_batches(ScanSpec.everything())`` against a
    plyvel iterator, in rows/s.

No measurement has a target: the suite shows how cost grows, the other suites hold the goals.
``spark-statestore bench --output FILE`` also writes the curves as an SVG next to FILE
(:func:`~spark_statestore.bench.plot.write_plots`).

Sizes: ``--quick`` uses :data:`QUICK_RESTORE_SIZES`; ``--records`` does not apply (the suite
measures its own ladder of sizes). ``--rounds`` does not apply either: each point is one run
of each side (the largest take minutes).
"""

from __future__ import annotations

import logging
import math
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from spark_statestore.bench.errors import BenchError
from spark_statestore.bench.follower import (
    BROKERS,
    KEY_FORMAT,
    VALUE_FORMAT,
    Changelog,
    changelog_parameters,
    produce_changelog,
)
from spark_statestore.bench.latency import Footprint, percentile, restore_in_child
from spark_statestore.bench.measure import BenchOptions, Measurement
from spark_statestore.connectors.kafka.local.child import broker_child
from spark_statestore.store import Store, StoreOptions

__all__ = [
    "LATENCY_SIZES",
    "LOOKUPS",
    "PARTITION_COUNTS",
    "QUICK_RESTORE_SIZES",
    "RANGES",
    "RESTORE_SIZES",
    "SUITE",
    "run_scale_suite",
    "size_label",
]

_log = logging.getLogger(__name__)

SUITE = "scale"
RESTORE_SIZES = (1_000_000, 10_000_000, 30_000_000)
QUICK_RESTORE_SIZES = (2_000, 6_000)
PARTITION_COUNTS = (8, 64)
LATENCY_SIZES = 2
"""Lookups and scans are measured on the stores of the first this many sizes (1M, 10M)."""
LOOKUPS = 20_000
RANGES = 2_000
RANGE_ROWS = 100
_QUICK_OPERATIONS = 200
_SEED = 20_261_126


def size_label(records: int) -> str:
    """``1M``, ``30M``, ``2k``, ``1500``: a size as measurement names show it."""
    for unit, word in ((1_000_000, "M"), (1_000, "k")):
        if records >= unit and records % unit == 0:
            return f"{records // unit}{word}"
    return str(records)


def run_scale_suite(options: BenchOptions) -> list[Measurement]:
    """Measure restores at every size and partition count, then lookups and scans of the
    kept 8-partition stores.

    Parameters
    ----------
    options
        ``quick`` (sizes) and ``batch_records`` (records per Kafka transaction).

    Returns
    -------
    list of Measurement
        ``restore_<size>_<partitions>p`` for each point, then ``get_<size>``,
        ``range100_<size>`` and ``full_scan_<size>`` for the sizes of :data:`LATENCY_SIZES`.

    Raises
    ------
    BenchError
        If the broker does not start, a changelog lost records, a restore did not restore
        every record or a child process failed.
    """
    sizes = QUICK_RESTORE_SIZES if options.quick else RESTORE_SIZES
    operations = _QUICK_OPERATIONS if options.quick else None
    topics = {
        (partitions, records): f"bench-scale-{partitions}p-{size_label(records)}"
        for partitions in PARTITION_COUNTS
        for records in sizes
    }
    restores: list[Measurement] = []
    reads: list[Measurement] = []
    with (
        tempfile.TemporaryDirectory(prefix="spark-statestore-bench-") as root,
        broker_child(
            Path(root) / "broker.log",
            [f"{topic}:{partitions}" for (partitions, _), topic in topics.items()],
            brokers=BROKERS,
            who=f"bench suite {SUITE}",
        ) as bootstrap,
    ):
        for index, ((partitions, records), topic) in enumerate(topics.items()):
            started = time.perf_counter()
            changelog = produce_changelog(
                bootstrap,
                records,
                options.batch_records,
                topic=topic,
                partitions=partitions,
                suite=SUITE,
            )
            produced = time.perf_counter() - started
            keep = partitions == PARTITION_COUNTS[0] and records in sizes[:LATENCY_SIZES]
            paths = {
                side: str(Path(root) / f"{side}-{size_label(records)}") if keep else None
                for side in ("follower", "bare")
            }
            footprints: dict[str, list[Footprint]] = {"follower": [], "bare": []}
            # One run each; the side that runs first alternates from point to point.
            order = ("follower", "bare") if index % 2 == 0 else ("bare", "follower")
            for side in order:
                restore_in_child(side, root, changelog, footprints[side], paths[side], suite=SUITE)
            _delete_topic(bootstrap, topic)
            restores.append(_restore_measurement(changelog, options, footprints, produced))
            follower_path, bare_path = paths["follower"], paths["bare"]
            if follower_path is not None and bare_path is not None:
                try:
                    reads.extend(
                        _read_measurements(follower_path, bare_path, changelog, operations)
                    )
                finally:
                    shutil.rmtree(follower_path, ignore_errors=True)
                    shutil.rmtree(bare_path, ignore_errors=True)
    return restores + reads


def _delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.delete_topics([topic], operation_timeout=60)[topic].result(timeout=90)
    except KafkaException as exc:
        raise BenchError(f"bench suite {SUITE}: deleting topic {topic} failed: {exc}") from exc


def _restore_measurement(
    changelog: Changelog,
    options: BenchOptions,
    footprints: dict[str, list[Footprint]],
    produced_s: float,
) -> Measurement:
    follower, bare = footprints["follower"][0], footprints["bare"][0]
    label = f"{size_label(changelog.records)}_{changelog.partitions}p"
    return Measurement(
        suite=SUITE,
        name=f"restore_{label}",
        unit="records/s",
        candidate=f"Follower + KafkaChangelogSource restore, {changelog.records:,} records, "
        f"{changelog.partitions} partitions, child process: peak RSS "
        f"{follower.peak_rss_mib:.0f} MiB",
        baseline="bare read_committed consume() + plyvel WriteBatch loop, child process: "
        f"peak RSS {bare.peak_rss_mib:.0f} MiB",
        candidate_rates=(follower.rate,),
        baseline_rates=(bare.rate,),
        target=None,
        parameters={
            **changelog_parameters(changelog, options),
            "candidate_peak_rss_mib": follower.peak_rss_mib,
            "baseline_peak_rss_mib": bare.peak_rss_mib,
            "candidate_start_rss_mib": follower.start_rss_mib,
            "baseline_start_rss_mib": bare.start_rss_mib,
            "measured": "one run per side, each in a fresh `python -c` child; VmHWM of "
            "/proc/<pid>/status at the end of the restore",
            "produce_seconds": round(produced_s, 1),
            "rounds": 1,
        },
    )


# -- lookups and scans --------------------------------------------------------------------
def _read_measurements(
    follower_path: str, bare_path: str, changelog: Changelog, operations: int | None
) -> list[Measurement]:
    import plyvel

    from spark_statestore.store.scan import scan_batches
    from spark_statestore.store.scan_spec import ScanSpec

    records = changelog.records
    rng = random.Random(_SEED + records)
    lookups = [KEY_FORMAT % rng.randrange(records) for _ in range(operations or LOOKUPS)]
    starts = [rng.randrange(records - RANGE_ROWS + 1) for _ in range(operations or RANGES)]
    ranges = [(KEY_FORMAT % i, KEY_FORMAT % (i + RANGE_ROWS - 1)) for i in starts]

    ours: dict[str, Any] = {}
    with (
        Store.open(follower_path, purpose="spark-statestore bench scale") as store,
        store.snapshot() as snapshot,
    ):
        ours["get"] = _latencies(snapshot.get, lookups, _expect_value)

        def our_range(bounds: tuple[bytes, bytes]) -> int:
            spec = ScanSpec.between(bounds[0], bounds[1])
            return sum(batch.num_rows for batch in scan_batches(snapshot, spec))

        ours["range100"] = _latencies(our_range, ranges, _expect_rows)
        ours["full_scan"] = _full_scan(
            lambda: sum(batch.num_rows for batch in scan_batches(snapshot, ScanSpec.everything())),
            records,
        )
    raw: dict[str, Any] = {}
    options = StoreOptions()
    db = plyvel.DB(bare_path, **options.leveldb_options())
    try:
        with db.snapshot() as snap:
            raw["get"] = _latencies(snap.get, lookups, _expect_value)

            def raw_range(bounds: tuple[bytes, bytes]) -> int:
                return len(list(snap.iterator(start=bounds[0], stop=bounds[1], include_stop=True)))

            raw["range100"] = _latencies(raw_range, ranges, _expect_rows)
            raw["full_scan"] = _full_scan(lambda: sum(1 for _ in snap.iterator()), records)
    finally:
        db.close()

    size = size_label(records)
    common = {
        "keys": records,
        "partitions": changelog.partitions,
        "key_bytes": len(KEY_FORMAT % 0),
        "value_bytes": len(VALUE_FORMAT % 0),
        "store_cache_bytes": options.cache_bytes,
        "bloom_filter_bits": options.bloom_filter_bits,
        "stores": "kept from this suite's restores of the same changelog",
        "rounds": 1,
    }
    out = []
    for name, what, ours_how, raw_how, count in (
        (
            "get",
            "point read of a random key",
            "Snapshot.get",
            "plyvel snapshot get of the raw key",
            len(lookups),
        ),
        (
            "range100",
            f"{RANGE_ROWS} consecutive keys from a random start",
            "scan_batches(ScanSpec.between) into Arrow",
            "plyvel snapshot iterator into a list",
            len(ranges),
        ),
    ):
        mine, theirs = _distribution_us(ours[name]), _distribution_us(raw[name])
        out.append(
            Measurement(
                suite=SUITE,
                name=f"{name}_{size}",
                unit="operations/s (1e6 / p50 us)",
                candidate=f"{ours_how}, {what}, {records:,} keys: "
                f"p50 {mine['p50_us']:.1f} us, p99 {mine['p99_us']:.1f} us",
                baseline=f"{raw_how}: p50 {theirs['p50_us']:.1f} us, p99 {theirs['p99_us']:.1f} us",
                candidate_rates=(1e6 / percentile(ours[name], 0.5),),
                baseline_rates=(1e6 / percentile(raw[name], 0.5),),
                target=None,
                parameters={
                    **common,
                    "operations": count,
                    "timed": "each operation alone (perf_counter_ns), on one snapshot",
                    "percentiles": "nearest rank",
                    **{f"candidate_{k}": v for k, v in mine.items()},
                    **{f"baseline_{k}": v for k, v in theirs.items()},
                },
            )
        )
    out.append(
        Measurement(
            suite=SUITE,
            name=f"full_scan_{size}",
            unit="rows/s",
            candidate=f"scan_batches(ScanSpec.everything()) into Arrow, {records:,} keys",
            baseline="plyvel snapshot iterator over every row",
            candidate_rates=(ours["full_scan"],),
            baseline_rates=(raw["full_scan"],),
            target=None,
            parameters=common,
        )
    )
    return out


def _expect_value(result: object) -> None:
    if result is None:
        raise BenchError(f"bench suite {SUITE}: a key of the store read as absent")


def _expect_rows(result: object) -> None:
    if result != RANGE_ROWS:
        raise BenchError(f"bench suite {SUITE}: a range of {RANGE_ROWS} keys read {result} rows")


def _latencies(
    operation: Callable[[Any], object], arguments: Sequence[Any], check: Callable[[object], None]
) -> list[float]:
    """Microseconds of each ``operation(argument)``; every result is checked (untimed)."""
    clock = time.perf_counter_ns
    out = []
    for argument in arguments:
        start = clock()
        result = operation(argument)
        out.append((clock() - start) / 1e3)
        check(result)
    return out


def _distribution_us(values: Sequence[float]) -> dict[str, float]:
    """p50, p99 and max (nearest rank) of microsecond ``values``."""
    return {
        "p50_us": round(percentile(values, 0.50), 1),
        "p99_us": round(percentile(values, 0.99), 1),
        "max_us": round(max(values), 1),
    }


def _full_scan(scan: Callable[[], int], records: int) -> float:
    start = time.perf_counter()
    rows = scan()
    seconds = time.perf_counter() - start
    if rows != records:
        raise BenchError(f"bench suite {SUITE}: a full scan read {rows:,} rows of {records:,}")
    return rows / seconds if seconds > 0 else math.inf
