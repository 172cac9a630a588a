"""Deferred commits (``Store.commit_deferred``, spark_statestore/store/deferred.py): the sink
without a changelog commits a batch's staged files as a promise the store keeps, applied on the
commit process's closing thread while Spark goes on. Durable when the commit returns, applied
exactly once whoever applies it: the closing thread, the next commit, or the next open after a
real SIGKILL at each step; a file gone missing is an error that names it, never a silent loss."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spark_statestore.sink.commit import BatchToCommit, commit_batch, is_committed
from spark_statestore.sink.staging import StagingArea
from spark_statestore.store import (
    CommitRecord,
    DeferredCommit,
    Role,
    Store,
    StoreCorruptedError,
    StoreSpec,
)
from spark_statestore.store.crash import CRASH_AT
from spark_statestore.store.layout import META_PENDING
from tests.unit.test_store_metrics import staged_rows

SPEC = StoreSpec(Role.LEADER, None, 1)
OFFSETS = [{"orders": {"0": 7}}]


def _stage(path: Path, batch_id: int, rows: dict[int, list[tuple[bytes, bytes | None]]]) -> list:
    """Stage ``{Spark partition: [(key, value)]}`` of a batch as the sink's tasks do."""
    staging = StagingArea(path)
    return [
        staging.stage(
            "q",
            batch_id,
            partition,
            0,
            [staged_rows([k for k, _ in pairs], [v for _, v in pairs])],
        )
        for partition, pairs in sorted(rows.items())
    ]


def _commit(path: Path, batch_id: int, rows: dict[int, list[tuple[bytes, bytes | None]]]) -> None:
    staged = _stage(path, batch_id, rows)
    with Store.open(path, SPEC) as store:
        batch = BatchToCommit("q", batch_id, staged, OFFSETS)
        commit_batch(store, StagingArea(path), batch, defer=True)
        assert store.pending_commit is not None and store.pending_commit.batch_id == batch_id
        # Durable now, applied when the handle closes: its metadata is the last applied one.
        assert not is_committed(store, "q", batch_id)


def _contents(path: Path) -> tuple[dict[bytes, bytes], CommitRecord | None, int]:
    with Store.open(path) as store:
        with store.snapshot() as snapshot:
            data = {key: value for key, value in snapshot.items()}
        meta = store.metadata
        assert store.pending_commit is None
        return data, meta.commit_record, meta.commit_seq


def test_a_deferred_batch_is_applied_when_its_handle_closes(tmp_path: Path) -> None:
    path = tmp_path / "store"
    _commit(path, 0, {0: [(b"a", b"1"), (b"b", b"2")], 1: [(b"a", b"3"), (b"c", b"4")]})
    data, record, seq = _contents(path)
    assert data == {b"a": b"3", b"b": b"2", b"c": b"4"}  # Spark partition order: 1 wins
    assert record is not None and (record.query_id, record.batch_id) == ("q", 0)
    assert record.source_offsets == OFFSETS and seq == 1
    with Store.open(path) as store:
        assert store.metadata.position.to_dict() == {"orders": {"0": 6}}
    # The staged files were the store's until it applied them; then it removed them (the
    # next commit removes the batch's directory).
    assert os.listdir(path / "_staging" / "q") == ["0"]
    assert os.listdir(path / "_staging" / "q" / "0") == []
    _commit(path, 1, {0: [(b"b", None), (b"d", b"5")]})
    assert os.listdir(path / "_staging" / "q") == ["1"]
    data, record, seq = _contents(path)
    assert data == {b"a": b"3", b"c": b"4", b"d": b"5"} and seq == 2
    assert record is not None and record.batch_id == 1


def test_the_next_commit_and_the_closing_thread_apply_it_too(tmp_path: Path) -> None:
    path = tmp_path / "store"
    staged = _stage(path, 0, {0: [(b"a", b"1")]})
    store = Store.open(path, SPEC)
    commit_batch(store, StagingArea(path), BatchToCommit("q", 0, staged), defer=True)
    # A second promise first keeps the one before.
    staged = _stage(path, 1, {0: [(b"a", b"2"), (b"b", b"1")]})
    commit_batch(store, StagingArea(path), BatchToCommit("q", 1, staged), defer=True)
    assert store.metadata.commit_seq == 1 and store.get(b"a") == b"1"
    store.close_in_background()
    data, record, seq = _contents(path)  # waits for the closing thread
    assert data == {b"a": b"2", b"b": b"1"} and seq == 2
    assert record is not None and record.batch_id == 1


