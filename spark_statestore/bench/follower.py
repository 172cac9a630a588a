"""The ``follower`` suite: restoring a changelog against a bare consume + WriteBatch loop.

Setup (not timed): a real Apache Kafka broker (KRaft, a JVM) runs through
``spark-statestore broker`` in a child process. A Kafka Streams-like writer fills an
8-partition changelog: 16-byte keys, 32-byte values, ``v``/``c`` position headers (``c``
padded like Kafka Streams pads it; each record's position is its input record's offset),
record timestamps of the time of writing, lz4 compression, and ``batch_records`` records per
Kafka transaction. The suite checks that every partition still starts at offset 0 (nothing
retained away or compacted) before measuring anything.

``restore``
    Records/s of a :class:`~spark_statestore.follower.Follower` reading through
    :class:`~spark_statestore.connectors.kafka.follower.source.KafkaChangelogSource` into a
    fresh follower store, from ``start_restore`` until it is RUNNING, against a bare loop in
    the same process: a read_committed confluent-kafka ``Consumer`` with the source's tuning,
    batched ``consume()``, and one plyvel ``WriteBatch`` (same LevelDB options and sync as
    the store) per consumed batch, putting raw keys and values, until every partition
    reaches its end offset. Both sides query the end offsets inside the timed span.
``follow_cli``
    One run of ``spark-statestore follow --until-caught-up --no-progress`` as a subprocess,
    timed from spawn to exit, so it includes interpreter start-up and imports; reported
    against the same bare loop, without a target.

Size: :data:`DEFAULT_RECORDS` unless ``--records`` (or ``--quick``) says otherwise. Since
:class:`~spark_statestore.bench.measure.BenchOptions` does not record whether ``--records``
was given, a ``records`` equal to the bench-wide default counts as "not given".

Why one module of over 500 lines: the changelog writer, the follower's restore and the bare
loop it is measured against are shared by the ``latency``, ``peers``, ``streams`` and
``scale`` suites, which must read the same changelog the same way; a fifth of it is this
description.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from spark_statestore.bench.errors import BenchError
from spark_statestore.bench.measure import BenchOptions, Measurement, interleave, timed
from spark_statestore.connectors.kafka.local.child import broker_child
from spark_statestore.store import Role, Store, StoreOptions, StoreSpec

__all__ = [
    "BROKERS",
    "CHUNK_RECORDS",
    "DEFAULT_RECORDS",
    "KEY_FORMAT",
    "PARTITIONS",
    "RESTORE_DEADLINE_S",
    "RESTORE_TARGET",
    "SUITE",
    "TOPIC",
    "VALUE_FORMAT",
    "Changelog",
    "bare_run",
    "c_headers",
    "changelog_parameters",
    "consumer_settings",
    "follower_records",
    "follower_run",
    "produce_changelog",
    "run_follower_suite",
]

SUITE = "follower"
RESTORE_TARGET = 0.6
"""The follower's restore should reach 60 % of a bare consume + WriteBatch loop."""
DEFAULT_RECORDS = 1_000_000
"""Changelog records of a run without ``--records``."""
PARTITIONS = 8
CHUNK_RECORDS = 50_000
"""Records per store commit for the follower, the CLI, and per ``consume()`` of the bare
loop, so every side commits (and syncs) equally often."""
BROKERS = 1
TOPIC = "bench-store-changelog"
INPUT_TOPIC = "bench-input"
KEY_FORMAT = b"key-%012d"  # 16 bytes
VALUE_FORMAT = b"value-%026d"  # 32 bytes
RESTORE_DEADLINE_S = 900.0
_ENTRY = struct.Struct(">iq")  # one (partition, offset) entry of a `c` header


@dataclass(frozen=True, slots=True)
class Changelog:
    """The changelog produced for the run and what a complete restore of it holds (by
    default this suite's :data:`TOPIC`; the ``streams`` suite's is Kafka Streams' own)."""

    bootstrap: str
    records: int
    transactions: int
    end_offsets: dict[int, int]
    last_records: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)
    topic: str = TOPIC
    suite: str = SUITE
    partitions: int = PARTITIONS

    def check(self, get: Callable[[bytes], bytes | None], applied: int | None, what: str) -> None:
        """Fail unless ``what`` applied every record (the last of each partition reads back)."""
        if applied is not None and applied != self.records:
            raise BenchError(
                f"bench suite {self.suite}: {what} applied {applied:,} records, the changelog has "
                f"{self.records:,}; its rate would be meaningless"
            )
        for partition, (key, value) in self.last_records.items():
            found = get(key)
            if found != value:
                raise BenchError(
                    f"bench suite {self.suite}: {what} did not restore partition {partition}: key "
                    f"{key!r} reads {found!r}, expected {value!r}; its rate would be meaningless"
                )


