"""Stores are owner-only: other local users can neither read a store nor lock its owner out.

Before, store directories and ``_owner.lock`` were created with the umask's modes (0755 and
0644 here), so any local user could read the whole store and hold a shared lock on
``_owner.lock`` that kept every owner out.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from spark_statestore.sink.staging import StagingArea, staged_schema
from spark_statestore.store import Role, Store, StoreOptions, StoreSpec, crash, redo

SPEC = StoreSpec(Role.LEADER, "private-changelog", 2)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture(autouse=True)
def permissive_umask() -> Iterator[None]:
    previous = os.umask(0o022)  # the common default: what the store must not rely on
    yield
    os.umask(previous)


def test_a_new_store_is_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with Store.open(path, SPEC) as store:
        assert _mode(path) == 0o700
        assert _mode(path / "_owner.lock") == 0o600
        assert _mode(path / "_owner.json") == 0o600
        store.update_owner(flight_location="grpc://127.0.0.1:1")
        assert _mode(path / "_owner.json") == 0o600
    # Only the owner's user may open the lock file: another user gets EACCES at the 0700
    # directory before any flock (root, which this test may run as, bypasses modes).
    assert _mode(path) & 0o077 == 0


def test_the_redo_file_of_a_chunked_commit_is_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "store"
    seen: dict[str, int] = {}

    def look(point: str) -> None:
        if point == "redo.marked":
            (spill,) = (path / redo.REDO_DIR).iterdir()
            seen["redo"] = _mode(path / redo.REDO_DIR)
            seen["spill"] = _mode(spill)

    options = StoreOptions(uncommitted_max_bytes=2_000, chunk_bytes=300)
    with Store.open(path, SPEC, options=options) as store, store.begin() as txn:
        for i in range(300):
            txn.put(b"k%04d" % i, b"v" * 50)
        assert txn.spilled
        crash.hook = look
        try:
            txn.commit()
        finally:
            crash.hook = None
    # The redo file's own directory is LevelDB's (0755): it sits behind the 0700 _redo/.
    assert seen["redo"] == 0o700 and "spill" in seen


def test_an_existing_world_readable_store_is_narrowed_on_open(tmp_path: Path) -> None:
    path = tmp_path / "store"
    Store.open(path, SPEC).close()
    os.chmod(path, 0o755)
    Store.open(path).close()
    assert _mode(path) == 0o700


def test_staging_before_the_store_exists_creates_it_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "store"
    batch = pa.RecordBatch.from_pylist([], schema=staged_schema())
    StagingArea(path).stage("query-1", 0, 0, 0, iter([batch]))
    assert _mode(path) == 0o700
