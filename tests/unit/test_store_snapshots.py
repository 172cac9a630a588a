"""Snapshots: consistent reads of one commit, scans, Arrow batches, metadata, closing."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pytest

from spark_statestore.position import Position
from spark_statestore.store import (
    Store,
    StoreClosedError,
    StoredRecord,
    StoreError,
    StoreOptions,
    arrow_schema,
)

MakeStore = Callable[..., Store]

# key -> (value, partition, offset, timestamp); None: unknown / no timestamp
ROWS: dict[bytes, tuple[bytes, int | None, int | None, int | None]] = {
    b"": (b"empty-key", 0, 0, 1_000),
    b"\x00": (b"zero", 1, 1, None),
    b"\x00\x01": (b"", 0, None, None),  # empty value
    b"a": (b"A", 1, 2, 2_000),
    b"a\xff": (b"A-ff", 0, 3, 3_000),
    b"a\xff\x00": (b"A-ff-0", 1, 4, None),
    b"a\xff\xff": (b"A-ff-ff", 0, 5, 5_000),
    b"ab": (b"AB", 1, 6, 6_000),
    b"b": (b"B", None, 7, 7_000),  # unknown partition
    b"c": (b"C", 0, None, 8_000),
    b"\xff": (b"FF", 1, 9, 9_000),
    b"\xff\xff": (b"FF-FF", 0, 10, None),
    b"\xff\xff\x00": (b"FF-FF-0", 1, 11, 11_000),
}
ITEMS = sorted((k, v[0]) for k, v in ROWS.items())


def _between(lower: bytes | None, upper: bytes | None) -> list[tuple[bytes, bytes]]:
    return [
        (k, v) for k, v in ITEMS if (lower is None or k >= lower) and (upper is None or k <= upper)
    ]


@pytest.fixture
def store(make_store: MakeStore) -> Store:
    store = make_store(partitions=2)
    with store.begin() as txn:
        # the bulk path: -1 is an unknown partition / offset, no timestamp
        txn.put_all(
            (key, value, -1 if p is None else p, -1 if o is None else o, -1 if t is None else t)
            for key, (value, p, o, t) in ROWS.items()
        )
        txn.record_source("in", 0, 100)
        txn.set_changelog_offset(0, 12)
    return store


# -- point reads ---------------------------------------------------------------------------
def test_get_and_multi_get(store: Store) -> None:
    with store.snapshot() as snap:
        for key, (value, *_) in ROWS.items():
            assert snap.get(key) == value
        assert snap.get(b"missing") is None
        assert snap.get(b"a\xfe") is None
        assert snap.multi_get([b"", b"a", b"missing", b"\xff\xff"]) == {
            b"": b"empty-key",
            b"a": b"A",
            b"\xff\xff": b"FF-FF",
        }
        assert snap.multi_get([]) == {}
        assert snap.get(b"\x00\x01") == b""  # an empty value is not a missing key


def test_get_record(store: Store) -> None:
    with store.snapshot() as snap:
        for key, (value, partition, offset, timestamp) in ROWS.items():
            assert snap.get_record(key) == StoredRecord(key, value, partition, offset, timestamp)
        assert snap.get_record(b"missing") is None


# -- scans ---------------------------------------------------------------------------------
def test_full_scan(store: Store) -> None:
    with store.snapshot() as snap:
        assert list(snap.items()) == ITEMS
        assert list(snap.scan()) == ITEMS
        assert list(snap.items(reverse=True)) == ITEMS[::-1]
        assert snap.count() == len(ROWS)


@pytest.mark.parametrize(
    ("lower", "upper"),
    [
        (b"a", b"b"),  # both bounds exist: both included
        (b"a\xff", b"a\xff\xff"),
        (b"\x00", b"\x00"),
        (b"a", b"a"),
        (b"", b""),
        (b"aa", b"az"),  # neither bound exists
        (None, b"a"),
        (b"ab", None),
        (b"", None),
        (None, b"\xff\xff\x00"),
        (b"\xff\xff\x00", None),
        (b"zz", None),
        (b"d", b"e"),
    ],
)
@pytest.mark.parametrize("reverse", [False, True])
def test_range_bounds_are_inclusive(
    store: Store, lower: bytes | None, upper: bytes | None, reverse: bool
) -> None:
    expected = _between(lower, upper)
    if reverse:
        expected.reverse()
    with store.snapshot() as snap:
        assert list(snap.items(lower, upper, reverse=reverse)) == expected
        assert list(snap.range(lower, upper, reverse=reverse)) == expected


def test_inverted_range_is_empty(store: Store) -> None:
    with store.snapshot() as snap:
        assert list(snap.items(b"c", b"a")) == []
        assert list(snap.items(b"c", b"a", reverse=True)) == []


@pytest.mark.parametrize(
    "prefix", [b"a", b"a\xff", b"a\xff\xff", b"\xff", b"\xff\xff", b"\x00", b"ab", b"q", b""]
)
@pytest.mark.parametrize("reverse", [False, True])
def test_prefix_scans(store: Store, prefix: bytes, reverse: bool) -> None:
    expected = [(k, v) for k, v in ITEMS if k.startswith(prefix)]
    if reverse:
        expected.reverse()
    with store.snapshot() as snap:
        assert list(snap.items(prefix=prefix, reverse=reverse)) == expected
        if not reverse:
            assert list(snap.prefix(prefix)) == expected


def test_prefix_with_ff_does_not_leak_into_the_next_prefix(store: Store) -> None:
    with store.snapshot() as snap:
        assert [k for k, _ in snap.items(prefix=b"a\xff")] == [b"a\xff", b"a\xff\x00", b"a\xff\xff"]
        assert [k for k, _ in snap.items(prefix=b"\xff")] == [b"\xff", b"\xff\xff", b"\xff\xff\x00"]


def test_prefix_and_bounds_are_exclusive(store: Store) -> None:
    with store.snapshot() as snap, pytest.raises(StoreError, match="prefix"):
        list(snap.items(b"a", None, prefix=b"a"))


@pytest.mark.parametrize("limit", [0, 1, 3, len(ROWS), len(ROWS) + 5])
def test_limit(store: Store, limit: int) -> None:
    with store.snapshot() as snap:
        assert list(snap.items(limit=limit)) == ITEMS[:limit]
        assert list(snap.items(reverse=True, limit=limit)) == ITEMS[::-1][:limit]
        assert list(snap.items(b"a", b"b", limit=2)) == _between(b"a", b"b")[:2]
        assert [r.key for r in snap.records(limit=limit)] == [k for k, _ in ITEMS[:limit]]


def test_limit_must_be_an_int(store: Store) -> None:
    with store.snapshot() as snap, pytest.raises(StoreError, match="limit"):
        list(snap.items(limit="3"))  # type: ignore[arg-type]


def test_records(store: Store) -> None:
    with store.snapshot() as snap:
        records = list(snap.records())
        assert records == [StoredRecord(k, *ROWS[k]) for k, _ in ITEMS]
        assert [r.key for r in snap.records(prefix=b"a\xff", reverse=True)] == [
            b"a\xff\xff",
            b"a\xff\x00",
            b"a\xff",
        ]
        assert [r.key for r in snap.records(b"a", b"ab")] == [k for k, _ in _between(b"a", b"ab")]


def test_count_of_an_empty_store(make_store: MakeStore) -> None:
    store = make_store()
    with store.snapshot() as snap:
        assert snap.count() == 0
        assert list(snap.items()) == []
        assert list(snap.items(reverse=True)) == []
        assert list(snap.to_batches()) == []


def test_single_key_store_scans(make_store: MakeStore) -> None:
    store = make_store()
    with store.begin() as txn:
        txn.put(b"", b"only")
    with store.snapshot() as snap:
        assert list(snap.items()) == [(b"", b"only")]
        assert list(snap.items(reverse=True)) == [(b"", b"only")]
        assert snap.count() == 1


# -- Arrow batches -------------------------------------------------------------------------
def test_arrow_schema() -> None:
    schema = arrow_schema()
    assert schema.names == ["key", "value", "partition", "offset", "timestamp", "headers"]
    assert schema.field("key").type == pa.binary()
    assert schema.field("value").type == pa.binary()
    assert schema.field("partition").type == pa.int32()
    assert schema.field("offset").type == pa.int64()
    assert schema.field("timestamp").type == pa.timestamp("ms", tz="UTC")
    assert schema.field("headers").type == pa.list_(
        pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
    )
    assert not schema.field("key").nullable
    assert not schema.field("value").nullable


def test_to_batches_content(store: Store) -> None:
    with store.snapshot() as snap:
        batches = list(snap.to_batches())
    assert len(batches) == 1
    batch = batches[0]
    assert batch.schema == arrow_schema()
    assert batch.column("key").to_pylist() == [k for k, _ in ITEMS]
    assert batch.column("value").to_pylist() == [v for _, v in ITEMS]
    assert batch.column("partition").to_pylist() == [ROWS[k][1] for k, _ in ITEMS]
    assert batch.column("offset").to_pylist() == [ROWS[k][2] for k, _ in ITEMS]
    stamps = batch.column("timestamp")
    assert stamps.cast(pa.int64()).to_pylist() == [ROWS[k][3] for k, _ in ITEMS]
    assert stamps.null_count == sum(1 for row in ROWS.values() if row[3] is None)
    assert batch.column("partition").null_count == 1
    assert batch.column("offset").null_count == 2
    first = stamps.to_pylist()[0]
    assert first == datetime(1970, 1, 1, 0, 0, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize("batch_rows", [1, 2, 5, len(ROWS), 1000])
def test_to_batches_splits_by_batch_rows(store: Store, batch_rows: int) -> None:
    with store.snapshot() as snap:
        batches = list(snap.to_batches(batch_rows=batch_rows))
    sizes = [b.num_rows for b in batches]
    assert all(0 < size <= batch_rows for size in sizes)
    assert all(size == batch_rows for size in sizes[:-1])
    assert sum(sizes) == len(ROWS)
    table = pa.Table.from_batches(batches, schema=arrow_schema())
    assert table.column("key").to_pylist() == [k for k, _ in ITEMS]


def test_to_batches_selection(store: Store) -> None:
    with store.snapshot() as snap:
        (batch,) = snap.to_batches(b"a", b"b", reverse=True)
        assert batch.column("key").to_pylist() == [k for k, _ in _between(b"a", b"b")][::-1]
        (batch,) = snap.to_batches(prefix=b"\xff", limit=2)
        assert batch.column("key").to_pylist() == [b"\xff", b"\xff\xff"]


@pytest.mark.parametrize("partitions", [[0], [1], [0, 1], [5]])
def test_to_batches_partition_filter(store: Store, partitions: list[int]) -> None:
    with store.snapshot() as snap:
        batches = list(snap.to_batches(partitions=partitions, batch_rows=2))
    keys = [k for b in batches for k in b.column("key").to_pylist()]
    assert keys == [k for k, _ in ITEMS if ROWS[k][1] in partitions]
    for batch in batches:
        assert set(batch.column("partition").to_pylist()) <= set(partitions)
        assert batch.num_rows == 2 or batch is batches[-1]


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_to_batches_rejects_bad_batch_rows(store: Store, bad: object) -> None:
    with store.snapshot() as snap, pytest.raises(StoreError, match="batch_rows"):
        list(snap.to_batches(batch_rows=bad))  # type: ignore[arg-type]


# -- metadata and isolation ----------------------------------------------------------------
def test_snapshot_metadata_is_its_commit(make_store: MakeStore) -> None:
    store = make_store(partitions=2)
    with store.begin() as txn:
        txn.put(b"k", b"1")
        txn.record_source("in", 0, 5)
        txn.set_changelog_offset(0, 3)
    first = store.metadata
    snap = store.snapshot()
    assert snap.metadata == first
    assert snap.position == Position.from_map({"in": {0: 5}})
    assert snap.changelog_offsets == {0: 3}
    assert snap.commit_seq == 1
    assert snap.commit_record is None
    with store.begin() as txn:
        txn.put(b"k", b"2")
        txn.put(b"k2", b"x")
        txn.record_source("in", 0, 9)
        txn.set_changelog_offset(1, 4)
    with store.begin() as txn:
        txn.delete(b"k")
    assert store.metadata.commit_seq == 3
    # the old snapshot still describes (and shows) the first commit
    assert snap.metadata == first
    assert snap.position == Position.from_map({"in": {0: 5}})
    assert snap.changelog_offsets == {0: 3}
    assert snap.commit_seq == 1
    assert list(snap.items()) == [(b"k", b"1")]
    assert f"commit_seq={snap.commit_seq}" in repr(snap)
    snap.close()
    with store.snapshot() as latest:
        assert latest.metadata == store.metadata
        assert latest.commit_seq == 3
        assert latest.position == Position.from_map({"in": {0: 9}})
        assert latest.changelog_offsets == {0: 3, 1: 4}
        assert list(latest.items()) == [(b"k2", b"x")]


def test_snapshots_are_isolated_from_each_other(make_store: MakeStore) -> None:
    store = make_store()
    views = []
    for i in range(4):
        with store.begin() as txn:
            txn.put(b"k%d" % i, b"v")
            if i:
                txn.delete(b"k%d" % (i - 1))
        views.append(store.snapshot())
    for i, view in enumerate(views):
        assert list(view.items()) == [(b"k%d" % i, b"v")]
        assert view.commit_seq == i + 1
        view.close()


def test_iterator_keeps_its_snapshot_while_writes_happen(make_store: MakeStore) -> None:
    store = make_store()
    with store.begin() as txn:
        for i in range(10):
            txn.put(b"k%d" % i, b"old")
    with store.snapshot() as snap:
        iterator = snap.items()
        assert next(iterator) == (b"k0", b"old")
        with store.begin() as txn:
            for i in range(10):
                txn.put(b"k%d" % i, b"new")
            txn.put(b"k10", b"new")
        assert list(iterator) == [(b"k%d" % i, b"old") for i in range(1, 10)]


# -- closing -------------------------------------------------------------------------------
def _all_reads(snap: object) -> list[Callable[[], object]]:
    return [
        lambda: snap.get(b"a"),  # type: ignore[attr-defined]
        lambda: snap.get_record(b"a"),  # type: ignore[attr-defined]
        lambda: snap.multi_get([b"a"]),  # type: ignore[attr-defined]
        lambda: list(snap.items()),  # type: ignore[attr-defined]
        lambda: list(snap.records()),  # type: ignore[attr-defined]
        lambda: list(snap.to_batches()),  # type: ignore[attr-defined]
        lambda: snap.count(),  # type: ignore[attr-defined]
    ]


def test_closed_snapshot(store: Store) -> None:
    snap = store.snapshot()
    snap.close()
    snap.close()  # idempotent
    assert snap.closed
    for read in _all_reads(snap):
        with pytest.raises(StoreClosedError, match="closed"):
            read()
    assert store.get(b"a") == b"A"  # the store is fine


def test_store_close_closes_open_snapshots(store: Store) -> None:
    snap = store.snapshot()
    other = store.snapshot()
    other.close()
    assert not snap.closed
    store.close()
    assert snap.closed
    for read in _all_reads(snap):
        with pytest.raises(StoreClosedError):
            read()
    snap.close()  # no crash
    other.close()


def test_store_close_during_a_scan(store: Store) -> None:
    snap = store.snapshot()
    iterator = snap.items()
    assert next(iterator) == ITEMS[0]
    store.close()
    with pytest.raises(StoreClosedError):
        next(iterator)
    snap.close()


@pytest.mark.parametrize("bad", [b"\x00short", b"\x07" + bytes(20) + b"value"])
def test_to_batches_names_a_corrupt_envelope(store: Store, bad: bytes) -> None:
    store._check_open().put(b"d" + b"b", bad)  # behind the store's back, as a foreign writer
    with store.snapshot() as snap, pytest.raises(StoreError, match="key b'b' is not a valid"):
        list(snap.to_batches())


# -- waiting for a commit ------------------------------------------------------------------
def _waiter(
    store: Store, offset: int, timeout_s: float
) -> tuple[threading.Thread, threading.Event, list[Any]]:
    """A thread waiting for ``store`` to reach ``input-0`` at ``offset``; ``checked`` is set
    once it has seen a commit that does not (from then on a commit must wake it)."""
    checked = threading.Event()
    result: list[Any] = []

    def reached(metadata: Any) -> bool:
        done = metadata.position.to_map().get("input", {}).get(0, -1) >= offset
        if not done:
            checked.set()
        return done

    thread = threading.Thread(
        target=lambda: result.append(store.wait_for_commit(reached, timeout_s)), daemon=True
    )
    thread.start()
    return thread, checked, result


@pytest.mark.parametrize("chunked", [False, True])
def test_wait_for_commit_is_woken_by_the_commit_that_satisfies_it(
    make_store: MakeStore, chunked: bool
) -> None:
    options = StoreOptions(uncommitted_max_bytes=1024, chunk_bytes=512) if chunked else None
    store = make_store(options=options)
    thread, checked, result = _waiter(store, 5, timeout_s=120)
    assert checked.wait(30)
    for offset in range(1, 6):
        with store.begin() as txn:
            txn.put(b"k%d" % offset, b"v" * 2000)
            txn.record_source("input", 0, offset)
    thread.join(30)
    assert not thread.is_alive()
    assert result[0].position == Position.from_map({"input": {0: 5}})
    assert result[0].commit_seq == store.metadata.commit_seq


def test_wait_for_commit_returns_the_latest_metadata_on_timeout(make_store: MakeStore) -> None:
    store = make_store()
    with store.begin() as txn:
        txn.record_source("input", 0, 1)
    metadata = store.wait_for_commit(lambda m: False, timeout_s=0.01)
    assert metadata == store.metadata
    assert store.wait_for_commit(lambda m: True, timeout_s=0) == store.metadata


def test_closing_the_store_ends_a_wait(make_store: MakeStore) -> None:
    store = make_store()
    thread, checked, result = _waiter(store, 5, timeout_s=600)
    assert checked.wait(30)
    store.close()
    thread.join(30)
    assert not thread.is_alive()
    assert result[0].position.is_empty()
