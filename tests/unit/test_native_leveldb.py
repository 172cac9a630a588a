"""The extension's LevelDB binding against a model and against plyvel: the same answers, the
same files (a store written by one reads back through the other), plyvel's closing rules."""

from __future__ import annotations

import os
import struct
import threading
import time
from pathlib import Path
from typing import Any

import plyvel
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.native_util import native_or_skip

native = native_or_skip()

KEYS = st.binary(min_size=0, max_size=4)
OPTIONS = {"lru_cache_size": 1 << 20, "bloom_filter_bits": 10}


def model_iter(
    data: dict[bytes, bytes],
    *,
    start: bytes | None = None,
    stop: bytes | None = None,
    include_start: bool = True,
    include_stop: bool = False,
    reverse: bool = False,
) -> list[tuple[bytes, bytes]]:
    """What plyvel's documentation says an iterator yields."""
    out = []
    for key in sorted(data):
        if start is not None and (key < start or (key == start and not include_start)):
            continue
        if stop is not None and (key > stop or (key == stop and not include_stop)):
            continue
        out.append((key, data[key]))
    return out[::-1] if reverse else out


operation = st.one_of(
    st.tuples(st.just("put"), KEYS, st.binary(max_size=8)),
    st.tuples(st.just("delete"), KEYS, st.none()),
)


_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_SETTINGS
@given(
    ops=st.lists(operation, max_size=30),
    later=st.lists(operation, max_size=10),
    bounds=st.tuples(
        st.none() | KEYS, st.none() | KEYS, st.booleans(), st.booleans(), st.booleans()
    ),
    prefix=KEYS,
)
def test_reads_match_the_model_and_plyvel_reads_the_files(
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[tuple[str, bytes, bytes | None]],
    later: list[tuple[str, bytes, bytes | None]],
    bounds: tuple[bytes | None, bytes | None, bool, bool, bool],
    prefix: bytes,
) -> None:
    path = str(tmp_path_factory.mktemp("db"))
    db = native.DB(path, create_if_missing=True, **OPTIONS)
    model: dict[bytes, bytes] = {}
    batch = db.write_batch(sync=True)
    for kind, key, value in ops:
        if kind == "put":
            assert value is not None
            batch.put(key, value)
            model[key] = value
        else:
            batch.delete(key)
            model.pop(key, None)
    batch.write()
    snapshot = db.snapshot()
    frozen = dict(model)
    for kind, key, value in later:
        if kind == "put":
            assert value is not None
            db.put(key, value)
            model[key] = value
        else:
            db.delete(key)
            model.pop(key, None)
    start, stop, include_start, include_stop, reverse = bounds
    kwargs = dict(start=start, stop=stop, include_start=include_start, include_stop=include_stop)
    assert list(db.iterator(reverse=reverse, **kwargs)) == model_iter(
        model, reverse=reverse, **kwargs
    )
    assert list(snapshot.iterator(reverse=reverse, **kwargs)) == model_iter(
        frozen, reverse=reverse, **kwargs
    )
    assert list(db.iterator(prefix=prefix, include_value=False)) == [
        k for k in sorted(model) if k.startswith(prefix)
    ]
    for key in {k for _, k, _ in ops + later}:
        assert db.get(key) == model.get(key)
        assert snapshot.get(key, b"absent") == frozen.get(key, b"absent")
    snapshot.release()
    db.close()
    # The same files through plyvel, and back.
    other = plyvel.DB(path, **OPTIONS)
    try:
        assert list(other) == sorted(model.items())
        other.put(b"from plyvel", b"1")
    finally:
        other.close()
    again = native.DB(path, **OPTIONS)
    try:
        assert again.get(b"from plyvel") == b"1"
    finally:
        again.close()


