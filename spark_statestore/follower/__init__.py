"""The changelog follower: continuous restore of a changelog into a read-only store (KIP-813).

* :mod:`~spark_statestore.follower.engine`: the :class:`Follower` and its lifecycle.
* :mod:`~spark_statestore.follower.protocols`: what it reads through (a changelog source, a
  leader's progress).
* :mod:`~spark_statestore.follower.versioned`: following a Kafka Streams versioned store's
  changelog into the right kind of store.
* :mod:`~spark_statestore.follower.leader` and :mod:`~spark_statestore.follower.topology`: when
  an exactly-once leader's committed input offsets are in its store, behind the internal
  topics its topology describes.

Its bindings: the Kafka side (the changelog source, the leader's progress) is
:mod:`spark_statestore.connectors.kafka.follower`; the Spark side (``readStream``) is
:mod:`spark_statestore.connectors.spark.follower`.
"""

from spark_statestore.follower.engine import LEADER_SAMPLE_INTERVAL_S, Follower, FollowerState
from spark_statestore.follower.protocols import ChangelogSource, LeaderProgress, PollResult, Row

__all__ = [
    "LEADER_SAMPLE_INTERVAL_S",
    "ChangelogSource",
    "Follower",
    "FollowerState",
    "LeaderProgress",
    "PollResult",
    "Row",
]
