"""The sink's engine side: a micro-batch into a store exactly once (KIP-844 ideas).

* :mod:`~spark_statestore.sink.staging`: executors stage their rows as Arrow IPC files next
  to the store.
* :mod:`~spark_statestore.sink.commit`: the driver's commit protocol applies exactly the
  staged files Spark's commit messages name, with the batch id, the source offsets and the
  position, in one atomic store commit; with a changelog it publishes first, through a
  :class:`~spark_statestore.sink.changes.ChangelogPublisher`, and rolls forward after a crash.
* :mod:`~spark_statestore.sink.changes`: what the protocol and a publisher exchange.
* :mod:`~spark_statestore.sink.publication`: staged rows as a publisher produces them and as
  the store writes them (each record's changelog partition and offset).

Its bindings: the Kafka side (the publisher, the transactional changelog writer, the progress
records, roll-forward reads) is :mod:`spark_statestore.connectors.kafka.sink`; the Spark side
(``writeStream.format("spark_statestore")`` and the batch writer) is
:mod:`spark_statestore.connectors.spark.sink`.
"""

from __future__ import annotations

from spark_statestore.sink.changes import Change, ChangelogPublisher, PublishedBatch
from spark_statestore.sink.commit import (
    BatchToCommit,
    CommitOutcome,
    commit_batch,
    is_committed,
)
from spark_statestore.sink.errors import StagingError
from spark_statestore.sink.staging import StagedFile, StagingArea, staged_schema

__all__ = [
    "BatchToCommit",
    "Change",
    "ChangelogPublisher",
    "CommitOutcome",
    "PublishedBatch",
    "StagedFile",
    "StagingArea",
    "StagingError",
    "commit_batch",
    "is_committed",
    "staged_schema",
]
