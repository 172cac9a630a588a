"""The raw limit of a Spark read through Python: a Python data source that does nothing but
yield one ready-made Arrow batch of the snapshot reader's schema (16-byte keys, 32-byte
values, as the ``spark`` suite's store) again and again. The ``spark`` suite reports it
against ``read.parquet`` (``scan_raw_source``), the ceiling of its store scans.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["RAW_BATCH_ROWS", "RAW_SOURCE", "raw_source_class"]

RAW_SOURCE = "spark_statestore_bench_raw"
RAW_BATCH_ROWS = 8192


def raw_source_class() -> type:
    """A Python data source (``RAW_SOURCE``) that reads ``rows`` rows of the snapshot
    reader's schema in one task, yielding one ready-made Arrow batch again and again: what
    Spark's Python Data Source API costs by itself, the limit of any Python reader. Defined
    here, in a function, because the engine imports Spark only when it runs it."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class RawReader(DataSourceReader):
        def __init__(self, rows: int) -> None:
            self.rows = rows

        def partitions(self) -> list[Any]:
            return [InputPartition(0)]  # one task, as the store's reads

        def read(self, partition: Any) -> Iterator[Any]:
            import pyarrow as pa

            n = RAW_BATCH_ROWS
            batch = pa.RecordBatch.from_arrays(
                [
                    pa.array([b"key-%012d" % i for i in range(n)], pa.binary()),
                    pa.array([b"value-%026d" % i for i in range(n)], pa.binary()),
                    pa.array([i % 8 for i in range(n)], pa.int32()),
                    pa.array(range(n), pa.int64()),
                    pa.array([1_700_000_000_000_000] * n, pa.timestamp("us", tz="UTC")),
                ],
                names=["key", "value", "partition", "offset", "timestamp"],
            )
            for start in range(0, self.rows, n):
                yield batch if start + n <= self.rows else batch.slice(0, self.rows - start)

    class RawSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return RAW_SOURCE

        def schema(self) -> str:
            return "key BINARY, value BINARY, partition INT, offset BIGINT, timestamp TIMESTAMP"

        def reader(self, schema: Any) -> Any:
            return RawReader(int(self.options["rows"]))

    return RawSource
