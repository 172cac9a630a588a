"""The snapshot reader's computed views (position, lag, metadata) planned through a live
owner's server and from the store itself agree, row for row. No JVM: planning is Python."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_statestore.connectors.spark.ddl import parse_ddl
from spark_statestore.connectors.spark.options import parse_reader_options
from spark_statestore.connectors.spark.reader.snapshot import SnapshotReader, reader_ddl
from spark_statestore.serve import StoreServer
from spark_statestore.store import CommitRecord, Role, Store, StoreSpec

PARTITIONS = 12  # more than 10: partitions sort as numbers, not as text


def _plan(path: Path, view: str) -> list[tuple[Any, ...]]:
    options = parse_reader_options({"path": str(path), "view": view})
    (partition,) = SnapshotReader(options, parse_ddl(reader_ddl(options))).partitions()
    rows: list[tuple[Any, ...]] = partition.rows  # type: ignore[attr-defined]
    return rows


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "views"
    spec = StoreSpec(Role.LEADER, "views-changelog", PARTITIONS)
    with Store.open(path, spec) as store, store.begin() as txn:
        for partition in range(PARTITIONS):
            txn.put(b"k%d" % partition, b"v", partition=partition, offset=partition)
            txn.set_changelog_offset(partition, partition + 1)
        txn.record_source("orders", 0, 41)
        txn.record_source("orders", 1, 7)
        txn.set_commit_record(CommitRecord("query", 3))
    return path


@pytest.mark.parametrize("view", ["position", "lag", "metadata"])
def test_views_through_the_owner_and_from_the_store_agree(store_path: Path, view: str) -> None:
    local = _plan(store_path, view)
    with Store.open(store_path, purpose="views test") as store, StoreServer(store) as server:
        served = _plan(store_path, view)
        location, pid = server.location, store.owner.pid
    if view == "metadata":
        # Only the owner differs: none for a closed store, the serving process otherwise.
        ((*local_fields, local_pid, local_host, local_purpose, local_location),) = local
        ((*served_fields, served_pid, _, served_purpose, served_location),) = served
        assert served_fields == local_fields
        assert (served_pid, served_purpose, served_location) == (pid, "views test", location)
        assert (local_pid, local_host, local_purpose, local_location) == (None,) * 4
        name, role, topic, partitions, held, prefix, _, _, seq, position, offsets = local_fields
        assert (name, role, topic, partitions, held, prefix, seq) == (
            "views",
            "leader",
            "views-changelog",
            PARTITIONS,
            None,
            None,
            1,
        )
        assert position == '{"orders":{"0":41,"1":7}}'
        assert offsets == {p: p + 1 for p in range(PARTITIONS)}
        return
    assert served == local
    if view == "position":
        assert local == [("orders", 0, 41), ("orders", 1, 7)]
    else:  # no lag provider and no Kafka: the applied offsets, without end or lag
        assert local == [(p, p + 1, None, None) for p in range(PARTITIONS)]


def test_a_read_waits_for_a_starting_follower_query_to_serve_the_store(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower query owns its store from before its Flight server is up: a read in that
    window waits for the server and reads through it (it used to open the store itself,
    wait two minutes for an owner that never leaves, and fail with StoreLockedError)."""
    import threading

    from spark_statestore.connectors.spark.reader import snapshot

    waiting = threading.Event()
    real_pause = snapshot._pause

    def pause(seconds: float) -> None:
        waiting.set()
        real_pause(seconds)

    monkeypatch.setattr(snapshot, "_pause", pause)
    monkeypatch.setattr(snapshot, "OWNER_WAIT_S", 20.0)
    options = parse_reader_options({"path": str(store_path)})
    planned: list[Any] = []
    with Store.open(store_path, purpose="a starting follower query", serves=True) as store:
        reader = SnapshotReader(options, parse_ddl(reader_ddl(options)))
        thread = threading.Thread(target=lambda: planned.extend(reader.partitions()))
        thread.start()
        try:
            assert waiting.wait(10), "the read did not wait for the owner's server"
            with StoreServer(store) as server:
                thread.join(30)
                assert not thread.is_alive()
                (partition,) = planned
                assert partition.location == server.location  # type: ignore[attr-defined]
        finally:
            thread.join(30)
