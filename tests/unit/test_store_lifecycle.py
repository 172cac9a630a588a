"""Store lifecycle: create, reopen, read-only handles, identity checks, damaged stores, close."""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import plyvel
import pytest

from spark_statestore.errors import OptionError, StateStoreError
from spark_statestore.position import Position
from spark_statestore.query import RangeQuery, StateQueryRequest
from spark_statestore.store import (
    FORMAT_VERSION,
    CommitRecord,
    Role,
    ScanSpec,
    Store,
    StoreClosedError,
    StoreCorruptedError,
    StoreError,
    StoreFormatError,
    StoreLockedError,
    StoreMismatchError,
    StoreNotFoundError,
    StoreOptions,
    StoreRoleError,
    StoreSpec,
    TransactionError,
    TransactionState,
    live_owner,
    read_owner,
    scan_batches,
)
from spark_statestore.store.layout import META_MANIFEST

FOLLOWER = StoreSpec(Role.FOLLOWER, "orders-changelog", 3)
LEADER = StoreSpec(Role.LEADER, "orders-changelog", 3)


def _populate(store: Store) -> None:
    with store.begin() as txn:
        txn.put(b"a", b"1", partition=0, offset=10, timestamp=1_000)
        txn.put(b"b", b"2", partition=2, offset=11)
        txn.merge_position(Position.from_map({"orders": {0: 41, 1: 7}}))
        txn.set_changelog_offset(0, 11)
        txn.set_changelog_offset(2, 12)
        txn.set_commit_record(
            CommitRecord("query-1", 5, {"orders": {"0": 42}}, {0: 11, 2: 12}),
        )


def _rewrite_meta(store_path: Path, key: bytes, value: bytes) -> None:
    """Write ``key`` in the closed store's LevelDB directly, as a damaged store would hold."""
    db = plyvel.DB(str(store_path / "db"))
    try:
        db.put(key, value)
    finally:
        db.close()


def _read_meta(store_path: Path, key: bytes) -> bytes | None:
    db = plyvel.DB(str(store_path / "db"))
    try:
        value: bytes | None = db.get(key)
        return value
    finally:
        db.close()


def _assert_released(path: Path) -> None:
    """A failed open must give ownership back: no owner file, no lock holder."""
    assert read_owner(str(path)) is None
    assert live_owner(str(path)) is None


# -- create and reopen ---------------------------------------------------------------------
@pytest.mark.parametrize("role", [Role.FOLLOWER, Role.LEADER])
def test_create_records_the_spec_in_the_manifest(tmp_path: Path, role: Role) -> None:
    with Store.open(tmp_path / "orders", StoreSpec(role, "orders-changelog", 3)) as store:
        assert store.manifest.role is role
        assert store.role is role
        assert store.manifest.changelog_topic == "orders-changelog"
        assert store.manifest.partitions == 3
        assert store.partitions == range(3)
        assert store.manifest.format_version == 1  # a key-value store (2: versioned)
        assert store.name == "orders"  # the directory name by default
        meta = store.metadata
        assert meta.commit_seq == 0
        assert meta.position == Position.empty()
        assert meta.changelog_offsets == {}
        assert meta.commit_record is None
        assert not store.closed
    assert (tmp_path / "orders" / "db").is_dir()


def test_create_with_an_explicit_name(tmp_path: Path) -> None:
    spec = StoreSpec(Role.LEADER, None, 1, name="counts")
    with Store.open(tmp_path / "dir", spec) as store:
        assert store.name == "counts"
        assert store.manifest.changelog_topic is None
    with Store.open(tmp_path / "dir") as store:
        assert store.name == "counts"


