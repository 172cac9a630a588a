"""Transactions: read-your-own-writes, atomic commit of data and metadata, rollback, spill."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from spark_statestore.changelog.partitioner import partition_for_key
from spark_statestore.position import Position
from spark_statestore.store import (
    CommitRecord,
    Role,
    Store,
    StoredRecord,
    StoreMetadata,
    StoreOptions,
    StoreSpec,
    TransactionError,
    TransactionState,
    crash,
)

MakeStore = Callable[..., Store]

# A budget a large transaction exceeds (it spills to a redo file), and chunks of a few keys.
SPILL = StoreOptions(uncommitted_max_bytes=2_000, chunk_bytes=300, sync=False)


def _content(store: Store) -> dict[bytes, bytes]:
    with store.snapshot() as snap:
        return dict(snap.items())


def _redo_leftovers(store: Store) -> list[str]:
    root = os.path.join(store.path, "_redo")
    return os.listdir(root) if os.path.isdir(root) else []


def _fill(store: Store, content: dict[bytes, bytes]) -> None:
    with store.begin() as txn:
        for key, value in content.items():
            txn.put(key, value)


# -- read-your-own-writes and isolation ----------------------------------------------------
def test_put_get_delete_read_your_own_writes(make_store: MakeStore) -> None:
    store = make_store()
    _fill(store, {b"a": b"1", b"b": b"2"})
    txn = store.begin()
    before = store.snapshot()
    txn.put(b"c", b"3")
    txn.put(b"a", b"10")
    txn.delete(b"b")
    assert txn.get(b"a") == b"10"
    assert txn.get(b"b") is None
    assert txn.get(b"c") == b"3"
    assert txn.get(b"missing") is None
    # a snapshot taken before the commit, and the store itself, do not see them
    assert before.get(b"a") == b"1"
    assert before.get(b"b") == b"2"
    assert before.get(b"c") is None
    assert store.get(b"c") is None
    meta = txn.commit()
    assert txn.state is TransactionState.COMMITTED
    assert dict(before.items()) == {b"a": b"1", b"b": b"2"}
    before.close()
    with store.snapshot() as after:
        assert dict(after.items()) == {b"a": b"10", b"c": b"3"}
        assert after.commit_seq == meta.commit_seq == 2


def test_rollback_discards_every_write(make_store: MakeStore) -> None:
    store = make_store()
    _fill(store, {b"a": b"1"})
    txn = store.begin()
    txn.put(b"a", b"changed")
    txn.put(b"new", b"x")
    txn.delete(b"a")
    txn.merge_position(Position.from_map({"in": {0: 9}}))
    txn.set_changelog_offset(0, 99)
    txn.rollback()
    assert txn.state is TransactionState.ROLLED_BACK
    txn.rollback()  # idempotent
    assert _content(store) == {b"a": b"1"}
    assert store.metadata.commit_seq == 1
    assert store.metadata.position == Position.empty()
    assert store.metadata.changelog_offsets == {}
    # the store accepts a new transaction afterwards
    with store.begin() as again:
        again.put(b"b", b"2")
    assert _content(store) == {b"a": b"1", b"b": b"2"}


def test_context_manager_commits_on_normal_exit(make_store: MakeStore) -> None:
    store = make_store()
    with store.begin() as txn:
        txn.put(b"k", b"v")
    assert txn.state is TransactionState.COMMITTED
    assert store.get(b"k") == b"v"
    assert store.metadata.commit_seq == 1


def test_context_manager_rolls_back_on_exception(make_store: MakeStore) -> None:
    store = make_store()
    with pytest.raises(RuntimeError, match="boom"), store.begin() as txn:
        txn.put(b"k", b"v")
        raise RuntimeError("boom")
    assert txn.state is TransactionState.ROLLED_BACK
    assert store.get(b"k") is None
    assert store.metadata.commit_seq == 0
    store.begin().rollback()  # the failed block released the store's transaction slot


def test_context_manager_after_explicit_commit_does_nothing(make_store: MakeStore) -> None:
    store = make_store()
    with store.begin() as txn:
        txn.put(b"k", b"v")
        txn.commit()
    assert store.metadata.commit_seq == 1


def test_only_one_open_transaction(make_store: MakeStore) -> None:
    store = make_store()
    txn = store.begin()
    with pytest.raises(TransactionError, match="already has an open transaction"):
        store.begin()
    txn.commit()
    second = store.begin()
    with pytest.raises(TransactionError):
        store.begin()
    second.rollback()
    store.begin().rollback()


@pytest.mark.parametrize("end", ["commit", "rollback"])
def test_a_finished_transaction_refuses_calls(make_store: MakeStore, end: str) -> None:
    store = make_store()
    txn = store.begin()
    txn.put(b"k", b"v")
    getattr(txn, end)()
    calls: list[Callable[[], Any]] = [
        lambda: txn.put(b"k", b"v"),
        lambda: txn.delete(b"k"),
        lambda: txn.get(b"k"),
        lambda: txn.get_record(b"k"),
        lambda: list(txn.items()),
        lambda: txn.put_all([(b"k", b"v", 0, 0, 0)]),
        lambda: txn.record_source("in", 0, 1),
        lambda: txn.merge_position(Position.empty()),
        lambda: txn.set_changelog_offset(0, 1),
        lambda: txn.set_commit_record(CommitRecord("q", 1)),
        txn.commit,
    ]
    for call in calls:
        with pytest.raises(TransactionError, match=txn.state.value):
            call()


@pytest.mark.parametrize(
    ("key", "value"), [("k", b"v"), (b"k", "v"), (None, b"v"), (b"k", None), (1, b"v")]
)
def test_put_requires_bytes(make_store: MakeStore, key: Any, value: Any) -> None:
    store = make_store()
    txn = store.begin()
    with pytest.raises(TransactionError, match="must be bytes"):
        txn.put(key, value)
    txn.commit()
    assert _content(store) == {}


def test_str_keys_are_refused_with_a_hint(make_store: MakeStore) -> None:
    store = make_store()
    txn = store.begin()
    with pytest.raises(TransactionError, match="encode it first"):
        txn.put("str-key", b"v")  # type: ignore[arg-type]
    with pytest.raises(TransactionError, match="must be bytes"):
        txn.delete("str-key")  # type: ignore[arg-type]
    assert list(txn.items()) == []
    txn.rollback()


def test_put_accepts_bytes_like(make_store: MakeStore) -> None:
    store = make_store()
    with store.begin() as txn:
        txn.put(bytearray(b"k1"), memoryview(b"v1"))  # type: ignore[arg-type]
    assert _content(store) == {b"k1": b"v1"}


# -- metadata --------------------------------------------------------------------------------
def test_commit_merges_position_per_partition_maximum(make_store: MakeStore) -> None:
    store = make_store()
    with store.begin() as txn:
        txn.merge_position(Position.from_map({"in": {0: 5, 1: 3}}))
        txn.record_source("in", 0, 2)  # lower than the merged position: no regression
        txn.record_source("in", 2, 9)
        txn.record_source("in", 2, 4)  # lower than the previous source of the slot
        txn.put(b"k", b"v", source=("other", 0, 1))
    expected = Position.from_map({"in": {0: 5, 1: 3, 2: 9}, "other": {0: 1}})
    assert store.metadata.position == expected
    with store.begin() as txn:
        txn.merge_position(Position.from_map({"in": {0: 4, 3: 1}}))
        txn.record_source("in", 1, 10)
        txn.delete(b"k", source=("other", 0, 7))
    expected = Position.from_map({"in": {0: 5, 1: 10, 2: 9, 3: 1}, "other": {0: 7}})
    assert store.metadata.position == expected
    with store.snapshot() as snap:
        assert snap.position == expected


def test_commit_returns_the_new_metadata(make_store: MakeStore) -> None:
    store = make_store(partitions=2)
    txn = store.begin()
    txn.put(b"k", b"v")
    txn.set_changelog_offset(1, 8)
    txn.record_source("in", 0, 3)
    meta = txn.commit()
    assert isinstance(meta, StoreMetadata)
    assert meta == store.metadata
    assert meta.commit_seq == 1
    assert meta.changelog_offsets == {1: 8}
    assert meta.position == Position.from_map({"in": {0: 3}})


def test_empty_commit_advances_the_sequence_only(make_store: MakeStore) -> None:
    store = make_store()
    with store.begin() as txn:
        txn.record_source("in", 0, 1)
    with store.begin():
        pass
    assert store.metadata.commit_seq == 2
    assert store.metadata.position == Position.from_map({"in": {0: 1}})


def test_changelog_offsets_merge_with_previous_commits(make_store: MakeStore) -> None:
    store = make_store(partitions=3)
    with store.begin() as txn:
        txn.set_changelog_offset(0, 10)
        txn.set_changelog_offset(2, 4)
    with store.begin() as txn:
        txn.set_changelog_offset(1, 5)
        txn.set_changelog_offset(2, 6)
    assert store.metadata.changelog_offsets == {0: 10, 1: 5, 2: 6}


@pytest.mark.parametrize(("partition", "offset"), [(3, 1), (-1, 1), (0, -1), (0, True), (0, 1.5)])
def test_set_changelog_offset_is_range_checked(
    make_store: MakeStore, partition: int, offset: Any
) -> None:
    store = make_store(partitions=3)
    txn = store.begin()
    with pytest.raises(TransactionError):
        txn.set_changelog_offset(partition, offset)
    txn.commit()
    assert store.metadata.changelog_offsets == {}


def test_commit_record_round_trips_through_reopen(tmp_path: Path) -> None:
    spec = StoreSpec(Role.LEADER, "out-changelog", 2)
    record = CommitRecord(
        "3f2a-query",
        17,
        {"in": {"0": 42, "1": 7}, "meta": [1, "x", None]},
        {0: 100, 1: 55},
    )
    with Store.open(tmp_path / "s", spec) as store:
        with store.begin() as txn:
            txn.put(b"k", b"v")
            txn.set_commit_record(record)
        assert store.metadata.commit_record == record
        with store.begin() as txn:  # a later commit without a record keeps the last one
            txn.put(b"k2", b"v")
        assert store.metadata.commit_record == record
    with Store.open(tmp_path / "s", spec) as store:
        assert store.metadata.commit_record == record
        assert store.metadata.commit_seq == 2
        with store.snapshot() as snap:
            assert snap.commit_record == record


def test_set_commit_record_type_checked(make_store: MakeStore) -> None:
    store = make_store()
    txn = store.begin()
    with pytest.raises(TransactionError, match="CommitRecord"):
        txn.set_commit_record({"query_id": "q", "batch_id": 1})  # type: ignore[arg-type]
    with pytest.raises(TransactionError, match="Position"):
        txn.merge_position({"in": {0: 1}})  # type: ignore[arg-type]
    txn.rollback()


# -- envelopes and partitions ----------------------------------------------------------------
def test_envelope_metadata(make_store: MakeStore) -> None:
    store = make_store(partitions=4)
    with store.begin() as txn:
        txn.put(b"full", b"v1", partition=3, offset=42, timestamp=1_700_000_000_000)
        txn.put(b"bare", b"v2", partition=1)
        assert txn.get_record(b"full") == StoredRecord(b"full", b"v1", 3, 42, 1_700_000_000_000)
        assert txn.get_record(b"missing") is None
    with store.snapshot() as snap:
        assert snap.get_record(b"full") == StoredRecord(b"full", b"v1", 3, 42, 1_700_000_000_000)
        assert snap.get_record(b"bare") == StoredRecord(b"bare", b"v2", 1, None, None)


@pytest.mark.parametrize(
    "fields",
    [
        {"partition": 4},
        {"partition": -2},
        {"partition": 2**31},
        {"offset": -2},
        {"offset": 2**63},
        {"timestamp": -5},
        {"timestamp": 1.5},
        {"partition": True},
    ],
)
def test_envelope_fields_are_range_checked(make_store: MakeStore, fields: dict[str, Any]) -> None:
    store = make_store(partitions=4)
    txn = store.begin()
    with pytest.raises(TransactionError):
        txn.put(b"k", b"v", **fields)
    assert txn.get(b"k") is None
    txn.commit()
    assert _content(store) == {}


@pytest.mark.parametrize("partitions", [2, 7])
def test_default_partition_is_kafkas_murmur2(make_store: MakeStore, partitions: int) -> None:
    store = make_store(partitions=partitions)
    keys = [b"key-%d" % i for i in range(40)]
    with store.begin() as txn:
        for key in keys:
            txn.put(key, b"v")
    expected = {key: partition_for_key(key, partitions) for key in keys}
    assert len(set(expected.values())) > 1  # the keys do spread over partitions
    with store.snapshot() as snap:
        got = {record.key: record.partition for record in snap.records()}
    assert got == expected


def test_default_partition_of_a_single_partition_store(make_store: MakeStore) -> None:
    store = make_store(partitions=1)
    with store.begin() as txn:
        for i in range(20):
            txn.put(b"key-%d" % i, b"v")
    with store.snapshot() as snap:
        assert {record.partition for record in snap.records()} == {0}


# -- put_all -------------------------------------------------------------------------------
def test_put_all_writes_and_deletes(make_store: MakeStore) -> None:
    store = make_store(partitions=2)
    _fill(store, {b"old": b"x", b"keep": b"y"})
    with store.begin() as txn:
        count = txn.put_all(
            [
                (b"a", b"1", 0, 5, 1_000),
                (b"b", b"2", 1, 6, -1),
                (b"old", None, 0, 7, 2_000),
                (b"a", b"1b", 1, 8, -1),  # a later record of the same key wins
                (b"c", b"3", -1, -1, -1),  # unknown partition and offset, no timestamp
            ]
        )
        assert count == 5
        assert txn.get(b"old") is None
        assert txn.get(b"a") == b"1b"
    assert _content(store) == {b"a": b"1b", b"b": b"2", b"c": b"3", b"keep": b"y"}
    with store.snapshot() as snap:
        assert snap.get_record(b"a") == StoredRecord(b"a", b"1b", 1, 8, None)
        assert snap.get_record(b"b") == StoredRecord(b"b", b"2", 1, 6, None)
        assert snap.get_record(b"c") == StoredRecord(b"c", b"3", None, None, None)


def test_put_all_mixes_with_single_writes(make_store: MakeStore) -> None:
    store = make_store(partitions=2)
    with store.begin() as txn:
        txn.put(b"a", b"single")
        txn.put_all([(b"a", b"bulk", 0, 1, -1), (b"b", b"bulk", 1, 2, -1)])
        txn.delete(b"b")
        txn.put_all(iter([(b"c", b"bulk", 0, 3, -1)]))
        txn.put(b"c", b"single")
        assert list(txn.items()) == [(b"a", b"bulk"), (b"c", b"single")]
    assert _content(store) == {b"a": b"bulk", b"c": b"single"}


def test_put_columns(make_store: MakeStore) -> None:
    store = make_store(partitions=2)
    _fill(store, {b"gone": b"x"})
    with store.begin() as txn:
        count = txn.put_columns(
            [b"a", b"b", b"gone"], [b"1", b"2", None], [0, 1, 0], [10, 11, 12], [5, -1, -1]
        )
        assert count == 3
        with pytest.raises(TransactionError, match="one length"):
            txn.put_columns([b"x"], [b"1", b"2"], [0], [0], [0])
    assert _content(store) == {b"a": b"1", b"b": b"2"}
    with store.snapshot() as snap:
        assert snap.get_record(b"a") == StoredRecord(b"a", b"1", 0, 10, 5)


@pytest.mark.parametrize(
    "bad",
    [
        ("str-key", b"v", 0, 0, 0),
        (b"k", "str-value", 0, 0, 0),
        (b"k", b"v", 0, 0),
        (b"k", b"v", 2**31, 0, 0),
        (b"k", b"v", 0, "offset", 0),
        42,
    ],
)
def test_put_all_malformed_record(make_store: MakeStore, bad: Any) -> None:
    store = make_store()
    _fill(store, {b"committed": b"c"})
    with pytest.raises(TransactionError, match=r"record 1 .*malformed"), store.begin() as txn:
        txn.put_all([(b"good", b"v", 0, 0, 0), bad, (b"after", b"v", 0, 0, 0)])
    assert txn.state is TransactionState.ROLLED_BACK
    assert _content(store) == {b"committed": b"c"}  # a bad record never reaches the store


def test_put_all_names_the_malformed_record_of_a_later_chunk(make_store: MakeStore) -> None:
    store = make_store()
    records: list[Any] = [(b"k%05d" % i, b"v", 0, i, -1) for i in range(6_000)]
    records[5_000] = (b"bad", b"v", 0, "offset", -1)
    txn = store.begin()
    with pytest.raises(TransactionError, match=r"record 5000 "):
        txn.put_all(records)
    assert txn.state is TransactionState.OPEN
    txn.rollback()
    assert _content(store) == {}


def test_put_all_past_the_budget_keeps_every_record(make_store: MakeStore) -> None:
    # the bulk path checks its budget between chunks of records: every record must survive
    # the spills in the middle of one call
    store = make_store(options=StoreOptions(uncommitted_max_bytes=10_000, chunk_bytes=4_096))
    _fill(store, {b"k00000": b"old", b"zzz": b"old"})
    records = [(b"k%05d" % i, b"v%d" % i, 0, i, -1) for i in range(10_000)]
    records.append((b"zzz", None, 0, -1, -1))
    txn = store.begin()
    assert txn.put_all(records) == 10_001
    assert txn.spilled
    assert txn.get(b"k00000") == b"v0"
    assert txn.get(b"k09999") == b"v9999"
    assert txn.get(b"zzz") is None
    expected = {key: value for key, value, *_ in records if value is not None}
    assert dict(txn.items()) == expected
    txn.commit()
    assert _content(store) == expected
    assert _redo_leftovers(store) == []


# -- items() overlay -----------------------------------------------------------------------
@pytest.fixture
def overlay(make_store: MakeStore) -> Any:
    """A store holding a..f committed and a transaction that changes some of them."""
    store = make_store()
    _fill(store, {k: b"old-" + k for k in (b"a", b"b", b"c", b"d", b"e", b"f")})
    txn = store.begin()
    txn.put(b"b", b"new-b")  # overwrite
    txn.delete(b"c")  # delete a committed key
    txn.put(b"cc", b"new-cc")  # new key between committed ones
    txn.put(b"g", b"new-g")  # new key after all
    txn.put(b"0", b"new-0")  # new key before all
    txn.delete(b"zz")  # delete a key that does not exist
    yield txn
    txn.rollback()


EXPECTED_OVERLAY = {
    b"0": b"new-0",
    b"a": b"old-a",
    b"b": b"new-b",
    b"cc": b"new-cc",
    b"d": b"old-d",
    b"e": b"old-e",
    b"f": b"old-f",
    b"g": b"new-g",
}


def test_items_overlay_full_scan(overlay: Any) -> None:
    assert list(overlay.items()) == sorted(EXPECTED_OVERLAY.items())
    assert list(overlay.items(reverse=True)) == sorted(EXPECTED_OVERLAY.items(), reverse=True)


@pytest.mark.parametrize(
    ("lower", "upper"),
    [
        (b"b", b"d"),
        (b"c", b"cc"),
        (None, b"b"),
        (b"cc", None),
        (b"c", b"c"),
        (b"x", b"y"),
        (b"a", b"a"),  # a committed key alone in the range
        (b"f", None),
        (b"e", b"e"),
    ],
)
@pytest.mark.parametrize("reverse", [False, True])
def test_items_overlay_ranges(
    overlay: Any, lower: bytes | None, upper: bytes | None, reverse: bool
) -> None:
    expected = sorted(
        (k, v)
        for k, v in EXPECTED_OVERLAY.items()
        if (lower is None or k >= lower) and (upper is None or k <= upper)
    )
    if reverse:
        expected.reverse()
    assert list(overlay.items(lower, upper, reverse=reverse)) == expected


def test_items_overlay_prefix(overlay: Any) -> None:
    assert list(overlay.items(prefix=b"c")) == [(b"cc", b"new-cc")]
    assert list(overlay.items(prefix=b"b")) == [(b"b", b"new-b")]
    assert list(overlay.items(prefix=b"q")) == []
    assert list(overlay.items(prefix=b"c", reverse=True)) == [(b"cc", b"new-cc")]


def test_items_overlay_sees_later_writes(overlay: Any) -> None:
    assert dict(overlay.items()) == EXPECTED_OVERLAY
    overlay.put(b"d", b"newer-d")
    overlay.delete(b"0")
    overlay.put(b"c", b"back-c")
    expected = {**EXPECTED_OVERLAY, b"d": b"newer-d", b"c": b"back-c"}
    del expected[b"0"]
    assert list(overlay.items()) == sorted(expected.items())


# -- spill to a redo file ------------------------------------------------------------------
# The spill tests write well over a thousand records, so that a transaction past its budget
# spills however often it checks the budget; what they test is reading and committing.
MANY = 1_500


def test_spilled_transaction_reads_its_own_writes(make_store: MakeStore) -> None:
    store = make_store(options=SPILL)
    committed = {b"c%03d" % i: b"committed-%d" % i for i in range(50)}
    _fill(store, committed)
    txn = store.begin()
    expected = dict(committed)
    for i in range(MANY):
        key, value = b"n%04d" % i, b"new-%d" % i * 3
        txn.put(key, value)
        expected[key] = value
    assert txn.spilled
    assert len(_redo_leftovers(store)) == 1
    # deletes and overwrites of committed keys after the spill
    for i in range(0, 50, 3):
        txn.delete(b"c%03d" % i)
        del expected[b"c%03d" % i]
    for i in range(1, 50, 5):
        txn.put(b"c%03d" % i, b"overwritten")
        expected[b"c%03d" % i] = b"overwritten"
    txn.delete(b"n0000")  # a delete of a spilled write
    del expected[b"n0000"]
    txn.put(b"n0001", b"rewritten")  # an overwrite of a spilled write
    expected[b"n0001"] = b"rewritten"
    for key in [*committed, *expected, b"n0000", b"zzz"]:
        assert txn.get(key) == expected.get(key)
    assert txn.get_record(b"n0001") is not None
    assert list(txn.items()) == sorted(expected.items())
    assert list(txn.items(reverse=True)) == sorted(expected.items(), reverse=True)
    assert list(txn.items(b"c010", b"n0005")) == sorted(
        (k, v) for k, v in expected.items() if b"c010" <= k <= b"n0005"
    )
    assert list(txn.items(b"c010", b"n0005", reverse=True)) == sorted(
        ((k, v) for k, v in expected.items() if b"c010" <= k <= b"n0005"), reverse=True
    )
    assert list(txn.items(prefix=b"n001")) == sorted(
        (k, v) for k, v in expected.items() if k.startswith(b"n001")
    )
    txn.commit()
    assert _content(store) == expected
    assert _redo_leftovers(store) == []


def test_few_large_writes_past_the_budget_spill(make_store: MakeStore) -> None:
    # 100 writes of 20 kB are 2 MB, twenty times the budget: the writes must not all stay
    # in memory.
    budget = 100_000
    store = make_store(options=StoreOptions(uncommitted_max_bytes=budget, sync=False))
    txn = store.begin()
    for i in range(100):
        txn.put(b"big-%03d" % i, bytes([i]) * 20_000)
    assert txn.spilled
    assert txn.uncommitted_bytes <= budget + 2 * 20_100
    assert txn.get(b"big-007") == bytes([7]) * 20_000
    txn.commit()
    with store.snapshot() as snap:
        assert snap.count() == 100
        assert snap.get(b"big-099") == bytes([99]) * 20_000
    assert _redo_leftovers(store) == []


def test_chunked_commit_applies_metadata(tmp_path: Path) -> None:
    spec = StoreSpec(Role.FOLLOWER, "changelog", 2)
    record = CommitRecord("q", 3, None, {0: 10})
    with Store.open(tmp_path / "s", spec, options=SPILL) as store:
        with store.begin() as txn:
            for i in range(MANY):
                txn.put(b"k%04d" % i, b"v" * 20, partition=i % 2, offset=i)
            txn.record_source("in", 1, 77)
            txn.set_changelog_offset(1, MANY)
            txn.set_commit_record(record)
            assert txn.spilled
        meta = store.metadata
        assert meta.commit_seq == 1
        assert meta.position == Position.from_map({"in": {1: 77}})
        assert meta.changelog_offsets == {1: MANY}
        assert meta.commit_record == record
        assert _redo_leftovers(store) == []
        with store.snapshot() as snap:
            assert snap.metadata == meta
    with Store.open(tmp_path / "s", spec) as store:
        assert store.metadata == meta
        with store.snapshot() as snap:
            assert snap.count() == MANY
            assert snap.get_record(b"k0123") == StoredRecord(b"k0123", b"v" * 20, 1, 123, None)


def test_snapshot_before_a_chunked_commit_keeps_the_old_state(make_store: MakeStore) -> None:
    store = make_store(options=SPILL)
    with store.begin() as txn:
        for i in range(20):
            txn.put(b"k%04d" % i, b"old")
        txn.record_source("in", 0, 1)
    old_meta = store.metadata
    before = store.snapshot()
    with store.begin() as txn:
        for i in range(MANY):
            txn.put(b"k%04d" % i, b"new")
        txn.delete(b"k0000")
        txn.record_source("in", 0, 2)
        assert txn.spilled
    assert store.metadata.commit_seq == old_meta.commit_seq + 1
    assert before.metadata == old_meta
    assert before.position == Position.from_map({"in": {0: 1}})
    assert before.commit_seq == 1
    assert dict(before.items()) == {b"k%04d" % i: b"old" for i in range(20)}
    assert before.get(b"k0000") == b"old"
    before.close()
    with store.snapshot() as after:
        assert after.count() == MANY - 1
        assert after.get(b"k0000") is None
        assert after.get(b"k0001") == b"new"
        assert after.position == Position.from_map({"in": {0: 2}})


def test_readers_during_a_chunked_commit_see_the_previous_commit(
    make_store: MakeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store(options=StoreOptions(uncommitted_max_bytes=2_000, chunk_bytes=100))
    with store.begin() as txn:
        txn.put(b"k0000", b"old")
        txn.record_source("in", 0, 1)
    old_meta = store.metadata
    seen: dict[str, Any] = {}

    def hook(point: str) -> None:
        # called by the chunked commit between its steps; part of the data is in LevelDB
        if point.startswith("redo.after_chunk") and "during" not in seen:
            snap = store.snapshot()
            seen["during"] = snap
            seen["items"] = list(snap.items())
            seen["get"] = store.get(b"k0001")
            seen["metadata"] = store.metadata

    monkeypatch.setattr(crash, "hook", hook)
    with store.begin() as txn:
        for i in range(MANY):
            txn.put(b"k%04d" % i, b"new")
        txn.record_source("in", 0, 2)
    assert "during" in seen, "the chunked commit never applied a chunk"
    during = seen["during"]
    assert seen["items"] == [(b"k0000", b"old")]
    assert seen["get"] is None
    assert seen["metadata"] == old_meta
    assert during.metadata == old_meta
    assert list(during.items()) == [(b"k0000", b"old")]  # still, after the commit
    during.close()
    with store.snapshot() as after:
        assert after.count() == MANY
        assert after.position == Position.from_map({"in": {0: 2}})


def test_rollback_of_a_spilled_transaction(make_store: MakeStore) -> None:
    store = make_store(options=SPILL)
    _fill(store, {b"a": b"1"})
    txn = store.begin()
    for i in range(MANY):
        txn.put(b"k%04d" % i, b"v" * 10)
    assert txn.spilled
    assert len(_redo_leftovers(store)) == 1
    txn.rollback()
    assert _redo_leftovers(store) == []
    assert _content(store) == {b"a": b"1"}
    assert store.metadata.commit_seq == 1


def test_exception_in_a_spilled_transaction_block(make_store: MakeStore) -> None:
    store = make_store(options=SPILL)
    with pytest.raises(KeyError), store.begin() as txn:
        for i in range(MANY):
            txn.put(b"k%04d" % i, b"v" * 10)
        assert txn.spilled
        raise KeyError("stop")
    assert _redo_leftovers(store) == []
    assert _content(store) == {}


def test_closing_the_store_discards_a_spilled_transaction(tmp_path: Path) -> None:
    spec = StoreSpec(Role.LEADER, None, 1)
    store = Store.open(tmp_path / "s", spec, options=SPILL)
    txn = store.begin()
    txn.put_all((b"k%04d" % i, b"v", 0, -1, -1) for i in range(MANY))
    assert txn.spilled
    store.close()
    assert txn.state is TransactionState.ROLLED_BACK
    assert not os.listdir(tmp_path / "s" / "_redo")
    with Store.open(tmp_path / "s", spec) as again:
        assert _content(again) == {}


def test_stray_redo_files_are_removed_on_open(tmp_path: Path) -> None:
    spec = StoreSpec(Role.LEADER, None, 1)
    with Store.open(tmp_path / "s", spec) as store:
        _fill(store, {b"a": b"1"})
    stray = tmp_path / "s" / "_redo" / "deadbeef"
    stray.mkdir(parents=True)
    (stray / "000001.log").write_bytes(b"junk")
    with Store.open(tmp_path / "s", spec) as store:
        assert _redo_leftovers(store) == []
        assert _content(store) == {b"a": b"1"}


# -- property: the store is a dict ---------------------------------------------------------
KEYS = st.sampled_from([b"", b"a", b"ab", b"b", b"\x00", b"\xff", b"\xff\xff", b"c"])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), KEYS, st.binary(max_size=40)),
        st.tuples(st.just("delete"), KEYS),
        st.tuples(
            st.just("put_all"),
            st.lists(st.tuples(KEYS, st.none() | st.binary(max_size=40)), max_size=6),
        ),
        st.tuples(st.just("commit")),
        st.tuples(st.just("rollback")),
    ),
    max_size=40,
)


@settings(max_examples=40, deadline=None)
@given(ops=OPS, budget=st.sampled_from([1, 300, 10**6]))
# the empty key alone in a layer (committed, or spilled) must survive reverse scans
@example(ops=[("put", b"", b"x"), ("commit",), ("put", b"a", b"y")], budget=10**6)
@example(ops=[("put_all", [(b"", b"x")]), ("put", b"a", b"y")], budget=1)
@example(
    ops=[("put_all", [(b"a", b"1"), (b"b", None)]), ("delete", b"a"), ("put", b"c", b"3")],
    budget=1,
)
def test_store_matches_a_dict_model(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[Any, ...]], budget: int
) -> None:
    options = StoreOptions(uncommitted_max_bytes=budget, chunk_bytes=64, sync=False)
    path = tmp_path_factory.mktemp("model")
    model: dict[bytes, bytes] = {}
    with Store.open(path, StoreSpec(Role.LEADER, None, 1), options=options) as store:
        txn = None
        pending: dict[bytes, bytes | None] = {}
        for op in ops:
            if op[0] in ("put", "delete", "put_all"):
                if txn is None:
                    txn = store.begin()
                if op[0] == "put":
                    txn.put(op[1], op[2])
                    pending[op[1]] = op[2]
                elif op[0] == "delete":
                    txn.delete(op[1])
                    pending[op[1]] = None
                else:  # the bulk path checks the budget at once: tiny budgets spill here
                    txn.put_all([(key, value, 0, -1, -1) for key, value in op[1]])
                    pending.update(op[1])
                view = {**model, **pending}
                expected = sorted((k, v) for k, v in view.items() if v is not None)
                assert list(txn.items()) == expected
                assert list(txn.items(reverse=True)) == expected[::-1]
                for key in pending:
                    assert txn.get(key) == view[key]
            elif txn is not None:
                if op[0] == "commit":
                    txn.commit()
                    for key, value in pending.items():
                        if value is None:
                            model.pop(key, None)
                        else:
                            model[key] = value
                else:
                    txn.rollback()
                txn, pending = None, {}
                assert _content(store) == model
        if txn is not None:
            txn.rollback()
        assert _content(store) == model
        assert _redo_leftovers(store) == []
    with Store.open(path) as reader:
        assert _content(reader) == model
