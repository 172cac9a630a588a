"""Point reads (``Store.get``, ``Snapshot.get``, ``Snapshot.get_record``): the same answers and
the same errors on both paths (the extension's one-call reads and the gated plyvel reads),
a stored value that is not an envelope named as corruption, closing under them, and a
chunked commit half-way into the database never seen by ``Store.get``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import plyvel
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from spark_statestore.native import ENV
from spark_statestore.store import (
    Role,
    Store,
    StoreClosedError,
    StoreCorruptedError,
    StoredRecord,
    StoreOptions,
    StoreSpec,
    crash,
)
from spark_statestore.store.layout import pack_header, pack_headers_envelope
from tests.native_util import fast_paths_off, stored_bytes

SPEC = StoreSpec(Role.FOLLOWER, "t", 2)

# Stored values that are not valid envelopes.
BAD_ENVELOPES = {
    "empty": b"",
    "short": b"\x00short",
    "short-with-headers": b"\x01" + bytes(20),
    "unknown-version": b"\x07" + bytes(20) + b"value",
    "headers-past-the-end": b"\x01" + bytes(20) + b"\x00\x00\x00\x09" + b"abc",
    "negative-headers-length": b"\x01" + bytes(20) + b"\xff\xff\xff\xff" + b"value",
    "header-key-not-utf8": b"\x01" + bytes(20) + b"\x00\x00\x00\x05\x00\x00\x00\x01\xff",
    "header-value-past-its-block": (
        b"\x01" + bytes(20) + b"\x00\x00\x00\x0a" + b"\x00\x00\x00\x01h\x00\x00\x00\x07v"
    ),
}


def _paths() -> list[bool]:
    """The paths to compare: the reference path, and the fast path unless it is off."""
    return [False] if fast_paths_off() else [False, True]


@pytest.fixture(params=_paths(), ids=lambda native: "native" if native else "plyvel")
def native_on(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Stores opened in the test read through the fast path (True) or plyvel (False)."""
    monkeypatch.setenv(ENV, "1" if request.param else "0")
    return bool(request.param)


def _write_raw(path: Path, rows: dict[bytes, bytes]) -> None:
    """Store ``rows`` (data key without its namespace -> stored bytes) behind the store's
    back, as another program or a damaged disk would leave them."""
    db = plyvel.DB(str(path / "db"))
    try:
        for key, raw in rows.items():
            db.put(b"d" + key, raw)
    finally:
        db.close()


def _outcome(read: Callable[[], object]) -> object:
    try:
        return read()
    except StoreCorruptedError as exc:
        return ("corrupted", str(exc))


# -- equal answers -------------------------------------------------------------------------
def _envelope(
    partition: int,
    offset: int,
    timestamp: int,
    headers: list[tuple[str, bytes | None]],
    value: bytes,
) -> bytes:
    """A valid envelope, as the store writes one (version 1 only with headers)."""
    if headers:
        return pack_headers_envelope(partition, offset, timestamp, tuple(headers)) + value
    return pack_header(partition, offset, timestamp) + value


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    raws=st.lists(
        st.one_of(
            stored_bytes(),
            st.builds(
                _envelope,
                st.integers(-1, 3),
                st.integers(-1, 99),
                st.integers(-1, 2**40),
                st.lists(st.tuples(st.text(max_size=3), st.none() | st.binary(max_size=4))),
                st.binary(max_size=8),
            ),
        ),
        min_size=1,
        max_size=5,
    )
)
@example(raws=list(BAD_ENVELOPES.values()))
def test_any_stored_bytes_read_the_same_on_both_paths(
    tmp_path_factory: pytest.TempPathFactory, raws: list[bytes]
) -> None:
    """Fuzz: valid envelopes (with and without headers), truncated ones, other versions and
    header blocks of any shape read to equal values and records on both paths, or fail on
    both with the same StoreCorruptedError."""
    paths = _paths()
    if len(paths) < 2:
        pytest.skip(f"{ENV}=0: the fast path is off")
    path = tmp_path_factory.mktemp("store")
    Store.open(path, SPEC).close()
    keys = [b"k%d" % i for i in range(len(raws))]
    _write_raw(path, dict(zip(keys, raws, strict=True)))
    outcomes = []
    for native in paths:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(ENV, "1" if native else "0")
            with Store.open(path) as store, store.snapshot() as snap:
                outcomes.append(
                    [
                        (
                            _outcome(lambda k=key: snap.get(k)),
                            _outcome(lambda k=key: snap.get_record(k)),
                            _outcome(lambda k=key: store.get(k)),
                        )
                        for key in [*keys, b"absent"]
                    ]
                )
    assert outcomes[0] == outcomes[1]


