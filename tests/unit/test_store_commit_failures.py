"""A commit that fails (an exception, an I/O error, a full disk) leaves the store with the
commit all there or not at all, and a later open completes an interrupted chunked commit.

Before the fix, an exception while a chunked commit was applied deleted the redo file but
left the durable redo marker, and the next open refused the store ("redo file missing;
delete the store"), which for a sink's leader store loses data; callers saw
``RuntimeError: Database is closed``.

The full disk is real: a child process lowers its ``RLIMIT_FSIZE`` (with SIGXFSZ ignored,
so writes fail with EFBIG as on a full disk) at each point of the commit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_statestore.store import (
    Role,
    Store,
    StoreClosedError,
    StoreIOError,
    StoreOptions,
    StoreSpec,
    crash,
)
from spark_statestore.store.redo import REDO_DIR
from tests.conftest import REPO_ROOT

SPEC = StoreSpec(Role.LEADER, "failures-changelog", 3)
# A budget the transaction exceeds (it spills to a redo file) and chunks of a few keys.
OPTIONS = StoreOptions(uncommitted_max_bytes=2_000, chunk_bytes=300)
PLAIN = StoreOptions()  # the same transaction fits the budget: one WriteBatch
BEFORE = {b"k%04d" % i: b"base-%d" % i for i in range(200)}
AFTER = {**{b"k%04d" % i: b"new-%d-" % i + b"x" * 40 for i in range(100, 400)}}
AFTER.update({k: v for k, v in BEFORE.items() if int(k[1:]) < 100 and int(k[1:]) % 3})
DELETED = [b"k%04d" % i for i in range(0, 100, 3)]

# (point, whether the commit is there after reopening when it fails at that point)
POINTS = [
    ("redo.sealed", False),  # the redo file is durable, the marker not written
    ("redo.marked", True),  # the marker is durable: the next open applies the redo file
    ("redo.after_chunk.1", True),
    ("redo.after_chunk.4", True),
    ("redo.before_metadata", True),
    ("redo.after_metadata", True),  # committed; the redo file is not removed yet
]


def _base(path: Path) -> None:
    with Store.open(path, SPEC, options=OPTIONS) as store, store.begin() as txn:
        for key, value in BEFORE.items():
            txn.put(key, value)


def _big_transaction(store: Store) -> None:
    """Writes that make BEFORE into AFTER, spilled; the caller commits."""
    txn = store.begin()
    for key in DELETED:
        txn.delete(key)
    for key, value in AFTER.items():
        if BEFORE.get(key) != value:
            txn.put(key, value)
    assert txn.spilled
    return txn


def _check_all_or_nothing(path: Path, committed: bool | None) -> bool:
    """Reopen: the store is BEFORE or AFTER (``committed`` says which, None: either), with
    matching metadata, and no redo file is left. Returns whether it is AFTER."""
    with Store.open(path, SPEC, options=OPTIONS) as store, store.snapshot() as snap:
        content = dict(snap.items())
        seq = snap.commit_seq
        assert not os.listdir(path / REDO_DIR) if (path / REDO_DIR).exists() else True
    if content == AFTER:
        assert seq == 2
        found = True
    else:
        assert content == BEFORE, "the store is neither before nor after the commit"
        assert seq == 1
        found = False
    if committed is not None:
        assert found == committed
    return found


@pytest.fixture
def hook() -> Iterator[list[object]]:
    raised: list[object] = []
    yield raised
    crash.hook = None


@pytest.mark.parametrize(("point", "committed"), POINTS)
@pytest.mark.parametrize(
    "exception",
    [OSError(28, "No space left on device"), KeyboardInterrupt(), MemoryError()],
    ids=["OSError", "KeyboardInterrupt", "MemoryError"],
)
def test_an_exception_at_every_redo_point(
    tmp_path: Path, hook: list[object], point: str, committed: bool, exception: BaseException
) -> None:
    path = tmp_path / "store"
    _base(path)
    store = Store.open(path, SPEC, options=OPTIONS)
    txn = _big_transaction(store)

    def fail(name: str) -> None:
        if name == point:
            raise exception

    crash.hook = fail
    expected = StoreIOError if isinstance(exception, OSError) else type(exception)
    with pytest.raises(expected) as caught:
        txn.commit()
    crash.hook = None
    assert not isinstance(caught.value, RuntimeError)
    if isinstance(exception, OSError):
        assert str(path) in str(caught.value) and "commit 2 failed" in str(caught.value)
    # The handle is closed: nobody reads a half-applied commit through it.
    assert store.closed
    with pytest.raises(StoreClosedError):
        store.get(b"k0001")
    _check_all_or_nothing(path, committed)


_FULL_DISK_CHILD = r"""
import json, resource, signal, sys
sys.path.insert(0, sys.argv[3])
from spark_statestore.store import Store, crash
from tests.unit.test_store_commit_failures import (
    AFTER, DELETED, OPTIONS, PLAIN, SPEC, _big_transaction,
)

path, point = sys.argv[1], sys.argv[2]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
store = Store.open(path, SPEC, options=PLAIN if point == "plain" else OPTIONS)
if point == "plain":  # a commit of one WriteBatch
    txn = store.begin()
    for key in DELETED:
        txn.delete(key)
    for key, value in AFTER.items():
        txn.put(key, value)
    assert not txn.spilled
else:
    txn = _big_transaction(store)

def full_disk(name=None):
    resource.setrlimit(resource.RLIMIT_FSIZE, (1, resource.RLIM_INFINITY))

if point in ("spill", "plain"):
    full_disk()  # the commit's last spill write, or its one batch, fails
else:
    crash.hook = lambda name: full_disk() if name == point else None
try:
    txn.commit()
    outcome = {"raised": None}
except BaseException as exc:
    outcome = {"raised": type(exc).__name__, "message": str(exc),
               "chain": [type(e).__name__ for e in (exc.__cause__, exc.__context__) if e]}
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
outcome["closed"] = store.closed
print(json.dumps(outcome))
"""


@pytest.mark.parametrize(
    ("point", "committed"),
    [("plain", False), ("spill", False), *[p for p in POINTS if p[0] != "redo.after_metadata"]],
)
def test_a_full_disk_at_every_redo_point(tmp_path: Path, point: str, committed: bool) -> None:
    path = tmp_path / "store"
    _base(path)
    result = subprocess.run(
        [sys.executable, "-c", _FULL_DISK_CHILD, str(path), point, str(REPO_ROOT)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["raised"] == "StoreIOError", outcome
    assert str(path) in outcome["message"]
    # A failed spill write leaves the store untouched and open; any other failure closes
    # the handle, which cannot tell what LevelDB made of the commit.
    assert outcome["closed"] == (point != "spill")
    _check_all_or_nothing(path, committed)