def test_reopen_with_the_same_spec_keeps_data_and_metadata(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with Store.open(path, FOLLOWER) as store:
        _populate(store)
        before = store.metadata
        store_id = store.manifest.store_id
    with Store.open(path, FOLLOWER) as store:
        assert store.manifest.store_id == store_id
        meta = store.metadata
        assert meta == before
        assert meta.commit_seq == 1
        assert meta.position == Position.from_map({"orders": {0: 41, 1: 7}})
        assert meta.changelog_offsets == {0: 11, 2: 12}
        assert meta.commit_record == CommitRecord(
            "query-1", 5, {"orders": {"0": 42}}, {0: 11, 2: 12}
        )
        assert store.get(b"a") == b"1"
        assert store.get(b"b") == b"2"
        with store.snapshot() as snap:
            record = snap.get_record(b"a")
            assert record is not None
            assert (record.partition, record.offset, record.timestamp) == (0, 10, 1_000)
        # and it can still be written
        with store.begin() as txn:
            txn.put(b"c", b"3", partition=1)
        assert store.metadata.commit_seq == 2


def test_reopen_read_only(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with Store.open(path, LEADER) as store:
        _populate(store)
        before = store.metadata
    with Store.open(path) as reader:
        assert reader.role is None
        assert reader.manifest.role is Role.LEADER
        assert reader.metadata == before
        assert reader.get(b"a") == b"1"
        assert reader.owner.role == "reader"
        with pytest.raises(StoreRoleError, match="read-only"):
            reader.begin()
        assert reader.get(b"zzz") is None


def test_open_missing_store_without_spec(tmp_path: Path) -> None:
    path = tmp_path / "nothing-here"
    with pytest.raises(StoreNotFoundError, match="no store at") as info:
        Store.open(path)
    assert isinstance(info.value, FileNotFoundError)
    assert info.value.path == str(path)
    assert not path.exists()  # a read-only open creates nothing


def test_open_directory_without_database_without_spec(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreNotFoundError):
        Store.open(tmp_path / "empty")
    assert not (tmp_path / "empty" / "db").exists()


def test_open_empty_leveldb_without_spec(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    plyvel.DB(str(tmp_path / "s" / "db"), create_if_missing=True).close()
    with pytest.raises(StoreNotFoundError, match="empty"):
        Store.open(tmp_path / "s")
    _assert_released(tmp_path / "s")


# -- identity checks -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "expected", "given"),
    [
        (StoreSpec(Role.FOLLOWER, "other-changelog", 3), "'orders-changelog'", "'other-changelog'"),
        (StoreSpec(Role.FOLLOWER, "orders-changelog", 4), "has 3 partitions", "has 4"),
        (StoreSpec(Role.FOLLOWER, "orders-changelog", 3, name="beta"), "'alpha'", "'beta'"),
    ],
)
def test_mismatched_spec(tmp_path: Path, spec: StoreSpec, expected: str, given: str) -> None:
    path = tmp_path / "s"
    with Store.open(path, StoreSpec(Role.FOLLOWER, "orders-changelog", 3, name="alpha")) as store:
        _populate(store)
    with pytest.raises(StoreMismatchError) as info:
        Store.open(path, spec)
    message = str(info.value)
    assert expected in message
    assert given in message
    assert str(path) in message
    assert isinstance(info.value, ValueError)
    _assert_released(path)
    # the failed open left the store intact and openable
    with Store.open(path, StoreSpec(Role.FOLLOWER, "orders-changelog", 3, name="alpha")) as s:
        assert s.get(b"a") == b"1"


def test_leader_spec_on_a_follower_store(tmp_path: Path) -> None:
    path = tmp_path / "s"
    Store.open(path, FOLLOWER).close()
    with pytest.raises(StoreRoleError, match="follower store") as info:
        Store.open(path, LEADER)
    assert "orders-changelog" in str(info.value)
    _assert_released(path)


def test_follower_spec_on_a_leader_store(tmp_path: Path) -> None:
    path = tmp_path / "s"
    Store.open(path, LEADER).close()
    with pytest.raises(StoreRoleError, match="leader store"):
        Store.open(path, FOLLOWER)
    _assert_released(path)
    with Store.open(path, LEADER) as store:
        assert store.role is Role.LEADER


# -- damaged or foreign stores -------------------------------------------------------------
def test_newer_format_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with Store.open(path, FOLLOWER) as store:
        _populate(store)
    raw = _read_meta(path, META_MANIFEST)
    assert raw is not None
    manifest = json.loads(raw)
    manifest["format_version"] = FORMAT_VERSION + 1
    _rewrite_meta(path, META_MANIFEST, json.dumps(manifest).encode())
    for spec in (FOLLOWER, None):
        with pytest.raises(StoreFormatError) as info:
            Store.open(path, spec)
        message = str(info.value)
        assert f"format version {FORMAT_VERSION + 1}" in message
        assert "upgrade" in message
        assert "delete the store directory" in message
        assert info.value.path == str(path)
        _assert_released(path)


@pytest.mark.parametrize("key", [b"m:manifest", b"m:position", b"m:offsets", b"m:commit", b"m:seq"])
def test_garbage_metadata_is_reported_as_corruption(tmp_path: Path, key: bytes) -> None:
    path = tmp_path / "s"
    with Store.open(path, FOLLOWER) as store:
        _populate(store)
    _rewrite_meta(path, key, b"{not json")
    for spec in (FOLLOWER, None):
        with pytest.raises(StoreCorruptedError) as info:
            Store.open(path, spec)
        message = str(info.value)
        assert str(path) in message
        assert "delete" in message
        assert info.value.path == str(path)
        _assert_released(path)


@pytest.mark.parametrize(
    "change",
    [
        {"partitions": "three"},
        {"partitions": 0},
        {"role": "boss"},
        {"name": None},
        {"changelog_topic": 7},
        {"format_version": 0},
    ],
)
def test_manifest_with_wrong_fields_is_corruption(tmp_path: Path, change: dict[str, Any]) -> None:
    path = tmp_path / "s"
    Store.open(path, FOLLOWER).close()
    raw = _read_meta(path, META_MANIFEST)
    assert raw is not None
    _rewrite_meta(path, META_MANIFEST, json.dumps({**json.loads(raw), **change}).encode())
    with pytest.raises(StoreCorruptedError, match="manifest"):
        Store.open(path)


def test_manifest_that_is_not_an_object_is_corruption(tmp_path: Path) -> None:
    path = tmp_path / "s"
    Store.open(path, FOLLOWER).close()
    _rewrite_meta(path, META_MANIFEST, b"[1, 2, 3]")
    with pytest.raises(StoreCorruptedError, match="delete"):
        Store.open(path, FOLLOWER)


@pytest.mark.parametrize("spec", [FOLLOWER, None])
def test_database_with_data_but_no_manifest(tmp_path: Path, spec: StoreSpec | None) -> None:
    path = tmp_path / "s"
    path.mkdir()
    db = plyvel.DB(str(path / "db"), create_if_missing=True)
    db.put(b"dkey", b"\x00" * 21 + b"value")
    db.close()
    with pytest.raises(StoreCorruptedError, match="no manifest") as info:
        Store.open(path, spec)
    assert str(path) in str(info.value)
    _assert_released(path)
    # nothing was written: the foreign database still has no manifest
    assert _read_meta(path, META_MANIFEST) is None


def _garble(files: list[str], content: bytes) -> None:
    assert files, "no LevelDB file to corrupt"
    for name in files:
        with open(name, "wb") as handle:
            handle.write(content)


@pytest.mark.parametrize(
    ("pattern", "content"),
    [
        ("CURRENT", b"garbage\n"),
        ("CURRENT", b"no newline at the end"),
        ("MANIFEST-*", b"garbage" * 40),
    ],
)
@pytest.mark.parametrize("spec", [FOLLOWER, None])
def test_corrupted_leveldb_files(
    tmp_path: Path, pattern: str, content: bytes, spec: StoreSpec | None
) -> None:
    path = tmp_path / "s"
    with Store.open(path, FOLLOWER) as store:
        _populate(store)
    _garble(glob.glob(os.path.join(path, "db", pattern)), content)
    with pytest.raises(StoreError) as info:
        Store.open(path, spec)
    assert isinstance(info.value, StoreCorruptedError)
    assert not isinstance(info.value, plyvel.Error)
    assert str(path) in str(info.value)
    assert "delete" in str(info.value)
    _assert_released(path)


def _damaged_table_store(path: Path) -> None:
    """A store whose one LevelDB table has a garbled data block (found only when read)."""
    with Store.open(path, FOLLOWER) as store, store.begin() as txn:
        for i in range(20_000):
            txn.put(b"k%06d" % i, b"value-%d-" % i * 10, partition=0)
    Store.open(path, FOLLOWER).close()  # reopening moves the log into a table
    (table,) = glob.glob(os.path.join(path, "db", "*.ldb"))
    with open(table, "r+b") as handle:
        handle.seek(os.path.getsize(table) // 3)
        handle.write(b"\xff" * 64)


@pytest.mark.parametrize(
    "read",
    [
        lambda snap: list(snap.items()),
        lambda snap: list(snap.items(reverse=True)),
        lambda snap: list(snap.to_batches()),
        lambda snap: list(scan_batches(snap, ScanSpec())),
        lambda snap: snap.count(),
        lambda snap: [snap.get(b"k%06d" % i) for i in range(20_000)],
        lambda snap: snap.multi_get([b"k%06d" % i for i in range(20_000)]),
    ],
    ids=["items", "reverse", "to_batches", "scan_batches", "count", "get", "multi_get"],
)
def test_corruption_found_by_a_read_is_a_store_error(tmp_path: Path, read: Any) -> None:
    # plyvel's CorruptionError reached callers before.
    path = tmp_path / "s"
    _damaged_table_store(path)
    with (
        Store.open(path) as store,
        store.snapshot() as snap,
        pytest.raises(StoreCorruptedError) as info,
    ):
        read(snap)
    assert not isinstance(info.value, plyvel.Error)
    assert str(path) in str(info.value) and "delete" in str(info.value)


def test_corruption_found_by_a_query_is_a_failed_result(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _damaged_table_store(path)
    with Store.open(path) as store:
        result = store.query(StateQueryRequest.in_store(store.name).with_query(RangeQuery()))
    failure = result.partition_results[0]
    assert failure.is_failure
    assert "corruption" in failure.failure_message.lower()


# -- specs and options ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "make",
    [
        lambda: StoreSpec("boss", "t", 1),  # type: ignore[arg-type]
        lambda: StoreSpec(Role.LEADER, "t", 0),
        lambda: StoreSpec(Role.LEADER, "t", -1),
        lambda: StoreSpec(Role.LEADER, "t", True),
        lambda: StoreSpec(Role.LEADER, "t", 2.0),  # type: ignore[arg-type]
        lambda: StoreSpec(Role.FOLLOWER, None, 1),
        lambda: StoreSpec(Role.FOLLOWER, "", 1),
        lambda: StoreSpec(Role.LEADER, "t", 1, name=""),
        lambda: StoreOptions(uncommitted_max_bytes=0),
        lambda: StoreOptions(uncommitted_max_bytes=-5),
        lambda: StoreOptions(chunk_bytes=-1),
        lambda: StoreOptions(chunk_bytes=True),
        lambda: StoreOptions(sync=1),  # type: ignore[arg-type]
        lambda: StoreOptions(lock_wait_seconds=-0.5),
        lambda: StoreOptions(cache_bytes=0),
        lambda: StoreOptions(bloom_filter_bits=-1),
    ],
)
def test_spec_and_option_validation(make: Callable[[], object]) -> None:
    with pytest.raises(OptionError):
        make()


def test_valid_specs_and_options() -> None:
    spec = StoreSpec("follower", "t", 2)  # type: ignore[arg-type]
    assert spec.role is Role.FOLLOWER
    assert StoreSpec(Role.LEADER, None, 1).changelog_topic is None  # a leader may have none
    options = StoreOptions(uncommitted_max_bytes=1, chunk_bytes=1, sync=False, lock_wait_seconds=0)
    assert options.uncommitted_max_bytes == 1


# -- closing -------------------------------------------------------------------------------
def test_closed_store_refuses_every_call(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s", LEADER)
    store.close()
    assert store.closed
    with pytest.raises(StoreClosedError):
        store.begin()
    with pytest.raises(StoreClosedError):
        store.snapshot()
    with pytest.raises(StoreClosedError):
        store.get(b"a")
    with pytest.raises(StoreClosedError):
        store.update_owner(flight_location="grpc://127.0.0.1:1")
    assert "closed" in repr(store)


def test_close_is_idempotent_and_gives_up_ownership(tmp_path: Path) -> None:
    path = tmp_path / "s"
    store = Store.open(path, LEADER)
    assert live_owner(str(path)) is not None
    store.close()
    store.close()
    with store:
        pass  # __exit__ closes again
    assert store.closed
    assert live_owner(str(path)) is None
    with Store.open(path, LEADER) as again:
        assert not again.closed


def test_close_rolls_back_the_open_transaction(tmp_path: Path) -> None:
    path = tmp_path / "s"
    store = Store.open(path, LEADER)
    txn = store.begin()
    txn.put(b"k", b"v", partition=0)
    store.close()
    assert txn.state is TransactionState.ROLLED_BACK
    with pytest.raises(TransactionError):
        txn.put(b"k2", b"v")
    with Store.open(path, LEADER) as store:
        assert store.get(b"k") is None
        assert store.metadata.commit_seq == 0


def test_error_hierarchy() -> None:
    for error in (
        StoreError,
        StoreClosedError,
        StoreCorruptedError,
        StoreFormatError,
        StoreLockedError,
        StoreMismatchError,
        StoreNotFoundError,
        StoreRoleError,
        TransactionError,
    ):
        assert issubclass(error, StoreError)
        assert issubclass(error, StateStoreError)
    assert issubclass(OptionError, StateStoreError)
    assert issubclass(StoreNotFoundError, FileNotFoundError)
    assert issubclass(StoreMismatchError, ValueError)
    locked = StoreLockedError("m", "/p", owner="o")
    assert (locked.path, locked.owner) == ("/p", "o")
