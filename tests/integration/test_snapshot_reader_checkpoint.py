"""A Spark read of a store nobody serves never keeps a writer out, and keeps its snapshot.

Before, the read's task owned the store (its ``_owner.lock`` and its LevelDB) for the whole
scan: a sink's commit meanwhile waited for the task and failed its streaming query after
120 s. Now the task reads a private checkpoint of the store (``_readers/<id>/``).

The read is paused inside the real reader's ``read()``, after its first batch: a downstream
UDF or ``mapInArrow`` would not do, because Spark buffers the reader's output ahead of the
operators that consume it, so the reader may have finished (and released the store) before
a slow downstream operator blocks. The pause is a pair of FIFOs the test controls.
"""

from __future__ import annotations

import os
import select
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from spark_statestore.store import Role, Store, StoreOptions, StoreSpec
from spark_statestore.store.checkpoint import READERS_DIR

pytestmark = pytest.mark.integration

FORMAT = "spark_statestore"
PAUSED_FORMAT = "spark_statestore_paused_read"
WAIT_S = 120.0

OLD = {f"k{i:04d}": f"old-{i}" for i in range(3000)}
BY_WRITER = {f"k{i:04d}": f"writer-{i}" for i in range(0, 3000, 3)}
BY_SINK = {f"k{i:04d}": f"sink-{i}" for i in range(1, 3000, 3)}


def paused_source(started: str, resume: str) -> type:
    """The ``spark_statestore`` data source, its reads paused after their first batch.

    A read's task says ``started`` (writes to that FIFO, which the test has open) once the
    real reader has yielded its first batch, then waits until the test writes to the FIFO
    ``resume``. Defined in a function so that Spark's workers get it by value.
    """
    from pyspark.sql.datasource import DataSourceReader

    from spark_statestore.connectors.spark.datasource import StateStoreDataSource

    def pause() -> None:
        gate = os.open(resume, os.O_RDONLY | os.O_NONBLOCK)  # before "started": see the test
        try:
            signal = os.open(started, os.O_WRONLY | os.O_NONBLOCK)
            os.write(signal, b"started")
            os.close(signal)
            ready, _, _ = select.select([gate], [], [], WAIT_S)
            if not ready:
                raise TimeoutError(f"the test never resumed the read ({resume})")
        finally:
            os.close(gate)

    class PausedReader(DataSourceReader):
        def __init__(self, inner: DataSourceReader) -> None:
            self._inner = inner

        def partitions(self) -> Any:
            return self._inner.partitions()

        def read(self, partition: Any) -> Iterator[Any]:
            batches = iter(self._inner.read(partition))
            first = next(batches, None)  # the store's snapshot is taken: the read is on
            pause()
            if first is not None:
                yield first
            yield from batches

    class PausedSource(StateStoreDataSource):
        @classmethod
        def name(cls) -> str:
            return PAUSED_FORMAT

        def reader(self, schema: Any) -> DataSourceReader:
            return PausedReader(super().reader(schema))

    return PausedSource


def string_rows(spark: Any, path: Path, format_name: str = FORMAT) -> Any:
    return (
        spark.read.format(format_name)
        .option("keyFormat", "string")
        .option("valueFormat", "string")
        .load(str(path))
        .select("key", "value")
    )


def wait_until_started(started_fd: int, read: Future[Any]) -> None:
    """Wait for the read's task to say it is reading; a read that fails raises here."""
    waited = 0.0
    while waited < WAIT_S:
        ready, _, _ = select.select([started_fd], [], [], 1.0)
        if ready and os.read(started_fd, 16) == b"started":
            return
        if read.done():
            read.result()  # raises the read's error
            raise AssertionError("the read finished without pausing")
        waited += 1.0
    raise AssertionError(f"the read's task did not start within {WAIT_S:g} s")


def resume_read(resume: Path) -> None:
    try:
        fd = os.open(resume, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # ENXIO: the task is not waiting (it failed, or never paused)
        return
    os.write(fd, b"go")
    os.close(fd)


def test_a_writer_commits_while_a_spark_read_is_in_flight(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "store"
    spark.createDataFrame(list(OLD.items()), "key STRING, value STRING").write.format(FORMAT).mode(
        "append"
    ).save(str(path))
    with Store.open(path) as store:
        spec = StoreSpec(Role.LEADER, store.manifest.changelog_topic, store.manifest.partitions)
    started, resume = tmp_path / "started", tmp_path / "resume"
    os.mkfifo(started, 0o600)
    os.mkfifo(resume, 0o600)
    spark.dataSource.register(paused_source(str(started), str(resume)))

    started_fd = os.open(started, os.O_RDONLY | os.O_NONBLOCK)
    pool = ThreadPoolExecutor(max_workers=1)
    read = pool.submit(lambda: string_rows(spark, path, PAUSED_FORMAT).collect())
    try:
        wait_until_started(started_fd, read)
        # The read is in the middle of its scan. A writer owns the store at once: it fails
        # after 2 s here if the read still holds the store (a sink waits 120 s, then fails).
        short_wait = StoreOptions(owner_wait_seconds=2.0)
        with (
            Store.open(path, spec, purpose="test writer", options=short_wait) as store,
            store.begin() as txn,
        ):
            for key, value in BY_WRITER.items():
                txn.put(key.encode(), value.encode())
        # And a real sink's commit (the batch writer's driver-side commit, which opens the
        # store as a streaming sink's does).
        spark.createDataFrame(list(BY_SINK.items()), "key STRING, value STRING").write.format(
            FORMAT
        ).mode("append").save(str(path))
        resume_read(resume)
        rows = read.result(timeout=WAIT_S)
    finally:
        resume_read(resume)
        pool.shutdown(wait=True)
        os.close(started_fd)

    assert {r["key"]: r["value"] for r in rows} == OLD  # the snapshot the read started with
    assert len(rows) == len(OLD)
    assert os.listdir(path / READERS_DIR) == []  # the read's checkpoint is gone
    now = {r["key"]: r["value"] for r in string_rows(spark, path).collect()}
    assert now == {**OLD, **BY_WRITER, **BY_SINK}
