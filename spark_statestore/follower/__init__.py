"""The changelog follower: continuous restore of a changelog into a read-only store (KIP-813).

:mod:`~spark_statestore.follower.engine` holds the :class:`Follower` and its lifecycle;
:mod:`~spark_statestore.follower.protocols` what it reads through (a changelog source, a
leader's progress), implemented by ``spark_statestore.connectors.kafka.follower``.
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
