"""Versioned stores (spark_statestore/store/versions.py) against a reference model.

The model is Kafka Streams' ``RocksDBVersionedStore`` semantics written the plainest way:
per partition an observed stream time, per key every accepted version kept forever, and
the reads' retention rules applied at read time. The store prunes versions on disk, splits
the latest value from the history and commits in transactions; whatever the records, the
batch boundaries and the spills, every read must equal the model's.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_statestore.query import (
    FailureReason,
    KeyQuery,
    MultiVersionedKeyQuery,
    RangeQuery,
    StateQueryRequest,
    VersionedKeyQuery,
    VersionedRecord,
)
from spark_statestore.store import (
    InvalidScanError,
    Role,
    ScanSpec,
    Store,
    StoreCorruptedError,
    StoreMismatchError,
    StoreOptions,
    StoreSpec,
    TransactionError,
    scan_batches,
)
from spark_statestore.store.versions import decode_history_key, history_key

PARTITIONS = 2
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def versioned(retention: int, name: str = "versions") -> StoreSpec:
    return StoreSpec(
        Role.FOLLOWER, "app-versions-changelog", PARTITIONS, history_retention_ms=retention
    )


# -- the reference model --------------------------------------------------------------------
@dataclass
class Model:
    retention: int
    stream: dict[int, int] = field(default_factory=dict)
    versions: dict[bytes, dict[int, bytes | None]] = field(default_factory=dict)
    partition: dict[bytes, int] = field(default_factory=dict)

    def apply(self, key: bytes, value: bytes | None, partition: int, timestamp: int) -> None:
        seen = self.stream.get(partition)
        if seen is not None and timestamp < seen - self.retention:
            return
        self.stream[partition] = timestamp if seen is None else max(seen, timestamp)
        self.versions.setdefault(key, {})[timestamp] = value
        self.partition[key] = partition

    def _cutoff(self, key: bytes) -> int:
        seen = self.stream.get(self.partition[key])
        return INT64_MIN if seen is None else seen - self.retention

    def _sorted(self, key: bytes) -> list[tuple[int, bytes | None]]:
        return sorted(self.versions.get(key, {}).items())

    def latest(self, key: bytes) -> VersionedRecord | None:
        versions = self._sorted(key)
        if not versions or versions[-1][1] is None:
            return None
        return VersionedRecord(versions[-1][1], versions[-1][0])  # type: ignore[arg-type]

    def as_of(self, key: bytes, time: int) -> VersionedRecord | None:
        versions = self._sorted(key)
        if not versions:
            return None
        if time < self._cutoff(key):
            latest = self.latest(key)
            return latest if latest is not None and latest.timestamp <= time else None
        stamps = [t for t, _ in versions]
        index = bisect.bisect_right(stamps, time) - 1
        if index < 0 or versions[index][1] is None:
            return None
        valid_to = stamps[index + 1] if index + 1 < len(stamps) else None
        return VersionedRecord(versions[index][1], stamps[index], valid_to)  # type: ignore[arg-type]

    def between(self, key: bytes, start: int, end: int, ascending: bool) -> list[VersionedRecord]:
        versions = self._sorted(key)
        if not versions:
            return []
        cutoff = self._cutoff(key)
        if end < cutoff:
            latest = self.latest(key)
            return [latest] if latest is not None and latest.timestamp <= end else []
        found = []
        for index, (stamp, value) in enumerate(versions):
            valid_to = versions[index + 1][0] if index + 1 < len(versions) else None
            if value is None or stamp > end:
                continue
            if valid_to is not None and (valid_to <= start or valid_to <= cutoff):
                continue
            found.append(VersionedRecord(value, stamp, valid_to))
        return found if ascending else found[::-1]


# -- helpers ----------------------------------------------------------------------------------
def ask(store: Store, query: Any) -> Any:
    """The answer of the partition that holds the key (the others must be empty)."""
    result = store.query(StateQueryRequest.in_store(store.name).with_query(query))
    answers = {}
    for partition, one in result.partition_results.items():
        assert one.is_success, one.failure_message
        answers[partition] = one.result
    holders = [p for p, a in answers.items() if a not in (None, [])]
    assert len(holders) <= 1, answers
    return (
        answers[holders[0]] if holders else (None if isinstance(query, VersionedKeyQuery) else [])
    )


def check_equal(store: Store, model: Model, keys: list[bytes], times: list[int]) -> None:
    for key in keys:
        if key not in model.partition:
            assert ask(store, VersionedKeyQuery.with_key(key)) is None
            continue
        assert ask(store, VersionedKeyQuery.with_key(key)) == model.latest(key), key
        for time in times:
            assert ask(store, VersionedKeyQuery.with_key(key).as_of(time)) == model.as_of(
                key, time
            ), (
                key,
                time,
            )
        for start, end in [(INT64_MIN, INT64_MAX), (0, 61), (17, 30), (30, 45), (44, 44)]:
            start, end = min(start, end), max(start, end)
            query = MultiVersionedKeyQuery.with_key(key).from_time(start).to_time(end)
            assert ask(store, query) == model.between(key, start, end, False), (key, start, end)
            assert ask(store, query.with_ascending_timestamps()) == model.between(
                key, start, end, True
            )
    # Scans as of a time (the SQL reader's asOfTimestamp): every key's version then.
    cutoffs = [t - model.retention for t in model.stream.values()]
    for time in times[::7]:
        for spec in (
            ScanSpec.everything(),
            ScanSpec.for_keys(keys),
            ScanSpec.with_prefix(b"a"),
            ScanSpec.between(b"\x00", b"a\x00"),
        ):
            spec = spec.with_as_of(time)
            expected_rows = {
                k: (r.value, r.timestamp)
                for k in model.partition
                if spec.matches_key(k) and (r := model.as_of(k, time)) is not None
            }
            with store.snapshot() as snapshot:
                if cutoffs and time < max(cutoffs):
                    with pytest.raises(InvalidScanError, match="keeps versions of changelog"):
                        list(scan_batches(snapshot, spec))
                    continue
                rows = {}
                for batch in scan_batches(snapshot, spec, batch_rows=3):
                    for row in batch.to_pylist():
                        stamp = row["timestamp"]
                        rows[row["key"]] = (row["value"], int(stamp.timestamp() * 1000))
            assert rows == expected_rows, (time, spec)
    # Key-value reads see the latest values.
    with store.snapshot() as snapshot:
        latest = {k: v for k, v in snapshot.items()}
    expected = {k: r.value for k in model.partition if (r := model.latest(k)) is not None}
    assert latest == expected


record = st.tuples(
    st.sampled_from([b"a", b"b", b"a\x00", b"a\x00\xff", b"\x00", b"\xff"]),
    st.one_of(st.none(), st.binary(max_size=3)),
    st.integers(0, 60),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    records=st.lists(record, max_size=40),
    retention=st.integers(0, 30),
    cuts=st.lists(st.integers(0, 40), max_size=4),
    budget=st.sampled_from([64 * 1024 * 1024, 256]),
)
def test_reads_equal_the_reference_model(
    tmp_path_factory: pytest.TempPathFactory,
    records: list[tuple[bytes, bytes | None, int]],
    retention: int,
    cuts: list[int],
    budget: int,
) -> None:
    path = tmp_path_factory.mktemp("versioned")
    model = Model(retention)
    keys = sorted({k for k, _, _ in records} | {b"zz"})
    times = list(range(-1, 62))
    options = StoreOptions(sync=False, uncommitted_max_bytes=budget)
    bounds = sorted({0, len(records), *[c for c in cuts if c <= len(records)]})
    with Store.open(str(path), versioned(retention), options=options) as store:
        offset = 0
        for lo, hi in itertools.pairwise(bounds):
            with store.begin() as txn:
                # Two calls per transaction, a read in between: the writer's cache must carry.
                middle = (lo + hi) // 2
                for part in (records[lo:middle], records[middle:hi]):
                    rows = []
                    for key, value, stamp in part:
                        partition = key[0] % PARTITIONS if key else 0
                        rows.append((key, value, partition, offset, stamp))
                        model.apply(key, value, partition, stamp)
                        offset += 1
                    txn.put_versions(rows)
                    txn.get(b"a")
            check_equal(store, model, keys, times)
    with Store.open(str(path), versioned(retention), options=options) as store:
        check_equal(store, model, keys, times)  # stream times and history survive a reopen


def test_out_of_order_versions_tombstones_and_expiry(tmp_path: Path) -> None:
    with Store.open(str(tmp_path / "s"), versioned(100)) as store:
        with store.begin() as txn:
            txn.put_versions(
                [
                    (b"k", b"v30", 0, 0, 30),
                    (b"k", b"v10", 0, 1, 10),  # older: a version in the past
                    (b"k", None, 0, 2, 20),  # deleted as of 20, until 30
                    (b"k", b"v40", 0, 3, 40),
                ]
            )
        assert ask(store, VersionedKeyQuery.with_key(b"k")) == VersionedRecord(b"v40", 40)
        assert ask(store, VersionedKeyQuery.with_key(b"k").as_of(15)) == VersionedRecord(
            b"v10", 10, 20
        )
        assert ask(store, VersionedKeyQuery.with_key(b"k").as_of(25)) is None
        assert ask(store, VersionedKeyQuery.with_key(b"k").as_of(35)) == VersionedRecord(
            b"v30", 30, 40
        )
        assert ask(store, MultiVersionedKeyQuery.with_key(b"k")) == [
            VersionedRecord(b"v40", 40),
            VersionedRecord(b"v30", 30, 40),
            VersionedRecord(b"v10", 10, 20),
        ]
        with store.begin() as txn:
            # Stream time 200: versions that ended by 100 are gone; a record before 100 is
            # older than the grace period and dropped, as Kafka Streams drops it.
            assert txn.put_versions([(b"j", b"x", 0, 4, 200), (b"k", b"late", 0, 5, 99)]) == 1
        assert ask(store, VersionedKeyQuery.with_key(b"k").as_of(35)) is None  # expired
        assert ask(store, VersionedKeyQuery.with_key(b"k").as_of(50)) == VersionedRecord(b"v40", 40)
        assert ask(store, MultiVersionedKeyQuery.with_key(b"k").to_time(60)) == [
            VersionedRecord(b"v40", 40)
        ]
        # Key-value reads see the latest values only.
        assert ask(store, KeyQuery.with_key(b"k")) == b"v40"
        result = store.query(
            StateQueryRequest.in_store(store.name).with_query(RangeQuery.with_no_bounds())
        )
        assert sorted(kv for p in result.partition_results.values() for kv in p.result) == [
            (b"j", b"x"),
            (b"k", b"v40"),
        ]


def test_history_records_are_removed_once_no_read_can_return_them(tmp_path: Path) -> None:
    with Store.open(str(tmp_path / "s"), versioned(10)) as store:
        with store.begin() as txn:
            txn.put_versions([(b"k", str(t).encode(), 0, t, t) for t in range(0, 100, 5)])
        with store.snapshot() as snapshot:
            assert [v.valid_from for v in snapshot.versions(b"k")] == [85, 90, 95]
        with store.begin() as txn:
            txn.put_versions([(b"k", None, 0, 100, 100), (b"other", b"x", 0, 101, 200)])
            txn.put_versions([(b"k", b"again", 0, 102, 201)])
        with store.snapshot() as snapshot:
            assert [v.valid_from for v in snapshot.versions(b"k")] == [201]


def test_a_versioned_store_is_written_only_with_put_versions(tmp_path: Path) -> None:
    with Store.open(str(tmp_path / "v"), versioned(10)) as store, store.begin() as txn:
        for write in (
            lambda: txn.put(b"k", b"v"),
            lambda: txn.delete(b"k"),
            lambda: txn.put_all([(b"k", b"v", 0, 0, 0)]),
            lambda: txn.put_columns([b"k"], [b"v"], [0], [0], [0]),
        ):
            with pytest.raises(TransactionError, match=r"versioned store.*put_versions"):
                write()
        with pytest.raises(TransactionError, match=r"record 1 .*timestamp"):
            txn.put_versions([(b"k", b"v", 0, 0, 5), (b"k", b"v", 0, 1, -1)])
        with pytest.raises(TransactionError, match=r"record 0 .*partition"):
            txn.put_versions([(b"k", b"v", PARTITIONS, 0, 5)])
        txn.rollback()
    spec = StoreSpec(Role.FOLLOWER, "app-versions-changelog", PARTITIONS)
    with Store.open(str(tmp_path / "kv"), spec) as store, store.begin() as txn:
        with pytest.raises(TransactionError, match="key-value store"):
            txn.put_versions([(b"k", b"v", 0, 0, 0)])
        txn.rollback()
        with store.snapshot() as snapshot, pytest.raises(InvalidScanError, match="key-value"):
            list(scan_batches(snapshot, ScanSpec.everything().with_as_of(5)))
        result = store.query(
            StateQueryRequest.in_store(store.name).with_query(VersionedKeyQuery.with_key(b"k"))
        )
        assert {r.failure_reason for r in result.partition_results.values()} == {
            FailureReason.UNKNOWN_QUERY_TYPE
        }


def test_a_store_keeps_its_kind_and_retention(tmp_path: Path) -> None:
    spec = StoreSpec(Role.FOLLOWER, "app-versions-changelog", PARTITIONS)
    Store.open(str(tmp_path / "kv"), spec).close()
    Store.open(str(tmp_path / "v"), versioned(10)).close()
    with pytest.raises(StoreMismatchError, match="key-value store, not a versioned store"):
        Store.open(str(tmp_path / "kv"), versioned(10))
    with pytest.raises(
        StoreMismatchError,
        match="retention of 10 ms, not a versioned store with a history retention of 20",
    ):
        Store.open(str(tmp_path / "v"), versioned(20))
    with pytest.raises(StoreMismatchError, match="not a key-value store"):
        Store.open(str(tmp_path / "v"), spec)
    with Store.open(str(tmp_path / "v")) as store:  # no spec: opens as it is
        assert store.manifest.history_retention_ms == 10
        assert store.manifest.format_version == 2


@given(st.lists(st.tuples(st.binary(max_size=6), st.integers(INT64_MIN, INT64_MAX)), max_size=30))
def test_history_keys_sort_by_key_then_time_and_round_trip(items: list[tuple[bytes, int]]) -> None:
    encoded = sorted(history_key(k, t) for k, t in items)
    assert [decode_history_key(raw) for raw in encoded] == sorted(items)


@given(st.binary(max_size=40))
def test_malformed_history_keys_are_refused(raw: bytes) -> None:
    try:
        key, stamp = decode_history_key(b"h" + raw)
    except StoreCorruptedError:
        return
    assert history_key(key, stamp) == b"h" + raw
