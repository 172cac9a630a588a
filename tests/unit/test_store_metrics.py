"""A store's metrics (:class:`StoreMetrics`) on a real store, without Kafka or Spark: its size
against the files on disk, its commit number against the store's, and how often the size
is measured."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from spark_statestore.metrics import StoreMetrics
from spark_statestore.sink.staging import StagingArea, staged_schema
from spark_statestore.store import Role, Store, StoreSpec

SPEC = StoreSpec(Role.LEADER, "sizes-changelog", 1)
Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def samples_of(registry: CollectorRegistry) -> Samples:
    """``{sample name: {labels: value}}`` of the registry's exposition, parsed by the
    Prometheus client's own parser (what a scrape returns)."""
    found: Samples = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def bytes_on_disk(path: Path) -> int:
    """The sizes of the files of LevelDB's directory and of the files directly in the store's
    directory (not its subdirectories: staging, checkpoints)."""
    total = sum(
        os.path.getsize(os.path.join(folder, name))
        for folder, _, names in os.walk(path / "db")
        for name in names
    )
    return total + sum(entry.stat().st_size for entry in path.iterdir() if entry.is_file())


def staged_rows(keys: list[bytes], values: list[bytes | None]) -> pa.RecordBatch:
    """A task's rows as it stages them (no record metadata)."""
    schema = staged_schema()
    others = {f.name: [None] * len(keys) for f in schema if f.name not in ("key", "value")}
    return pa.RecordBatch.from_pydict({"key": keys, "value": values, **others}, schema=schema)


def _around_a_write(path: Path, size_ttl_s: float, records: int) -> list[tuple[float, ...]]:
    """Before and after writing ``records`` records of 1 KiB (incompressible) and staging a
    100 kB file beside the store: the size and commit number the metrics report, the bytes
    on disk and the store's commit number."""
    labels = (("store", str(path)),)
    readings = []
    with Store.open(path, SPEC) as store:
        registry = CollectorRegistry()
        StoreMetrics(store, registry, size_ttl_s=size_ttl_s)
        for write in (False, True):
            if write:
                with store.begin() as txn:
                    for i in range(records):
                        txn.put(b"key-%06d" % i, os.urandom(1024), partition=0)
                    txn.commit()
                rows = staged_rows([b"k"], [b"x" * 100_000])
                StagingArea(str(path)).stage("query", 0, 0, 0, [rows])
            found = samples_of(registry)
            readings.append(
                (
                    found["spark_statestore_store_size_bytes"][labels],
                    found["spark_statestore_store_commit_seq"][labels],
                    bytes_on_disk(path),
                    store.metadata.commit_seq,
                )
            )
    return readings


def test_the_size_is_the_store_files_on_disk_and_the_commit_seq_the_store_s(
    tmp_path: Path,
) -> None:
    before, after = _around_a_write(tmp_path / "store", 0, 1000)
    for size, seq, on_disk, store_seq in (before, after):
        assert size == on_disk > 0  # the staged file is not the store's
        assert seq == store_seq
    assert after[1] == before[1] + 1
    assert after[0] >= before[0] + 1000 * 1024


def test_the_size_is_measured_at_most_once_per_ttl(tmp_path: Path) -> None:
    before, after = _around_a_write(tmp_path / "store", 3600, 200)
    # The commit number is read at each scrape; the size is the one measured first.
    assert after[1] == after[3] == before[1] + 1
    assert after[0] == before[0] < after[2]
