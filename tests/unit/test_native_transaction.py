"""The fast path writes what the reference path writes: the same records given in columns
(through the compiled extension) and as tuples (plyvel, per record in Python) leave
byte-equal stores, read the same inside the transaction, and fail the same way."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_statestore.changelog.columns import RecordColumns
from spark_statestore.native import ENV
from spark_statestore.store import Role, Store, StoreOptions, StoreSpec
from spark_statestore.store.errors import TransactionError
from tests.native_util import native_or_skip

native_or_skip()

SPEC = StoreSpec(Role.FOLLOWER, "t", 4)

record = st.tuples(
    st.binary(max_size=5),
    st.none() | st.binary(max_size=8),
    st.integers(0, 3),
    st.integers(-1, 2**40),
    st.integers(-1, 2**40),
)
header_sets = st.lists(
    st.tuples(st.sampled_from(["a", "b", "é"]), st.none() | st.binary(max_size=4)),
    min_size=0,
    max_size=3,
).map(tuple)


def raw_contents(path: Path) -> dict[bytes, bytes]:
    """Every data key of the store's LevelDB and its envelope (metadata aside)."""
    import plyvel

    db = plyvel.DB(str(path / "db"))
    try:
        return {k: v for k, v in db.iterator() if k[:1] in (b"d", b"h")}
    finally:
        db.close()


def write(
    path: Path,
    monkeypatch: pytest.MonkeyPatch,
    native_on: bool,
    chunks: list[list[tuple[bytes, bytes | None, int, int, int]]],
    columns: bool,
    headers: list[dict[int, tuple[tuple[str, bytes | None], ...]]],
    budget: int,
) -> list[list[tuple[bytes, bytes]]]:
    """Write ``chunks`` (one transaction each) and return what each transaction read back
    of its own writes before committing."""
    monkeypatch.setenv(ENV, "1" if native_on else "0")
    seen = []
    options = StoreOptions(uncommitted_max_bytes=budget)
    with Store.open(path, SPEC, options=options) as store:
        for rows, kept in zip(chunks, headers, strict=True):
            with store.begin() as txn:
                if columns:
                    txn.put_records(RecordColumns.from_rows(rows), kept)
                else:
                    txn.put_all(rows, kept)
                seen.append(list(txn.items()))
                txn.commit()
    return seen


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    chunks=st.lists(st.lists(record, max_size=25), min_size=1, max_size=3),
    header_rows=st.lists(st.tuples(st.integers(0, 24), header_sets), max_size=4),
    spill=st.booleans(),
)
def test_columns_and_tuples_leave_equal_stores(
    tmp_path_factory: pytest.TempPathFactory,
    chunks: list[list[tuple[bytes, bytes | None, int, int, int]]],
    header_rows: list[tuple[int, tuple[tuple[str, bytes | None], ...]]],
    spill: bool,
) -> None:
    headers = [{i: h for i, h in header_rows if i < len(rows)} for rows in chunks]
    budget = 600 if spill else StoreOptions().uncommitted_max_bytes  # small: spills
    fast, tuples = tmp_path_factory.mktemp("fast"), tmp_path_factory.mktemp("tuples")
    reference = tmp_path_factory.mktemp("ref")
    with pytest.MonkeyPatch.context() as mp:
        seen_fast = write(fast, mp, True, chunks, True, headers, budget)
        seen_tuples = write(tuples, mp, True, chunks, False, headers, budget)
        seen_ref = write(reference, mp, False, chunks, False, headers, budget)
    assert seen_fast == seen_tuples == seen_ref
    assert raw_contents(fast) == raw_contents(tuples) == raw_contents(reference)


@pytest.mark.parametrize(
    "bad",
    [
        (b"b", b"2", 9, 0, 0),  # partition 9 of a 4-partition store
        ("text", b"2", 0, 0, 0),  # Arrow would take text as bytes: the store does not
        (b"b", "text", 0, 0, 0),
        (b"b", b"2", 0, 1.5, 0),  # Arrow would take a float as an int
        (b"b", b"2", 0, 0, None),
    ],
)
def test_a_malformed_record_fails_every_path_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: tuple[object, ...]
) -> None:
    rows = [(b"a", b"1", 0, 0, 0), bad]
    for native_on, columns in ((True, True), (True, False), (False, False)):
        if columns and bad[2] == 9:
            records = RecordColumns.from_rows(rows)  # type: ignore[arg-type]
        elif columns:
            continue  # such columns are not Arrow's binary/int columns
        monkeypatch.setenv(ENV, "1" if native_on else "0")
        path = tmp_path / f"{native_on}{columns}"
        with (
            Store.open(path, SPEC) as store,
            store.begin() as txn,
            pytest.raises(TransactionError, match="record 1 of the bulk write"),
        ):
            if columns:
                txn.put_records(records)
            else:
                txn.put_all(rows)  # type: ignore[arg-type]


def test_a_bool_field_is_an_int_on_every_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [(b"a", b"1", True, 0, 0)]  # as struct.pack takes it
    for native_on in (True, False):
        monkeypatch.setenv(ENV, "1" if native_on else "0")
        with Store.open(tmp_path / str(native_on), SPEC) as store:
            with store.begin() as txn:
                txn.put_all(rows)
                txn.commit()
            with store.snapshot() as snapshot:
                assert snapshot.get_record(b"a").partition == 1  # type: ignore[union-attr]
