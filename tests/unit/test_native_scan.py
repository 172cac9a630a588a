"""Scans answer the same on both paths: every kind of :class:`ScanSpec` over the same store,
read through the compiled extension (decoded in one call per batch) and through plyvel (the
reference path), gives equal Arrow tables; a corrupted envelope fails both the same way."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from spark_statestore.native import ENV
from spark_statestore.store import Role, ScanSpec, Store, StoreSpec, scan_batches
from spark_statestore.store.errors import InvalidScanError, StoreCorruptedError
from spark_statestore.store.scan import ScanStats, lookup_batches
from spark_statestore.store.snapshot import arrow_schema
from tests.native_util import native_or_skip, stored_bytes

native_or_skip()

SPEC = StoreSpec(Role.FOLLOWER, "t", 4)
KEYS = st.binary(min_size=1, max_size=3)


def as_rows(table: pa.Table) -> list[dict[str, object]]:
    """The table's rows, timestamps as epoch ms (stored bytes can hold instants Python's
    datetime cannot)."""
    at = table.schema.get_field_index("timestamp")
    stamps = table.column(at).cast(pa.int64())
    return table.set_column(at, "timestamp", stamps).to_pylist()


def scan(path: Path, spec: ScanSpec, native_on: bool, batch_rows: int) -> pa.Table:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV, "1" if native_on else "0")
        with Store.open(path) as store, store.snapshot() as snapshot:
            batches = list(scan_batches(snapshot, spec, batch_rows=batch_rows))
            assert all(b.num_rows <= batch_rows for b in batches)
            return pa.Table.from_batches(batches, schema=arrow_schema())


specs = st.one_of(
    st.just(ScanSpec.everything()),
    st.lists(KEYS, max_size=6).map(ScanSpec.for_keys),
    st.tuples(st.none() | KEYS, st.none() | KEYS, st.booleans(), st.booleans()).map(
        lambda b: ScanSpec.between(b[0], b[1], lower_inclusive=b[2], upper_inclusive=b[3])
    ),
    KEYS.map(ScanSpec.with_prefix),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(
        st.tuples(KEYS, st.binary(max_size=6), st.integers(-1, 3), st.integers(-1, 99)),
        max_size=40,
    ),
    header_rows=st.sets(st.integers(0, 39), max_size=4),
    spec=specs,
    partitions=st.none() | st.sets(st.integers(0, 3), max_size=2),
    limit=st.none() | st.integers(0, 10),
    batch_rows=st.integers(1, 7),
)
def test_every_scan_answers_the_same_on_both_paths(
    tmp_path_factory: pytest.TempPathFactory,
    rows: list[tuple[bytes, bytes, int, int]],
    header_rows: set[int],
    spec: ScanSpec,
    partitions: set[int] | None,
    limit: int | None,
    batch_rows: int,
) -> None:
    path = tmp_path_factory.mktemp("store")
    headers = {i: (("h", b"x%d" % i), ("n", None)) for i in header_rows if i < len(rows)}
    with Store.open(path, SPEC) as store, store.begin() as txn:
        txn.put_all([(k, v, p, o, o * 10 if o >= 0 else -1) for k, v, p, o in rows], headers)
        txn.commit()
    if partitions is not None:
        spec = spec.with_partitions(partitions)
    spec = spec.with_limit(limit)
    fast = scan(path, spec, True, batch_rows)
    reference = scan(path, spec, False, batch_rows)
    assert as_rows(fast) == as_rows(reference)


def test_a_corrupted_envelope_fails_both_paths_naming_its_key(tmp_path: Path) -> None:
    import plyvel

    with Store.open(tmp_path, SPEC) as store, store.begin() as txn:
        txn.put_all([(b"a", b"1", 0, 0, 0), (b"b", b"2", 0, 1, 0)])
        txn.commit()
    db = plyvel.DB(str(tmp_path / "db"))
    db.put(b"db", b"\x07short")  # an unknown envelope version
    db.close()
    for native_on in (True, False):
        for spec in (ScanSpec.everything(), ScanSpec.for_keys([b"b"])):
            with pytest.raises(StoreCorruptedError, match="b'b'"):
                scan(tmp_path, spec, native_on, 10)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    envelopes=st.lists(
        stored_bytes(),
        min_size=1,
        max_size=6,
    )
)
@example(envelopes=[bytes(13) + b"\x013" + bytes(6)])  # a timestamp past datetime's range
def test_any_stored_bytes_read_the_same_or_fail_the_same(
    tmp_path_factory: pytest.TempPathFactory, envelopes: list[bytes]
) -> None:
    """Fuzz: raw values under data keys (valid envelopes, truncated ones, other versions,
    header blocks of any length) scan to equal tables on both paths, or fail with a
    StoreCorruptedError on both."""
    import plyvel

    path = tmp_path_factory.mktemp("store")
    Store.open(path, SPEC).close()
    db = plyvel.DB(str(path / "db"))
    for i, raw in enumerate(envelopes):
        db.put(b"dk%02d" % i, raw)
    db.close()
    outcomes = []
    for native_on in (True, False):
        for spec in (ScanSpec.everything(), ScanSpec.for_keys([b"k00", b"k03"])):
            try:
                outcomes.append(as_rows(scan(path, spec, native_on, 4)))
            except StoreCorruptedError:
                outcomes.append("corrupted")
    assert outcomes[:2] == outcomes[2:]


def lookup(path: Path, keys: pa.Array, native_on: bool, batch_rows: int) -> pa.Table:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV, "1" if native_on else "0")
        with Store.open(path) as store, store.snapshot() as snapshot:
            stats = ScanStats()
            batches = list(lookup_batches(snapshot, keys, batch_rows=batch_rows, stats=stats))
            assert all(b.num_rows <= batch_rows for b in batches)
            table = pa.Table.from_batches(batches, schema=arrow_schema())
            assert stats.rows_returned == table.num_rows
            return table


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(
        st.tuples(
            st.binary(min_size=1, max_size=3) | st.just(b"\xff\x00"),
            st.binary(max_size=6),
            st.integers(0, 3),
            st.integers(0, 99),
        ),
        max_size=40,
    ),
    wanted=st.lists(st.binary(min_size=1, max_size=3) | st.just(b"\xff\x00"), max_size=12),
    large=st.booleans(),
    batch_rows=st.integers(1, 7),
)
@example(
    rows=[(b"\x80", b"v", 0, 0), (b"\x01", b"w", 1, 1)],
    wanted=[b"\x80", b"\x01", b"\x80"],
    large=False,
    batch_rows=1,
)
def test_a_lookup_of_arrow_keys_answers_as_a_key_scan_on_both_paths(
    tmp_path_factory: pytest.TempPathFactory,
    rows: list[tuple[bytes, bytes, int, int]],
    wanted: list[bytes],
    large: bool,
    batch_rows: int,
) -> None:
    """``lookup_batches`` (keys deduplicated and sorted in Arrow, unsigned bytes order) gives
    the rows of ``ScanSpec.for_keys`` (deduplicated and sorted by Python), on both paths."""
    path = tmp_path_factory.mktemp("store")
    with Store.open(path, SPEC) as store, store.begin() as txn:
        txn.put_all([(k, v, p, o, o * 10) for k, v, p, o in rows])
        txn.commit()
    keys = pa.array(wanted, pa.large_binary() if large else pa.binary())
    expected = as_rows(scan(path, ScanSpec.for_keys(wanted), False, batch_rows))
    for native_on in (True, False):
        assert as_rows(lookup(path, keys, native_on, batch_rows)) == expected


def test_a_lookup_refuses_null_and_non_binary_keys(tmp_path: Path) -> None:
    Store.open(tmp_path, SPEC).close()
    for native_on in (True, False):
        for keys, message in (
            (pa.array([b"a", None], pa.binary()), "null"),
            (pa.array(["a"], pa.string()), "binary array"),
            ([b"a"], "binary array"),
        ):
            with pytest.raises(InvalidScanError, match=message):
                lookup(tmp_path, keys, native_on, 4)  # type: ignore[arg-type]
