"""Kill -9 of a Spark driver whose follower source is restoring a store, then restart it.

A child process (:mod:`tests.crash.spark_follower_child`: driver Python, its JVM and the
source's Python reader process, in one new process group) runs the follower source on a
store while the changelog is being restored. The test SIGKILLs the child's whole process
group in the middle of the restore, then opens the store itself and checks that it is
exactly the fold of the committed changelog records below the offsets it recorded
(tombstones delete, the aborted transaction never shows), with the matching position and no
redo file left. A second child restarts the query from the same checkpoint with
``Trigger.AvailableNow``, which must finish the restore: the store is then the fold of the
whole committed changelog, at its end offsets.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from spark_statestore.changelog import partition_for_key
from spark_statestore.changelog.position_codec import encode_position
from spark_statestore.position import Position
from spark_statestore.serve import StoreClient, connect_to_owner
from spark_statestore.store import Store
from spark_statestore.store.ownership import read_owner
from spark_statestore.store.redo import REDO_DIR
from tests.conftest import REPO_ROOT
from tests.integration.test_spark_follower import wait_for_owner_exit

pytestmark = pytest.mark.integration

INPUT = "orders"
PARTITIONS = 8
KEYS = 20_000
TXN_RECORDS = 25_000
TOMBSTONE_RATE = 0.004
RECORDS = 200_000  # the follower commits 50k-record chunks: a restore of >= 4 commits
SOAK_RECORDS = 600_000
SOAK_KILLS = int(os.environ.get("SPARK_STATESTORE_SPARK_SOAK_KILLS", "10"))
SEED = 20261207

START_TIMEOUT_S = 300.0  # a JVM start on a busy 2-core machine
RESTORE_TIMEOUT_S = 300.0
# The store's owner pushes no notification of its commits, so the test polls (cheap local
# Flight calls). The follower commits 50k-record chunks: even at the raw consume rate of the
# 2-core machine (~1M records/s) one chunk takes ~50 ms, so a 10 ms poll sees the store
# between two commits of a restore.
POLL_S = 0.01


@dataclass(frozen=True)
class Written:
    """One committed changelog record."""

    key: bytes
    value: bytes | None  # None: a tombstone
    input_offset: int  # its ``c`` header: position {INPUT: {partition: input_offset}}


class ChangelogProducer:
    """Writes a Kafka-Streams-format changelog (``v``/``c`` headers) in transactions.

    Keeps every committed record by ``(partition, offset)`` (from the delivery reports), so
    the fold of the committed records below any offsets can be computed. Records of aborted
    transactions take offsets too, but are only counted.
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.topic = topic
        self.partitions = partitions
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": f"crash-writer-{topic}",
                "compression.type": "lz4",
                "linger.ms": 20,
                "batch.num.messages": 10_000,
            }
        )
        self.producer.init_transactions(30)
        self.committed: dict[int, dict[int, Written]] = {p: {} for p in range(partitions)}
        self.aborted = 0
        self.input_offset = 0

    def transaction(self, changes: Sequence[tuple[bytes, bytes | None]], abort: bool) -> None:
        delivered: list[tuple[int, int, Written]] = []
        errors: list[KafkaError] = []

        def reporter(written: Written) -> Callable[[KafkaError | None, Any], None]:
            def report(err: KafkaError | None, msg: Any) -> None:
                if err is not None:
                    errors.append(err)
                else:
                    delivered.append((msg.partition(), msg.offset(), written))

            return report

        self.producer.begin_transaction()
        for key, value in changes:
            partition = partition_for_key(key, self.partitions)
            self.input_offset += 1
            header = Position.from_map({INPUT: {partition: self.input_offset}})
            self.producer.produce(
                self.topic,
                key=key,
                value=value,
                partition=partition,
                headers=[
                    ("v", b"\x00"),
                    ("c", encode_position(header, pad_like_kafka_streams=True)),
                ],
                on_delivery=reporter(Written(key, value, self.input_offset)),
            )
        # Flushing serves the delivery reports, aborted records included (they take offsets).
        assert self.producer.flush(60) == 0, "the changelog writer could not flush"
        assert not errors and len(delivered) == len(changes), errors[:3]
        if abort:
            self.producer.abort_transaction(60)
            self.aborted += len(delivered)
            return
        self.producer.commit_transaction(60)
        for partition, offset, written in delivered:
            self.committed[partition][offset] = written

    def fold(self, below: Mapping[int, int]) -> dict[bytes, tuple[bytes, int, int]]:
        """``key -> (value, partition, offset)`` after the committed records below
        ``below`` (``{partition: next offset}``; a missing partition: nothing applied)."""
        state: dict[bytes, tuple[bytes, int, int]] = {}
        for partition, records in self.committed.items():
            limit = below.get(partition, 0)
            for offset, written in sorted(records.items()):
                if offset >= limit:
                    break
                if written.value is None:
                    state.pop(written.key, None)
                else:
                    state[written.key] = (written.value, partition, offset)
        return state

    def position(self, below: Mapping[int, int]) -> dict[str, dict[int, int]]:
        """The merge of the ``c`` headers of the committed records below ``below``."""
        merged = {}
        for partition, records in self.committed.items():
            seen = [w.input_offset for o, w in records.items() if o < below.get(partition, 0)]
            if seen:
                merged[partition] = max(seen)
        return {INPUT: merged} if merged else {}


