"""A local SparkSession set up the way the demo, the tests and the README use it."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["LOCAL_CONF", "has_kafka_connector", "local_session"]

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
    app_name: str,
    master: str = "local[2]",
    *,
    kafka_source: bool = False,
    conf: Mapping[str, str] | None = None,
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
        Put Spark's own Kafka connector (``format("kafka")``) and Avro functions
        (``from_avro``) on the classpath, from the jars ``spark-statestore jars`` resolved
        for the installed PySpark (nothing is downloaded here).
    conf
        Settings on top of :data:`LOCAL_CONF` (a cluster's master, driver address, ...).

    Raises
    ------
    JarsMissingError
        ``kafka_source`` is asked for and the connector's jars were never resolved.
    StateStoreError
        ``kafka_source`` is asked for, but this process already runs a Spark driver started
        without the connector (a driver's classpath is fixed when it starts).
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**LOCAL_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    if not kafka_source:
        return builder.getOrCreate()
    from spark_statestore.connectors.kafka.local.jars import spark_avro_jars, spark_kafka_jars

    # Spark's own connectors: the Kafka source and sink, and from_avro/to_avro.
    jars = [str(p) for p in (*spark_kafka_jars().jars(), *spark_avro_jars().jars())]
    session = builder.config("spark.jars", ",".join(jars)).getOrCreate()
    if not _loads(session, _KAFKA_PROVIDER):
        from spark_statestore.errors import StateStoreError

        raise StateStoreError(
            "Spark's Kafka connector is not on this process's Spark driver: the driver JVM "
            "was started earlier without it, and a JVM's classpath is fixed when it starts "
            "(stopping the session does not help). Ask for kafka_source=True in the first "
            "session of a fresh process."
        )
    return session


_KAFKA_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


def has_kafka_connector(session: SparkSession) -> bool:
    """Whether ``session``'s driver has Spark's own Kafka connector (``format("kafka")``)."""
    return _loads(session, _KAFKA_PROVIDER)


def _loads(session: SparkSession, class_name: str) -> bool:
    """Whether the driver can load ``class_name``."""
    from py4j.protocol import Py4JJavaError

    jvm = session.sparkContext._jvm
    assert jvm is not None  # a running session has its gateway
    try:
        jvm.java.lang.Thread.currentThread().getContextClassLoader().loadClass(class_name)
    except Py4JJavaError:
        return False
    return True