def follower_records(options: BenchOptions) -> int:
    """Changelog records for this run: ``options.records`` when ``--records`` or ``--quick``
    chose it, else :data:`DEFAULT_RECORDS`."""
    if options.quick or options.records != BenchOptions().records:
        return options.records
    return DEFAULT_RECORDS


def run_follower_suite(options: BenchOptions) -> list[Measurement]:
    """Measure the follower's restore rate and the follow command against a bare loop.

    Parameters
    ----------
    options
        Rounds, ``records`` (see :func:`follower_records`) and ``batch_records`` (records per
        Kafka transaction of the changelog).

    Returns
    -------
    list of Measurement
        ``restore`` (target :data:`RESTORE_TARGET`) and ``follow_cli`` (no target).

    Raises
    ------
    BenchError
        If the broker does not start, the changelog lost records, or a path did not restore
        every record.
    """
    records = follower_records(options)
    with (
        tempfile.TemporaryDirectory(prefix="spark-statestore-bench-") as root,
        broker_child(
            Path(root) / "broker.log",
            [f"{TOPIC}:{PARTITIONS}"],
            brokers=BROKERS,
            who=f"bench suite {SUITE}",
        ) as bootstrap,
    ):
        changelog = produce_changelog(bootstrap, records, options.batch_records)
        rates = interleave(
            {
                "follower": partial(follower_run, root, changelog),
                "bare": partial(bare_run, root, changelog),
            },
            options.rounds,
        )
        cli_seconds = _cli_run(root, changelog)
    parameters = changelog_parameters(changelog, options)
    return [
        Measurement(
            suite=SUITE,
            name="restore",
            unit="records/s",
            candidate="Follower + KafkaChangelogSource restore to RUNNING",
            baseline="bare read_committed consume() + plyvel WriteBatch loop",
            candidate_rates=tuple(rates["follower"]),
            baseline_rates=tuple(rates["bare"]),
            target=RESTORE_TARGET,
            parameters=parameters,
        ),
        Measurement(
            suite=SUITE,
            name="follow_cli",
            unit="records/s",
            candidate="spark-statestore follow --until-caught-up "
            "(1 subprocess run, incl. process start-up)",
            baseline="bare read_committed consume() + plyvel WriteBatch loop",
            candidate_rates=(changelog.records / cli_seconds,),
            baseline_rates=tuple(rates["bare"]),
            target=None,
            parameters={**parameters, "runs": 1, "seconds": cli_seconds},
        ),
    ]


def changelog_parameters(changelog: Changelog, options: BenchOptions) -> dict[str, Any]:
    """The parameters of a measurement restoring ``changelog``: its sizes and how it was
    written, the follower's chunk and sync, the broker, and ``options.rounds``."""
    return {
        "records": changelog.records,
        "partitions": changelog.partitions,
        "transactions": changelog.transactions,
        "records_per_transaction": options.batch_records,
        "key_bytes": len(KEY_FORMAT % 0),
        "value_bytes": len(VALUE_FORMAT % 0),
        "headers": "v, c (padded like Kafka Streams)",
        "compression": "lz4",
        "chunk_records": CHUNK_RECORDS,
        "sync": StoreOptions().sync,
        "brokers": BROKERS,
        "broker": "Apache Kafka (KRaft, one local node), child process",
        "end_offsets": sum(changelog.end_offsets.values()),
        "rounds": options.rounds,
    }


# -- the broker and the changelog ---------------------------------------------------------
def c_headers(partitions: int = PARTITIONS) -> list[Callable[[int], bytes]]:
    """Per partition, ``offset -> c header`` of ``{INPUT_TOPIC: {partition: offset}}``.

    Encoding a Position per record would make producing slower than restoring; the header
    differs between records only in the offset, so it is patched into one encoded template,
    checked once against :func:`encode_position`.
    """
    from spark_statestore.changelog.position_codec import encode_position
    from spark_statestore.position import Position

    def encoded(partition: int, offset: int) -> bytes:
        return encode_position(
            Position.from_map({INPUT_TOPIC: {partition: offset}}), pad_like_kafka_streams=True
        )

    makers: list[Callable[[int], bytes]] = []
    for partition in range(partitions):
        template = encoded(partition, 0)
        exact = encode_position(Position.from_map({INPUT_TOPIC: {partition: 0}}))
        head, tail = template[: len(exact) - _ENTRY.size], template[len(exact) :]
        make = partial(_patched_header, head, tail, partition)
        if make(123_456_789) != encoded(partition, 123_456_789):
            raise BenchError(f"bench suite {SUITE}: the c header template does not encode")
        makers.append(make)
    return makers


