"""The sink's Kafka side: publishing a store's batches to its changelog exactly once.

* :mod:`~spark_statestore.connectors.kafka.sink.publisher`: the
  :class:`~spark_statestore.sink.commit.ChangelogPublisher` the commit protocol uses.
* :mod:`~spark_statestore.connectors.kafka.sink.writer`: the transactional changelog writer
  (one Kafka transaction per batch, zombies fenced, transaction timeouts named).
* :mod:`~spark_statestore.connectors.kafka.sink.progress`: the progress record each batch
  writes to ``<changelog>-progress`` in the same transaction, and reading the last one.
* :mod:`~spark_statestore.connectors.kafka.sink.ranges`: reading committed changelog ranges
  back, to roll a store forward after a crash between the two commits.
* :mod:`~spark_statestore.connectors.kafka.sink.bound`: the changelog offsets a Kafka Streams
  store following the changelog must reach to reflect the leader's writes up to an input
  position (read-your-writes in the other direction, from the ``c`` headers).
"""
