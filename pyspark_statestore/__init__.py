"""Automatic registration of the ``spark_statestore`` data source.

Spark imports every installed top-level ``pyspark_*`` module that defines ``DefaultSource``
and registers it, so ``spark.read.format("spark_statestore")`` works without calling
:func:`spark_statestore.register`. Importing this module starts nothing.
"""

from __future__ import annotations

from spark_statestore.connectors.spark.datasource import StateStoreDataSource as DefaultSource

__all__ = ["DefaultSource"]
