"""Single ownership of a store directory: the OS lock, ``_owner.json``, stale owners."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import plyvel
import pytest

from spark_statestore.store import (
    OwnerInfo,
    Role,
    Store,
    StoreLockedError,
    StoreNotFoundError,
    StoreOptions,
    StoreSpec,
    live_owner,
    read_owner,
)
from spark_statestore.store.leveldb import binding
from spark_statestore.store.ownership import wait_for_release
from tests.conftest import REPO_ROOT

SPEC = StoreSpec(Role.FOLLOWER, "orders-changelog", 2)

HOLDER = textwrap.dedent(
    """
    import sys

    from spark_statestore.store import Role, Store, StoreSpec

    store = Store.open(
        sys.argv[1], StoreSpec(Role.FOLLOWER, "orders-changelog", 2), purpose="child holder"
    )
    print("ready", flush=True)
    sys.stdin.readline()
    store.close()
    print("closed", flush=True)
    """
)


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A child process that holds ``tmp_path / "s"`` open until told to stop (or killed)."""
    path = tmp_path / "s"
    Store.open(path, SPEC).close()
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "ready":
            proc.kill()
            _, err = proc.communicate()
            pytest.fail(f"the holder process did not start: {line!r}\n{err}")
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def _owner_file(path: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((path / "_owner.json").read_text())
    return data


# -- this process --------------------------------------------------------------------------
def test_owner_file_while_open(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with Store.open(path, SPEC, purpose="follower source of query 3f2a") as store:
        data = _owner_file(path)
        assert data["pid"] == os.getpid()
        assert data["host"] == socket.gethostname()
        assert data["role"] == "follower"
        assert data["purpose"] == "follower source of query 3f2a"
        assert data["started_at"]
        assert data["flight_location"] is None
        info = read_owner(str(path))
        assert info == store.owner
        assert live_owner(str(path)) == info
    assert not (path / "_owner.json").exists()
    assert read_owner(str(path)) is None
    assert live_owner(str(path)) is None


def test_threads_of_one_process_take_turns_at_a_store(tmp_path: Path) -> None:
    """Concurrent short-lived readers in one process (a store host answering several tasks'
    lookups with private checkpoints) wait for each other as for another process, instead
    of failing with "already open in this process" (a fresh-clone CI run saw an enrich
    lookup fail so)."""
    import threading

    path = tmp_path / "s"
    with Store.open(path, SPEC) as store, store.begin() as txn:
        txn.put(b"k", b"v")
        txn.commit()
    options = StoreOptions(lock_wait_seconds=30.0, owner_wait_seconds=30.0)
    holding = threading.Event()
    release = threading.Event()
    errors: list[BaseException] = []
    values: list[bytes | None] = []

    def first() -> None:
        with Store.open(path, purpose="first reader", options=options):
            holding.set()
            release.wait(30)

    def second() -> None:
        try:
            with Store.open(path, purpose="second reader", options=options) as store:
                values.append(store.get(b"k"))
        except BaseException as exc:  # reported below
            errors.append(exc)

    one = threading.Thread(target=first)
    one.start()
    assert holding.wait(30)
    two = threading.Thread(target=second)
    two.start()
    two.join(0.3)  # it waits for the first reader: the store is held
    assert two.is_alive() and not errors
    release.set()
    one.join(30)
    two.join(30)
    assert not errors and values == [b"v"]


def test_reader_owner_role(tmp_path: Path) -> None:
    path = tmp_path / "s"
    Store.open(path, SPEC).close()
    with Store.open(path, purpose="inspect") as reader:
        assert _owner_file(path)["role"] == "reader"
        assert reader.owner.purpose == "inspect"
    assert not (path / "_owner.json").exists()


def test_second_open_in_this_process(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with Store.open(path, SPEC) as store:
        for spec in (SPEC, None):
            with pytest.raises(StoreLockedError, match="already open in this process") as info:
                Store.open(path, spec)
            assert not isinstance(info.value, plyvel.Error)
            assert isinstance(info.value.owner, OwnerInfo)
            assert info.value.owner.pid == os.getpid()
            assert info.value.path == str(path)
        # the failed opens did not disturb the owner
        assert read_owner(str(path)) == store.owner
        with store.begin() as txn:
            txn.put(b"k", b"v")
        assert store.get(b"k") == b"v"
    with Store.open(path, SPEC) as again:
        assert again.get(b"k") == b"v"


def test_update_owner(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with Store.open(path, SPEC, purpose="serve") as store:
        before = store.owner
        updated = store.update_owner(flight_location="grpc://127.0.0.1:1")
        assert updated.flight_location == "grpc://127.0.0.1:1"
        assert store.owner == updated
        assert (updated.pid, updated.role, updated.purpose, updated.started_at) == (
            before.pid,
            before.role,
            before.purpose,
            before.started_at,
        )
        assert _owner_file(path)["flight_location"] == "grpc://127.0.0.1:1"
        assert read_owner(str(path)) == updated
        assert live_owner(str(path)) == updated
        assert "serving at grpc://127.0.0.1:1" in updated.describe()


def test_wait_for_release_waits_through_the_release_of_the_store(tmp_path: Path) -> None:
    path = tmp_path / "s"
    store = Store.open(path, SPEC)
    assert not wait_for_release(str(path), os.getpid(), 0.05)  # it owns the store
    # Releasing, the owner removes _owner.json first and unlocks after: still its store.
    (path / "_owner.json").unlink()
    assert not wait_for_release(str(path), os.getpid(), 0.05)
    # Another process that describes itself has the store: this one gave it up.
    (path / "_owner.json").write_text(json.dumps({"pid": 1, "host": "h", "role": "leader"}))
    assert wait_for_release(str(path), os.getpid(), 0.0)
    store.close()
    assert wait_for_release(str(path), os.getpid(), 0.0)


def test_read_owner_of_a_damaged_owner_file(tmp_path: Path) -> None:
    (tmp_path / "_owner.json").write_text('{"pid": ')
    assert read_owner(str(tmp_path)) is None
    (tmp_path / "_owner.json").write_text('{"host": "h"}')
    assert read_owner(str(tmp_path)) is None
    assert read_owner(str(tmp_path / "missing")) is None
    assert live_owner(str(tmp_path / "missing")) is None


def test_foreign_leveldb_lock_is_a_locked_error(tmp_path: Path) -> None:
    path = tmp_path / "s"
    Store.open(path, SPEC).close()
    # A program outside the ownership protocol, in this process: through the binding the
    # store opens with (LevelDB's lock is per process and per copy of the library; another
    # process, through either binding, is the next test).
    foreign = binding().DB(str(path / "db"))
    try:
        with pytest.raises(StoreLockedError, match="LevelDB is locked") as info:
            Store.open(path, SPEC)
        assert not isinstance(info.value, binding().Error)
        assert read_owner(str(path)) is None  # the failed open gave ownership back
    finally:
        foreign.close()
    with Store.open(path, SPEC) as store:
        assert not store.closed


def test_foreign_leveldb_lock_of_another_process_is_a_locked_error(tmp_path: Path) -> None:
    path = tmp_path / "s"
    Store.open(path, SPEC).close()
    # plyvel in another process: the store may open through the other binding here.
    foreign = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import plyvel, sys; db = plyvel.DB(sys.argv[1]); print('held', flush=True); "
            "sys.stdin.read()",
            str(path / "db"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert foreign.stdout is not None and foreign.stdout.readline() == "held\n"
        with pytest.raises(StoreLockedError, match="LevelDB is locked"):
            Store.open(path, SPEC)
    finally:
        assert foreign.stdin is not None
        foreign.stdin.close()
        foreign.wait(30)
    with Store.open(path, SPEC) as store:
        assert not store.closed


# -- another process -----------------------------------------------------------------------
def test_store_held_by_another_process(tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    path = tmp_path / "s"
    for spec in (SPEC, None):
        with pytest.raises(StoreLockedError) as info:
            Store.open(path, spec, options=StoreOptions(lock_wait_seconds=0))
        error = info.value
        assert not isinstance(error, plyvel.Error)
        assert f"pid {holder.pid}" in str(error)
        assert "child holder" in str(error)
        assert isinstance(error.owner, OwnerInfo)
        assert error.owner.pid == holder.pid
    owner = live_owner(str(path))
    assert owner is not None
    assert owner.pid == holder.pid
    assert owner.host == socket.gethostname()
    assert owner.role == "follower"
    assert owner.purpose == "child holder"
    assert owner.is_alive_here()
    assert read_owner(str(path)) == owner


def test_owner_that_closes_gives_the_store_up(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    path = tmp_path / "s"
    assert holder.stdin is not None and holder.stdout is not None
    holder.stdin.write("\n")
    holder.stdin.flush()
    assert holder.stdout.readline().strip() == "closed"
    assert holder.wait() == 0
    assert live_owner(str(path)) is None
    assert read_owner(str(path)) is None
    with Store.open(path, SPEC) as store:
        assert store.owner.pid == os.getpid()


def test_killed_owner_leaves_a_stale_owner_file(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    path = tmp_path / "s"
    child_pid = holder.pid
    holder.kill()
    holder.wait()
    assert live_owner(str(path)) is None
    stale = read_owner(str(path))
    assert stale is not None
    assert stale.pid == child_pid
    assert stale.purpose == "child holder"
    assert not stale.is_alive_here()
    with Store.open(path, SPEC, purpose="successor") as store:
        data = _owner_file(path)
        assert data["pid"] == os.getpid()
        assert data["purpose"] == "successor"
        assert live_owner(str(path)) == store.owner
        with store.begin() as txn:
            txn.put(b"k", b"v")
    assert not (path / "_owner.json").exists()


def test_owner_wait_outlasts_a_short_lived_owner(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    path = tmp_path / "s"
    assert holder.stdin is not None and holder.stdout is not None
    with pytest.raises(StoreLockedError, match="child holder"):
        Store.open(path, SPEC)  # no wait: refused at once, naming the owner
    holder.stdin.write("\n")  # the holder closes the store now, while we are waiting
    holder.stdin.flush()
    with Store.open(path, SPEC, options=StoreOptions(owner_wait_seconds=60)) as store:
        assert store.owner.pid == os.getpid()
    assert holder.wait() == 0


def test_owner_wait_gives_up_naming_the_owner(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    with pytest.raises(StoreLockedError, match="child holder"):
        Store.open(tmp_path / "s", SPEC, options=StoreOptions(owner_wait_seconds=0.3))


def test_a_file_where_a_store_was_expected_has_no_owner(tmp_path: Path) -> None:
    """A path that is a file holds no store: no owner, and opening it says there is no store
    (it raised NotADirectoryError from the owner probe before)."""
    path = tmp_path / "file"
    path.write_text("not a store")
    assert live_owner(str(path)) is None
    with pytest.raises(StoreNotFoundError, match="no store at"):
        Store.open(path)
