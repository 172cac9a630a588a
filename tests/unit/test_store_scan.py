"""Scan specs: semantics against a model, bounded reads, validation, JSON round trips."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_statestore.errors import StateStoreError
from spark_statestore.store import (
    InvalidScanError,
    ScanSpec,
    ScanStats,
    Store,
    StoreClosedError,
    StoreError,
    arrow_schema,
    scan_batches,
)
from spark_statestore.store.errors import UncoveredKeySchemaError
from spark_statestore.store.scan import check_framed_ids

MakeStore = Callable[..., Store]

# key -> (value, partition, offset, timestamp); None: unknown / no timestamp
ROWS: dict[bytes, tuple[bytes, int | None, int | None, int | None]] = {
    b"": (b"empty-key", 0, 0, 1_000),
    b"\x00": (b"zero", 1, 1, None),
    b"\x00\x01": (b"", 0, None, None),
    b"a": (b"A", 1, 2, 2_000),
    b"a\x00": (b"A-0", 2, 3, 2_500),
    b"a\xff": (b"A-ff", 0, 3, 3_000),
    b"a\xff\x00": (b"A-ff-0", 1, 4, None),
    b"a\xff\xff": (b"A-ff-ff", 0, 5, 5_000),
    b"ab": (b"AB", 1, 6, 6_000),
    b"b": (b"B", None, 7, 7_000),  # unknown partition
    b"c": (b"C", 0, None, 8_000),
    b"\xff": (b"FF", 1, 9, 9_000),
    b"\xff\xff": (b"FF-FF", 2, 10, None),
    b"\xff\xff\x00": (b"FF-FF-0", 1, 11, 11_000),
}
KEYS = sorted(ROWS)


@pytest.fixture
def store(make_store: MakeStore) -> Store:
    store = make_store(partitions=3)
    with store.begin() as txn:
        txn.put_all(
            (key, value, -1 if p is None else p, -1 if o is None else o, -1 if t is None else t)
            for key, (value, p, o, t) in ROWS.items()
        )
    return store


def _scan(store: Store, spec: ScanSpec, **kwargs: object) -> tuple[pa.Table, ScanStats]:
    stats = ScanStats()
    with store.snapshot() as snap:
        batches = list(scan_batches(snap, spec, stats=stats, **kwargs))  # type: ignore[arg-type]
    for batch in batches:
        assert batch.schema == arrow_schema()
    return pa.Table.from_batches(batches, schema=arrow_schema()), stats


def _keys(store: Store, spec: ScanSpec) -> list[bytes]:
    table, _ = _scan(store, spec)
    keys: list[bytes] = table.column("key").to_pylist()
    return keys


def _model(spec: ScanSpec) -> list[bytes]:
    """What ``spec`` selects from ROWS, by its definition."""
    out = []
    for key in KEYS:
        if spec.keys is not None and key not in spec.keys:
            continue
        if spec.lower is not None and (
            key < spec.lower or (key == spec.lower and not spec.lower_inclusive)
        ):
            continue
        if spec.upper is not None and (
            key > spec.upper or (key == spec.upper and not spec.upper_inclusive)
        ):
            continue
        if spec.prefix is not None and not key.startswith(spec.prefix):
            continue
        if spec.partitions is not None and ROWS[key][1] not in spec.partitions:
            continue
        out.append(key)
    return out if spec.limit is None else out[: spec.limit]


# -- semantics ------------------------------------------------------------------------------
def test_everything_returns_all_rows_with_their_envelope(store: Store) -> None:
    table, stats = _scan(store, ScanSpec.everything())
    assert table.column("key").to_pylist() == KEYS
    by_key = {row["key"]: row for row in table.to_pylist()}
    for key, (value, partition, offset, timestamp) in ROWS.items():
        row = by_key[key]
        assert (row["value"], row["partition"], row["offset"]) == (value, partition, offset)
        expected = (
            None if timestamp is None else datetime.fromtimestamp(timestamp / 1000, tz=timezone.utc)
        )
        assert row["timestamp"] == expected
    assert stats == ScanStats(rows_examined=len(ROWS), rows_returned=len(ROWS))


def test_exclusive_lower_bound_skips_only_the_bound(store: Store) -> None:
    spec = ScanSpec.between(b"a", b"b", lower_inclusive=False)
    assert _keys(store, spec) == [b"a\x00", b"ab", b"a\xff", b"a\xff\x00", b"a\xff\xff", b"b"]
    # b"a\x00" is the smallest key above b"a": it must not be skipped with the bound.
    assert _keys(store, ScanSpec.between(b"a", None, lower_inclusive=False))[0] == b"a\x00"


def test_exclusive_upper_bound_drops_the_bound_and_reads_nothing_beyond(store: Store) -> None:
    spec = ScanSpec.between(b"a", b"a\xff\xff", upper_inclusive=False)
    table, stats = _scan(store, spec)
    assert table.column("key").to_pylist() == [b"a", b"a\x00", b"ab", b"a\xff", b"a\xff\x00"]
    assert stats.rows_returned == 5
    assert stats.rows_examined <= stats.rows_returned + 1  # at most the bound itself
    # A bound that is no key: nothing to drop.
    assert _keys(store, ScanSpec.between(b"a\xfe", b"a\xff\x01", upper_inclusive=False)) == [
        b"a\xff",
        b"a\xff\x00",
    ]


@pytest.mark.parametrize(
    "spec",
    [
        ScanSpec.between(b"c", b"a"),
        ScanSpec.between(b"a", b"a", upper_inclusive=False),
        ScanSpec.between(b"a", b"a", lower_inclusive=False),
        ScanSpec.for_keys([]),
        ScanSpec.everything().with_limit(0),
        ScanSpec.everything().with_partitions([]),
        ScanSpec.with_prefix(b"a").intersect(ScanSpec.with_prefix(b"b")),
        ScanSpec.with_prefix(b"a").intersect(ScanSpec.between(b"b", None)),
        ScanSpec.for_keys([b"a", b"b"]).intersect(ScanSpec.for_keys([b"c"])),
    ],
)
def test_empty_specs_read_nothing(store: Store, spec: ScanSpec) -> None:
    assert spec.is_empty()
    table, stats = _scan(store, spec)
    assert table.num_rows == 0
    assert stats == ScanStats(0, 0)


def test_point_range_with_both_bounds_inclusive_is_one_key(store: Store) -> None:
    spec = ScanSpec.between(b"a", b"a")
    assert not spec.is_empty()
    assert _keys(store, spec) == [b"a"]


def test_key_lookups_are_sorted_distinct_and_skip_missing_keys(store: Store) -> None:
    spec = ScanSpec.for_keys([b"c", b"missing", b"", b"a", b"c"])
    assert spec.keys == (b"", b"a", b"c", b"missing")
    table, stats = _scan(store, spec)
    assert table.column("key").to_pylist() == [b"", b"a", b"c"]
    assert table.column("value").to_pylist() == [b"empty-key", b"A", b"C"]
    assert stats == ScanStats(rows_examined=3, rows_returned=3)


def test_keys_are_filtered_by_bounds_and_prefix_before_they_are_read(store: Store) -> None:
    keys = ScanSpec.for_keys([b"", b"a", b"a\xff", b"ab", b"b", b"c"])
    spec = keys.intersect(ScanSpec.between(b"a", b"b", lower_inclusive=False))
    table, stats = _scan(store, spec)
    assert table.column("key").to_pylist() == [b"ab", b"a\xff", b"b"]
    assert stats.rows_examined == 3  # keys outside the bounds are not even read
    spec = keys.intersect(ScanSpec.with_prefix(b"a"))
    assert _keys(store, spec) == [b"a", b"ab", b"a\xff"]


def test_partitions_keep_only_their_rows(store: Store) -> None:
    table, stats = _scan(store, ScanSpec.everything().with_partitions([1]))
    assert table.column("key").to_pylist() == [k for k in KEYS if ROWS[k][1] == 1]
    assert set(table.column("partition").to_pylist()) == {1}
    assert stats.rows_examined == len(ROWS)  # counted before the partition filter
    assert stats.rows_returned == table.num_rows
    # Rows of unknown partition match no partition set.
    assert b"b" not in _keys(store, ScanSpec.everything().with_partitions([0, 1, 2]))
    assert _keys(store, ScanSpec.for_keys([b"a", b"c"]).with_partitions([0])) == [b"c"]


def test_limit_counts_returned_rows_after_the_partition_filter(store: Store) -> None:
    spec = ScanSpec.everything().with_partitions([1]).with_limit(3)
    table, stats = _scan(store, spec)
    assert table.column("key").to_pylist() == [b"\x00", b"a", b"ab"]
    assert stats.rows_returned == 3
    assert stats.rows_examined == KEYS.index(b"ab") + 1  # stops at the limit
    assert _keys(store, ScanSpec.for_keys(KEYS).with_limit(2)) == KEYS[:2]


@pytest.mark.parametrize(
    "prefix", [b"a", b"a\xff", b"a\xff\xff", b"\xff", b"\xff\xff", b"\x00", b"q", b""]
)
def test_prefix(store: Store, prefix: bytes) -> None:
    assert _keys(store, ScanSpec.with_prefix(prefix)) == [k for k in KEYS if k.startswith(prefix)]


def test_batch_rows_splits_batches(store: Store) -> None:
    with store.snapshot() as snap:
        sizes = [b.num_rows for b in scan_batches(snap, ScanSpec.everything(), batch_rows=4)]
        assert sizes == [4, 4, 4, 2]
        sizes = [b.num_rows for b in scan_batches(snap, ScanSpec.for_keys(KEYS), batch_rows=5)]
        assert sizes == [5, 5, 4]
        with pytest.raises(InvalidScanError, match="batch_rows"):
            scan_batches(snap, ScanSpec.everything(), batch_rows=0)


def test_stats_accumulate_across_scans(store: Store) -> None:
    stats = ScanStats()
    with store.snapshot() as snap:
        for _ in range(2):
            list(scan_batches(snap, ScanSpec.for_keys([b"a", b"b"]), stats=stats))
    assert stats == ScanStats(rows_examined=4, rows_returned=4)


def test_a_closed_snapshot_cannot_be_scanned(store: Store) -> None:
    snap = store.snapshot()
    snap.close()
    for spec in (ScanSpec.everything(), ScanSpec.for_keys([b"a"])):
        with pytest.raises(StoreClosedError):
            list(scan_batches(snap, spec))


def test_intersect_takes_the_tighter_bounds() -> None:
    a = ScanSpec.between(b"b", b"m")
    b = ScanSpec.between(b"b", b"k", lower_inclusive=False)
    both = a.intersect(b)
    assert (both.lower, both.lower_inclusive, both.upper, both.upper_inclusive) == (
        b"b",
        False,
        b"k",
        True,
    )
    assert both == b.intersect(a)
    limited = ScanSpec.everything().with_limit(5).intersect(ScanSpec.everything().with_limit(3))
    assert limited.limit == 3
    parts = (
        ScanSpec.everything()
        .with_partitions([1, 2])
        .intersect(ScanSpec.everything().with_partitions([2, 3]))
    )
    assert parts.partitions == frozenset({2})
    assert ScanSpec.with_prefix(b"a").intersect(ScanSpec.with_prefix(b"ab")).prefix == b"ab"
    assert ScanSpec.with_prefix(b"ab").intersect(ScanSpec.with_prefix(b"a")).prefix == b"ab"


def test_matches_key() -> None:
    spec = ScanSpec.for_keys([b"a", b"b", b"c"]).intersect(
        ScanSpec.between(b"a", b"c", upper_inclusive=False)
    )
    assert [k for k in (b"a", b"b", b"c", b"d") if spec.matches_key(k)] == [b"a", b"b"]


KEY_ALPHABET = st.one_of(
    st.sampled_from([*KEYS, b"a\x01", b"aa", b"zz", b"\xff\xff\xff", b"a\xfe"]),
    st.binary(max_size=3),
)
SPECS = st.builds(
    ScanSpec,
    keys=st.none() | st.lists(KEY_ALPHABET, max_size=6).map(tuple),
    lower=st.none() | KEY_ALPHABET,
    lower_inclusive=st.booleans(),
    upper=st.none() | KEY_ALPHABET,
    upper_inclusive=st.booleans(),
    prefix=st.none() | st.sampled_from([b"", b"a", b"a\xff", b"\xff", b"\xff\xff", b"b"]),
    partitions=st.none() | st.frozensets(st.integers(0, 3), max_size=3),
    limit=st.none() | st.integers(0, 20),
)
SCHEMA_IDS = st.none() | st.frozensets(st.integers(-(2**31), 2**31 - 1), max_size=3)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(spec=SPECS)
def test_scans_match_the_model(store: Store, spec: ScanSpec) -> None:
    table, stats = _scan(store, spec, batch_rows=3)
    expected = _model(spec)
    assert table.column("key").to_pylist() == expected
    assert stats.rows_returned == len(expected)
    if spec.is_empty():
        assert expected == [] and stats.rows_examined == 0
    if spec.keys is not None:
        assert stats.rows_examined <= len(spec.keys)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(a=SPECS, b=SPECS)
def test_intersect_selects_rows_both_select(store: Store, a: ScanSpec, b: ScanSpec) -> None:
    unlimited_a, unlimited_b = a.with_limit(None), b.with_limit(None)
    both = set(_model(unlimited_a)) & set(_model(unlimited_b))
    assert _keys(store, unlimited_a.intersect(unlimited_b)) == sorted(both)


# -- reads stay bounded on a large store ---------------------------------------------------
def test_key_lookups_read_only_their_keys_on_a_large_store(make_store: MakeStore) -> None:
    store = make_store("large", partitions=4)
    with store.begin() as txn:
        txn.put_all((b"k%07d" % i, b"v", i % 4, i, 1_000) for i in range(200_000))
    wanted = [b"k0000007", b"k0123456", b"k0199999", b"absent"]
    table, stats = _scan(store, ScanSpec.for_keys(wanted))
    assert table.column("key").to_pylist() == wanted[:3]
    assert stats.rows_examined <= len(wanted)
    _, stats = _scan(store, ScanSpec.between(b"k0100000", b"k0100009", upper_inclusive=False))
    # The reference path reads the exclusive bound's key and drops it; the compiled
    # extension's iterator stops at it.
    assert stats.rows_returned == 9
    assert stats.rows_examined in (9, 10)
    _, stats = _scan(store, ScanSpec.with_prefix(b"k019999"))
    assert stats.rows_examined == stats.rows_returned == 10
    _, stats = _scan(store, ScanSpec.everything().with_limit(5))
    assert stats.rows_examined == 5


# -- validation ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: ScanSpec.for_keys(b"abc"), "single value"),  # type: ignore[arg-type]
        (lambda: ScanSpec(keys=b"abc"), "single value"),  # type: ignore[arg-type]
        (lambda: ScanSpec.for_keys(["a"]), "encode it"),  # type: ignore[list-item]
        (lambda: ScanSpec.between("a", None), "lower must be bytes"),  # type: ignore[arg-type]
        (lambda: ScanSpec.with_prefix(1), "prefix must be bytes"),  # type: ignore[arg-type]
        (lambda: ScanSpec.everything().with_limit(-1), r"limit must be in \[0, 2\*\*63-1\]"),
        (lambda: ScanSpec.everything().with_limit(2**63), r"limit must be in \[0, 2\*\*63-1\]"),
        (lambda: ScanSpec.everything().with_limit(True), "limit must be an int"),
        (lambda: ScanSpec.everything().with_partitions([-1]), "partitions must be ints"),
        (lambda: ScanSpec.everything().with_partitions([True]), "partitions must be ints"),
        (lambda: ScanSpec.everything().with_partitions(3), "collection of ints"),  # type: ignore[arg-type]
        (lambda: ScanSpec(lower_inclusive=1), "True or False"),  # type: ignore[arg-type]
    ],
)
def test_invalid_specs_are_refused(build: Callable[[], object], match: str) -> None:
    with pytest.raises(InvalidScanError, match=match) as err:
        build()
    assert isinstance(err.value, StoreError)
    assert isinstance(err.value, ValueError)
    assert isinstance(err.value, StateStoreError)


def test_bytes_like_values_are_normalised_to_bytes() -> None:
    spec = ScanSpec.for_keys([bytearray(b"b"), memoryview(b"a")]).intersect(  # type: ignore[list-item]
        ScanSpec.with_prefix(bytearray(b""))  # type: ignore[arg-type]
    )
    assert spec.keys == (b"a", b"b")
    assert type(spec.prefix) is bytes
    assert hash(spec) == hash(ScanSpec(keys=(b"a", b"b"), prefix=b""))


# -- JSON ----------------------------------------------------------------------------------
@given(spec=SPECS, framed_ids=SCHEMA_IDS)
def test_json_round_trip(spec: ScanSpec, framed_ids: frozenset[int] | None) -> None:
    spec = replace(spec, framed_ids=framed_ids)
    text = spec.to_json()
    assert ScanSpec.from_json(text) == spec
    assert ScanSpec.from_json(text.encode()) == spec
    assert ScanSpec.from_dict(json.loads(text)) == spec


def test_json_shape() -> None:
    spec = ScanSpec.for_keys([b"\xff", b"a"]).intersect(
        ScanSpec.between(b"a", None, lower_inclusive=False).with_partitions([2, 0]).with_limit(7)
    )
    assert json.loads(spec.to_json()) == {
        "keys": ["YQ==", "/w=="],
        "lower": "YQ==",
        "lower_inclusive": False,
        "upper": None,
        "upper_inclusive": True,
        "prefix": None,
        "partitions": [0, 2],
        "limit": 7,
        "as_of": None,
        "framed_ids": None,
    }
    assert ScanSpec.from_json("{}") == ScanSpec.everything()
    assert json.loads(ScanSpec.everything().with_as_of(-5).to_json())["as_of"] == -5


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"lmit": 3}', "unknown field 'lmit'; did you mean 'limit'"),
        ('{"keys": "YQ=="}', "'keys' must be a list"),
        ('{"keys": [null]}', "keys must be base64"),
        ('{"lower": "not base64!"}', "not base64"),
        ('{"keys": ["YQ==", "not base64!"]}', "'keys' holds 'not base64!', which is not base64"),
        ('{"keys": ["YQ==", "YQ"]}', "'keys' holds 'YQ', which is not base64"),
        ('{"keys": ["YQ==", "\u00e9"]}', "not base64"),
        ('{"keys": ["YQ==", 5]}', "'keys' must hold base64 strings"),
        ('{"upper": 5}', "'upper' must hold base64 strings"),
        ('{"partitions": {"0": 1}}', "'partitions' must be a list"),
        ('{"partitions": ["0"]}', "partitions must be ints"),
        ('{"limit": "10"}', "limit must be an int"),
        ('{"as_of": "2024-01-01"}', "as_of must be epoch milliseconds"),
        ('{"as_of": 9223372036854775808}', "as_of must be epoch milliseconds"),
        ('{"upper_inclusive": "yes"}', "True or False"),
        ('{"framed_ids": 3}', "'framed_ids' must be a list"),
        ('{"framed_ids": [2147483648]}', "32-bit schema ids"),
        ('{"framed_ids": [true]}', "framed_ids must be ints"),
    ],
)
def test_malformed_json_is_refused(text: str, match: str) -> None:
    with pytest.raises(InvalidScanError, match=match):
        ScanSpec.from_json(text)


# -- keys framed by a schema registry ------------------------------------------------------
def _framed(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big", signed=True) + payload


@pytest.fixture
def framed_store(make_store: MakeStore) -> Store:
    """Keys under schema ids 1, 3 and 300 (whose frame header ends in 0xff bytes, so the
    skip scan's next seek carries into the id)."""
    store = make_store(partitions=1)
    keys = [_framed(i, bytes([n])) for i in (1, 3, 255, 511) for n in (0, 1, 255)]
    with store.begin() as txn:
        txn.put_all((key, b"v", 0, n, -1) for n, key in enumerate(keys))
    return store


def test_a_framed_key_lookup_reads_when_every_stored_id_is_covered(framed_store: Store) -> None:
    wanted = [_framed(3, b"\x01"), _framed(1, b"\x01")]
    spec = ScanSpec.for_keys(wanted).intersect(ScanSpec(framed_ids=frozenset({1, 3, 255, 511})))
    assert _keys(framed_store, spec) == sorted(wanted)


@pytest.mark.parametrize("uncovered", [{1}, {3}, {255}, {511}, {1, 511}])
def test_a_framed_key_lookup_fails_when_the_store_holds_keys_under_another_id(
    framed_store: Store, uncovered: set[int]
) -> None:
    ids = frozenset({1, 3, 255, 511} - uncovered)
    spec = ScanSpec(keys=(_framed(3, b"\x01"),), framed_ids=ids)
    with pytest.raises(UncoveredKeySchemaError) as raised:
        _keys(framed_store, spec)
    assert raised.value.ids == frozenset(uncovered)
    for schema_id in uncovered:
        assert f"schema id {schema_id} (e.g. key " in str(raised.value)
    # Even a lookup that selects nothing must not answer "absent" then.
    with pytest.raises(UncoveredKeySchemaError):
        _keys(framed_store, ScanSpec(keys=(), framed_ids=ids))


@pytest.mark.parametrize("stray", [b"", b"\x00\x00", b"\x01abcdef", b"\xff"])
def test_keys_that_are_not_frames_are_uncovered_too(make_store: MakeStore, stray: bytes) -> None:
    store = make_store(partitions=1)
    with store.begin() as txn:
        txn.put_all([(_framed(1, b"k"), b"v", 0, 0, -1), (stray, b"v", 0, 1, -1)])
    with pytest.raises(UncoveredKeySchemaError, match="not registry frames") as raised:
        _keys(store, ScanSpec(keys=(_framed(1, b"k"),), framed_ids=frozenset({1})))
    assert raised.value.ids == frozenset({None})


def test_the_id_check_costs_a_seek_per_stored_id(make_store: MakeStore) -> None:
    store = make_store(partitions=1)
    with store.begin() as txn:
        txn.put_all(
            (_framed(i % 3, n.to_bytes(4, "big")), b"v", 0, n, -1)
            for i, n in ((n, n) for n in range(3000))
        )
    with store.snapshot() as snap:
        seeks = 0
        chunks = snap.envelope_chunks

        def counted(*args: object) -> object:
            nonlocal seeks
            seeks += 1
            return chunks(*args)  # type: ignore[arg-type]

        snap.envelope_chunks = counted  # type: ignore[method-assign]
        check_framed_ids(snap, frozenset({0, 1, 2}))
    assert seeks == 4  # one per id, and one that finds the end
