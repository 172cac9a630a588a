"""A leader's progress from Kafka, for changelogs without position headers (DESIGN §5).

Kafka Streams writes position headers only with a private setting on. For a leader that runs
exactly-once, a follower still learns a lower bound of its position: the leader's consumer
group (its ``application.id``) commits its input offsets in the same transactions that write
its changelog. :meth:`KafkaLeaderProgress.sample` reads the group's committed offsets
(stable ones only: a pending transactional commit is waited for) and then the changelog's
log end offsets; once the follower has applied every changelog partition up to those ends,
every input record before the committed offsets is reflected in its store.

This holds only for an exactly-once leader. An at-least-once leader commits its offsets
apart from its changelog writes (before them, after a crash), so nothing follows from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException

from spark_statestore.connectors.kafka import clients
from spark_statestore.connectors.kafka.errors import client_error
from spark_statestore.position import Position

__all__ = ["KafkaLeaderProgress"]


class KafkaLeaderProgress:
    """Samples an exactly-once leader's committed input offsets, then its changelog's ends.

    Parameters
    ----------
    bootstrap_servers
        The Kafka cluster.
    application_id
        The leader's ``application.id``: its consumer group.
    changelog
        The changelog the follower reads.
    partitions
        The changelog's partition count.
    config
        The user's ``kafka.*`` settings.
    timeout_s
        How long one Kafka request may take.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        application_id: str,
        changelog: str,
        partitions: int,
        *,
        config: Mapping[str, Any] | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.application_id = application_id
        self._changelog = changelog
        self._partitions = range(partitions)
        self._timeout_s = timeout_s
        self._admin = clients.admin(bootstrap_servers, config)
        self._log_ends = clients.consumer(
            bootstrap_servers,
            config,
            group=f"spark-statestore-leader-{application_id}",
            what=f"changelog {changelog!r}",
            read_committed=False,
        )

    def sample(self) -> tuple[Position, dict[int, int]]:
        """``(committed position, changelog log ends)``, read in that order.

        Raises
        ------
        KafkaClientError
            The group's offsets or the changelog's ends cannot be read.
        """
        request = ConsumerGroupTopicPartitions(self.application_id)
        try:
            futures = self._admin.list_consumer_group_offsets(
                [request], require_stable=True, request_timeout=self._timeout_s
            )
            committed = futures[self.application_id].result(timeout=self._timeout_s)
        except KafkaException as exc:
            raise client_error(
                exc, f"cannot read the committed offsets of the leader {self.application_id!r}"
            ) from exc
        offsets: dict[str, dict[int, int]] = {}
        for tp in committed.topic_partitions or ():
            if tp.error is None and tp.offset > 0:
                offsets.setdefault(tp.topic, {})[tp.partition] = tp.offset - 1
        ends = {
            p: clients.watermarks(self._log_ends, self._changelog, p, self._timeout_s)[1]
            for p in self._partitions
        }
        return Position.from_map(offsets), ends

    def close(self) -> None:
        """Release the clients."""
        self._log_ends.close()