def produce_changelog(kafka_broker: Any, topic: str, records: int, seed: int) -> ChangelogProducer:
    """``records`` committed changes over ``KEYS`` keys, with tombstones and one aborted
    transaction in the middle whose values must never reach the store."""
    rng = random.Random(seed)
    writer = ChangelogProducer(kafka_broker.bootstrap_servers, topic, PARTITIONS)
    transactions = records // TXN_RECORDS
    for index in range(transactions):
        changes = [
            (
                b"k%05d" % rng.randrange(KEYS),
                None if rng.random() < TOMBSTONE_RATE else b"%d" % rng.randrange(1_000_000),
            )
            for _ in range(TXN_RECORDS)
        ]
        writer.transaction(changes, abort=False)
        if index == transactions // 2:
            aborted = [(b"k%05d" % rng.randrange(KEYS), b"ABORTED") for _ in range(2_000)]
            writer.transaction([*aborted, (b"only-aborted", b"ABORTED")], abort=True)
    writer.producer.flush(30)
    return writer


def changelog_end_offsets(kafka_broker: Any, topic: str) -> dict[int, int]:
    """``{partition: end offset}``, checking the broker still holds every offset."""
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_broker.bootstrap_servers,
            "group.id": "crash-test-watermarks",
            "isolation.level": "read_committed",
        }
    )
    try:
        marks = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()
    lost = {p: low for p, (low, _) in marks.items() if low != 0}
    assert not lost, (
        f"Kafka dropped the oldest offsets of {topic} ({lost}): the test's topic must keep "
        "everything"
    )
    return {p: high for p, (_, high) in marks.items()}


class SparkChild:
    """One run of :mod:`tests.crash.spark_follower_child`, in a new session and process group."""

    def __init__(
        self, mode: str, store: Path, checkpoint: Path, bootstrap: str, topic: str
    ) -> None:
        self.store = store
        self.log_path = store.parent / f"child-{mode}-{time.monotonic_ns()}.log"
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    *("-m", "tests.crash.spark_follower_child", mode),
                    *(str(store), str(checkpoint), bootstrap, topic),
                ],
                cwd=REPO_ROOT,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                start_new_session=True,
                env=dict(os.environ, PYTHONUNBUFFERED="1", PYSPARK_PYTHON=sys.executable),
            )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], START_TIMEOUT_S)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith("started "):
            self.kill()
            raise AssertionError(
                f"the Spark child did not start its query in {START_TIMEOUT_S:.0f} s "
                f"(stdout {line!r}):\n{self.log_tail()}"
            )

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(
                f"the Spark child exited with {self.proc.returncode}:\n{self.log_tail()}"
            )

    def kill(self) -> None:
        """SIGKILL the group (driver, JVM, the source's reader process) and reap the child.

        Spark's worker daemons put themselves in groups of their own; they exit when the
        JVM is gone.
        """
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)

    def finish(self, timeout_s: float) -> None:
        """Wait for an ``available-now`` run to end by itself, successfully."""
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"the Trigger.AvailableNow query did not end in {timeout_s:.0f} s:\n"
                f"{self.log_tail()}"
            ) from None
        assert self.proc.stdout is not None
        out = self.proc.stdout.read()  # the child has exited: the pipe is at its end
        assert self.proc.returncode == 0 and out.split() == ["done"], (
            f"the Trigger.AvailableNow query failed ({self.proc.returncode}, {out!r}):\n"
            f"{self.log_tail()}"
        )


