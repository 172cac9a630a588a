"""Records kept with their changelog record's headers (envelope version 1), no broker."""

from __future__ import annotations

import contextlib
import random
from pathlib import Path

import pyarrow as pa
import pytest

from spark_statestore.connectors.kafka.follower.source import kept_headers
from spark_statestore.store import Role, ScanSpec, Store, StoredRecord, StoreSpec, scan_batches
from spark_statestore.store.errors import StoreCorruptedError
from spark_statestore.store.layout import (
    DATA_PREFIX,
    HEADER_SIZE,
    decode_record,
    envelope_value,
    pack_header,
    pack_headers_envelope,
)

HEADERS = (
    ("trace", b"t-1"),
    ("dup", b"x"),
    ("dup", b""),
    ("nul", None),
    ("\u00e9t\u00e9", b"\xff"),
)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(tmp_path / "s", StoreSpec(Role.FOLLOWER, "h-changelog", 4))


def test_envelope_round_trip_and_version_0_unchanged() -> None:
    raw = pack_headers_envelope(2, 41, 1_700_000_000_000, HEADERS) + b"value"
    assert raw[0] == 1
    record = decode_record(b"k", raw)
    assert record == StoredRecord(b"k", b"value", 2, 41, 1_700_000_000_000, HEADERS)
    assert envelope_value(raw) == b"value"
    # A record without headers keeps the old envelope byte for byte (and stores written
    # before headers were kept read as they were).
    plain = pack_header(2, 41, 5) + b"value"
    assert plain[0] == 0 and len(plain) == HEADER_SIZE + 5
    assert decode_record(b"k", plain) == StoredRecord(b"k", b"value", 2, 41, 5)
    assert decode_record(b"k", plain).headers == ()


def test_truncated_or_inconsistent_headers_are_corruption() -> None:
    raw = pack_headers_envelope(0, 1, 2, HEADERS) + b"v"
    rng = random.Random(3)
    for cut in range(HEADER_SIZE, len(raw) - 1):
        try:
            record = decode_record(b"k", raw[:cut])
        except StoreCorruptedError as exc:
            assert "not a valid envelope" in str(exc)
        else:  # a cut inside the value is a shorter value, not corruption
            assert record.headers == HEADERS
    for _ in range(300):
        mutated = bytearray(raw)
        mutated[rng.randrange(HEADER_SIZE, len(raw))] = rng.randrange(256)
        with contextlib.suppress(StoreCorruptedError):
            decode_record(b"k", bytes(mutated))
    with pytest.raises(StoreCorruptedError, match="version byte 02"):
        decode_record(b"k", b"\x02" + raw[1:])


def test_puts_keep_headers_and_every_read_path_returns_them(store: Store) -> None:
    with store:
        with store.begin() as txn:
            txn.put(b"a", b"1", partition=0, offset=1, timestamp=10, headers=HEADERS)
            txn.put(b"b", b"2", partition=1, offset=2, timestamp=11)
            rows = [(b"c", b"3", 2, 3, 12), (b"d", b"4", 3, 4, 13), (b"e", None, 3, 5, 14)]
            txn.put_all(rows, {1: (("h", b"d"),), 2: (("h", b"gone"),)})
            assert txn.get_record(b"a") == StoredRecord(b"a", b"1", 0, 1, 10, HEADERS)
            assert txn.get(b"d") == b"4"
        with store.snapshot() as snap:
            assert snap.get(b"a") == b"1"
            assert snap.get_record(b"a") == StoredRecord(b"a", b"1", 0, 1, 10, HEADERS)
            assert snap.get_record(b"b") == StoredRecord(b"b", b"2", 1, 2, 11)
            assert snap.get_record(b"d") == StoredRecord(b"d", b"4", 3, 4, 13, (("h", b"d"),))
            assert snap.get(b"e") is None  # a delete keeps nothing, headers or not
            assert snap.multi_get([b"a", b"d"]) == {b"a": b"1", b"d": b"4"}
            assert list(snap.items()) == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3"), (b"d", b"4")]
            want = {
                b"a": [{"key": k, "value": v} for k, v in HEADERS],
                b"b": [],
                b"c": [],
                b"d": [{"key": "h", "value": b"d"}],
            }
            # The scan of a range (Arrow, row by row since some envelopes have headers), of
            # point reads, and of a partition subset.
            for spec in (
                ScanSpec.everything(),
                ScanSpec.for_keys([b"a", b"b", b"c", b"d"]),
                ScanSpec.everything().with_partitions([0, 3]),
            ):
                table = pa.Table.from_batches(list(scan_batches(snap, spec)))
                got = dict(zip(table["key"].to_pylist(), table["headers"].to_pylist(), strict=True))
                wanted = {
                    k: v for k, v in want.items() if spec.partitions is None or k in (b"a", b"d")
                }
                assert got == wanted, spec
            # Without any headers in a chunk, the vectorized path gives empty lists.
            (batch,) = snap.to_batches(lower=b"b", upper=b"c")
            assert batch.column("headers").to_pylist() == [[], []]
            assert batch.column("value").to_pylist() == [b"2", b"3"]
        raw = store._db.get(DATA_PREFIX + b"b")
        assert raw is not None and raw[0] == 0 and len(raw) == HEADER_SIZE + 1


def test_bad_headers_are_refused_naming_the_field(store: Store) -> None:
    from spark_statestore.store.errors import TransactionError

    with store, store.begin() as txn:
        with pytest.raises(TransactionError, match="headers"):
            txn.put(b"a", b"1", headers=((b"bytes-key", b"v"),))  # type: ignore[arg-type]
        txn.rollback()


def test_the_follower_source_keeps_all_but_the_position_headers() -> None:
    assert kept_headers([None, [], [("v", b"\x00"), ("c", b"...")]]) == {}
    assert kept_headers([[("trace", b"1"), ("v", b"\x00"), ("c", b"."), ("dup", None)]]) == {
        0: (("trace", b"1"), ("dup", None))
    }
    assert kept_headers([None, [("a", b"1")]]) == {1: (("a", b"1"),)}
