"""The follower source: ``spark.readStream.format("spark_statestore")``.

* :mod:`~spark_statestore.connectors.spark.follower.source`: the driver's stream reader
  (offsets, partitions, admission control);
* :mod:`~spark_statestore.connectors.spark.follower.runtime`: what that reader runs in its
  long-lived driver process: the store, the follower thread and the Flight server;
* :mod:`~spark_statestore.connectors.spark.follower.feed`: the change feed's rows, read by
  the executors' tasks from Kafka;
* :mod:`~spark_statestore.connectors.spark.follower.leader_options`: the options that name an
  exactly-once leader (``leaderApplicationId``) and narrow its wait.
"""