@pytest.fixture
def spawn() -> Iterator[Callable[..., SparkChild]]:
    """Factory of Spark children; any still running at teardown are killed."""
    children: list[SparkChild] = []

    def factory(mode: str, store: Path, checkpoint: Path, bootstrap: str, topic: str) -> SparkChild:
        child = SparkChild(mode, store, checkpoint, bootstrap, topic)
        children.append(child)
        return child

    yield factory
    for child in children:
        child.kill()
        if child.proc.stdout is not None:
            child.proc.stdout.close()


def wait_for_owner_client(child: SparkChild, store: Path) -> StoreClient:
    """The Flight client of the child's reader process, once it owns and serves the store."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while (client := connect_to_owner(store)) is None:
        child.check_alive()
        assert time.monotonic() < deadline, (
            f"no process owned and served {store} {START_TIMEOUT_S:.0f} s after the query "
            f"started:\n{child.log_tail()}"
        )
        time.sleep(POLL_S)
    return client


def wait_for_first_commit(child: SparkChild, client: StoreClient) -> dict[int, int]:
    """The store's changelog offsets once the follower has committed its first chunk."""
    deadline = time.monotonic() + RESTORE_TIMEOUT_S
    while True:
        # A pin, not describe(): describe() also asks Kafka for end offsets (lags).
        pinned = client.pin()
        client.release(pinned.snapshot_id)
        if any(pinned.changelog_offsets.values()):
            return dict(pinned.changelog_offsets)
        child.check_alive()
        assert time.monotonic() < deadline, (
            f"the follower committed nothing in {RESTORE_TIMEOUT_S:.0f} s:\n{child.log_tail()}"
        )
        time.sleep(POLL_S)


def kill_and_wait(child: SparkChild) -> None:
    """SIGKILL the child's process group, and wait for the store's owner to be gone."""
    child.kill()
    assert child.proc.returncode == -signal.SIGKILL, child.proc.returncode
    wait_for_owner_exit(child.store)


def mismatch(actual: Mapping[bytes, Any], expected: Mapping[bytes, Any]) -> str:
    """A short description of how two big key -> value maps differ ("" when equal)."""
    if actual == expected:
        return ""
    missing = sorted(expected.keys() - actual.keys())
    extra = sorted(actual.keys() - expected.keys())
    changed = sorted(k for k in actual.keys() & expected.keys() if actual[k] != expected[k])
    examples = [(k, actual[k], expected[k]) for k in changed[:3]]
    return (
        f"{len(missing)} keys missing {missing[:3]}, {len(extra)} extra {extra[:3]}, "
        f"{len(changed)} differ (actual, expected) {examples}"
    )


def check_store(path: Path, changelog: ChangelogProducer, end: Mapping[int, int]) -> dict[int, int]:
    """Open (and so recover) the store and check it is the fold of the committed changelog
    below the offsets it recorded; returns those offsets."""
    with Store.open(path) as store:
        metadata = store.metadata
        with store.snapshot() as snapshot:
            actual = {r.key: (r.value, r.partition, r.offset) for r in snapshot.records()}
    offsets = dict(metadata.changelog_offsets)
    assert set(offsets) <= set(end) and all(offsets[p] <= end[p] for p in offsets), (
        f"the store recorded offsets {offsets} beyond the changelog's end {dict(end)}"
    )
    problem = mismatch(actual, changelog.fold(offsets))
    assert not problem, f"store differs from the committed changelog below {offsets}: {problem}"
    assert not [k for k, (v, _, _) in actual.items() if v == b"ABORTED"]
    assert metadata.position.to_map() == changelog.position(offsets)
    redo_root = path / REDO_DIR
    assert not redo_root.exists() or not os.listdir(redo_root), "recovery left a redo file"
    return offsets


def discard_unwritten_first_batch(checkpoint: Path) -> None:
    """Remove Spark's own half-written first offsets file, as its user has to.

    A kill -9 while Spark writes its offset log's first entry leaves only its hidden temp
    file (``offsets/.0.<uuid>.tmp``); Spark 4.x then refuses to restart from the checkpoint
    (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY: its new-checkpoint check counts the temp
    file). This is Spark's checkpoint, not the store: docs/spark.md says what to delete.
    """
    offsets = checkpoint / "offsets"
    if not offsets.is_dir() or any(not p.name.startswith(".") for p in offsets.iterdir()):
        return  # a written batch (or nothing at all): Spark restarts from it
    for orphan in offsets.iterdir():
        if orphan.name.endswith((".tmp", ".tmp.crc")):
            orphan.unlink()


