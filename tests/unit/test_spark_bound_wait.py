"""The snapshot reader's planning waits for ``positionBound`` (``positionBoundTimeoutMs``)
when no owner serves the store: it checks the store again until a commit (here: this test,
playing a sink's commit in another process) reaches the bound. No JVM: planning is Python."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

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


def test_planning_waits_for_the_commit_that_reaches_the_bound(
    tmp_path: Path, rechecks: _Rechecks
) -> None:
    path = tmp_path / "store"
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
    assert rechecks.seen.wait(60), errors  # it found the store below the bound
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