def test_values_and_records(make_store: Callable[..., Store], native_on: bool) -> None:
    store = make_store(partitions=2)
    with store.begin() as txn:
        txn.put(b"a", b"A", partition=1, offset=7, timestamp=1_000)
        txn.put_all([(b"", b"", -1, 8, -1)])  # empty key and value, unknown partition, no time
        txn.put_all([(b"h", b"H", 0, 9, 2_000)], {0: (("x", b"1"), ("y", None))})
    with store.snapshot() as snap:
        assert [snap.get(k) for k in (b"a", b"", b"h", b"nope")] == [b"A", b"", b"H", None]
        assert [store.get(k) for k in (b"a", b"", b"h", b"nope")] == [b"A", b"", b"H", None]
        assert snap.get_record(b"a") == StoredRecord(b"a", b"A", 1, 7, 1_000)
        assert snap.get_record(b"") == StoredRecord(b"", b"", None, 8, None)
        assert snap.get_record(b"h") == StoredRecord(
            b"h", b"H", 0, 9, 2_000, (("x", b"1"), ("y", None))
        )
        assert snap.get_record(b"nope") is None
        # A key that is not bytes: what Python's bytes + key makes of it, on both paths.
        assert snap.get(bytearray(b"a")) == store.get(memoryview(b"a")) == b"A"  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            snap.get("a")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            store.get("a")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", BAD_ENVELOPES.values(), ids=BAD_ENVELOPES.keys())
def test_a_value_that_is_not_an_envelope_is_corruption_naming_the_key(
    tmp_path: Path, native_on: bool, bad: bytes
) -> None:
    # A bug fixed: get returned garbage for these (the bytes after a header it did not
    # check), or raised a bare IndexError or struct.error.
    Store.open(tmp_path, SPEC).close()
    _write_raw(tmp_path, {b"bad": bad, b"good": pack_header(0, 1, 2) + b"fine"})
    with Store.open(tmp_path) as store, store.snapshot() as snap:
        for read in (snap.get, snap.get_record, store.get, lambda k: snap.multi_get([k])):
            with pytest.raises(StoreCorruptedError, match=r"key b'bad' is not a valid envelope"):
                read(b"bad")
        assert snap.get(b"good") == store.get(b"good") == b"fine"
        assert snap.multi_get([b"good", b"absent"]) == {b"good": b"fine"}


@pytest.mark.parametrize("bad", BAD_ENVELOPES.values(), ids=BAD_ENVELOPES.keys())
def test_a_transaction_reading_a_value_that_is_not_an_envelope_names_the_key(
    tmp_path: Path, native_on: bool, bad: bytes
) -> None:
    # A bug fixed: Transaction.get decoded the stored value unchecked, as Snapshot.get did.
    Store.open(tmp_path, SPEC).close()
    _write_raw(tmp_path, {b"bad": bad})
    with Store.open(tmp_path, SPEC) as store, store.begin() as txn:
        for read in (txn.get, txn.get_record):
            with pytest.raises(StoreCorruptedError, match=r"key b'bad' is not a valid envelope"):
                read(b"bad")
        txn.put(b"bad", b"mended")
        assert txn.get(b"bad") == b"mended"


# -- closing -------------------------------------------------------------------------------
def test_reads_after_close_raise_what_they_raised_before(
    make_store: Callable[..., Store], native_on: bool
) -> None:
    store = make_store()
    with store.begin() as txn:
        txn.put(b"a", b"A")
    snap = store.snapshot()
    kept = store.snapshot()
    snap.close()
    snapshot_closed = r"snapshot of store .* at commit 1 is closed \(or its store handle is\)"
    for read in (snap.get, snap.get_record):
        with pytest.raises(StoreClosedError, match=snapshot_closed):
            read(b"a")
    assert kept.get(b"a") == store.get(b"a") == b"A"  # the others are fine
    store.close()
    for read in (kept.get, kept.get_record):
        with pytest.raises(StoreClosedError, match=snapshot_closed):
            read(b"a")
    with pytest.raises(StoreClosedError, match=r"store .* is closed; open it again$"):
        store.get(b"a")