def restart_to_the_end(
    spawn: Callable[..., SparkChild],
    store: Path,
    checkpoint: Path,
    bootstrap: str,
    topic: str,
    changelog: ChangelogProducer,
    end: Mapping[int, int],
) -> None:
    """Restart the query from its checkpoint with Trigger.AvailableNow; it completes the store."""
    discard_unwritten_first_batch(checkpoint)
    spawn("available-now", store, checkpoint, bootstrap, topic).finish(START_TIMEOUT_S * 2)
    wait_for_owner_exit(store)
    offsets = check_store(store, changelog, end)
    assert offsets == dict(end), "the restarted query did not complete the restore"


# In `make soak` since CI reached its 25-minute budget (41 s here): the soak variant below
# kills a follower query at random moments, mid-restore among them; CI keeps the sink's and
# the store's kills at every commit step and the cluster's executor kill.
@pytest.mark.soak
def test_kill_mid_restore_then_restart(
    kafka_broker: Any,
    make_topic: Callable[..., str],
    spawn: Callable[..., SparkChild],
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=PARTITIONS, suffix="-changelog")
    changelog = produce_changelog(kafka_broker, topic, RECORDS, SEED)
    end = changelog_end_offsets(kafka_broker, topic)
    assert changelog.aborted > 0 and len(changelog.fold(end)) > KEYS // 2
    store, checkpoint = tmp_path / "store", tmp_path / "checkpoint"
    bootstrap = kafka_broker.bootstrap_servers

    child = spawn("follow", store, checkpoint, bootstrap, topic)
    with wait_for_owner_client(child, store) as client:
        seen = wait_for_first_commit(child, client)
    owner = read_owner(str(store))
    assert owner is not None
    # Otherwise killing the group would not be a kill -9 of the process that owns the store.
    assert os.getpgid(owner.pid) == child.proc.pid, "the store's owner is not in the group"
    assert any(seen.get(p, 0) < end[p] for p in end), (
        f"the whole changelog ({RECORDS} records) was restored before the test looked "
        f"({seen}): raise RECORDS so that the kill lands mid-restore"
    )
    kill_and_wait(child)
    offsets = check_store(store, changelog, end)
    assert all(offsets.get(p, 0) >= o for p, o in seen.items()), (seen, offsets)
    assert any(offsets.get(p, 0) < end[p] for p in end), (
        f"the restore finished before the kill ({offsets}): raise RECORDS"
    )
    restart_to_the_end(spawn, store, checkpoint, bootstrap, topic, changelog, end)


@pytest.mark.soak
def test_soak_kills_at_random_moments(
    kafka_broker: Any,
    make_topic: Callable[..., str],
    spawn: Callable[..., SparkChild],
    tmp_path: Path,
) -> None:
    rng = random.Random(SEED)
    topic = make_topic(partitions=PARTITIONS, suffix="-changelog")
    changelog = produce_changelog(kafka_broker, topic, SOAK_RECORDS, SEED + 1)
    end = changelog_end_offsets(kafka_broker, topic)
    store, checkpoint = tmp_path / "store", tmp_path / "checkpoint"
    bootstrap = kafka_broker.bootstrap_servers
    history: list[dict[int, int]] = []
    for kill in range(SOAK_KILLS):
        child = spawn("follow", store, checkpoint, bootstrap, topic)
        # The kill moment is the randomness under test: any time from the query's start
        # (before, while or after the reader opens the store), or, every other kill, soon
        # after the reader serves the store (during its restore however fast it is).
        if kill % 2:
            wait_for_owner_client(child, store).close()
            delay = rng.uniform(0.0, 1.0)
        else:
            delay = rng.uniform(0.0, 8.0)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.proc.wait(timeout=delay)
        child.check_alive()
        kill_and_wait(child)
        if not (store / "db").exists():
            history.append({})
            continue
        offsets = check_store(store, changelog, end)
        if history:
            previous = history[-1]
            assert all(offsets.get(p, 0) >= o for p, o in previous.items()), (previous, offsets)
        history.append(offsets)
    mid_restore = [h for h in history if 0 < sum(h.values()) < sum(end.values())]
    assert mid_restore, f"no kill landed mid-restore: {history}"
    restart_to_the_end(spawn, store, checkpoint, bootstrap, topic, changelog, end)