def test_a_batch_reports_the_size_plyvel_reports(tmp_path: Path) -> None:
    ours = native.DB(str(tmp_path / "ours"), create_if_missing=True)
    theirs = plyvel.DB(str(tmp_path / "theirs"), create_if_missing=True)
    try:
        a, b = ours.write_batch(), theirs.write_batch()
        for batch in (a, b):
            batch.put(b"k" * 200, b"v" * 300)
            batch.delete(b"gone")
            batch.put(b"", b"")
        assert a.approximate_size() == b.approximate_size()
        a.clear()
        b.clear()
        assert a.approximate_size() == b.approximate_size() == 12
    finally:
        ours.close()
        theirs.close()


def test_closing_ends_iterators_and_snapshots(tmp_path: Path) -> None:
    db = native.DB(str(tmp_path), create_if_missing=True)
    for i in range(100):
        db.put(b"%03d" % i, b"x")
    it = db.iterator()
    next(it)
    snapshot = db.snapshot()
    snapshot_it = snapshot.iterator()
    next(snapshot_it)
    db.close()  # LevelDB aborts if a version is still referenced: ours ends them first
    db.close()  # idempotent
    assert db.closed
    for call in (
        lambda: next(it),
        lambda: next(snapshot_it),
        lambda: snapshot.get(b"001"),
        lambda: db.get(b"001"),
        db.snapshot,
        lambda: db.put(b"a", b"b"),
    ):
        with pytest.raises(RuntimeError, match="closed"):
            call()
    it.close()  # closing what the database already ended is fine
    snapshot.release()


def test_point_reads_decode_envelopes_under_a_prefix(tmp_path: Path) -> None:
    from spark_statestore.store.layout import pack_header, pack_headers_envelope

    db = native.DB(str(tmp_path), create_if_missing=True)
    with_headers = pack_headers_envelope(1, 2, 3, (("h", b"x"),)) + b"H"
    db.put(b"dplain", pack_header(1, -1, 5) + b"P")
    db.put(b"dheaders", with_headers)
    db.put(b"dbad", b"\x07" + bytes(20))
    db.put(b"plain", b"not under the prefix")
    snapshot = db.snapshot()
    db.put(b"dlater", pack_header(0, 0, 0) + b"L")
    for source in (db, snapshot):
        assert source.get_value(b"plain", b"d") == b"P"
        assert source.get_value(b"headers", b"d") == b"H"
        assert source.get_value(b"absent", b"d") is None
        assert source.get_record(b"plain", b"d") == (b"P", 1, None, 5)
        assert source.get_record(b"headers", b"d") == with_headers  # Python decodes headers
        assert source.get_record(b"bad", b"d") == b"\x07" + bytes(20)  # ... and names this
        with pytest.raises(native.EnvelopeError) as refused:
            source.get_value(b"bad", b"d")
        assert refused.value.args == (b"\x07" + bytes(20),)
        assert source.get_value(bytearray(b"plain"), b"d") == b"P"  # as b"d" + key joins
        with pytest.raises(TypeError):
            source.get_value("plain", b"d")
    assert db.get_value(b"later", b"d") == b"L"
    assert snapshot.get_value(b"later", b"d") is None  # the snapshot's state
    snapshot.release()
    with pytest.raises(RuntimeError, match="Snapshot is closed"):
        snapshot.get_value(b"plain", b"d")
    with pytest.raises(RuntimeError, match="Snapshot is closed"):
        snapshot.get_record(b"plain", b"d")
    other = db.snapshot()
    db.close()
    for source in (db, other):
        for read in (source.get_value, source.get_record):
            with pytest.raises(RuntimeError, match="closed"):
                read(b"plain", b"d")


def test_a_close_waits_for_readers_in_other_threads(tmp_path: Path) -> None:
    db = native.DB(str(tmp_path), create_if_missing=True)
    batch = db.write_batch()
    for i in range(20_000):
        batch.put(b"%06d" % i, b"v" * 50)
    batch.write()
    outcomes: list[str] = []
    started = threading.Barrier(5)

    def read() -> None:
        started.wait()
        try:
            while True:
                for _ in db.iterator():
                    pass
                db.get(b"000001")
        except RuntimeError as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    started.wait()
    db.close()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert len(outcomes) == 4 and all("closed" in o for o in outcomes)