_CHILD = r"""
import sys, threading
from spark_statestore.store import Role, ScanSpec, Store, StoreClosedError, StoreSpec, scan_batches

root, rounds = sys.argv[1], int(sys.argv[2])
spec = StoreSpec(Role.FOLLOWER, "t-changelog", 2)
N, VALUE = 2000, b"v" * 64
errors = []
for round_ in range(rounds):
    path = f"{root}/store-{round_}"
    with Store.open(path, spec) as store, store.begin() as txn:
        for i in range(N):
            txn.put(b"k%06d" % i, VALUE, offset=i)
    store = Store.open(path, spec)
    shared = store.snapshot()
    kinds = range(6)
    started = threading.Barrier(len(kinds) + 1)
    ended = []

    def read(kind):
        started.wait()
        i = 0
        try:
            while True:
                key = b"k%06d" % (i % N)
                i += 1
                if kind == 0:
                    got = store.get(key)
                elif kind == 1:
                    got = shared.get(key)
                elif kind == 2:
                    got = shared.get_record(key).value
                elif kind == 3:
                    with store.snapshot() as snap:
                        got = snap.get(key)
                elif kind == 4:
                    got = store.get(key + b"-absent") or VALUE
                else:
                    for _ in scan_batches(shared, ScanSpec.for_keys([key, b"k000007"])):
                        pass
                    got = VALUE
                if got != VALUE:
                    errors.append(f"reader {kind}: {key!r} read {got!r}")
                    return
        except StoreClosedError:
            ended.append(kind)
        except BaseException as exc:
            errors.append(f"reader {kind}: {exc!r}")

    threads = [threading.Thread(target=read, args=(k,)) for k in kinds]
    for t in threads:
        t.start()
    started.wait()
    # Let the readers get into LevelDB at different depths before closing under them.
    for _ in range(round_ * 7 % 23):
        store.get(b"k000002")
    shared.close()  # the shared snapshot's readers end ...
    for _ in range(round_ * 5 % 11):
        store.get(b"k000002")
    store.close()  # ... then everybody's
    for t in threads:
        t.join()
    if sorted(ended) != list(kinds) and not errors:
        errors.append(f"round {round_}: readers {sorted(ended)} ended with StoreClosedError")
if errors:
    print("\n".join(errors[:5]))
    sys.exit(3)
print("ok")
"""


@pytest.mark.parametrize("native", _paths(), ids=lambda native: "native" if native else "plyvel")
def test_closing_under_concurrent_point_reads_never_crashes(tmp_path: Path, native: bool) -> None:
    """Threads reading single keys (Store.get, a shared snapshot's get and get_record, their
    own snapshots, lookups) while the shared snapshot closes and then the store: never a
    crash or a wrong value, and every reader ends with StoreClosedError. A child process, so
    that a crash fails the test instead of killing pytest."""
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path), "30"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, ENV: "1" if native else "0"},
    )
    assert result.returncode == 0, (
        f"child exited {result.returncode} (-11 is SIGSEGV)\n{result.stdout}{result.stderr[-3000:]}"
    )
    assert result.stdout.strip() == "ok"


# -- a chunked commit ------------------------------------------------------------------------
@pytest.fixture
def hook() -> Iterator[list[Callable[[str], None]]]:
    """Functions called at the store's crash points (see ``store.crash``) during the test."""
    calls: list[Callable[[str], None]] = []

    def call_all(point: str) -> None:
        for call in calls:
            call(point)

    crash.hook = call_all
    yield calls
    crash.hook = None


def test_store_get_never_sees_a_chunked_commit_half_applied(
    tmp_path: Path, native_on: bool, hook: list[Callable[[str], None]]
) -> None:
    options = StoreOptions(uncommitted_max_bytes=2_000, chunk_bytes=300)
    old = {b"k%03d" % i: b"old-%d" % i for i in range(100)}
    new = {key: b"new-" + value + b"x" * 20 for key, value in old.items()}
    with Store.open(tmp_path, SPEC, options=options) as store:
        with store.begin() as txn:
            for key, value in old.items():
                txn.put(key, value)
        seen: list[dict[bytes, bytes | None]] = []

        def read_midway(point: str) -> None:
            if point.startswith("redo.after_chunk."):
                seen.append({key: store.get(key) for key in old})

        hook.append(read_midway)
        txn = store.begin()
        for key, value in new.items():
            txn.put(key, value)
        assert txn.spilled
        txn.commit()
        assert len(seen) > 1, "the commit must go into the database in several chunks"
        assert all(state == old for state in seen)
        assert {key: store.get(key) for key in old} == new
