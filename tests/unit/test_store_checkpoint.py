"""Checkpoints: a reader's private copy of a store, so a long read never keeps writers out.

Before, a reader without a live owner held the store (its lock and LevelDB) for the whole
read, and a sink's commit waiting on it failed its streaming query after 120 s.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_statestore.connectors.spark.ddl import parse_ddl
from spark_statestore.connectors.spark.options import parse_reader_options
from spark_statestore.connectors.spark.reader.snapshot import SnapshotReader, reader_ddl
from spark_statestore.store import (
    Role,
    Store,
    StoreNotFoundError,
    StoreOptions,
    StoreSpec,
    checkpoint,
    crash,
    redo,
)
from spark_statestore.store.checkpoint import (
    READERS_DIR,
    reader_checkpoint,
    remove_stale_checkpoints,
)
from tests.conftest import REPO_ROOT
from tests.crash.test_store_crash import SEED, Child, commits_in
from tests.crash.workload import Model

SPEC = StoreSpec(Role.LEADER, None, 2)
NO_WAIT = StoreOptions(owner_wait_seconds=0.0, lock_wait_seconds=0.5)


def _commit(path: Path, items: dict[bytes, bytes], options: StoreOptions = NO_WAIT) -> None:
    with Store.open(path, SPEC, options=options) as store, store.begin() as txn:
        for key, value in items.items():
            txn.put(key, value)
        txn.record_source("orders", 0, len(items))


def _content(store: Store) -> dict[bytes, bytes]:
    with store.snapshot() as snap:
        return dict(snap.items())


OLD = {b"k%05d" % i: b"old-%d" % i for i in range(3000)}
NEW = {b"k%05d" % i: b"new-%d" % i for i in range(0, 3000, 2)}


def _readers(path: Path) -> list[str]:
    root = path / READERS_DIR
    return sorted(os.listdir(root)) if root.exists() else []


def test_a_checkpoint_is_the_store(tmp_path: Path) -> None:
    path = tmp_path / "store"
    _commit(path, OLD)
    with Store.open(path) as store:
        expected, metadata, manifest = _content(store), store.metadata, store.manifest
    with reader_checkpoint(path, purpose="test") as copy:
        assert _content(copy) == expected == OLD
        assert copy.metadata == metadata
        assert copy.manifest == manifest
        assert stat.S_IMODE(os.stat(path / READERS_DIR).st_mode) == 0o700
    assert _readers(path) == []  # the copy is gone


def test_writers_commit_while_a_checkpoint_is_read(tmp_path: Path) -> None:
    path = tmp_path / "store"
    _commit(path, OLD)
    with reader_checkpoint(path, purpose="test") as copy, copy.snapshot() as snap:
        items = snap.items()
        assert next(items) == (b"k00000", b"old-0")  # a read in the middle of a scan
        _commit(path, NEW)  # owns the store at once: nobody else holds it
        rest = dict(items)
        assert rest == {k: v for k, v in OLD.items() if k != b"k00000"}
    with Store.open(path) as store:
        assert _content(store) == {**OLD, **NEW}


def test_a_checkpoint_completes_an_interrupted_chunked_commit(tmp_path: Path) -> None:
    path = tmp_path / "store"
    _commit(path, OLD)
    spill = StoreOptions(uncommitted_max_bytes=2_000, chunk_bytes=300)

    def fail(point: str) -> None:
        if point == "redo.after_chunk.2":
            raise OSError(5, "Input/output error")

    crash.hook = fail
    try:
        with pytest.raises(OSError):
            _commit(path, NEW, spill)
    finally:
        crash.hook = None
    with reader_checkpoint(path, purpose="test") as copy:
        assert _content(copy) == {**OLD, **NEW}


def test_a_checkpoint_completes_a_chunked_commit_killed_midway(tmp_path: Path) -> None:
    # A writer SIGKILLed in the middle of applying a chunked commit (as in
    # tests/crash/test_store_crash.py): the store holds part of the transaction under a
    # redo marker. The checkpoint's open completes the commit before copying the files.
    path = tmp_path / "store"
    _, lines = Child(path, "redo.after_chunk.3").finish()
    started, finished = commits_in(lines)
    assert started is not None and not finished
    assert lines[-1] == f"commit {started} 1", "the kill must happen inside a chunked commit"
    model = Model(SEED)
    model.advance_to(started)
    with reader_checkpoint(path, purpose="test") as copy, copy.snapshot() as snap:
        record = copy.metadata.commit_record
        assert record is not None and record.batch_id == started
        assert {r.key: (r.value, r.partition, r.offset) for r in snap.records()} == model.data
    assert os.listdir(path / redo.REDO_DIR) == []  # the store itself was completed


def test_a_checkpoint_of_a_missing_store_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "nothing"
    with pytest.raises(StoreNotFoundError), reader_checkpoint(path, purpose="test"):
        pass
    assert not path.exists()  # _readers/ and a lock file were created there before


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    previous = os.umask(0o022)  # the common default: what the copy must not rely on
    yield
    os.umask(previous)


@pytest.mark.usefixtures("permissive_umask")
def test_a_checkpoint_is_owner_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "store"
    _commit(path, OLD)
    made: dict[str, int] = {}
    copy_database = checkpoint._copy_database

    def look(store_path: str, copy: str) -> None:
        # The copy as made, before its own LevelDB opens it and replaces CURRENT, the
        # MANIFEST and the log with files of its own (behind the 0700 directories).
        copy_database(store_path, copy)
        for name in os.listdir(Path(copy) / "db"):
            made[name] = stat.S_IMODE(os.stat(Path(copy) / "db" / name).st_mode)

    monkeypatch.setattr(checkpoint, "_copy_database", look)
    with reader_checkpoint(path, purpose="test") as copy:
        root = Path(copy.path)
        assert root.parent == path / READERS_DIR
        modes = {p.name: stat.S_IMODE(os.stat(p).st_mode) for p in root.parent.iterdir()}
        assert modes == {root.name: 0o700, f"{root.name}.lock": 0o600}
        assert stat.S_IMODE(os.stat(root / "db").st_mode) == 0o700
    copied = {name: mode for name, mode in made.items() if not name.endswith((".ldb", ".sst"))}
    assert "CURRENT" in copied and any(name.startswith("MANIFEST-") for name in copied)
    assert copied == dict.fromkeys(copied, 0o600)


def test_the_lock_file_of_a_reader_killed_while_deleting_its_copy_goes(tmp_path: Path) -> None:
    path = tmp_path / "store"
    _commit(path, OLD)
    with reader_checkpoint(path, purpose="test"):
        pass
    orphan = uuid.uuid4().hex
    (path / READERS_DIR / f"{orphan}.lock").touch()  # its copy deleted, its lock file not
    assert remove_stale_checkpoints(str(path)) == [orphan]
    assert _readers(path) == []


_HOLDER = r"""
import sys
from spark_statestore.store.checkpoint import reader_checkpoint
with reader_checkpoint(sys.argv[1], purpose="holder") as store:
    print("ready", flush=True)
    sys.stdin.read()