def _killed_at(path: Path, point: str, batch_id: int, *, background: bool) -> None:
    """Commit a deferred batch in a child process SIGKILLed at ``point``."""
    code = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parents[2])!r})
from pathlib import Path
from tests.unit.test_store_deferred import _stage, SPEC, OFFSETS
from spark_statestore.sink.commit import BatchToCommit, commit_batch
from spark_statestore.sink.staging import StagingArea
from spark_statestore.store import Store
path = Path({str(path)!r})
rows = [(b"k%d" % {batch_id}, b"v"), (b"shared", b"%d" % {batch_id})]
staged = _stage(path, {batch_id}, {{0: rows}})
store = Store.open(path, SPEC)
commit_batch(store, StagingArea(path), BatchToCommit("q", {batch_id}, staged, OFFSETS), defer=True)
store.close_in_background() if {background!r} else store.close()
"""
    env = {**os.environ, CRASH_AT: point}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]


@pytest.mark.parametrize(
    ("point", "background"),
    [
        ("store.deferred", False),  # the promise is written: nothing applied
        ("store.deferred_apply", True),  # the closing thread was about to apply it
        ("store.deferred_applied", False),  # applied, the promise not yet removed
    ],
)
def test_a_process_killed_at_any_step_leaves_the_batch_committed_exactly_once(
    tmp_path: Path, point: str, background: bool
) -> None:
    path = tmp_path / "store"
    _commit(path, 0, {0: [(b"k0", b"v"), (b"shared", b"0")]})
    _killed_at(path, point, 1, background=background)
    with Store.open(path, SPEC) as store:  # the open applies what the dead process promised
        assert store.pending_commit is None
        assert is_committed(store, "q", 1)
    data, record, seq = _contents(path)
    assert data == {b"k0": b"v", b"k1": b"v", b"shared": b"1"}
    assert record is not None and record.batch_id == 1 and seq == 2  # applied once
    # Spark replays the batch after such a crash: skipped.
    staged = _stage(path, 1, {0: [(b"k1", b"v"), (b"shared", b"1")]})
    with Store.open(path, SPEC) as store:
        outcome = commit_batch(store, StagingArea(path), BatchToCommit("q", 1, staged), defer=True)
        assert outcome.value == "skipped" and store.pending_commit is None
    assert _contents(path)[2] == 2


def test_a_reader_s_open_applies_it(tmp_path: Path) -> None:
    path = tmp_path / "store"
    _commit(path, 0, {0: [(b"a", b"1")]})
    _killed_at(path, "store.deferred", 1, background=False)
    with Store.open(path) as reader:  # read-only: it still completes the committed batch
        assert reader.get(b"k1") == b"v" and reader.metadata.commit_seq == 2


def test_a_missing_file_is_named_and_the_promise_kept(tmp_path: Path) -> None:
    path = tmp_path / "store"
    _commit(path, 0, {0: [(b"a", b"1")]})
    _killed_at(path, "store.deferred", 1, background=False)
    batch_dir = path / "_staging" / "q" / "1"
    (name,) = os.listdir(batch_dir)
    os.rename(batch_dir / name, tmp_path / name)
    with pytest.raises(StoreCorruptedError, match=f"_staging/q/1/{name}.*cannot be completed"):
        Store.open(path)
    os.rename(tmp_path / name, batch_dir / name)  # the file is back: the commit completes
    assert _contents(path)[0] == {b"a": b"1", b"k1": b"v", b"shared": b"1"}


def test_a_damaged_promise_is_a_corrupted_store(tmp_path: Path) -> None:
    path = tmp_path / "store"
    _commit(path, 0, {0: [(b"a", b"1")]})
    with Store.open(path, SPEC) as store:
        store._check_open().put(META_PENDING, b'{"files": 3}', sync=True)
    with pytest.raises(StoreCorruptedError, match="deferred commit marker cannot be decoded"):
        Store.open(path)
    with pytest.raises(ValueError, match="relative to the store"):
        DeferredCommit(("/etc/passwd",), None, CommitRecord("q", 0))
    assert json.loads(DeferredCommit(("a",), None, CommitRecord("q", 0)).to_json())["files"] == [
        "a"
    ]


def test_spark_s_abort_after_a_commit_leaves_the_promised_files(tmp_path: Path) -> None:
    """Spark aborts a batch whose commit raised, also after the store committed it (the
    store host could not be started again, say): the staged files of a batch promised to the
    store must stay until it is applied. The batch writer, without a Spark driver."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    from spark_statestore.connectors.spark.options import parse_sink_options
    from spark_statestore.connectors.spark.sink import BatchWriter, StagedMessage

    path = tmp_path / "store"
    schema = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])

    def writer(version: int) -> BatchWriter:
        raw = {"path": str(path), "txnappid": "app", "txnversion": str(version)}
        return BatchWriter(parse_sink_options(raw, streaming=False), schema, False)

    staging = StagingArea(path)
    first = staging.stage("app", 0, 0, 0, [staged_rows([b"a"], [b"1"])])
    committed = writer(0)
    committed.commit([StagedMessage(first)])
    committed.abort([StagedMessage(first)])  # the commit had raised after the store's
    assert (path / "_staging" / "app" / "0").is_dir()
    assert _contents(path)[0] == {b"a": b"1"}
    # A batch that was not committed: its files go.
    second = staging.stage("app", 1, 0, 0, [staged_rows([b"b"], [b"2"])])
    writer(1).abort([StagedMessage(second)])
    assert not (path / "_staging" / "app" / "1").exists()
    assert _contents(path)[0] == {b"a": b"1"}
    # A promise a killed commit process left (Spark then aborts that batch in another
    # process): the abort's open applies it before the batch's files go.
    _killed_at(path, "store.deferred", 1, background=False)  # query "q", batch 1
    assert os.listdir(path / "_staging" / "q" / "1")
    raw = {"path": str(path), "txnappid": "q", "txnversion": "1"}
    BatchWriter(parse_sink_options(raw, streaming=False), schema, False).abort([])
    assert not (path / "_staging" / "q" / "1").exists()
    data = _contents(path)[0]
    assert data[b"k1"] == b"v" and data[b"shared"] == b"1"


