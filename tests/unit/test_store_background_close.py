"""``Store.close_in_background``: the sink's commit process closes its store while the next
micro-batch's tasks run, with LevelDB's memtable moved into a table first, so the next open
replays no log."""

from __future__ import annotations

import contextlib
import glob
import os
import threading
from pathlib import Path

from spark_statestore.store import Role, Store, StoreSpec, live_owner, read_owner

LEADER = StoreSpec(Role.LEADER, "orders-changelog", 3)


def _log_bytes(path: Path) -> int:
    """Bytes in LevelDB's write-ahead log files: what the next open replays."""
    return sum(os.path.getsize(f) for f in glob.glob(str(path / "**" / "*.log"), recursive=True))


def _write(store: Store, rows: int, tag: bytes) -> None:
    with store.begin() as txn:
        for n in range(rows):
            txn.put(b"key-%06d" % n, tag * 40)
        txn.commit()


def test_the_next_open_replays_no_log(tmp_path: Path) -> None:
    path = tmp_path / "store"
    store = Store.open(path, LEADER)
    _write(store, 20_000, b"a")
    store.close_in_background()
    reopened = Store.open(path, LEADER)  # waits for the background close
    try:
        assert reopened.get(b"key-000123") == b"a" * 40
        assert reopened.get(b"key-019999") == b"a" * 40
    finally:
        reopened.close()
    # The plain close leaves the batch in the log, for the next open to replay.
    plain = Store.open(path, LEADER)
    _write(plain, 20_000, b"b")
    plain.close()
    assert _log_bytes(path) > 500_000
    flushed = Store.open(path, LEADER)
    _write(flushed, 20_000, b"c")
    flushed.close_in_background()
    with Store.open(path, LEADER) as store:
        assert store.get(b"key-000007") == b"c" * 40
    assert _log_bytes(path) < 100_000


def test_ownership_is_given_back_when_the_thread_ends(tmp_path: Path) -> None:
    path = tmp_path / "store"
    store = Store.open(path, LEADER, purpose="a commit")
    _write(store, 10, b"x")
    store.close_in_background()
    for thread in threading.enumerate():
        if thread.name == f"close {store.path}":
            thread.join()
    assert read_owner(str(path)) is None
    assert live_owner(str(path)) is None


def test_a_store_closed_meanwhile_is_left_closed(tmp_path: Path) -> None:
    path = tmp_path / "store"
    store = Store.open(path, LEADER)
    store.close()
    store.close_in_background()  # nothing to flush, nothing to close: no error
    with Store.open(path, LEADER) as again:
        assert again.get(b"missing") is None


def test_another_process_opening_the_store_waits_for_the_close(tmp_path: Path) -> None:
    """Spark's next step after a commit may open the store in another process (a snapshot
    read, a test): it waits for the closing commit process instead of failing."""
    import subprocess
    import sys

    from spark_statestore.store import crash

    path = tmp_path / "store"
    store = Store.open(path, LEADER, purpose="a commit")
    _write(store, 10, b"x")
    reached, go = threading.Event(), threading.Event()

    def hold(point: str) -> None:
        if point == "store.background_close":
            reached.set()
            go.wait(60)

    crash.hook = hold
    try:
        store.close_in_background()
        assert reached.wait(30)
        owner = read_owner(str(path))
        assert owner is not None and owner.closing
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys\n"
                "from spark_statestore.store import Store\n"
                "print('opening', flush=True)\n"
                "with Store.open(sys.argv[1]) as s:\n"
                "    print(s.get(b'key-000003').decode())\n",
                str(path),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert child.stdout is not None
        assert child.stdout.readline() == b"opening\n"
        # Without the closing mark it would fail at once (StoreLockedError): it waits.
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=1)
        assert child.poll() is None, child.communicate()
        go.set()
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err.decode()
        assert out.decode().strip() == "x" * 40, out
    finally:
        go.set()
        crash.hook = None
