"""Local Spark processes for development and tests, started from the installed PySpark: a
standalone cluster whose Workers live on hosts of their own (:mod:`.cluster`), a Spark
Connect server (:mod:`.connect`)."""

from spark_statestore.connectors.spark.local.cluster import DEFAULT_PREFIX, LocalSparkCluster
from spark_statestore.connectors.spark.local.daemons import SparkDaemon, spark_home
from spark_statestore.connectors.spark.local.executors import SparkExecutor

__all__ = ["DEFAULT_PREFIX", "LocalSparkCluster", "SparkDaemon", "SparkExecutor", "spark_home"]