class NumberingChangelog:
    """A changelog of three partitions that numbers each partition's records on from its
    end, as Kafka does for the sink's only writer (the real one is tested against Kafka),
    and keeps every record it was given: ``(key, value, partition, offset, timestamp)``."""

    topic = "app-store-changelog"

    def __init__(self) -> None:
        self.ends = {0: 7, 1: 0, 2: 40}
        self.records: list[tuple[bytes, bytes | None, int, int, int]] = []

    def partition_count(self) -> int:
        return 3

    def published_batch(self, store_id: str) -> None:
        return None

    def publish(self, changes: Any, **_: Any) -> dict[int, int]:
        written: set[int] = set()
        for key, value, _, stamp, part in changes:
            self.records.append((key, value, part, self.ends[part], stamp))
            self.ends[part] += 1
            written.add(part)
        return {part: self.ends[part] for part in written}


PUBLISHED_SPEC = StoreSpec(Role.LEADER, NumberingChangelog.topic, 3)
_BATCHES = [
    {0: [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")], 1: [(b"a", b"4"), (b"d", b"5")]},
    {0: [(b"b", None), (b"e", b"6")], 1: [(b"a", b"7"), (b"f", b"8"), (b"e", b"9")]},
]


def _published_commits(path: Path, changelog: NumberingChangelog, defer: bool) -> None:
    for batch_id, rows in enumerate(_BATCHES):
        staged = _stage(path, batch_id, rows)
        with Store.open(path, PUBLISHED_SPEC) as store:
            batch = BatchToCommit("q", batch_id, staged, OFFSETS)
            commit_batch(store, StagingArea(path), batch, changelog, defer=defer)  # type: ignore[arg-type]
            assert (store.pending_commit is not None) == defer


def _stored(path: Path) -> tuple[dict[bytes, tuple[Any, ...]], Any]:
    with Store.open(path) as store:
        assert store.pending_commit is None
        with store.snapshot() as snapshot:
            records = {}
            for key, value in snapshot.items():
                record = snapshot.get_record(key)
                assert record is not None
                records[key] = (value, record.partition, record.offset, record.timestamp)
        return records, store.metadata


@pytest.mark.parametrize("defer", [False, True])
def test_a_published_batch_is_stored_with_its_changelog_coordinates(
    tmp_path: Path, defer: bool
) -> None:
    """With a changelog the commit defers its store commit too, once the Kafka transaction
    has committed (the records' coordinates written beside the staged files): the store
    ends exactly as the direct commit leaves it, each key naming its last record."""
    path = tmp_path / "store"
    changelog = NumberingChangelog()
    _published_commits(path, changelog, defer)
    expected: dict[bytes, tuple[Any, ...]] = {}
    for key, value, part, offset, stamp in changelog.records:
        if value is None:
            expected.pop(key, None)
        else:
            expected[key] = (value, part, offset, stamp)
    records, meta = _stored(path)
    assert records == expected
    assert records[b"a"][0] == b"7" and b"b" not in records
    written = {part for _, _, part, _, _ in changelog.records}
    assert {p: meta.changelog_offsets.get(p) for p in written} == {
        p: changelog.ends[p] for p in written
    }
    assert meta.commit_record is not None and meta.commit_record.batch_id == 1
    assert meta.commit_seq == 2 and meta.position.to_dict() == {"orders": {"0": 6}}
    if defer:  # applied: the store removed the batch's files and coordinates
        assert os.listdir(path / "_staging" / "q" / "1") == []


def test_a_published_promise_survives_the_process(tmp_path: Path) -> None:
    """The commit process killed once its promise (with coordinates) is written: the next
    open stores the records as the killed process would have."""
    path = tmp_path / "store"
    changelog = NumberingChangelog()
    staged = _stage(path, 0, _BATCHES[0])
    store = Store.open(path, PUBLISHED_SPEC)
    batch = BatchToCommit("q", 0, staged, OFFSETS)
    commit_batch(store, StagingArea(path), batch, changelog, defer=True)  # type: ignore[arg-type]
    # As a killed process leaves it: the marker, not applied (the handle is dropped unclosed).
    pending = store._pending
    assert pending is not None and pending.coordinates is not None
    store._pending = None
    store.close()
    with Store.open(path, PUBLISHED_SPEC) as reopened:  # the open applies the promise
        assert reopened.pending_commit is None and is_committed(reopened, "q", 0)
    records, meta = _stored(path)
    last = {
        key: (value, part, offset, stamp) for key, value, part, offset, stamp in changelog.records
    }
    assert records == last
    assert meta.commit_record is not None
    assert meta.commit_record.changelog_end_offsets == {
        p: changelog.ends[p] for p in meta.commit_record.changelog_end_offsets
    }


def test_coordinates_that_do_not_match_the_files_are_a_corrupted_store(tmp_path: Path) -> None:
    from spark_statestore.store.deferred import write_coordinates

    path = tmp_path / "store"
    staged = _stage(path, 0, _BATCHES[0])
    store = Store.open(path, PUBLISHED_SPEC)
    commit_batch(
        store, StagingArea(path), BatchToCommit("q", 0, staged), NumberingChangelog(), defer=True
    )  # type: ignore[arg-type]
    pending = store._pending
    assert pending is not None and pending.coordinates is not None
    store._pending = None
    store.close()
    coordinates = path / pending.coordinates
    write_coordinates(str(coordinates), [([0, 1], [1, 2]), ([0], [3])])  # rows missing
    with pytest.raises(StoreCorruptedError, match=r"coordinates\.arrow.*too few rows"):
        Store.open(path)
    write_coordinates(str(coordinates), [([0] * 3, [1] * 3)])  # a file's batch missing
    with pytest.raises(StoreCorruptedError, match="1 coordinate batches for 2 files"):
        Store.open(path)


def test_a_deferred_commit_removes_the_files_spark_did_not_commit(tmp_path: Path) -> None:
    """A killed run's (or a failed task's) attempt left its file in the batch: the deferred
    commit of the attempt Spark committed removes it at once (the store removes the promised
    files once it has applied them), so a query's last batch leaves nothing behind."""
    path = tmp_path / "store"
    dead = _stage(path, 0, {0: [(b"a", b"dead")]})
    staged = _stage(path, 0, {0: [(b"a", b"1")], 1: [(b"b", b"2")]})
    with Store.open(path, SPEC) as store:
        commit_batch(store, StagingArea(path), BatchToCommit("q", 0, staged, OFFSETS), defer=True)
        left = sorted(os.listdir(path / "_staging" / "q" / "0"))
        assert left == sorted(os.path.basename(s.name) for s in staged)
        assert os.path.basename(dead[0].name) not in left
    assert _contents(path)[0] == {b"a": b"1", b"b": b"2"}
    assert os.listdir(path / "_staging" / "q" / "0") == []