def _patched_header(head: bytes, tail: bytes, partition: int, offset: int) -> bytes:
    return head + _ENTRY.pack(partition, offset) + tail


def produce_changelog(
    bootstrap: str,
    records: int,
    per_transaction: int,
    *,
    topic: str = TOPIC,
    partitions: int = PARTITIONS,
    suite: str = SUITE,
) -> Changelog:
    """Fill ``topic`` (``partitions`` partitions, already created) with ``records`` distinct
    keys, ``per_transaction`` records per Kafka transaction, as described in this module's
    docstring; record ``i`` goes to partition ``i % partitions``."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"spark-statestore-bench-{topic}",
            "compression.type": "lz4",
            "linger.ms": 50,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    headers = c_headers(partitions)
    version = ("v", b"\x00")
    last: dict[int, tuple[bytes, bytes]] = {}
    transactions = 0
    try:
        producer.init_transactions(60)
        # Recent timestamps, one millisecond apart, the last one now: a broker rolls a
        # segment at every append of records older than segment.ms (7 days), which would
        # distort what the readers measure, and refuses records more than
        # message.timestamp.after.max.ms (1 hour) ahead of its clock (a 10M-record changelog
        # stamped from now on would reach 2.8 hours ahead).
        first_ms = int(time.time() * 1000) - records
        for start in range(0, records, per_transaction):
            producer.begin_transaction()
            for i in range(start, min(start + per_transaction, records)):
                partition = i % partitions
                key, value = KEY_FORMAT % i, VALUE_FORMAT % i
                record_headers: list[tuple[str, str | bytes | None]] = [
                    version,
                    ("c", headers[partition](i // partitions)),
                ]
                while True:
                    try:
                        producer.produce(
                            topic,
                            key=key,
                            value=value,
                            partition=partition,
                            timestamp=first_ms + i,
                            headers=record_headers,
                        )
                        break
                    except BufferError:  # the local queue is full: let it drain
                        producer.poll(0.05)
                last[partition] = (key, value)
            producer.commit_transaction(120)
            transactions += 1
    except KafkaException as exc:
        raise BenchError(
            f"bench suite {suite}: producing the changelog {topic} failed: {exc}"
        ) from exc
    return Changelog(
        bootstrap=bootstrap,
        records=records,
        transactions=transactions,
        end_offsets=_check_nothing_dropped(bootstrap, topic, partitions, suite),
        last_records=last,
        topic=topic,
        suite=suite,
        partitions=partitions,
    )


def _check_nothing_dropped(
    bootstrap: str, topic: str, partitions: int, suite: str
) -> dict[int, int]:
    """The end offsets; fails if the broker already dropped the oldest records."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer(consumer_settings(bootstrap, "watermarks", partitions))
    try:
        marks = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            for p in range(partitions)
        }
    except KafkaException as exc:
        raise BenchError(f"bench suite {suite}: cannot read the offsets of {topic}: {exc}") from exc
    finally:
        consumer.close()
    dropped = {p: low for p, (low, _high) in marks.items() if low != 0}
    if dropped:
        raise BenchError(
            f"bench suite {suite}: Kafka dropped the oldest records of {topic} "
            f"(first offsets {dropped}, expected 0): check the broker's retention settings"
        )
    return {p: high for p, (_low, high) in marks.items()}


def consumer_settings(bootstrap: str, purpose: str, partitions: int = PARTITIONS) -> dict[str, Any]:
    # KafkaChangelogSource's tuning (its read-ahead budget over the changelog's partitions),
    # so the bare loop reads the way the follower does.
    from spark_statestore.connectors.kafka.follower.source import read_ahead_settings

    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": f"spark-statestore-bench-{purpose}",  # never committed
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
        "fetch.max.bytes": 32 * 1024 * 1024,
        # As the follower's reader: fetch again as soon as the queue has room.
        "fetch.queue.backoff.ms": 0,
    }
    return read_ahead_settings(settings, {}, partitions)


