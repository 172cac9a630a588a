"""The sink's staging area and commit protocol, without Spark or Kafka."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_statestore.position import Position
from spark_statestore.sink.commit import BatchToCommit, CommitOutcome, commit_batch, is_committed
from spark_statestore.sink.staging import StagedFile, StagingArea, StagingError, staged_schema
from spark_statestore.store import Store, StoreOptions

MakeStore = Callable[..., Store]
Row = tuple[bytes, bytes | None, str | None, int | None, int | None]


def batch_of(rows: list[Row]) -> pa.RecordBatch:
    keys, values, topics, partitions, offsets = (list(c) for c in zip(*rows, strict=True))
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(topics, pa.string()),
            pa.array(partitions, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array([1_000] * len(keys), pa.int64()),
        ],
        schema=staged_schema(),
    )


def stage(
    staging: StagingArea, batch_id: int, partition: int, rows: list[Row], attempt: int = 0
) -> StagedFile:
    return staging.stage("q1", batch_id, partition, attempt, [batch_of(rows)])


def content(store: Store) -> dict[bytes, bytes]:
    with store.snapshot() as snapshot:
        return dict(snapshot.items())


def test_a_batch_commits_in_partition_order_with_its_position(make_store: MakeStore) -> None:
    store = make_store(topic=None)
    staging = StagingArea(store.path)
    second = stage(staging, 0, 1, [(b"a", b"late", "in", 0, 7), (b"b", None, "in", 0, 8)])
    first = stage(staging, 0, 0, [(b"a", b"early", "in", 1, 3), (b"b", b"1", "in", 1, 4)])
    assert first.max_offsets == {"in": {1: 4}} and first.rows == 2
    outcome = commit_batch(store, staging, BatchToCommit("q1", 0, [second, first], {"src": 1}))
    assert outcome is CommitOutcome.COMMITTED
    assert content(store) == {b"a": b"late"}  # partition 1 after partition 0; null deletes
    metadata = store.metadata
    assert metadata.position == Position.from_map({"in": {0: 8, 1: 4}})
    assert metadata.commit_record is not None
    assert (metadata.commit_record.query_id, metadata.commit_record.batch_id) == ("q1", 0)
    assert metadata.commit_record.source_offsets == {"src": 1}
    assert not os.path.exists(os.path.join(staging.root, "q1", "0"))  # staging cleaned


def test_a_replayed_batch_is_skipped(make_store: MakeStore) -> None:
    store = make_store(topic=None)
    staging = StagingArea(store.path)
    commit_batch(
        store,
        staging,
        BatchToCommit("q1", 0, [stage(staging, 0, 0, [(b"k", b"1", None, None, None)])]),
    )
    seq = store.metadata.commit_seq
    replay = stage(staging, 0, 0, [(b"k", b"REPLAYED", None, None, None)], attempt=1)
    assert commit_batch(store, staging, BatchToCommit("q1", 0, [replay])) is CommitOutcome.SKIPPED
    assert content(store) == {b"k": b"1"} and store.metadata.commit_seq == seq
    assert is_committed(store, "q1", 0) and not is_committed(store, "q1", 1)
    assert not is_committed(store, "other-query", 0)  # another query's batch 0 is new
    # The next batch applies.
    nxt = stage(staging, 1, 0, [(b"k", b"2", None, None, None)])
    assert commit_batch(store, staging, BatchToCommit("q1", 1, [nxt])) is CommitOutcome.COMMITTED
    assert content(store) == {b"k": b"2"}


def test_only_the_files_named_are_applied(make_store: MakeStore) -> None:
    # A failed or speculative attempt leaves its own file; the commit applies the messages.
    store = make_store(topic=None)
    staging = StagingArea(store.path)
    stage(staging, 0, 0, [(b"dup", b"attempt-0", None, None, None)], attempt=0)
    chosen = stage(staging, 0, 0, [(b"dup", b"attempt-1", None, None, None)], attempt=1)
    commit_batch(store, staging, BatchToCommit("q1", 0, [chosen]))
    assert content(store) == {b"dup": b"attempt-1"}


def test_a_task_without_rows_keeps_no_staged_file(make_store: MakeStore) -> None:
    # Its commit message names no file (Spark commits nothing of it): a file would stay
    # behind a batch whose commit the store applies later (a deferred commit).
    store = make_store(topic=None)
    staging = StagingArea(store.path)
    empty = pa.RecordBatch.from_pylist([], schema=staged_schema())
    staged = staging.stage("q1", 0, 3, 0, [empty])
    assert (staged.rows, staged.size) == (0, 0)
    assert not os.path.exists(os.path.join(staging.root, staged.name))
    assert os.listdir(os.path.join(staging.root, "q1", "0")) == []


def test_complete_mode_replaces_the_content(make_store: MakeStore) -> None:
    store = make_store(topic=None)
    staging = StagingArea(store.path)
    commit_batch(
        store,
        staging,
        BatchToCommit(
            "q1",
            0,
            [
                stage(
                    staging, 0, 0, [(b"a", b"1", None, None, None), (b"b", b"2", None, None, None)]
                )
            ],
        ),
    )
    whole = stage(staging, 1, 0, [(b"b", b"3", None, None, None), (b"c", b"4", None, None, None)])
    commit_batch(store, staging, BatchToCommit("q1", 1, [whole], complete=True))
    assert content(store) == {b"b": b"3", b"c": b"4"}


def test_a_missing_staged_file_fails_and_leaves_the_store(make_store: MakeStore) -> None:
    store = make_store(topic=None)
    staging = StagingArea(store.path)
    commit_batch(
        store,
        staging,
        BatchToCommit("q1", 0, [stage(staging, 0, 0, [(b"a", b"1", None, None, None)])]),
    )
    before = store.metadata
    ok = stage(staging, 1, 0, [(b"a", b"2", None, None, None)])
    gone = stage(staging, 1, 1, [(b"b", b"2", None, None, None)])
    os.unlink(os.path.join(staging.root, gone.name))
    with pytest.raises(StagingError, match="Spark partition 1"):
        commit_batch(store, staging, BatchToCommit("q1", 1, [ok, gone]))
    assert store.metadata == before and content(store) == {b"a": b"1"}


def test_a_batch_over_the_memory_budget_commits_in_chunks(
    make_store: MakeStore, tmp_path: Path
) -> None:
    store = make_store(
        topic=None,
        options=StoreOptions(uncommitted_max_bytes=64 * 1024, chunk_bytes=16 * 1024, sync=False),
    )
    staging = StagingArea(store.path)
    rows: list[Row] = [(b"k%05d" % i, b"v" * 100, "in", 0, i) for i in range(3000)]
    commit_batch(store, staging, BatchToCommit("q1", 0, [stage(staging, 0, 0, rows)]))
    assert len(content(store)) == 3000
    assert store.metadata.position == Position.from_map({"in": {0: 2999}})
    assert (
        not os.listdir(os.path.join(store.path, "_redo"))
        if os.path.exists(os.path.join(store.path, "_redo"))
        else True
    )


def test_stale_staging_of_dead_queries_is_removed(make_store: MakeStore) -> None:
    store = make_store(topic=None)
    staging = StagingArea(store.path)
    old = staging.stage("dead-query", 3, 0, 0, [batch_of([(b"x", b"1", None, None, None)])])
    old_dir = os.path.join(staging.root, "dead-query")
    os.utime(old_dir, (0, 0))
    commit_batch(
        store,
        staging,
        BatchToCommit("q1", 0, [stage(staging, 0, 0, [(b"a", b"1", None, None, None)])]),
    )
    assert not os.path.exists(old_dir) and old.rows == 1


def test_kafka_shaped_source_offsets_join_the_position(make_store: MakeStore) -> None:
    store = make_store(topic=None)
    staging = StagingArea(store.path)
    offsets = [{"logOffset": 3}, {"orders": {"0": 10, "1": 0}}, 7, "-"]
    staged = stage(staging, 0, 0, [(b"a", b"1", "orders", 1, 2)])
    commit_batch(store, staging, BatchToCommit("q1", 0, [staged], offsets))
    # next offset 10 -> processed up to 9; a next offset of 0 says nothing.
    assert store.metadata.position == Position.from_map({"orders": {0: 9, 1: 2}})


def test_source_offsets_of_other_shapes_say_nothing_and_never_fail(make_store: MakeStore) -> None:
    store = make_store(topic=None)
    staging = StagingArea(store.path)
    # Digits of other scripts, superscripts, signs and values beyond Kafka's ranges.
    odd = {"\u0663": 10, "\u00b2": 10, "+3": 10, "2147483648": 10, "4": 2**63 + 5, "5": 2**70}
    offsets = [{"orders": {"0": 10, **odd}}]
    staged = stage(staging, 0, 0, [(b"a", b"1", None, None, None)])
    commit_batch(store, staging, BatchToCommit("q1", 0, [staged], offsets))
    assert store.metadata.position == Position.from_map({"orders": {0: 9}})


def test_stale_staging_skips_entries_that_are_not_batch_ids(make_store: MakeStore) -> None:
    store = make_store(topic=None)
    staging = StagingArea(store.path)
    for name in ("\u00b2", "\u0663", "-1"):
        os.makedirs(os.path.join(staging.root, "q1", name))
    commit_batch(
        store,
        staging,
        BatchToCommit("q1", 5, [stage(staging, 5, 0, [(b"a", b"1", None, None, None)])]),
    )
    assert sorted(os.listdir(os.path.join(staging.root, "q1"))) == sorted(
        ["\u00b2", "\u0663", "-1"]
    )


@pytest.mark.parametrize(
    ("query_id", "problem"),
    [("a\x00b", "NUL"), ("a" * 256, "more than 255"), ("a/b", "path separator"), (".a", "'.'")],
)
def test_a_query_id_that_cannot_name_a_directory_is_a_staging_error(
    make_store: MakeStore, query_id: str, problem: str
) -> None:
    staging = StagingArea(make_store(topic=None).path)
    with pytest.raises(StagingError, match=problem):
        staging.stage(query_id, 0, 0, 0, [batch_of([(b"a", b"1", None, None, None)])])


class RecordingPublisher:
    """A changelog that keeps what it is given (the real one is tested against Kafka)."""

    topic = "app-store-changelog"

    def __init__(self) -> None:
        self.changes: list[tuple[Any, ...]] = []

    def partition_count(self) -> int:
        return 1

    def published_batch(self, store_id: str) -> None:
        return None

    def publish(self, changes: Any, **_: Any) -> dict[int, int]:
        self.changes.extend(changes)
        return {0: len(self.changes)}


def test_published_timestamps_are_the_stored_ones_and_never_zero(make_store: MakeStore) -> None:
    store = make_store(topic="app-store-changelog")
    staging = StagingArea(store.path)
    schema = staged_schema()
    rows = pa.RecordBatch.from_arrays(
        [
            pa.array([b"given", b"zero", b"none"]),
            pa.array([b"1", b"2", b"3"]),
            *(pa.nulls(3, schema.field(name).type) for name in ("topic", "partition", "offset")),
            pa.array([1_000, 0, None], pa.int64()),
        ],
        schema=schema,
    )
    publisher = RecordingPublisher()
    staged = staging.stage("q1", 0, 0, 0, [rows])
    commit_batch(store, staging, BatchToCommit("q1", 0, [staged]), publisher)  # type: ignore[arg-type]
    published = {key: stamp for key, _, _, stamp, _ in publisher.changes}
    with store.snapshot() as snapshot:
        stored = {key: snapshot.get_record(key).timestamp for key in published}  # type: ignore[union-attr]
    assert stored == published
    # librdkafka publishes timestamp 0 as "now": 0 gets the batch's commit time, as null does.
    assert published[b"given"] == 1_000
    assert published[b"zero"] == published[b"none"] > 1_000


def test_changelog_offsets_number_each_partition_on_from_its_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch's records take consecutive offsets per partition, in order, on both paths."""
    from spark_statestore.native import ENV
    from spark_statestore.sink.publication import consecutive_offsets

    parts = [2, 0, 2, 2, 1, 0]
    expected = ([10, 0, 11, 12, 5, 1], {0: 2, 1: 6, 2: 13})
    for path in ("0", "auto"):
        monkeypatch.setenv(ENV, path)
        assert consecutive_offsets(parts, {0: 0, 1: 5, 2: 10}) == expected
        with pytest.raises(KeyError):
            consecutive_offsets([3], {0: 0})


