"""The ``peers`` suite: our follower against what a user would pick instead, on one changelog.

Setup (not timed): a real Apache Kafka broker (KRaft, a JVM) runs through
``spark-statestore broker`` in a child process, and the ``follower`` suite's own writer fills
its changelog (:func:`~spark_statestore.bench.follower.follower_records` records over 8
partitions, 16-byte keys, 32-byte values, ``v``/``c`` position headers, ``batch_records``
records per Kafka transaction, lz4) and checks that nothing was retained away. That one topic
is what every path below reads.

``feed_vs_spark_kafka``
    Rows/s of our follower feed, ``spark.readStream.format("spark_statestore")`` with
    ``changelog`` into a fresh store (so the follower restores the store while the executors
    deliver the change feed), against Spark's own Kafka source,
    ``spark.readStream.format("kafka")`` subscribed to the same topic from ``earliest`` with
    ``kafka.isolation.level=read_committed``. Both write to the ``noop`` sink with
    ``trigger(availableNow=True)`` and a fresh checkpoint, in one ``local[2]`` SparkSession
    with Spark's Kafka connector on its classpath (``local_session(kafka_source=True)``),
    started in a child process so that its JVM starts with the connector (this process may
    already run a JVM without it); its start-up time is the parameter ``spark_startup_s``,
    never inside a rate. The child times both sides and reports their rates. Timed:
    ``writeStream...start()`` to ``awaitTermination()`` returning, so query start-up, every
    micro-batch and, for ours, the follower's restore. After each run (not timed) the
    ``numInputRows`` of its progress reports must add up to the changelog's record count.
    One untimed warm-up run of each side comes first (JIT, Python worker start-up), except
    with ``--quick``.
``restore_vs_quixstreams``
    Records/s of the ``follower`` suite's restore (a
    :class:`~spark_statestore.follower.Follower` reading through
    :class:`~spark_statestore.connectors.kafka.follower.source.KafkaChangelogSource` into a
    fresh store, ``start_restore`` until RUNNING, checked afterwards) against quixstreams
    recovering a store of the same size. quixstreams writes its own changelog format, so it
    builds its store itself (setup, not timed): an ``Application`` (exactly-once, so its
    changelog is transactional too, committing every ``batch_records`` messages) runs a
    stateful ``apply`` over the same topic as its input, which stores every message's 32-byte
    value under its 16-byte key (``state.set_bytes``); its changelog then holds one record
    per input record. Each timed round starts the same application again, as a new process on
    an empty state directory, so it recovers the whole store from its changelog.
    Timed inside that process (by :func:`~spark_statestore.bench.measure.timed`, the
    same clock as our side): the call in which quixstreams recovers,
    ``StateStoreManager.do_recovery()``, from its start until it returns, which is when
    quixstreams' ``RecoveryManager`` has consumed every changelog partition up to the end
    offset it read at assignment and logs "Recovery process complete". It notices the end
    on a poll that returns nothing (1 s poll timeout, consumer positions cached for 1 s):
    that is part of its recovery, so part of the time, and dominates tiny ``--quick`` runs.
    Not timed: the interpreter start-up, the consumer group join and the opening of the
    RocksDB partitions (like our ``Store.open``), which come before; counting the recovered
    keys, which must equal the record count, after. quixstreams runs from its own virtual
    environment (:data:`PEERS_VENV`, created from PyPI with quixstreams
    :data:`QUIXSTREAMS_VERSION` on first use) because it needs an older confluent-kafka
    than this project's.

Neither measurement has a target: they are reported for information.

Size: as the ``follower`` suite, :data:`~spark_statestore.bench.follower.DEFAULT_RECORDS`
unless ``--records`` (or ``--quick``) says otherwise.
"""

from __future__ import annotations

import logging
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from spark_statestore.bench.follower import (
    BROKERS,
    KEY_FORMAT,
    PARTITIONS,
    TOPIC,
    VALUE_FORMAT,
    follower_records,
    follower_run,
    produce_changelog,
)
from spark_statestore.bench.measure import BenchOptions, Measurement, interleave
from spark_statestore.bench.peers_feed import FeedRequest, feed_rates_in_child
from spark_statestore.bench.peers_quixstreams import (
    QUIXSTREAMS_VERSION,
    QuixApp,
    QuixRecovery,
    quixstreams_python,
)
from spark_statestore.bench.spark import MASTER
from spark_statestore.connectors.kafka.local.child import broker_child

_log = logging.getLogger(__name__)

__all__ = ["SUITE", "run_peers_suite"]

SUITE = "peers"