# -- the timed runs -----------------------------------------------------------------------
def follower_run(
    root: str,
    changelog: Changelog,
    keep: str | None = None,
    *,
    during: Callable[[Any], AbstractContextManager[object]] | None = None,
) -> float:
    """Records/s of a follower restoring ``changelog`` into a fresh store under ``root``,
    removed afterwards unless ``keep`` names the (new) directory to restore into and keep;
    ``during(follower)`` is a context around the timed restore (metrics served meanwhile)."""
    from spark_statestore.connectors.kafka.follower.source import KafkaChangelogSource
    from spark_statestore.follower import Follower

    path = keep if keep is not None else tempfile.mkdtemp(prefix="follower-", dir=root)
    try:
        spec = StoreSpec(Role.FOLLOWER, changelog.topic, changelog.partitions)
        with Store.open(path, spec, purpose="spark-statestore bench") as store:
            source = KafkaChangelogSource(changelog.bootstrap, changelog.topic)
            try:
                follower = Follower(store, source, chunk_records=CHUNK_RECORDS)
            except BaseException:
                source.close()
                raise
            try:
                with nullcontext() if during is None else during(follower):
                    seconds = timed(partial(_restore, follower))
            finally:
                follower.stop()
            changelog.check(store.get, follower.records_applied, "the follower")
    finally:
        if keep is None:
            shutil.rmtree(path)
    return changelog.records / seconds


def _restore(follower: Any) -> None:
    from spark_statestore.follower import FollowerState

    deadline = time.monotonic() + RESTORE_DEADLINE_S
    follower.start_restore()
    while follower.state is not FollowerState.RUNNING:
        follower.step()
        if time.monotonic() > deadline:
            raise BenchError(
                f"bench suite {SUITE}: the follower did not reach RUNNING within "
                f"{RESTORE_DEADLINE_S:.0f} s (lags {follower.lags()})"
            )


def bare_run(root: str, changelog: Changelog, keep: str | None = None) -> float:
    """Records/s of the bare consume + WriteBatch loop restoring ``changelog`` into a fresh
    plyvel database under ``root`` (raw keys and values), removed afterwards unless ``keep``
    names the (new) directory to restore into and keep."""
    import plyvel
    from confluent_kafka import Consumer

    path = keep if keep is not None else tempfile.mkdtemp(prefix="bare-", dir=root)
    options = StoreOptions()
    try:
        db = plyvel.DB(path, create_if_missing=True, **options.leveldb_options())
        consumer = Consumer(consumer_settings(changelog.bootstrap, "bare", changelog.partitions))
        try:
            applied: list[int] = []
            seconds = timed(partial(_consume_into, consumer, changelog, db, options.sync, applied))
            changelog.check(db.get, applied[0], "the bare consume + WriteBatch loop")
        finally:
            consumer.close()
            db.close()
    finally:
        if keep is None:
            shutil.rmtree(path)
    return changelog.records / seconds


def _consume_into(
    consumer: Any, changelog: Changelog, db: Any, sync: bool, applied: list[int]
) -> None:
    """Read every partition to its end offset, one WriteBatch per ``consume()``."""
    from confluent_kafka import KafkaError, TopicPartition

    topic, partitions = changelog.topic, range(changelog.partitions)
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
        for p in partitions
    }
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    pending = set(ends)
    count = 0
    deadline = time.monotonic() + RESTORE_DEADLINE_S
    while pending:
        messages = consumer.consume(CHUNK_RECORDS, timeout=0.5)
        batch = db.write_batch(sync=sync)
        put = batch.put
        events = 0
        for message in messages:
            error = message.error()
            if error is None:
                put(message.key(), message.value())
                continue
            events += 1
            if error.code() != KafkaError._PARTITION_EOF:
                raise BenchError(f"bench suite {SUITE}: the bare loop's consume failed: {error}")
            if message.offset() >= ends[message.partition()]:
                pending.discard(message.partition())
        if len(messages) > events:  # like the follower, commit only when there are records
            batch.write()
        count += len(messages) - events
        if time.monotonic() > deadline:
            raise BenchError(f"bench suite {SUITE}: the bare loop did not reach {ends}")
    applied.append(count)


def _cli_run(root: str, changelog: Changelog) -> float:
    """Seconds of one ``spark-statestore follow --until-caught-up`` process, spawn to exit."""
    path = os.path.join(root, "cli-store")
    command = [
        sys.executable,
        "-m",
        "spark_statestore.cli",
        "follow",
        "--bootstrap-servers",
        changelog.bootstrap,
        "--changelog",
        changelog.topic,
        "--chunk-records",
        str(CHUNK_RECORDS),
        "--until-caught-up",
        "--no-progress",
        path,
    ]
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, timeout=RESTORE_DEADLINE_S)
    seconds = time.perf_counter() - start
    if proc.returncode != 0 or "caught up" not in proc.stderr:
        raise BenchError(
            f"bench suite {SUITE}: spark-statestore follow exited {proc.returncode}: "
            f"{proc.stderr.strip()[-2000:]}"
        )
    try:
        with Store.open(path, purpose="spark-statestore bench check") as store:
            changelog.check(store.get, None, "spark-statestore follow")
    finally:
        shutil.rmtree(path)
    return seconds
