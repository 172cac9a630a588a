"""Kill -9 of a Spark query writing through the transactional sink, then restart it.

A child process (:mod:`tests.crash.sink_child`: the driver's Python, its JVM and Spark's
Python daemons and workers, all in one new session) runs the sink over a JSON file source,
one input file per micro-batch, publishing to a Kafka changelog. ``uncommitted.max.bytes`` is
small, so every batch commits to the store under a redo marker. The test SIGKILLs the whole
application at injected points of the commit protocol (:mod:`spark_statestore.store.crash`: during
staging, before the Kafka commit, between the Kafka commit and the store commit, in the middle
of a chunked store commit, between the store commit and Spark's commit log) and at random
moments of the restarted query's recovery commit, restarts it until it has committed every
file, and checks:

* after each kill: the store is exactly the fold of the batches it has committed, with their
  position and the last one's source offsets (from Spark's offset log); Spark's offset log,
  the changelog's progress record, the store and Spark's commit log are at most one batch
  apart, in that order (nothing is committed twice, nothing committed is lost);
* after each completed restart, in addition: the store is the fold of all the input; the
  changelog read with read_committed holds every input row exactly once and nothing else,
  each with its timestamp and a position header within its batch's (past its row), batches
  in order, and each key's last record of a batch is its last row in the batch (a batch's
  tasks may publish while they stage, so their rows interleave); each key's
  envelope names the changelog record that wrote it (partition, offset, timestamp); a
  follower of the changelog converges to the leader (data, envelopes, position); no staged or
  redo file is left behind;
* positions, batch ids and commit counts never go backwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import plyvel
import pytest
from confluent_kafka import Consumer, TopicPartition

from spark_statestore.changelog import partition_for_key
from spark_statestore.connectors.kafka.follower.source import KafkaChangelogSource
from spark_statestore.connectors.kafka.sink.progress import read_last_progress
from spark_statestore.connectors.kafka.sink.writer import transactional_id_for
from spark_statestore.connectors.spark.leader.server import LOG_FILE
from spark_statestore.follower import Follower, FollowerState
from spark_statestore.sink.staging import STAGING_DIR
from spark_statestore.store import Role, Store, StoreSpec
from spark_statestore.store.crash import CRASH_AT, CRASH_PGID
from spark_statestore.store.layout import DATA_PREFIX, META_REDO
from spark_statestore.store.ownership import live_owner, read_owner
from spark_statestore.store.redo import REDO_DIR
from spark_statestore.store.store import DB_DIR
from tests.conftest import REPO_ROOT
from tests.crash.sink_child import SERVE
from tests.kafka_util import fence_transactions, poll_until, settled_changelog

# Self-contained (a broker and Spark applications of its own): runs beside the main run.
pytestmark = [pytest.mark.integration, pytest.mark.beside]

APP = "sinkcrash"
INPUT_TOPIC = "orders"
INPUT_PARTITIONS = 2
CHANGELOG_PARTITIONS = 8
KEYS = 1500  # later files overwrite and delete earlier files' keys
UNIQUE_ROWS = 300  # a file of keys written once each (of the KEYS // WINDOW its slot has)
SMALL_ROWS = 2000
VALUE_BYTES = 100
DELETE_RATE = 0.08
# A big batch writes BIG_ROWS fresh keys of ~1 KB: more than the store's 4 MiB commit chunk,
# so its store commit is applied in two chunks (redo.after_chunk.1 lies between them).
BIG_ROWS = 4500
BIG_VALUE_BYTES = 1000
BUDGET_BYTES = 65536  # the sink's uncommitted.max.bytes: every batch spills to a redo file
STREAMED_BUDGET_BYTES = 1 << 20  # the same in the runs that die while a batch streams
SEED = 20261130
EPOCH_MS = 1_790_000_000_000  # row r of file f has timestamp EPOCH_MS + f * FILE_STRIDE + r
FILE_STRIDE = 100_000
WINDOW = 4  # any WINDOW consecutive input files write disjoint keys

START_TIMEOUT_S = 300.0  # a JVM start on a busy 2-core machine
RUN_TIMEOUT_S = 600.0
POLL_S = 0.01
COMMIT_WINDOW_S = 1.0  # a driver-side commit, Spark's commit log and the next batch's start
SOAK_KILLS = int(os.environ.get("SPARK_STATESTORE_SINK_SOAK_KILLS", "30"))
SOAK_ROWS = 800

# Each phase adds two input files, kills the query at the point while it commits the first,
# kills the restarted query at a random moment of its recovery commit, then restarts it until
# it has committed everything. (point, whether the phase's first file is a big batch)
CI_PHASES = [
    ("sink.after_publish", False),  # in the very first commit: the restart rolls the brand
    # new store forward from the changelog
    ("redo.after_chunk.1", True),  # the restart completes the store commit from its redo file
    # The store host dies (with the application) while the tasks' rows of a batch stream
    # into its transaction: the restart fences that transaction and commits the batch anew.
    ("sink.streamed_produce", False),
    # The Kafka transaction and the store's promise of the batch (its staged files and the
    # records' changelog coordinates) committed, nothing applied: the restart's open applies
    # it, each key's envelope naming its record.
    ("store.deferred", False),
]
STREAMED = {"sink.streamed_produce", "sink.streamed_before_commit", "sink.streamed_after_commit"}
"""Points in the store host's publishing of a batch while its tasks stage it: reached in the
second batch of a run (the first, not expected, is published at its commit)."""
SERVED_PHASES = {"redo.after_chunk.1"}
"""Phases whose crashing run writes with option ``serve``: the sink's store server commits,
and it is the process that dies at the point (with the driver); the restart, without
``serve``, completes the commit it left."""
CI_RANDOM_KILL_AFTER: set[str] = set()
"""Random kills after a phase: none in CI, where the kills are at the named commit steps; the
soak kills at random after every phase and then 30 times more (the redo completion's random
kill moved there when the cluster and Spark Connect tests needed CI's time, the roll-forward's
when the query network's trust tests did)."""
SOAK_PHASES = [
    ("sink.before_publish", False),  # nothing published yet: the restart commits it afresh
    *CI_PHASES,
    # Spark replays the batch: the sink skips it (in soak only since the scale bench needed
    # CI's time; CI keeps the skip of a replayed batch in test_commit and
    # test_commit_changelog, without a Spark restart).
    ("sink.after_store_commit", False),
    # Killed while staging, before anything is published: the restart discards the staged
    # files of the dead attempt (in soak only, to keep CI within its time on real Kafka).
    ("sink.staged", False),
    ("redo.sealed", False),  # redo file durable, no marker: rolled forward from Kafka
    ("redo.marked", False),
    ("redo.before_metadata", True),
    ("redo.after_metadata", False),
    # The store host has every row in the transaction, about to commit it: aborted by the
    # restart's fence, published anew.
    ("sink.streamed_before_commit", False),
    # The store host committed a streamed batch, the store not: the restart rolls forward
    # (in soak only since the deferred store commit's kill took its place in CI; CI keeps
    # the roll-forward of the first commit).
    ("sink.streamed_after_commit", False),
    # The commit process's closing thread about to apply the promised batch.
    ("store.deferred_apply", False),
]
REDO_MARKED = {"redo.marked", "redo.after_chunk.1", "redo.before_metadata"}
AFTER_THE_COMMIT = {
    "store.deferred_apply",
    "redo.sealed",
    "redo.marked",
    "redo.after_chunk.1",
    "redo.before_metadata",
    "redo.after_metadata",
}
"""Points the commit process reaches after its commit returned, applying the batch's promise
on its closing thread (a big batch's chunked store commit is that apply), unless the sink's
store server commits (``serve``): Spark may have logged the batch's commit meanwhile."""


# -- the input -------------------------------------------------------------------------------

Envelope = tuple[bytes, "int | None", "int | None", "int | None"]
"""A stored record as checked: value, changelog partition, offset, timestamp."""


def within(low: dict[str, dict[int, int]], high: dict[str, dict[int, int]]) -> bool:
    """Whether position ``high`` contains position ``low`` (every offset at least as far)."""
    return all(
        high.get(topic, {}).get(partition, -1) >= offset
        for topic, offsets in low.items()
        for partition, offset in offsets.items()
    )


def merged_position(
    a: dict[str, dict[int, int]], b: dict[str, dict[int, int]]
) -> dict[str, dict[int, int]]:
    merged = {topic: dict(offsets) for topic, offsets in a.items()}
    for topic, offsets in b.items():
        slot = merged.setdefault(topic, {})
        for partition, offset in offsets.items():
            slot[partition] = max(offset, slot.get(partition, -1))
    return merged


@dataclass(frozen=True, slots=True)
class Row:
    key: bytes
    value: bytes | None  # None: a delete
    partition: int  # the input record's metadata, merged into the store position
    offset: int
    timestamp: int  # epoch ms: the store's envelopes and the changelog records carry it

    def to_json(self) -> str:
        value = None if self.value is None else self.value.decode()
        return json.dumps(
            {
                "key": self.key.decode(),
                "value": value,
                "topic": INPUT_TOPIC,
                "partition": self.partition,
                "offset": self.offset,
                "timestamp": self.timestamp,
            }
        )


class Input:
    """The input files, in the order the file source reads them, and what they fold to.

    ``maxFilesPerTrigger=1`` makes each file one micro-batch, but not always: when a query is
    killed after its file source logged the next file and before Spark's offset log did, the
    restarted query's next batch takes that file and the following one. So the files of a
    batch are read from the checkpoint (:meth:`Pipeline.last_file`), and since Spark orders
    the rows of a multi-file batch as it splits the files, any ``WINDOW`` consecutive files
    write disjoint keys: the fold then does not depend on that order.
    """

    def __init__(self, directory: Path, seed: int) -> None:
        self.directory = directory
        self.rng = random.Random(seed)
        self.files: list[list[Row]] = []
        self.positions: list[dict[str, dict[int, int]]] = []  # the position after each file
        self._next_offset = [0] * INPUT_PARTITIONS
        self.big: list[int] = []  # the big files
        # Strictly increasing modification times make the file source's order (oldest first)
        # the order of the files.
        self._mtime = int(time.time()) - 86_400
        directory.mkdir(parents=True, exist_ok=True)

    def add(self, rows: int | None = None, *, big: bool = False, unique: bool = False) -> int:
        """Write the next input file (``rows`` rows; by default ``SMALL_ROWS``, or ``BIG_ROWS``
        for a big file of fresh ~1 KB keys; with ``unique``, :data:`UNIQUE_ROWS` rows, each
        key once, as a keyed source's batch has them); returns its index."""
        number = len(self.files)
        # Older big files' keys, for this file to delete some.
        doomed = [
            b"b%03d-%05d" % (f, i)
            for f in self.big
            if f <= number - WINDOW
            for i in range(BIG_ROWS)
        ]
        made = []
        count = rows or (BIG_ROWS if big else UNIQUE_ROWS if unique else SMALL_ROWS)
        distinct = iter(self.rng.sample(range(KEYS // WINDOW), count) if unique else ())
        for index in range(count):
            if unique:
                key = b"k%04d" % (number % WINDOW + WINDOW * next(distinct))
                deleted = self.rng.random() < DELETE_RATE
                value = None if deleted else self._value(number, index, VALUE_BYTES)
            elif big:
                key = b"b%03d-%05d" % (number, index)
                value: bytes | None = self._value(number, index, BIG_VALUE_BYTES)
            elif doomed and self.rng.random() < 0.02:
                key, value = self.rng.choice(doomed), None
            else:
                key = b"k%04d" % (number % WINDOW + WINDOW * self.rng.randrange(KEYS // WINDOW))
                deleted = self.rng.random() < DELETE_RATE
                value = None if deleted else self._value(number, index, VALUE_BYTES)
            partition = self.rng.randrange(INPUT_PARTITIONS)
            stamp = EPOCH_MS + number * FILE_STRIDE + index
            made.append(Row(key, value, partition, self._next_offset[partition], stamp))
            self._next_offset[partition] += 1
        self.files.append(made)
        if big:
            self.big.append(number)
        self.positions.append(
            {INPUT_TOPIC: {p: o - 1 for p, o in enumerate(self._next_offset) if o}}
        )
        temporary = self.directory / f".{number:05d}.json.tmp"
        temporary.write_text("".join(row.to_json() + "\n" for row in made))
        self._mtime += 1
        os.utime(temporary, (self._mtime, self._mtime))
        temporary.rename(self.directory / f"{number:05d}.json")  # never seen half-written
        return number

    def _value(self, number: int, index: int, size: int) -> bytes:
        return b"%05d.%05d." % (number, index) + self.rng.randbytes(size // 2).hex().encode()

    def row_of(self, timestamp: int | None) -> tuple[int, int] | None:
        """``(file, row)`` of the input row with this timestamp (None: no input row has it)."""
        if timestamp is None:
            return None
        file, row = divmod(timestamp - EPOCH_MS, FILE_STRIDE)
        return (file, row) if 0 <= file < len(self.files) and row < len(self.files[file]) else None

    def position(self, last: int) -> dict[str, dict[int, int]]:
        """The position after files ``0..last``."""
        return self.positions[last] if last >= 0 else {}

    def fold(self, last: int) -> dict[bytes, bytes]:
        """The state after files ``0..last``."""
        state: dict[bytes, bytes] = {}
        for rows in self.files[: last + 1]:
            for row in rows:
                if row.value is None:
                    state.pop(row.key, None)
                else:
                    state[row.key] = row.value
        return state


# -- processes ------------------------------------------------------------------------------


def session_members(session: int) -> list[int]:
    """The live processes of ``session`` (a zombie has exited: its locks are released)."""
    pids = (int(entry) for entry in os.listdir("/proc") if entry.isdigit())
    return [pid for pid in pids if session_of(pid) == session]


def session_of(pid: int) -> int | None:
    """The session of a live process (None: gone or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == b"Z" else int(fields[3])


def wait_for_exit(pid: int, timeout_s: float) -> None:
    """Block until ``pid`` has exited (a pidfd becomes readable then)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        ready, _, _ = select.select([fd], [], [], max(timeout_s, 0.0))
        assert ready, f"pid {pid} did not exit after SIGKILL"
    finally:
        os.close(fd)


def kill_session(session: int, timeout_s: float = 60.0) -> None:
    """SIGKILL every process of ``session`` and wait until all have exited.

    Spark's Python daemons (and so the sink's driver-side commit process and the executor
    workers) put themselves in process groups of their own, but stay in the session.
    """
    deadline = time.monotonic() + timeout_s
    while members := session_members(session):
        assert time.monotonic() < deadline, f"processes {members} survived SIGKILL"
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in members:
            wait_for_exit(pid, deadline - time.monotonic())


class SinkChild:
    """One run of :mod:`tests.crash.sink_child`, in a new session (whose id is its pid)."""

    def __init__(
        self,
        pipeline: Pipeline,
        crash_at: str | None,
        serve: bool = False,
        budget: int = BUDGET_BYTES,
    ) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYSPARK_PYTHON=sys.executable)
        env.pop(CRASH_AT, None)
        env.pop(CRASH_PGID, None)  # the child sets it to its own process group
        env.pop(SERVE, None)
        if crash_at is not None:
            env[CRASH_AT] = crash_at
        if serve:
            env[SERVE] = "1"
        self.log_path = pipeline.root / f"child-{len(pipeline.children)}-{crash_at}.log"
        self.spawned_at = time.monotonic()
        self.seconds = 0.0  # how long it ran, once it has ended
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "tests.crash.sink_child"),
                    *(str(pipeline.input.directory), str(pipeline.store)),
                    *(str(pipeline.checkpoint), pipeline.bootstrap, pipeline.changelog, APP),
                    str(budget),
                ],
                cwd=REPO_ROOT,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                start_new_session=True,
                env=env,
            )

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def read_line(self, timeout_s: float) -> str:
        """The child's next line of output ("" at its end or after ``timeout_s``)."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        return self.proc.stdout.readline() if ready else ""

    def wait_started(self) -> None:
        line = self.read_line(START_TIMEOUT_S)
        assert line.startswith("started "), (
            f"the sink query did not start in {START_TIMEOUT_S:.0f} s ({line!r}):\n"
            f"{self.log_tail()}"
        )

    def wait_done(self) -> None:
        """Wait for ``done``, then kill the child: everything is committed by then, and
        Spark's orderly shutdown only costs time."""
        self.wait_started()
        line = self.read_line(RUN_TIMEOUT_S)
        if line != "done\n":
            self.wait(60)
        assert line == "done\n", (
            f"the restarted query failed (exit {self.proc.returncode}, {line!r}):\n"
            f"{self.log_tail()}"
        )
        self.kill()

    def exited(self) -> bool:
        """Whether the child has exited, without reaping it: while it is unreaped its pid
        (its process group and session id) cannot be reused, so killing them stays safe."""
        if self.proc.returncode is not None:
            return True
        return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None

    def check_alive(self) -> None:
        assert not self.exited(), f"the sink child exited early:\n{self.log_tail()}"

    def wait(self, timeout_s: float = RUN_TIMEOUT_S) -> str:
        """Wait for the child to end by itself and kill what is left of its session (Spark's
        daemons exit soon after the JVM; make it now); the child's stdout."""
        try:
            wait_for_exit(self.proc.pid, timeout_s)
        except AssertionError:
            self.kill()
            raise AssertionError(
                f"the sink child did not end in {timeout_s:.0f} s:\n{self.log_tail()}"
            ) from None
        self.kill()
        assert self.proc.stdout is not None
        return self.proc.stdout.read()

    def kill(self) -> None:
        """SIGKILL the whole application: the child's group (driver, JVM) first, then the
        rest of its session; then reap the child."""
        if self.proc.returncode is not None:
            return  # reaped: its session was killed then
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        kill_session(self.proc.pid)
        self.proc.wait(timeout=60)
        self.seconds = time.monotonic() - self.spawned_at


# -- the pipeline under test ----------------------------------------------------------------


@dataclass(frozen=True)
class State:
    """Where each party is after a kill (-1: nothing yet)."""

    planned: int  # Spark's offset log
    published: int  # the changelog's last progress record
    stored: int  # the store's commit record
    finished: int  # Spark's commit log
    position: dict[str, dict[int, int]]
    commit_seq: int

    def describe(self) -> str:
        if self.published > self.stored:
            return "between the Kafka commit and the store commit"
        if self.stored > self.finished:
            return "between the store commit and Spark's commit log"
        if self.planned > self.published:
            return "while staging or publishing"
        return "between batches"


class Pipeline:
    """One sink query (input, checkpoint, store, changelog) killed and restarted."""

    def __init__(self, root: Path, broker: Any, changelog: str, seed: int) -> None:
        self.root = root
        self.input = Input(root / "in", seed)
        self.store, self.checkpoint = root / "store", root / "checkpoint"
        self.replica = root / "replica"
        self.bootstrap: str = broker.bootstrap_servers
        self.changelog = changelog
        self.rng = random.Random(seed + 1)
        self.children: list[SinkChild] = []
        self.history: list[tuple[str, State]] = []
        self.kills: list[str] = []
        self.store_id: str | None = None

    def spawn(
        self, crash_at: str | None = None, *, serve: bool = False, budget: int = BUDGET_BYTES
    ) -> SinkChild:
        child = SinkChild(self, crash_at, serve, budget)
        self.children.append(child)
        return child

    def last_in(self, log: str) -> int:
        """The last batch in Spark's ``offsets`` or ``commits`` log (-1: none)."""
        directory = self.checkpoint / log
        names = os.listdir(directory) if directory.is_dir() else []
        return max((int(name) for name in names if name.isdigit()), default=-1)

    def published(self) -> int:
        """The last batch Kafka committed, once the dead sink's transaction is decided.

        Kafka answers the sink's commitTransaction before it writes the commit markers, so
        the store (committed right after) can be ahead of what a read_committed read sees
        for a while: the fresh-clone run of issue 38 read (1, 1, 0, 1) at the completed
        run's check. The restarted sink fences its transactional id before it reads the
        progress topic, which waits for those markers; so does this check.
        """
        assert self.store_id is not None
        fence_transactions(self.bootstrap, transactional_id_for(self.store_id, APP))
        record = read_last_progress(self.bootstrap, self.changelog, self.store_id)
        if record is None:
            return -1
        assert record.query_id == self.query_id(), record
        return record.batch_id

    def source_files(self) -> dict[int, int]:
        """The file source's log: ``{log offset: input file}`` (compacted entries included)."""
        files = {}
        directory = self.checkpoint / "sources" / "0"
        for path in directory.iterdir() if directory.is_dir() else ():
            if not path.name.startswith("."):
                for line in path.read_text().splitlines()[1:]:  # after "v1"
                    entry = json.loads(line)
                    files[entry["batchId"]] = int(Path(entry["path"]).stem)
        return files

    def last_file(self, batch: int) -> int:
        """The last input file Spark's batch ``batch`` covers (-1: none)."""
        if batch < 0:
            return -1
        lines = (self.checkpoint / "offsets" / str(batch)).read_text().splitlines()
        return self.source_files()[json.loads(lines[2])["logOffset"]]

    def batch_ends(self, last: int) -> list[int]:
        """The last input file of each of Spark's batches ``0..last``."""
        ends = [self.last_file(batch) for batch in range(last + 1)]
        spans = [end - start for start, end in zip([-1, *ends], ends, strict=False)]
        assert max(spans, default=1) <= WINDOW, (
            f"a batch spans more than {WINDOW} files ({spans}): their keys overlap, so the "
            "expected state depends on how Spark split them; raise WINDOW"
        )
        return ends

    def query_id(self) -> str:
        with open(self.checkpoint / "metadata", encoding="utf-8") as handle:
            return str(json.loads(handle.readline())["id"])

    def source_offsets(self, batch: int) -> list[Any]:
        """The batch's source offsets in Spark's offset log (one JSON line per source)."""
        lines = (self.checkpoint / "offsets" / str(batch)).read_text().splitlines()
        return [json.loads(line) for line in lines[2:]]  # after "v1" and the batch metadata

    def staged_files(self, batch: int) -> list[Path]:
        return sorted((self.store / STAGING_DIR / self.query_id() / str(batch)).glob("*.arrow"))

    # -- kills ------------------------------------------------------------------------------
    def crash_at(self, point: str, *, serve: bool = False) -> int:
        """Run the query until it SIGKILLs itself at ``point``; returns the batch it died in
        (the run's first, or its second for a point of the store host's streamed
        publishing). With ``serve``, the sink's store server commits and dies there, with
        the driver."""
        batch = self.last_in("commits") + 1 + (1 if point in STREAMED else 0)
        # The store host streams a batch only while its keys fit the commit's memory budget:
        # the run that dies in a streamed batch has room for a small file's.
        budget = STREAMED_BUDGET_BYTES if point in STREAMED else BUDGET_BYTES
        child = self.spawn(point, serve=serve, budget=budget)
        out = child.wait()
        if serve:
            assert (self.store / LOG_FILE).is_file(), "no sink store server was started"
            # The server kills the driver's process group first, then itself: the driver's
            # exit can be seen a moment before the server's own.
            store = str(self.store)
            poll_until(
                lambda: True if live_owner(store) is None else None,
                timeout_s=10,
                interval_s=0.02,
                failure=lambda: f"the store's owner outlived the crash: {live_owner(store)}",
            )
        assert child.proc.returncode == -signal.SIGKILL, (
            f"the query did not die at {point} (exit {child.proc.returncode}, {out!r}):\n"
            f"{child.log_tail()}"
        )
        planned, finished = self.last_in("offsets"), self.last_in("commits")
        if point in AFTER_THE_COMMIT and not serve:
            # Reached on the commit process's closing thread once the commit returned: Spark
            # may have logged the batch's commit, and planned the next, before the kill.
            assert planned in (batch, batch + 1) and finished in (batch - 1, batch), (
                f"{point}: Spark planned {planned} and committed {finished}, batch {batch}"
            )
        else:
            # It died in the batch: Spark planned no further one.
            assert (planned, finished) == (batch, batch - 1)
        self.kills.append(f"{point} in batch {batch}")
        return batch

    def kill_at_random(self, sync: str, window_s: float) -> State:
        """Run the query and SIGKILL it at a random moment, up to ``window_s`` after ``sync``:

        * ``"start"``: the query has started (the kill may land anywhere in its first batch);
        * ``"commit"``: a process of this run owns the store, i.e. the driver-side commit of
          the run's first batch (a replay, a roll-forward, a redo completion) has begun;
        * ``"batch"``: Spark has planned a new batch (the kill lands in a warm batch).

        At the latest the kill comes once Spark plans the batch of the last file, so the run
        never ends.
        """
        last = len(self.input.files) - 1
        assert self.last_file(self.last_in("commits")) < last - 1, "too little input left"
        planned = self.last_in("offsets")
        child = self.spawn()
        child.wait_started()
        deadline = time.monotonic() + RUN_TIMEOUT_S

        def synchronized() -> bool:
            if sync == "commit":
                owner = read_owner(str(self.store))
                return owner is not None and session_of(owner.pid) == child.proc.pid
            return sync == "start" or self.last_in("offsets") > planned

        while not synchronized():
            child.check_alive()
            assert time.monotonic() < deadline, f"no {sync} in {RUN_TIMEOUT_S:.0f} s"
            time.sleep(POLL_S)
        # The kill moment is the randomness under test.
        kill_at = time.monotonic() + self.rng.uniform(0.0, window_s)
        while time.monotonic() < kill_at and self.last_file(self.last_in("offsets")) < last:
            child.check_alive()
            time.sleep(POLL_S)
        child.check_alive()
        child.kill()
        assert child.proc.returncode == -signal.SIGKILL, child.proc.returncode
        redo_pending = bool(os.listdir(self.store / REDO_DIR)) if self.has_redo() else False
        state = self.check_prefix("random kill")
        where = state.describe() + (" (a redo file was left)" if redo_pending else "")
        self.kills.append(f"random after {sync} in batch {state.planned}: {where}")
        return state

    def has_redo(self) -> bool:
        return (self.store / REDO_DIR).is_dir()

    # -- checks ---------------------------------------------------------------------------
    def open_leader(self) -> tuple[Any, dict[bytes, Envelope]]:
        with Store.open(self.store) as store:
            self.store_id = store.manifest.store_id
            return store.metadata, envelopes(store)

    def check_prefix(self, label: str) -> State:
        """The store is the fold of the batches it committed, the parties at most one batch
        apart; nothing went backwards. Opening the store completes an interrupted commit."""
        metadata, records = self.open_leader()
        record = metadata.commit_record
        stored = -1 if record is None else record.batch_id
        if record is not None:
            assert record.query_id == self.query_id(), record
            assert record.source_offsets == self.source_offsets(stored), record
        state = State(
            planned=self.last_in("offsets"),
            published=self.published(),
            stored=stored,
            finished=self.last_in("commits"),
            position=metadata.position.to_map(),
            commit_seq=metadata.commit_seq,
        )
        order = (state.finished, state.stored, state.published, state.planned)
        assert list(order) == sorted(order) and state.planned <= state.finished + 1, (
            f"{label}: Spark committed / store / Kafka / Spark planned = {order}: each may "
            "only be one batch ahead of the one before"
        )
        values = {key: value for key, (value, _, _, _) in records.items()}
        ends = self.batch_ends(stored)
        files = ends[-1] if ends else -1
        problem = mismatch(values, self.input.fold(files))
        assert not problem, (
            f"{label}: the store (batch {stored}) differs from the fold of files 0..{files}: "
            f"{problem}"
        )
        assert state.position == self.input.position(files), (label, state.position)
        assert metadata.commit_seq == stored + 1, f"{label}: commit_seq {metadata.commit_seq}"
        self.check_forward(label, state)
        return state

    def check_forward(self, label: str, state: State) -> None:
        """Positions, batch ids and commit counts never go backwards."""
        if self.history:
            before_label, before = self.history[-1]
            for name in ("planned", "published", "stored", "finished", "commit_seq"):
                assert getattr(state, name) >= getattr(before, name), (
                    f"{name} went back from {getattr(before, name)} ({before_label}) to "
                    f"{getattr(state, name)} ({label})"
                )
            for topic, offsets in before.position.items():
                now = state.position.get(topic, {})
                assert all(now.get(p, -1) >= o for p, o in offsets.items()), (
                    f"position went backwards: {before.position} ({before_label}) -> "
                    f"{state.position} ({label})"
                )
        self.history.append((label, state))

    def finish(self) -> None:
        """Restart the query until it has committed every file, then check everything."""
        self.spawn().wait_done()
        state = self.check_prefix("completed run")
        last = state.stored
        assert (state.planned, state.published, state.stored, state.finished) == (last,) * 4
        assert self.last_file(last) == len(self.input.files) - 1, "not every file committed"
        self.check_changelog(last)
        self.check_follower()
        leftovers = [p for p in (self.store / STAGING_DIR).rglob("*") if p.is_file()]
        assert not leftovers, f"staged files left behind: {leftovers[:3]}"
        assert not self.has_redo() or not os.listdir(self.store / REDO_DIR), "redo files left"

    def check_changelog(self, last: int) -> None:
        """Every input row of batches ``0..last`` exactly once, with a position header within
        its batch's, batches in order, each key's last record of a batch its last row there;
        the store's envelopes and changelog offsets name the records."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "sink-crash"})
        try:
            lows = {
                p: consumer.get_watermark_offsets(TopicPartition(self.changelog, p), 30)[0]
                for p in range(CHANGELOG_PARTITIONS)
            }
        finally:
            consumer.close()
        assert not any(lows.values()), (
            f"Kafka dropped the oldest offsets of {self.changelog} ({lows}): the test's "
            "topic must keep everything"
        )
        ends_of = self.batch_ends(last)
        batch_of_file: list[int] = []  # the Spark batch of each input file
        for batch, end in enumerate(ends_of):
            batch_of_file += [batch] * (end + 1 - len(batch_of_file))
        seen: dict[tuple[int, int], tuple[int, int]] = {}  # (file, row) -> (partition, offset)
        reached: dict[int, dict[str, dict[int, int]]] = {}  # batch -> its records' headers
        latest: dict[int, int] = {}  # partition -> batch of its last record
        last_record: dict[tuple[int, bytes], tuple[int, int]] = {}  # (batch, key) -> row
        fold: dict[bytes, Envelope] = {}
        ends: dict[int, int] = {}
        for record in sorted(
            settled_changelog(self.bootstrap, self.changelog),
            key=lambda r: (r.partition, r.offset),
        ):
            where = f"{self.changelog}-{record.partition}@{record.offset}"
            found = self.input.row_of(record.timestamp)
            assert found is not None, f"{where}: {record.key!r} is no input row"
            assert found not in seen, f"{where}: input row {found} already at {seen[found]}"
            seen[found] = (record.partition, record.offset)
            file, index = found
            row = self.input.files[file][index]
            assert (record.key, record.value) == (row.key, row.value), f"{where}: {found}"
            assert record.partition == partition_for_key(row.key, CHANGELOG_PARTITIONS), where
            batch = batch_of_file[file] if file < len(batch_of_file) else None
            assert batch is not None, f"{where}: row {found} is in no committed batch"
            # A record's header is its batch's position as far as the batch had got when it
            # was published: after the previous batch, within its own batch, past its row.
            header = record.position.to_map() if record.position else {}
            before = self.input.position(ends_of[batch - 1]) if batch else {}
            after = self.input.position(ends_of[batch])
            assert within(before, header) and within(header, after), (
                f"{where}: row {found} of batch {batch} has the position header {header}, not "
                f"between {before} and {after}"
            )
            assert header.get(INPUT_TOPIC, {}).get(row.partition, -1) >= row.offset, (
                f"{where}: the position header {header} of row {found} is before the row"
            )
            reached[batch] = merged_position(reached.get(batch, before), header)
            previous_batch = latest.get(record.partition, -1)
            assert batch >= previous_batch, f"{where}: batch {batch} after {previous_batch}"
            latest[record.partition] = batch
            # The tasks of a batch may publish while they stage (the store host), so their
            # rows interleave; a key's last record in a batch is its last row in it.
            last_record[(batch, record.key)] = found
            if record.value is None:
                fold.pop(record.key, None)
            else:
                fold[record.key] = (record.value, record.partition, record.offset, record.timestamp)
            ends[record.partition] = record.offset + 1
        last_row: dict[tuple[int, bytes], tuple[int, int]] = {}
        for file in range(ends_of[-1] + 1):
            for index, row in enumerate(self.input.files[file]):
                last_row[(batch_of_file[file], row.key)] = (file, index)
        assert last_record == last_row, "a key's last record in a batch is not its last row"
        for batch, position in reached.items():  # a batch's records reach its position
            assert position == self.input.position(ends_of[batch]), (batch, position)
        missing = [(f, r) for f in range(ends_of[-1] + 1) for r in range(len(self.input.files[f]))]
        missing = [found for found in missing if found not in seen]
        assert not missing, (
            f"{len(missing)} input rows are not in the changelog: {missing[:3]}; it holds "
            f"{len(seen)} committed records, offsets {self.watermarks('read_committed')} "
            f"(read_uncommitted: {self.watermarks('read_uncommitted')})"
        )
        metadata, records = self.open_leader()
        problem = mismatch(records, fold)
        assert not problem, f"the store's envelopes differ from the changelog: {problem}"
        assert dict(metadata.changelog_offsets) == ends, (metadata.changelog_offsets, ends)

    def watermarks(self, isolation: str) -> dict[int, tuple[int, int]]:
        consumer = Consumer(
            {"bootstrap.servers": self.bootstrap, "group.id": "marks", "isolation.level": isolation}
        )
        try:
            return {
                p: consumer.get_watermark_offsets(TopicPartition(self.changelog, p), 30)
                for p in range(CHANGELOG_PARTITIONS)
            }
        finally:
            consumer.close()

    def check_follower(self) -> None:
        """A follower of the changelog (kept across checks) converges to the leader."""
        metadata, leader = self.open_leader()
        spec = StoreSpec(Role.FOLLOWER, self.changelog, CHANGELOG_PARTITIONS)
        with Store.open(self.replica, spec) as replica:
            follower = Follower(replica, KafkaChangelogSource(self.bootstrap, self.changelog))
            deadline = time.monotonic() + RUN_TIMEOUT_S
            try:
                while follower.state is not FollowerState.RUNNING:
                    assert time.monotonic() < deadline, "the follower never caught up"
                    follower.step()
            finally:
                follower.stop()
            problem = mismatch(envelopes(replica), leader)
            assert not problem, f"the follower differs from the leader: {problem}"
            assert replica.metadata.position == metadata.position
            offsets = replica.metadata.changelog_offsets
            assert all(offsets.get(p, 0) >= o for p, o in metadata.changelog_offsets.items())

    def check_crash(self, point: str, batch: int) -> None:
        """What the store, Kafka and Spark hold right after the kill at ``point``."""
        if point.startswith("redo."):
            # Leave the interrupted store commit to the restarted sink; read only around it.
            assert self.published() == batch, "the batch was published before its store commit"
            file = self.last_file(batch)
            rows = self.input.files[file]
            db = plyvel.DB(str(self.store / DB_DIR), create_if_missing=False)
            try:
                marked = db.get(META_REDO) is not None
                # A big batch writes fresh keys, applied in key order: its first and last
                # key show how far the chunked apply got.
                applied = [
                    db.get(DATA_PREFIX + row.key) is not None for row in rows[:: len(rows) - 1]
                ]
            finally:
                db.close()
            assert marked == (point in REDO_MARKED), f"{point}: redo marker present: {marked}"
            assert self.has_redo() and os.listdir(self.store / REDO_DIR), "no redo file"
            if file in self.input.big and self.last_file(batch - 1) == file - 1:
                nothing, everything = [False, False], [True, True]
                expected = {
                    "redo.sealed": nothing,
                    "redo.marked": nothing,
                    "redo.before_metadata": everything,
                    "redo.after_metadata": everything,
                }.get(point, [True, False])  # redo.after_chunk.N: part of the keys
                assert applied == expected, f"{point}: first/last key applied: {applied}"
            return
        staged = self.staged_files(batch)
        state = self.check_prefix(point)
        seen = (state.planned, state.published, state.stored, state.finished)
        expected = {
            "sink.staged": (batch, batch - 1, batch - 1, batch - 1),
            "sink.before_publish": (batch, batch - 1, batch - 1, batch - 1),
            "sink.after_publish": (batch, batch, batch - 1, batch - 1),
            "sink.after_store_commit": (batch, batch, batch, batch - 1),
            "store.deferred": (batch, batch, batch, batch - 1),
            "sink.streamed_produce": (batch, batch - 1, batch - 1, batch - 1),
            "sink.streamed_before_commit": (batch, batch - 1, batch - 1, batch - 1),
            "sink.streamed_after_commit": (batch, batch, batch - 1, batch - 1),
        }.get(point)
        if point in AFTER_THE_COMMIT:  # Spark may be a batch further (see crash_at)
            assert seen[1:3] == (batch, batch), f"{point}: published/stored {seen}"
            assert seen[0] in (batch, batch + 1) and seen[3] in (batch - 1, batch), seen
        else:
            assert seen == expected, f"{point}: planned/published/stored/finished {seen}"
        if point in ("sink.staged", "sink.before_publish"):
            assert staged, f"{point}: batch {batch} has no staged file"


def envelopes(store: Store) -> dict[bytes, Envelope]:
    with store.snapshot() as snapshot:
        return {r.key: (r.value, r.partition, r.offset, r.timestamp) for r in snapshot.records()}


def mismatch(actual: dict[bytes, Any], expected: dict[bytes, Any]) -> str:
    """A short description of how two key -> value maps differ ("" when equal)."""
    if actual == expected:
        return ""
    missing = sorted(expected.keys() - actual.keys())
    extra = sorted(actual.keys() - expected.keys())
    changed = sorted(k for k in actual.keys() & expected.keys() if actual[k] != expected[k])
    examples = [(k, str(actual[k])[:60], str(expected[k])[:60]) for k in changed[:2]]
    return (
        f"{len(missing)} keys missing {missing[:3]}, {len(extra)} extra {extra[:3]}, "
        f"{len(changed)} differ (actual, expected) {examples}"
    )


@pytest.fixture
def pipeline(
    kafka_broker: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Pipeline]:
    """A sink pipeline on a fresh changelog; children still running at teardown are killed."""
    name = request.node.name.replace("_", "-")[:40]
    changelog = f"{APP}-{name}-{time.monotonic_ns()}-changelog"
    # Neither compacted (unlike a production changelog) nor time-retained: the check reads
    # every input row back exactly once, and the input's timestamps are months old, so the
    # log cleaner would remove overwritten rows and retention would delete all of them.
    kafka_broker.create_topic(
        changelog, CHANGELOG_PARTITIONS, compacted=False, config={"retention.ms": "-1"}
    )
    kafka_broker.create_topic(f"{changelog}-progress", 1)
    made = Pipeline(tmp_path, kafka_broker, changelog, SEED)
    yield made
    for child in made.children:
        child.kill()
        if child.proc.stdout is not None:
            child.proc.stdout.close()
    runs = ", ".join(f"{child.seconds:.0f}" for child in made.children)
    print(f"{len(made.kills)} kills: {'; '.join(made.kills)}\nseconds per run: {runs}")


def run_phase(pipeline: Pipeline, point: str, big: bool, *, random_kill: bool = True) -> None:
    # The store host commits a streamed batch as it is only when the keys several of its
    # tasks wrote reached the changelog in the commit's order: its phases write files of
    # unique keys (two tasks each), as a keyed source's batches are.
    unique = point in STREAMED
    first = pipeline.input.add(big=big, unique=unique)
    pipeline.input.add(unique=unique)
    if unique:
        pipeline.input.add(
            unique=True
        )  # the run's first batch is not streamed: it dies in the second
    batch = pipeline.crash_at(point, serve=point in SERVED_PHASES)
    # It died committing the first new file (the second for a streamed point).
    assert pipeline.last_file(batch - 1) + 1 == first + (1 if point in STREAMED else 0)
    pipeline.check_crash(point, batch)
    if random_kill:
        # A batch applied after its commit returned (AFTER_THE_COMMIT) may have been logged
        # by Spark before the kill: the random kill needs two files not yet committed.
        while len(pipeline.input.files) - pipeline.last_file(pipeline.last_in("commits")) < 3:
            pipeline.input.add(unique=unique)
        pipeline.kill_at_random("commit", COMMIT_WINDOW_S)
    pipeline.finish()


def test_kills_at_each_commit_step(pipeline: Pipeline) -> None:
    # Each kill is a Spark application start; the random kills of the recovery commits are
    # the soak's (test_soak_kills), to keep CI within its time.
    for point, big in CI_PHASES:
        run_phase(pipeline, point, big, random_kill=point in CI_RANDOM_KILL_AFTER)
    assert len(pipeline.kills) == len(CI_PHASES) + len(CI_RANDOM_KILL_AFTER), pipeline.kills


@pytest.mark.soak
def test_soak_kills(pipeline: Pipeline) -> None:
    for point, big in SOAK_PHASES:
        run_phase(pipeline, point, big)
    for kill in range(SOAK_KILLS):
        while len(pipeline.input.files) - pipeline.last_file(pipeline.last_in("commits")) < 5:
            pipeline.input.add(SOAK_ROWS)
        sync = ("start", "commit", "batch")[kill % 3]
        pipeline.kill_at_random(sync, {"start": 10.0, "commit": COMMIT_WINDOW_S}.get(sync, 1.0))
    pipeline.finish()
    kinds = Counter(kill.split(": ", 1)[-1] for kill in pipeline.kills if kill.startswith("rand"))
    assert len(kinds) >= 2, f"the random kills landed in too few places: {kinds}"
