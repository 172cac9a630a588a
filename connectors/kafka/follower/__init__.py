"""The follower's Kafka side: reading a changelog with read_committed.

* :mod:`~spark_statestore.connectors.kafka.follower.source`: :class:`KafkaChangelogSource`,
  the changelog source the engine's :class:`~spark_statestore.follower.Follower` restores
  and follows a store from (offsets, lags, read-ahead, lost offsets).
* :mod:`~spark_statestore.connectors.kafka.follower.ranges`: one offset range of one
  partition, as an executor's task of the change feed reads it.
"""