# -- the suite ----------------------------------------------------------------------------
def run_peers_suite(options: BenchOptions) -> list[Measurement]:
    """Measure our follower feed against Spark's Kafka source and our follower's restore
    against quixstreams' recovery, on the same changelog.

    Parameters
    ----------
    options
        Rounds, ``records`` (see :func:`~spark_statestore.bench.follower.follower_records`)
        and ``batch_records`` (records per Kafka transaction of the changelog, and per
        quixstreams checkpoint).

    Returns
    -------
    list of Measurement
        ``feed_vs_spark_kafka`` and ``restore_vs_quixstreams``, without targets.

    Raises
    ------
    BenchError
        If quixstreams' environment cannot be created, the broker or a Spark session does
        not start, or a path did not read or restore every record.
    """
    records = follower_records(options)
    quix_python = quixstreams_python()  # first: fail before minutes of setup
    with (
        tempfile.TemporaryDirectory(prefix="spark-statestore-bench-") as root,
        broker_child(
            Path(root) / "broker.log",
            [f"{TOPIC}:{PARTITIONS}"],
            brokers=BROKERS,
            who=f"bench suite {SUITE}",
        ) as bootstrap,
    ):
        start = time.perf_counter()
        changelog = produce_changelog(bootstrap, records, options.batch_records)
        _log.info(
            "bench suite %s: wrote %d changelog records in %.1f s",
            SUITE,
            records,
            time.perf_counter() - start,
        )
        feed = feed_rates_in_child(
            FeedRequest(
                bootstrap=bootstrap,
                records=changelog.records,
                root=root,
                rounds=options.rounds,
                warmup=not options.quick,
            )
        )
        quix = QuixApp(quix_python, root, changelog, options.batch_records)
        built = quix.build_store()
        recoveries: list[QuixRecovery] = []
        restore_rates = interleave(
            {
                "follower": partial(follower_run, root, changelog),
                "quixstreams": partial(quix.recovery_rate, recoveries),
            },
            options.rounds,
        )
    common: dict[str, Any] = {
        "records": changelog.records,
        "partitions": PARTITIONS,
        "transactions": changelog.transactions,
        "records_per_transaction": options.batch_records,
        "key_bytes": len(KEY_FORMAT % 0),
        "value_bytes": len(VALUE_FORMAT % 0),
        "changelog": "Kafka Streams format (v, c headers), lz4, written by the follower suite",
        "end_offsets": sum(changelog.end_offsets.values()),
        "broker": "Apache Kafka (KRaft, one local node), child process",
        "rounds": options.rounds,
    }
    last = recoveries[-1]
    return [
        Measurement(
            suite=SUITE,
            name="feed_vs_spark_kafka",
            unit="rows/s",
            candidate="readStream.format('spark_statestore') change feed into a fresh store "
            "-> noop, availableNow",
            baseline="readStream.format('kafka') read_committed -> noop, availableNow (same topic)",
            candidate_rates=feed.feed,
            baseline_rates=feed.spark_kafka,
            target=None,
            parameters={
                **common,
                "timed": "writeStream.start() to awaitTermination(), fresh checkpoint (and store)",
                "warmup_runs": 0 if options.quick else 1,
                "sink": "noop",
                "spark_master": MASTER,
                "spark_startup_s": round(feed.spark_startup_s, 3),
                "spark_session": "started in a child process (a JVM with the Kafka connector)",
            },
        ),
        Measurement(
            suite=SUITE,
            name="restore_vs_quixstreams",
            unit="records/s",
            candidate="Follower + KafkaChangelogSource restore to RUNNING",
            baseline=f"quixstreams {QUIXSTREAMS_VERSION} recovery of its RocksDB store "
            "(a restart on an empty state dir)",
            candidate_rates=tuple(restore_rates["follower"]),
            baseline_rates=tuple(restore_rates["quixstreams"]),
            target=None,
            parameters={
                **common,
                "timed": "ours: start_restore() to RUNNING; quixstreams: "
                "StateStoreManager.do_recovery(), timed in its own process",
                "quixstreams": QUIXSTREAMS_VERSION,
                "quixstreams_python": str(quix_python),
                "quixstreams_changelog": last.changelog,
                "quixstreams_changelog_end_offsets": last.end_offsets,
                "quixstreams_store_key_bytes": last.key_bytes,
                "quixstreams_store_value_bytes": last.value_bytes,
                "quixstreams_processing_guarantee": "exactly-once",
                "quixstreams_build_s": round(built.seconds, 3),
                "quixstreams_process_s": [round(r.process_seconds, 3) for r in recoveries],
            },
        ),
    ]