"""


def test_stale_checkpoints_go_and_live_ones_stay(tmp_path: Path) -> None:
    path = tmp_path / "store"
    _commit(path, OLD)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        live = _readers(path)
        assert len(live) == 2  # the copy and its lock file
        assert remove_stale_checkpoints(str(path)) == []
        with reader_checkpoint(path, purpose="test"):
            assert set(live) < set(_readers(path))
        assert _readers(path) == live
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        with reader_checkpoint(path, purpose="test"):
            assert not set(live) & set(_readers(path))
        assert _readers(path) == []
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_a_spark_read_without_an_owner_never_keeps_a_writer_out(tmp_path: Path) -> None:
    # The executor side of spark.read.format("spark_statestore") on a store nobody serves:
    # while its task is in the middle of the scan, a sink's commit gets the store at once.
    path = tmp_path / "store"
    _commit(path, OLD)
    options = parse_reader_options({"path": str(path), "keyformat": "binary"})
    reader = SnapshotReader(options, parse_ddl(reader_ddl(options)))
    (partition,) = reader.partitions()
    batches = iter(reader.read(partition))
    first = next(batches)  # the task is reading
    _commit(path, NEW)  # failed with StoreLockedError before (after 120 s in a real sink)
    rows = [*first.to_pylist(), *(r for b in batches for r in b.to_pylist())]
    assert {r["key"]: r["value"] for r in rows} == OLD  # the snapshot the read started with
