"""Crash safety of the store engine, with real processes killed by SIGKILL.

A child process commits the deterministic workload of :mod:`tests.crash.workload` (small
transactions and large ones that spill and commit in chunks under a redo marker). The test
kills it at random moments and at injected points of the chunked commit, reopens the store
each time (which completes or discards an interrupted commit) and checks that the store is
exactly the fold of a committed prefix of the workload: data, envelopes, position and
changelog offsets, with the prefix never shrinking.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_statestore.store import Store
from spark_statestore.store.redo import REDO_DIR
from tests.conftest import REPO_ROOT
from tests.crash.workload import QUERY_ID, Model

SEED = 20261121
RANDOM_KILLS = 30
SOAK_KILLS = int(os.environ.get("SPARK_STATESTORE_SOAK_KILLS", "300"))

# Points of a chunked commit (see spark_statestore/store/redo.py) and whether the
# transaction must be visible after recovery when the process dies there.
INJECTED_POINTS = [
    ("redo.sealed", 1, False),  # redo file durable, no marker yet: never committed
    ("redo.marked", 1, True),  # marker written, nothing applied: recovery applies it all
    ("redo.after_chunk.1", 1, True),
    ("redo.after_chunk.5", 1, True),
    ("redo.after_chunk.3", 2, True),  # in the second chunked commit of the run
    ("redo.before_metadata", 1, True),  # all data applied, metadata not yet
    ("redo.after_metadata", 1, True),  # committed, redo file not yet removed
]


class Child:
    """One run of the child process against the store."""

    def __init__(self, store: Path, *crash_at: str) -> None:
        # stderr goes to a file: the test reads stdout alone, through one buffered reader.
        self.errors = tempfile.TemporaryFile("w+")  # noqa: SIM115 (as long as the child; finish() closes it)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.crash.child", str(store), str(SEED), *crash_at],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline().split()
        if not ready or ready[0] != "ready":
            self.proc.kill()
            self.proc.wait(timeout=30)
            raise AssertionError(f"child did not start: {ready} {self.error_text()}")
        self.started_from = int(ready[1])

    def error_text(self) -> str:
        self.errors.seek(0)
        return self.errors.read()[-2000:]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)

    def finish(self) -> tuple[int, list[str]]:
        """Wait for the (killed) child; its exit code and its output lines after "ready".

        The rest of stdout is read through the reader that read "ready": that line's read
        may have taken more lines into its buffer (a busy machine lets the child run ahead),
        and ``communicate()`` would read past them, from the pipe itself (it lost every line
        of a run once). A child that neither dies nor exits is killed after a minute.
        """
        assert self.proc.stdout is not None
        hung: list[bool] = []
        watchdog = threading.Timer(60, lambda: (hung.append(True), self.proc.kill()))
        watchdog.start()
        try:
            out = self.proc.stdout.read()
            self.proc.wait()
        finally:
            watchdog.cancel()
            self.proc.stdout.close()
        errors = self.error_text()
        self.errors.close()
        assert not hung, f"the child neither died nor exited in 60 s: {errors}"
        assert self.proc.returncode == -signal.SIGKILL, (self.proc.returncode, errors)
        return self.proc.returncode, out.splitlines()


def check_store(path: Path, model: Model) -> int:
    """Reopen (recover) the store and check it is the fold of a committed prefix."""
    with Store.open(path) as store:
        metadata = store.metadata
        record = metadata.commit_record
        last = -1 if record is None else record.batch_id
        if record is not None:
            assert record.query_id == QUERY_ID
        model.advance_to(last)  # raises if the committed prefix shrank
        with store.snapshot() as snapshot:
            actual = {r.key: (r.value, r.partition, r.offset) for r in snapshot.records()}
        assert actual == model.data, f"store differs from the fold of transactions 0..{last}"
        assert metadata.position.to_map() == model.position
        assert dict(metadata.changelog_offsets) == model.offsets
        assert metadata.commit_seq == last + 1
    redo_root = path / REDO_DIR
    assert not redo_root.exists() or not os.listdir(redo_root), "recovery left a redo file"
    return last


def commits_in(lines: list[str]) -> tuple[int | None, bool]:
    """The last transaction the child started to commit, and whether it finished."""
    started = done = None
    for line in lines:
        word, *rest = line.split()
        if word == "commit":
            started = int(rest[0])
        elif word == "done":
            done = int(rest[0])
    return started, started is not None and started == done


def run_random_kills(tmp_path: Path, kills: int) -> Iterator[int]:
    rng = random.Random(SEED)
    store = tmp_path / "store"
    model = Model(SEED)
    for _ in range(kills):
        child = Child(store)
        assert child.started_from == model.committed
        # The kill moment is the randomness under test; "ready" above is the synchronization.
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.proc.wait(timeout=rng.uniform(0.0, 0.3))
        child.kill()
        child.finish()
        yield check_store(store, model)


def test_random_kills_leave_a_committed_prefix(tmp_path: Path) -> None:
    seen = list(run_random_kills(tmp_path, RANDOM_KILLS))
    assert len(seen) == RANDOM_KILLS
    assert seen == sorted(seen)
    # The workload must actually have moved, through several large (chunked) commits.
    assert seen[-1] >= 20, seen


@pytest.mark.parametrize(("point", "occurrence", "committed"), INJECTED_POINTS)
def test_kill_inside_a_chunked_commit(
    tmp_path: Path, point: str, occurrence: int, committed: bool
) -> None:
    store = tmp_path / "store"
    model = Model(SEED)
    child = Child(store, point, str(occurrence))
    _, lines = child.finish()  # the fault hook kills it at the point
    started, finished = commits_in(lines)
    assert started is not None and not finished, lines[-3:]
    assert lines[-1] == f"commit {started} 1", "the kill must happen inside a chunked commit"
    last = check_store(store, model)
    assert last == (started if committed else started - 1)
    # The store keeps working after recovery: the next run continues from there.
    child = Child(store)
    assert child.started_from == last
    child.kill()
    child.finish()
    check_store(store, model)


@pytest.mark.soak
def test_soak_random_kills(tmp_path: Path) -> None:
    seen = list(run_random_kills(tmp_path, SOAK_KILLS))
    assert seen == sorted(seen)
