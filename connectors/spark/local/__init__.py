"""A Spark standalone cluster as local JVM processes, its Workers on hosts of their own."""

from spark_statestore.connectors.spark.local.cluster import DEFAULT_PREFIX, LocalSparkCluster
from spark_statestore.connectors.spark.local.daemons import SparkDaemon, spark_home
from spark_statestore.connectors.spark.local.executors import SparkExecutor

__all__ = ["DEFAULT_PREFIX", "LocalSparkCluster", "SparkDaemon", "SparkExecutor", "spark_home"]
