"""The ``spark_statestore`` Python data source: follower source and snapshot reader.

The same format name serves two surfaces, told apart by the ``changelog`` option:

* ``spark.readStream.format("spark_statestore").option("changelog", ...)`` is the follower
  source (the change feed, with the store materialized as it goes);
* ``spark.read.format("spark_statestore").load(path)`` is the snapshot reader (no
  ``changelog`` option: the store knows its changelog).

The short name ``statestore`` is Spark's own built-in State Data Source, hence
``spark_statestore``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)

from spark_statestore.connectors.spark.errors import SparkSourceError
from spark_statestore.connectors.spark.options import (
    parse_reader_options,
    parse_sink_options,
    parse_source_options,
)
from spark_statestore.connectors.spark.worker_gc import freeze_long_lived

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["FORMAT_NAME", "StateStoreDataSource"]

FORMAT_NAME = "spark_statestore"


class StateStoreDataSource(DataSource):
    """Kafka Streams style state stores as a Spark data source (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def _is_feed(self) -> bool:
        return "changelog" in self.options

    def schema(self) -> str:
        freeze_long_lived()
        if self._is_feed():
            from spark_statestore.connectors.spark.follower.feed import feed_ddl

            return feed_ddl(parse_source_options(self.options))
        from spark_statestore.connectors.spark.reader.snapshot import reader_ddl

        return reader_ddl(parse_reader_options(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        freeze_long_lived()
        if self._is_feed():
            raise SparkSourceError(
                "spark.read.format('spark_statestore') reads a store snapshot and takes no "
                "'changelog' option (the store knows its changelog): remove it, or use "
                "spark.readStream to follow the changelog"
            )
        from spark_statestore.connectors.spark.reader.lookup import spark_scopes_pushdown_per_scan
        from spark_statestore.connectors.spark.reader.snapshot import (
            PushdownSnapshotReader,
            SnapshotReader,
        )

        options = parse_reader_options(self.options, schema)
        if spark_scopes_pushdown_per_scan():
            return PushdownSnapshotReader(options, schema)
        return SnapshotReader(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        freeze_long_lived()
        if not self._is_feed():
            raise SparkSourceError(
                "option 'changelog' is required for spark.readStream.format('spark_statestore')"
                ": the changelog topic to follow, e.g. .option('changelog', "
                "'app-store-changelog')"
            )
        from spark_statestore.connectors.spark.follower.source import FollowerStreamReader

        return FollowerStreamReader(parse_source_options(self.options, schema), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        freeze_long_lived()
        from spark_statestore.connectors.spark.sink import StreamSink

        # Spark passes overwrite=True for the complete output mode.
        return StreamSink(parse_sink_options(self.options, streaming=True), schema, overwrite)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        freeze_long_lived()
        from spark_statestore.connectors.spark.sink import BatchWriter

        return BatchWriter(parse_sink_options(self.options, streaming=False), schema, overwrite)
