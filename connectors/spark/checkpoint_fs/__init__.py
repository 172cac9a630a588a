"""The filesystem layer of ``checkpointLocation``: the sink reads Spark's offset log and the
query id wherever the checkpoint is (a path, ``file:``, ``hdfs:``, ``s3a:``, ``gs:``,
``abfss:``...), from a Python process without a JVM.

Design, in short: Hadoop's ``Path`` rules for the location
(:mod:`~spark_statestore.connectors.spark.checkpoint_fs.location`); ``pyarrow.fs`` for the
object stores (pyarrow is a dependency already, and its wheels carry the S3, GCS and Azure
clients); WebHDFS over HTTP for HDFS, since pyarrow's ``HadoopFileSystem`` needs a Hadoop
distribution's ``libhdfs`` and a JVM in the process
(:mod:`~spark_statestore.connectors.spark.checkpoint_fs.webhdfs`); the settings Spark takes
from its Hadoop configuration come as sink options named after Hadoop's keys, or from the
environment the SDKs read (:mod:`~spark_statestore.connectors.spark.checkpoint_fs.settings`).
"""

from spark_statestore.connectors.spark.checkpoint_fs.errors import (
    CheckpointLocationError,
    CheckpointReadError,
)
from spark_statestore.connectors.spark.checkpoint_fs.location import Backend, CheckpointLocation
from spark_statestore.connectors.spark.checkpoint_fs.query_checkpoint import QueryCheckpoint
from spark_statestore.connectors.spark.checkpoint_fs.settings import (
    FILESYSTEM_OPTIONS,
    FilesystemSettings,
)

__all__ = [
    "FILESYSTEM_OPTIONS",
    "Backend",
    "CheckpointLocation",
    "CheckpointLocationError",
    "CheckpointReadError",
    "FilesystemSettings",
    "QueryCheckpoint",
]
