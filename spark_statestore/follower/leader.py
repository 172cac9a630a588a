"""When an exactly-once leader's committed input offsets are in its store (DESIGN §5).

A Kafka Streams app running exactly-once commits its consumer group's offsets in the
transactions that write its output, internal topics and changelogs. For a store fed straight
by the input topics, "the group committed input offset *o*" means *o*'s effect is in the
changelog below its log end read after. For a store behind internal topics (a repartition
topic after a ``groupBy``, a foreign-key join's subscription topics), the first sub-topology
commits *o* in the transaction that writes the internal topic, and the store's sub-topology
applies those records in a later transaction. :class:`LeaderChain` therefore grants *o* only
at the end of a chain:

1. read the group's committed offsets ``C0`` (the sample's input position);
2. read the log ends ``E1`` of the internal topics; wait until the group's committed offsets
   on them reach ``E1`` (everything *o* caused in them is processed, and what that wrote is
   below the next ends); repeat for as many levels as the chain can have;
3. read the changelog's log ends: once the follower has applied those, ``C0``'s input
   offsets are in its store.

Every read of ends comes after the read of committed offsets it follows. A committed offset
short of a log end counts as reached when nothing but transaction markers or aborted records
lie between (Kafka Streams commits the offset after its last record, and a marker takes an
offset too): the caller's ``drained`` probe says so.

The chain is pure: :class:`LeaderChain.observe` takes what the Kafka connector read in one
round and returns a sample once one is complete, so it is tested without a broker.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from spark_statestore.position import Position

__all__ = ["LeaderChain", "Observation", "TopicPartition", "internal_topic_of"]

TopicPartition = tuple[str, int]

_INTERNAL_SUFFIXES = ("-repartition", "-topic")
"""How Kafka Streams names the internal topics a group consumes: ``<app>-<name>-repartition``
and the foreign-key join's ``<app>-<name>-subscription-registration-topic`` and
``...-subscription-response-topic`` (changelogs are read by the restore consumer, outside
the group)."""


def internal_topic_of(application_id: str, topic: str) -> bool:
    """Whether ``topic`` is named as one of ``application_id``'s internal topics that its
    consumer group reads (repartition and subscription topics)."""
    return topic.startswith(application_id + "-") and topic.endswith(_INTERNAL_SUFFIXES)


@dataclass(frozen=True, slots=True)
class Observation:
    """What one round read from Kafka, in this order.

    Parameters
    ----------
    committed
        The group's committed offsets (the next offset to read) per topic-partition; a
        partition whose offset could not be read (e.g. unstable) is absent.
    internal
        The internal topics the chain waits on, per partition, as known in this round.
    ends
        Log end offsets of the ``internal`` partitions, read after ``committed``.
    changelog_ends
        The changelog's log end offsets per partition, read after ``committed``.
    """

    committed: Mapping[TopicPartition, int]
    internal: Collection[TopicPartition]
    ends: Mapping[TopicPartition, int]
    changelog_ends: Mapping[int, int]


@dataclass(slots=True)
class _Sample:
    position: Position
    rounds_left: int
    targets: dict[TopicPartition, int]


Drained = Callable[[TopicPartition, int, int], bool]
"""``drained(tp, committed, end)``: whether ``[committed, end)`` of ``tp`` holds no committed
data record (only transaction markers or aborted records)."""


class LeaderChain:
    """Samples in flight along the chain of internal topics; see the module docstring.

    Parameters
    ----------
    rounds
        How many levels of internal topics to wait through; None: as many as there are
        internal topics in the observation a sample starts with (the longest chain without
        knowing the topology).
    is_input
        Which committed topics a granted position names (the app's input topics).
    max_in_flight
        Samples in flight at most. One starts every round while there is room, so an input
        offset committed just after a sample started waits for the next round's sample,
        not for that one to complete.
    """

    def __init__(
        self,
        *,
        rounds: int | None,
        is_input: Callable[[str], bool],
        max_in_flight: int = 16,
    ) -> None:
        self._rounds = rounds
        self._is_input = is_input
        self._max_in_flight = max_in_flight
        self._flight: list[_Sample] = []
        self.waiting_on: tuple[TopicPartition, int, int | None] | None = None
        """The first internal partition the oldest sample waits on: ``(tp, end, committed)``."""

    def observe(
        self, observed: Observation, drained: Drained
    ) -> tuple[Position, dict[int, int]] | None:
        """Advance the samples in flight with one round's reads and start a new one.

        Returns the newest sample completed in this round: ``(input position, changelog
        ends)``; once the follower has applied the changelog up to those ends, the position
        holds for its store. None when none completed.
        """
        done: tuple[Position, dict[int, int]] | None = None
        ends = {tp: observed.ends[tp] for tp in observed.internal if tp in observed.ends}
        missing = [tp for tp in observed.internal if tp not in observed.ends]
        still: list[_Sample] = []
        for sample in self._flight:
            if not self._reached(sample.targets, observed.committed, drained):
                still.append(sample)
                continue
            if missing:
                # An internal partition's end is unknown this round: the next level's
                # targets would be incomplete, so wait for a round that has them all.
                still.append(sample)
                continue
            sample.rounds_left -= 1
            if sample.rounds_left <= 0:
                done = (sample.position, dict(observed.changelog_ends))
            else:
                sample.targets = dict(ends)
                still.append(sample)
        self._flight = still
        if not missing and len(still) < self._max_in_flight:
            started = self._start(observed, ends)
            if started is not None:
                done = started
        self.waiting_on = self._first_wait(observed.committed)
        return done

    def _rounds_for(self, ends: Mapping[TopicPartition, int]) -> int:
        if self._rounds is not None:
            return self._rounds
        return len({topic for topic, _ in ends})

    def _start(
        self, observed: Observation, ends: dict[TopicPartition, int]
    ) -> tuple[Position, dict[int, int]] | None:
        offsets: dict[str, dict[int, int]] = {}
        for (topic, partition), offset in observed.committed.items():
            if offset > 0 and self._is_input(topic):
                offsets.setdefault(topic, {})[partition] = offset - 1
        position = Position.from_map(offsets)
        rounds = self._rounds_for(ends)
        if rounds == 0:
            return position, dict(observed.changelog_ends)
        self._flight.append(_Sample(position, rounds, dict(ends)))
        return None

    @staticmethod
    def _reached(
        targets: Mapping[TopicPartition, int],
        committed: Mapping[TopicPartition, int],
        drained: Drained,
    ) -> bool:
        for tp, end in targets.items():
            have = committed.get(tp, 0)
            if have >= end:
                continue
            if tp not in committed and end > 0:
                # Nothing committed (or unreadable this round): the probe decides whether
                # the partition holds anything the group still has to process.
                if not drained(tp, 0, end):
                    return False
                continue
            if not drained(tp, have, end):
                return False
        return True

    def _first_wait(
        self, committed: Mapping[TopicPartition, int]
    ) -> tuple[TopicPartition, int, int | None] | None:
        if not self._flight:
            return None
        for tp, end in sorted(self._flight[0].targets.items()):
            have = committed.get(tp)
            if have is None or have < end:
                return tp, end, have
        return None
