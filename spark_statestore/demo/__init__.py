"""The end-to-end demo behind the README's first command (``make demo``).

:func:`run_demo` (:mod:`~spark_statestore.demo.run`) is the whole sequence:

1. Start a local Apache Kafka broker (KRaft, a JVM) through ``spark-statestore broker``, with
   the orders topic ``shop-orders`` (4 partitions) and the topics the Spark job of section 6
   publishes to.
2. Start "another application": the repository's real Kafka Streams app
   (``interop/kafka-streams``, its own JVM, :mod:`~spark_statestore.demo.app`), which keeps
   each customer's order total in a RocksDB store logged to ``shop-app-totals-changelog``
   (exactly-once, position headers on); write orders to it in transactions, one of them
   aborted.
3. to 5. A Spark follower query materializes that changelog into a local store; Spark SQL
   queries the live store, beside the app's own IQv2 answers, while more orders arrive
   (:mod:`~spark_statestore.demo.follow_part`).
6. and 7. A Spark job aggregates the changelog and writes through the transactional sink into
   a store it leads, with a changelog of its own; a second query follows that changelog; SQL
   shows both stores agree; a read bounded by the app's next changelog write fails with
   NOT_UP_TO_BOUND until the follower has caught up with it
   (:mod:`~spark_statestore.demo.loop_part`).
8. Both stores are found through their announcements on the changelog's replicas topic, and
   a router answers a key query from the leader, then, the leader stopped, from the follower
   (:mod:`~spark_statestore.demo.route_part`).
9. Say what to look at; every query, Spark, the Kafka Streams app and the broker are stopped
   (also on errors); exit 0.

:mod:`~spark_statestore.demo.output` is what the parts share (the output, SQL on stores, the
feed printer). The work directory (default ``/tmp/spark-statestore-demo``) is cleaned at the
start of each run and kept afterwards, so the stores can be read again when the demo is over.
Spark and Kafka clients are imported when the demo runs, never at module import.
"""

from __future__ import annotations

from spark_statestore.demo.errors import DemoError
from spark_statestore.demo.run import DEFAULT_WORKDIR, run_demo

__all__ = ["DEFAULT_WORKDIR", "DemoError", "run_demo"]