def test_a_snapshot_release_waits_for_a_multi_get_in_flight(tmp_path: Path) -> None:
    # A bug fixed: get_records reads without the GIL, and a release from another thread
    # freed the snapshot and its read options under it (LevelDB then read freed memory);
    # the release returned at once, long before the multi-get.
    db = native.DB(str(tmp_path), create_if_missing=True)
    count = 300_000

    def write_all(value: bytes) -> None:
        batch = db.write_batch()
        for i in range(count):
            batch.put(b"d%07d" % i, bytes(21) + value)
        batch.write()

    write_all(b"old")
    snapshot = db.snapshot()
    write_all(b"new")
    keys = pa.array([b"%07d" % i for i in range(count)], pa.binary())
    calling = threading.Event()
    outcome: list[tuple[float, Any] | None] = []

    def lookups() -> None:
        calling.set()
        try:
            decoded = snapshot.get_records(keys, b"d")
        except RuntimeError:  # released before the call began: nothing to check
            outcome.append(None)
        else:
            outcome.append((time.monotonic(), decoded))

    thread = threading.Thread(target=lookups)
    thread.start()
    calling.wait()
    time.sleep(0.02)  # into the call, which reads for far longer than this
    started = time.monotonic()
    snapshot.release()
    released = time.monotonic()
    thread.join(60)
    assert outcome
    if outcome[0] is not None:
        finished, decoded = outcome[0]
        # It waited (a release alone takes microseconds), unless the reads ended before it.
        assert released - started > 0.001 or finished <= started
        assert decoded[0] == count and decoded[2][2] == b"old" * count  # the snapshot's
    db.close()


def test_errors_are_plyvels_kinds(tmp_path: Path) -> None:
    with pytest.raises(native.Error, match="does not exist"):
        native.DB(str(tmp_path / "none"))
    db = native.DB(str(tmp_path / "db"), create_if_missing=True)
    db.put(b"a", b"1")
    db.close()
    # A descriptor that is not one: LevelDB reports corruption, as through plyvel.
    for name in os.listdir(tmp_path / "db"):
        if name.startswith("MANIFEST"):
            (tmp_path / "db" / name).write_bytes(b"\xff" * 200)
    with pytest.raises(native.CorruptionError, match="Corruption"):
        native.DB(str(tmp_path / "db"))
    assert issubclass(native.CorruptionError, native.Error)
    locked = native.DB(str(tmp_path / "locked"), create_if_missing=True)
    try:
        os.chmod(tmp_path / "locked", 0o500)
        if os.geteuid() != 0:  # root writes anyway
            with pytest.raises(OSError):
                native.DB(str(tmp_path / "locked" / "sub"), create_if_missing=True)
    finally:
        os.chmod(tmp_path / "locked", 0o700)
        locked.close()
    assert issubclass(native.IOError, OSError)
    with pytest.raises(TypeError, match="key must be bytes"):
        native.DB(str(tmp_path / "t"), create_if_missing=True).get("text")


_HEADER = struct.Struct(">xiqq")


def _columns(rows: list[tuple[bytes, bytes | None, int, int, int]]) -> list[pa.Array]:
    keys, values, partitions, offsets, stamps = zip(*rows, strict=True) if rows else ((),) * 5
    return [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.array(partitions, pa.int32()),
        pa.array(offsets, pa.int64()),
        pa.array(stamps, pa.int64()),
    ]


record = st.tuples(
    st.binary(max_size=6),
    st.none() | st.binary(max_size=10),
    st.integers(-1, 7),
    st.integers(-1, 2**63 - 1),
    st.integers(-1, 2**63 - 1),
)


