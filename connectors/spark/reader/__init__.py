"""The snapshot reader: ``spark.read.format("spark_statestore")``.

* :mod:`~spark_statestore.connectors.spark.reader.snapshot`: planning over one pinned
  snapshot (through the store's live owner, or a private checkpoint of the store), the views,
  bounds and lags;
* :mod:`~spark_statestore.connectors.spark.reader.lookup`: the explicit lookup options
  (``keys``, ``keyPrefix``, ``keyFrom``/``keyTo``, ``partitions``);
* :mod:`~spark_statestore.connectors.spark.reader.pushdown`: filter pushdown, where Spark
  scopes a pushed plan to its own scan.
"""
