"""A snapshot read planned just as a follower query (or ``serve``) takes the store: the reader
looked for a server, found none, and the owner took the store's lock before the reader opened
it. The reader must read through the server the owner starts, not wait on the lock until
OWNER_WAIT_S and fail (a fresh-clone CI run failed so: "store ... is owned by pid N (follower:
Spark follower source ...), serving at grpc+tcp://..."; here, in one process, the old reader
failed at once: "already open in this process"). No JVM: planning is Python."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import spark_statestore.connectors.spark.reader.snapshot as snapshot
from spark_statestore.connectors.spark.ddl import parse_ddl
from spark_statestore.connectors.spark.options import parse_reader_options
from spark_statestore.connectors.spark.reader.snapshot import SnapshotReader, reader_ddl
from spark_statestore.connectors.spark.reader.tasks import ScanTask
from spark_statestore.serve import StoreServer
from spark_statestore.store import Role, Store, StoreSpec


def test_a_read_planned_as_an_owner_takes_the_store_goes_through_its_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "store"
    spec = StoreSpec(Role.LEADER, None, 1, "s")
    with Store.open(path, spec, purpose="test") as store, store.begin() as txn:
        txn.put(b"k", b"v", source=("orders", 0, 1))
    monkeypatch.setattr(snapshot, "OWNER_WAIT_S", 20.0)  # bounds the retries
    owned: dict[str, Any] = {}
    looked = SnapshotReader._wait_for_server

    def owner_arrives(self: SnapshotReader) -> bool:
        """Right after the reader's first look for a server, an owner takes the store and
        serves it (as a follower query starting does)."""
        found = looked(self)
        if "store" not in owned:
            owned["store"] = Store.open(path, purpose="a follower query starting", serves=True)
            owned["server"] = StoreServer(owned["store"])
            owned["server"].start()
        return found

    monkeypatch.setattr(SnapshotReader, "_wait_for_server", owner_arrives)
    options = parse_reader_options({"path": str(path)})
    try:
        (task,) = SnapshotReader(options, parse_ddl(reader_ddl(options))).partitions()
        assert isinstance(task, ScanTask) and task.location is not None  # through the server
        assert task.location == owned["server"].location
    finally:
        owned["server"].close()
        owned["store"].close()


def test_a_task_reading_as_an_owner_takes_the_store_goes_through_its_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same race where a task reads the store as it is now (the store host's reads):
    no owner when it looks, an owner serving by the time it opens the store."""
    import spark_statestore.serve as serve
    from spark_statestore.connectors.spark.host.reads import current_snapshot
    from spark_statestore.position import PositionBound

    path = tmp_path / "store"
    spec = StoreSpec(Role.LEADER, None, 1, "s")
    with Store.open(path, spec, purpose="test") as store, store.begin() as txn:
        txn.put(b"k", b"v", source=("orders", 0, 1))
    owned: dict[str, Any] = {}
    looked = serve.connect_to_owner

    def owner_arrives(at: str) -> Any:
        client = looked(at)
        if "store" not in owned:  # right after the task's first look, an owner serves
            owned["store"] = Store.open(path, purpose="a follower query starting", serves=True)
            owned["server"] = StoreServer(owned["store"])
            owned["server"].start()
        return client

    monkeypatch.setattr(serve, "connect_to_owner", owner_arrives)
    try:
        unbounded = PositionBound.unbounded()
        with current_snapshot(str(path), purpose="t", bound=unbounded, wait_s=0) as now:
            assert now.via == owned["server"].location
            assert now.commit_seq == 1
    finally:
        owned["server"].close()
        owned["store"].close()