@_SETTINGS
@given(rows=st.lists(record, max_size=40), split=st.integers(0, 40))
def test_put_records_writes_the_envelopes_the_python_path_writes(
    tmp_path_factory: pytest.TempPathFactory,
    rows: list[tuple[bytes, bytes | None, int, int, int]],
    split: int,
) -> None:
    db = native.DB(str(tmp_path_factory.mktemp("db")), create_if_missing=True)
    try:
        batch = db.write_batch()
        # Two calls, the second's columns sliced (an Arrow offset), one batch.
        first, second = rows[:split], rows[split:]
        for part in (first, second):
            columns = _columns([(b"pad", None, 0, 0, 0), *part])
            assert batch.put_records(
                *(c.slice(1) for c in columns), prefix=b"d", max_partition=8
            ) == len(part)
        batch.write()
        expected: dict[bytes, bytes] = {}
        for key, value, partition, offset, stamp in rows:
            if value is None:
                expected.pop(b"d" + key, None)
            else:
                expected[b"d" + key] = _HEADER.pack(partition, offset, stamp) + value
        assert dict(db.iterator()) == expected
    finally:
        db.close()


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ((None, b"v", 0, 0, 0), "key is null"),
        ((b"k", b"v", None, 0, 0), "partition is null"),
        ((b"k", b"v", 0, None, 0), "offset is null"),
        ((b"k", b"v", 0, 0, None), "timestamp is null"),
        ((b"k", b"v", 8, 0, 0), "partition 8 out of range"),
    ],
)
def test_a_malformed_record_names_its_index_and_leaves_the_batch(
    tmp_path: Path, row: tuple[object, ...], reason: str
) -> None:
    db = native.DB(str(tmp_path), create_if_missing=True)
    try:
        batch = db.write_batch()
        batch.put(b"before", b"1")
        rows = [(b"a", b"1", 0, 0, 0), row]
        columns = [pa.array([r[i] for r in rows]) for i in range(5)]
        columns[0] = columns[0].cast(pa.binary())
        columns[1] = columns[1].cast(pa.binary())
        with pytest.raises(ValueError) as caught:
            batch.put_records(*columns, prefix=b"d", max_partition=8)
        index, message = caught.value.args
        assert index == 1 and reason in message
        assert len(batch) == 1
        with pytest.raises(TypeError, match="int32 or int64"):
            batch.put_records(
                columns[0],
                columns[1],
                columns[0],
                columns[3],
                columns[4],
                prefix=b"d",
                max_partition=8,
            )
        with pytest.raises(ValueError, match="rows"):
            batch.put_records(columns[0].slice(1), *columns[1:], prefix=b"d", max_partition=8)
    finally:
        db.close()


def test_a_batch_written_in_key_order_keeps_each_keys_writes_in_order(tmp_path: Path) -> None:
    """A batch reaches LevelDB sorted by key (cheaper for its memtable and tables); the
    writes of one key keep their order, so the batch ends as written."""
    db = native.DB(str(tmp_path / "db"), create_if_missing=True, **OPTIONS)
    try:
        batch = db.write_batch(sync=True)
        for key, value in [(b"z", b"1"), (b"a", b"1"), (b"m", b"1"), (b"z", b"2")]:
            batch.put(key, value)
        batch.delete(b"a")
        batch.put(b"m", b"2")
        batch.delete(b"m")
        batch.put(b"m", b"3")
        batch.put(b"b", b"1")
        batch.write()
        assert list(db.iterator()) == [(b"b", b"1"), (b"m", b"3"), (b"z", b"2")]
        records = db.write_batch(sync=True)
        keys = [b"k9", b"k1", b"k9", b"k5", b"k1"]
        values = [b"first", b"one", b"last", b"five", None]
        records.put_records(
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([0] * 5, pa.int32()),
            pa.array(range(5), pa.int64()),
            pa.array([7] * 5, pa.int64()),
            prefix=b"d",
            max_partition=1,
        )
        records.write()
        stored = {key: value[21:] for key, value in db.iterator(prefix=b"d")}
        assert stored == {b"dk5": b"five", b"dk9": b"last"}
    finally:
        db.close()
