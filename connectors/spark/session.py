"""A local SparkSession set up the way the demo, the tests and the README use it."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["LOCAL_CONF", "local_session"]

LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "2g",
    # Micro-batches of a follower query start as soon as the previous one ends.
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    "spark.sql.streaming.stopTimeout": "60s",
    # The snapshot reader turns key/partition filters into store lookups (pushFilters).
    "spark.sql.python.filterPushdown.enabled": "true",
}
"""The settings of ``conf/spark-defaults.conf`` (keep the two in sync)."""


def local_session(
    app_name: str, master: str = "local[2]", *, kafka_source: bool = False
) -> SparkSession:
    """A local SparkSession whose Python workers run this interpreter.

    Spark's Python workers must run the same interpreter (and so the same installed
    packages) as the driver: ``PYSPARK_PYTHON`` is set to ``sys.executable`` unless the
    environment already sets it.

    Parameters
    ----------
    app_name, master
        As for ``SparkSession.builder``.
    kafka_source
        Put Spark's own Kafka connector (``format("kafka")``) on the classpath, from the
        jars ``spark-statestore jars`` resolved for the installed PySpark (nothing is
        downloaded here).

    Raises
    ------
    JarsMissingError
        ``kafka_source`` is asked for and the connector's jars were never resolved.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in LOCAL_CONF.items():
        builder = builder.config(key, value)
    if kafka_source:
        from spark_statestore.connectors.kafka.local.jars import spark_kafka_jars

        builder = builder.config("spark.jars", ",".join(map(str, spark_kafka_jars().jars())))
    return builder.getOrCreate()