@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.sampled_from(["a", "b", "c"])),
            st.one_of(st.none(), st.integers(0, 5)),
            st.one_of(st.none(), st.integers(0, 2**40)),
        ),
        max_size=60,
    ),
    st.dictionaries(
        st.sampled_from(["a", "b"]),
        st.dictionaries(st.integers(0, 5), st.integers(0, 2**40), max_size=3),
        max_size=2,
    ),
)
def test_max_offsets_merge_as_a_loop_over_the_rows_does(
    rows: list[tuple[str | None, int | None, int | None]], before: dict[str, dict[int, int]]
) -> None:
    """The staging area's record of a task's input offsets (its position), computed in
    Arrow, equals the plain loop: rows missing a topic, partition or offset say nothing."""
    from spark_statestore.sink.staging import merge_max_offsets

    expected = {topic: dict(offsets) for topic, offsets in before.items()}
    for topic, partition, offset in rows:
        if topic is not None and partition is not None and offset is not None:
            slot = expected.setdefault(topic, {})
            slot[partition] = max(offset, slot.get(partition, -1))
    count = len(rows)
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([b"k"] * count, pa.binary()),
            pa.array([b"v"] * count, pa.binary()),
            pa.array([r[0] for r in rows], pa.string()),
            pa.array([r[1] for r in rows], pa.int32()),
            pa.array([r[2] for r in rows], pa.int64()),
            pa.nulls(count, pa.int64()),
        ],
        schema=staged_schema(),
    )
    merged = {topic: dict(offsets) for topic, offsets in before.items()}
    merge_max_offsets(merged, batch)
    assert merged == expected
