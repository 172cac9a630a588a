"""The sink's Kafka side: publishing a store's batches to its changelog exactly once.

* :mod:`~spark_statestore.connectors.kafka.sink.publisher`: the
  :class:`~spark_statestore.sink.commit.ChangelogPublisher` the commit protocol uses.
* :mod:`~spark_statestore.connectors.kafka.sink.writer`: the transactional changelog writer
  (one Kafka transaction per batch, zombies fenced, transaction timeouts named).
* :mod:`~spark_statestore.connectors.kafka.sink.progress`: the progress record each batch
  writes to ``<changelog>-progress`` in the same transaction, and reading the last one.
* :mod:`~spark_statestore.connectors.kafka.sink.ranges`: reading committed changelog ranges
  back, to roll a store forward after a crash between the two commits.
"""
