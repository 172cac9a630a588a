"""The snapshot reader's planning waits for ``positionBound`` (``positionBoundTimeoutMs``)
when no owner serves the store: it checks the store again until a commit (here: this test,
playing a sink's commit in another process) reaches the bound. No JVM: planning is Python."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_statestore.connectors.spark.ddl import parse_ddl
from spark_statestore.connectors.spark.options import parse_reader_options
from spark_statestore.connectors.spark.reader.snapshot import (
    NotUpToBoundError,
    SnapshotReader,
    reader_ddl,
)
from spark_statestore.store import Role, Store, StoreOptions, StoreSpec

BOUND = '{"orders": {"0": 5}}'


def _commit(path: Path, offset: int) -> int:
    """A leader's commit reaching ``orders-0`` at ``offset``; returns its sequence number."""
    spec = StoreSpec(Role.LEADER, None, 1)
    with Store.open(path, spec, options=StoreOptions(owner_wait_seconds=60)) as store:
        with store.begin() as txn:
            txn.put(b"k%d" % offset, b"v")
            txn.record_source("orders", 0, offset)
        return store.metadata.commit_seq


def _reader(path: Path, timeout_ms: int) -> SnapshotReader:
    raw = {"path": str(path), "positionbound": BOUND, "positionboundtimeoutms": str(timeout_ms)}
    options = parse_reader_options(raw)
    return SnapshotReader(options, parse_ddl(reader_ddl(options)))


class _Rechecks(logging.Handler):
    """Sets ``seen`` when the reader logs that it will check the store again."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "checking again" in record.getMessage():
            self.seen.set()


@pytest.fixture
def rechecks() -> Any:
    handler = _Rechecks()
    logger = logging.getLogger("spark_statestore.connectors.spark.reader.snapshot")
    previous = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(previous)


@pytest.mark.parametrize("exists", [True, False], ids=["below-the-bound", "not-created-yet"])
def test_planning_waits_for_the_commit_that_reaches_the_bound(
    tmp_path: Path, rechecks: _Rechecks, exists: bool
) -> None:
    # A store that does not exist yet (a follower query just started, which creates it) has
    # not reached the bound either: a bounded read waits for it as for a store behind.
    path = tmp_path / "store"
    if exists:
        _commit(path, 1)
    planned: list[Any] = []
    errors: list[BaseException] = []

    def plan() -> None:
        try:
            planned.extend(_reader(path, 120_000).partitions())
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    thread = threading.Thread(target=plan)
    thread.start()
    assert rechecks.seen.wait(60), errors  # it found the store below the bound, or none
    seq = _commit(path, 5)
    thread.join(60)
    assert not thread.is_alive() and not errors, errors
    assert [p.commit_seq for p in planned] == [seq]


def test_planning_gives_up_at_the_timeout(tmp_path: Path) -> None:
    path = tmp_path / "store"
    _commit(path, 1)
    with pytest.raises(NotUpToBoundError, match=r"after waiting 0\.2 s \(positionBoundTimeoutMs\)"):
        _reader(path, 200).partitions()
    with pytest.raises(NotUpToBoundError, match="set positionBoundTimeoutMs to wait"):
        _reader(path, 0).partitions()


def test_an_unbounded_read_of_a_missing_store_fails_at_once(tmp_path: Path) -> None:
    from spark_statestore.store.errors import StoreNotFoundError

    raw = {"path": str(tmp_path / "nothing")}
    options = parse_reader_options(raw)
    with pytest.raises(StoreNotFoundError, match="no store at"):
        SnapshotReader(options, parse_ddl(reader_ddl(options))).partitions()
    with pytest.raises(StoreNotFoundError, match="no store at"):
        _reader(tmp_path / "nothing", 200).partitions()  # nor one that waited in vain


def test_an_enrichment_lookup_waits_for_a_store_not_created_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # enrich's lookups without an owner wait as the reader's planning does: the store is
    # created (by a commit reaching the rows' position) while the lookup waits to look again.
    from types import SimpleNamespace

    from spark_statestore.connectors.spark import enrich_tasks as enrich
    from spark_statestore.position import PositionBound

    path = tmp_path / "store"
    plan = SimpleNamespace(local_path=str(path), wait_s=60.0, store=f"store {path}")
    pauses: list[float] = []

    def pause(seconds: float) -> None:  # the lookup's wait before it looks again
        pauses.append(seconds)
        _commit(path, 5)

    monkeypatch.setattr(enrich.time, "sleep", pause)
    keys, values, position = enrich.lookup_here(  # type: ignore[arg-type]
        plan, pa.array([b"k5", b"absent"]), PositionBound.from_json(BOUND)
    )
    assert len(pauses) == 1
    assert keys.to_pylist() == [b"k5"] and values.to_pylist() == [b"v"]
    assert position.to_map() == {"orders": {0: 5}}
