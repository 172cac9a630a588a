"""Record-batch scanning and the transaction index of the embedded broker's proxy."""

from __future__ import annotations

import struct

from spark_statestore.connectors.kafka.embedded.txnlog import AbortedTxn, PartitionTxnLog
from spark_statestore.connectors.kafka.embedded.wire import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    Reader,
    scan_batches,
)


def _varint(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _record(key: bytes, value: bytes, offset_delta: int = 0) -> bytes:
    body = (
        b"\x00"  # attributes
        + _varint(0)  # timestamp delta
        + _varint(offset_delta)
        + _varint(len(key))
        + key
        + _varint(len(value))
        + value
        + _varint(0)  # headers
    )
    return _varint(len(body)) + body


def batch(
    base_offset: int,
    count: int,
    pid: int = -1,
    transactional: bool = False,
    control: int | None = None,
) -> bytes:
    """A magic-2 record batch as it appears in a Fetch response (CRC not computed)."""
    attrs = (0x10 if transactional or control is not None else 0) | (
        0x20 if control is not None else 0
    )
    if control is not None:
        records = _record(struct.pack(">hh", 0, control), b"\x00\x00\x00\x00\x00\x00")
        count = 1
    else:
        records = b"".join(_record(b"k", b"v", i) for i in range(count))
    after_length = (
        struct.pack(">ibIhiqqqhii", 0, 2, 0, attrs, count - 1, 0, 0, pid, 0, 0, count) + records
    )
    return struct.pack(">qi", base_offset, len(after_length)) + after_length


def test_scan_batches_reads_offsets_pids_and_control_types() -> None:
    blob = (
        batch(0, 3)
        + batch(3, 2, pid=7, transactional=True)
        + batch(5, 1, pid=7, control=CONTROL_ABORT)
        + batch(6, 1, pid=9, control=CONTROL_COMMIT)
    )
    batches, covered = scan_batches(blob)
    assert covered == len(blob)
    assert [(b.base_offset, b.last_offset) for b in batches] == [(0, 2), (3, 4), (5, 5), (6, 6)]
    assert [b.transactional for b in batches] == [False, True, True, True]
    assert [b.control_type for b in batches] == [None, None, CONTROL_ABORT, CONTROL_COMMIT]
    assert batches[1].producer_id == 7


def test_scan_batches_ignores_a_trailing_partial_batch() -> None:
    whole = batch(0, 2)
    blob = whole + batch(2, 5)[:-7]
    batches, covered = scan_batches(blob)
    assert len(batches) == 1 and covered == len(whole)
    assert scan_batches(b"\x00" * 5) == ([], 0)


def _log(blob: bytes) -> PartitionTxnLog:
    txn_log = PartitionTxnLog()
    txn_log.apply(scan_batches(blob)[0])
    return txn_log


def test_lso_is_the_first_offset_of_the_oldest_open_transaction() -> None:
    txn_log = _log(batch(0, 2) + batch(2, 3, pid=5, transactional=True) + batch(5, 1))
    assert txn_log.scanned_to == 6
    assert txn_log.last_stable_offset() == 2
    txn_log.apply(scan_batches(batch(6, 1, pid=5, control=CONTROL_COMMIT))[0])
    assert txn_log.last_stable_offset() == 7
    assert txn_log.aborted == []


def test_aborted_transactions_are_recorded_with_their_marker() -> None:
    blob = (
        batch(0, 1, pid=1, transactional=True)
        + batch(1, 1, pid=2, transactional=True)
        + batch(2, 1, pid=1, transactional=True)
        + batch(3, 1, pid=1, control=CONTROL_ABORT)
        + batch(4, 1, pid=2, control=CONTROL_COMMIT)
    )
    txn_log = _log(blob)
    assert txn_log.aborted == [AbortedTxn(first_offset=0, producer_id=1, marker_offset=3)]
    assert txn_log.last_stable_offset() == 5
    # A consumer that already passed the abort marker must not be told about it again.
    assert txn_log.aborted_since(fetch_offset=4, upto=5) == []
    assert txn_log.aborted_since(fetch_offset=2, upto=5) == txn_log.aborted
    assert txn_log.aborted_since(fetch_offset=0, upto=0) == []


def test_applying_the_same_batches_twice_is_harmless() -> None:
    blob = batch(0, 1, pid=3, transactional=True) + batch(1, 1, pid=3, control=CONTROL_ABORT)
    txn_log = _log(blob)
    txn_log.apply(scan_batches(blob)[0])
    assert len(txn_log.aborted) == 1
    assert txn_log.scanned_to == 2


def test_batches_beyond_a_gap_are_not_folded_in() -> None:
    # A fetch response that starts past the scanned end must not make the index skip the
    # unseen offsets (an open transaction could start there).
    txn_log = _log(batch(0, 2))
    txn_log.apply(scan_batches(batch(5, 1) + batch(6, 1, pid=4, transactional=True))[0])
    assert txn_log.scanned_to == 2
    assert txn_log.open == {}
    txn_log.apply(scan_batches(batch(2, 3, pid=4, transactional=True) + batch(5, 1))[0])
    assert txn_log.scanned_to == 6
    assert txn_log.last_stable_offset() == 2


def test_retention_gap_moves_the_scan_forward() -> None:
    txn_log = PartitionTxnLog()
    txn_log.skip_to(100)
    assert txn_log.scanned_to == 100
    txn_log.skip_to(50)
    assert txn_log.scanned_to == 100


def test_reader_rejects_truncated_frames() -> None:
    r = Reader(b"\x00\x01")
    assert r.i16() == 1
    try:
        r.i32()
    except ValueError as exc:
        assert "truncated" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("truncated frame accepted")
