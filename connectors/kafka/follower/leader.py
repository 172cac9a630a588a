"""A leader's progress from Kafka, for changelogs without position headers (DESIGN §5).

Kafka Streams writes position headers only with a private setting on. For a leader that runs
exactly-once, a follower still learns a lower bound of its position from the leader's
consumer group (its ``application.id``): :class:`KafkaLeaderProgress` reads, in rounds, the
group's committed offsets (stable ones only), the log ends of the app's internal topics and
the changelog's, and feeds them to a :class:`~spark_statestore.follower.leader.LeaderChain`,
which grants an input offset only once everything it caused has gone through every internal
topic (repartition, foreign-key subscription topics) into the changelog. The rounds run on
their own thread, so the follower never waits on Kafka's admin requests.

Which internal topics count: the topics named as the app's internal topics that exist
(``<application.id>-...-repartition`` and ``...-topic``), waited through in as many levels
as there are such topics; or, narrower, the internal topics upstream of the store in the
app's topology description (``topology``), or the ones the user names (``upstream_topics``).

This holds only for an exactly-once leader. An at-least-once leader commits its offsets
apart from its changelog writes (before them, after a crash), so nothing follows from them.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Collection, Mapping
from typing import Any

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

from spark_statestore.connectors.kafka import clients
from spark_statestore.connectors.kafka.errors import (
    KafkaClientError,
    client_error,
    is_transient,
    kafka_error_of,
)
from spark_statestore.follower.leader import LeaderChain, Observation, internal_topic_of
from spark_statestore.follower.topology import parse_topology, store_of_changelog
from spark_statestore.position import Position

__all__ = ["KafkaLeaderProgress"]

_log = logging.getLogger(__name__)

_ROUND_S = 0.05
"""How often a round reads the group's offsets and the log ends."""
_RETRY_S = 1.0
"""How long to wait before another round after a failed one."""
_STUCK_S = 0.5
"""How long a partition's committed offset must stay short of its target, unchanged, before
the probe looks at what lies between (only markers or aborted records: reached). An app
under load commits a partition it processes every commit interval; the consumer's position,
which Kafka Streams commits, usually skips the last transaction's marker already."""
_PROBE_S = 0.2
_COORDINATOR_ERRORS = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
)
_SLOW_NOTE_S = 10.0
"""How long the oldest sample may wait before the progress says what it waits on."""


class KafkaLeaderProgress:
    """An exactly-once leader's committed input offsets, granted through its internal topics.

    Parameters
    ----------
    bootstrap_servers
        The Kafka cluster.
    application_id
        The leader's ``application.id``: its consumer group, and its internal topics' prefix.
    changelog
        The changelog the follower reads.
    partitions
        The changelog's partition count.
    config
        The user's ``kafka.*`` settings.
    timeout_s
        How long one Kafka request may take.
    topology
        The text of the app's ``Topology.describe()``: only the internal topics upstream of
        the store (named by ``changelog``, ``<application_id>-<store>-changelog``) are waited
        through, level by level.
    upstream_topics
        The internal topics between the app's input topics and the store, as Kafka names
        them (empty: none, the store reads the input topics directly). Exclusive with
        ``topology``.
    probe_after_s
        How long an internal partition's committed offset must stand still short of its
        target before the probe looks at what lies between.

    Raises
    ------
    TopologyError
        ``topology`` cannot be read or does not have the store.
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
        topology: str | None = None,
        upstream_topics: Collection[str] | None = None,
        probe_after_s: float = _STUCK_S,
    ) -> None:
        if topology is not None and upstream_topics is not None:
            raise ValueError("give the leader's topology or its upstream topics, not both")
        self.application_id = application_id
        self._changelog = changelog
        self._partitions = range(partitions)
        self._timeout_s = timeout_s
        self._bootstrap = bootstrap_servers
        self._config = dict(config or {})
        # Internal topics as the topology describes them (without the app's prefix), or as
        # the user names them; None: every internal topic of the app that exists.
        self._described: frozenset[str] | None = None
        self._named: frozenset[str] | None = None
        if topology is not None:
            store = store_of_changelog(application_id, changelog)
            self._described = parse_topology(topology).upstream(store).internal
        elif upstream_topics is not None:
            self._named = frozenset(upstream_topics)
        rounds = None
        if self._described is not None:
            rounds = len(self._described)
        elif self._named is not None:
            rounds = len(self._named)
        self._internal_names: set[str] = set()
        self._chain = LeaderChain(
            rounds=rounds, is_input=lambda topic: topic not in self._internal_names
        )
        self._admin = clients.admin(bootstrap_servers, config)
        self._probe: Any = None
        self._stuck: dict[tuple[str, int], tuple[int, float]] = {}
        self._probe_after_s = probe_after_s
        self._drained: set[tuple[tuple[str, int], int, int]] = set()
        self._lock = threading.Lock()
        self._ready: tuple[Position, dict[int, int]] | None = None
        self._note: str | None = None
        self._started_waiting: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- LeaderProgress -------------------------------------------------------------------
    def sample(self) -> tuple[Position, dict[int, int]] | None:
        """The newest completed sample since the last call: ``(input position, changelog
        log ends)``, or None. Starts the rounds on the first call."""
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(
                target=self._run, name=f"leader-{self.application_id}", daemon=True
            )
            self._thread.start()
        with self._lock:
            ready, self._ready = self._ready, None
        return ready

    def note(self) -> str | None:
        """Why the leader's position may not be advancing (a read that fails, or a wait
        that has lasted), None when rounds complete normally."""
        with self._lock:
            return self._note

    def close(self) -> None:
        """Stop the rounds and release the clients."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(self._timeout_s)
        probe, self._probe = self._probe, None
        if probe is not None:
            probe.close()

    # -- rounds ---------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                completed = self.run_round()
            except KafkaClientError as exc:
                self._set_note(str(exc))
                _log.warning("leader %s: %s", self.application_id, exc)
                self._stop.wait(_RETRY_S)
                continue
            except Exception as exc:  # kept alive: the follower goes on, bounds are refused
                self._set_note(
                    f"reading the progress of the leader {self.application_id!r} failed: {exc!r}"
                )
                _log.exception("leader %s: a round failed", self.application_id)
                self._stop.wait(_RETRY_S)
                continue
            if completed is not None:
                with self._lock:
                    self._ready = completed
            self._stop.wait(_ROUND_S)

    def run_round(self) -> tuple[Position, dict[int, int]] | None:
        """One round: committed offsets, then the internal topics' and the changelog's log
        ends; returns a sample completed by it, if any.

        Raises
        ------
        KafkaClientError
            Something could not be read (the round did nothing).
        """
        committed = self._committed()
        internal = self._internal_partitions()
        ends = self._log_ends([*internal, *((self._changelog, p) for p in self._partitions)])
        observed = Observation(
            committed=committed,
            internal=internal,
            ends={tp: ends[tp] for tp in internal if tp in ends},
            changelog_ends={p: ends[(self._changelog, p)] for p in self._partitions},
        )
        self._track_stuck(committed, observed.ends)
        completed = self._chain.observe(observed, self._is_drained)
        self._note_wait(completed is not None)
        return completed

    def _committed(self) -> dict[tuple[str, int], int]:
        """The group's stable committed offsets; transient errors (a coordinator loading or
        moving) are retried within the timeout."""
        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                return self._read_committed()
            except TimeoutError as exc:  # a future's result() not answered in time
                if time.monotonic() >= deadline:
                    raise KafkaClientError(
                        f"cannot read the committed offsets of the leader "
                        f"{self.application_id!r}: no answer within {self._timeout_s:g} s; "
                        "check kafka.bootstrap.servers"
                    ) from exc
            except KafkaException as exc:
                error = kafka_error_of(exc)
                transient = error is not None and (
                    is_transient(error) or error.code() in _COORDINATOR_ERRORS
                )
                if not transient or time.monotonic() >= deadline:
                    raise client_error(
                        exc,
                        f"cannot read the committed offsets of the leader {self.application_id!r}",
                    ) from exc
            if self._stop.wait(0.1):
                raise KafkaClientError(f"the progress of leader {self.application_id!r} stopped")

    def _read_committed(self) -> dict[tuple[str, int], int]:
        # confluent-kafka 2.16 crashes the process (SIGSEGV) listing all the offsets of a
        # group that does not exist; a group that has never committed has none anyway.
        described = self._admin.describe_consumer_groups(
            [self.application_id], request_timeout=self._timeout_s
        )[self.application_id].result(timeout=self._timeout_s)
        if described.state == ConsumerGroupState.DEAD:
            return {}
        futures = self._admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(self.application_id)],
            require_stable=True,
            request_timeout=self._timeout_s,
        )
        result = futures[self.application_id].result(timeout=self._timeout_s)
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in result.topic_partitions or ()
            if tp.error is None and tp.offset >= 0
        }

    def _internal_partitions(self) -> list[tuple[str, int]]:
        try:
            metadata = self._admin.list_topics(timeout=self._timeout_s)
        except KafkaException as exc:
            raise client_error(
                exc, f"cannot list the cluster's topics for the leader {self.application_id!r}"
            ) from exc
        counts = {
            name: len(info.partitions)
            for name, info in metadata.topics.items()
            if info.error is None and info.partitions
        }
        names: set[str] = set()
        if self._described is not None:
            for name in self._described:
                prefixed = f"{self.application_id}-{name}"
                if prefixed in counts:
                    names.add(prefixed)
                elif name in counts:
                    names.add(name)
                else:
                    raise KafkaClientError(
                        f"internal topic {name!r} of the leader's topology (Kafka names it "
                        f"{prefixed!r}) does not exist; is the app running this topology?"
                    )
        elif self._named is not None:
            for name in self._named:
                if name not in counts:
                    raise KafkaClientError(
                        f"upstream topic {name!r} of the leader {self.application_id!r} does "
                        "not exist; check leaderUpstreamTopics"
                    )
                names.add(name)
        else:
            names = {n for n in counts if internal_topic_of(self.application_id, n)}
        self._internal_names = names
        return [(name, p) for name in sorted(names) for p in range(counts[name])]

    def _log_ends(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        if not partitions:
            return {}
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        request = {TopicPartition(t, p): latest for t, p in partitions}
        try:
            futures = self._admin.list_offsets(
                request,
                isolation_level=IsolationLevel.READ_UNCOMMITTED,
                request_timeout=self._timeout_s,
            )
            return {
                (tp.topic, tp.partition): future.result(timeout=self._timeout_s).offset
                for tp, future in futures.items()
            }
        except KafkaException as exc:
            raise client_error(
                exc, f"cannot read the log end offsets of the leader {self.application_id!r}"
            ) from exc
        except TimeoutError as exc:
            raise KafkaClientError(
                f"cannot read the log end offsets of the leader {self.application_id!r}: no "
                f"answer within {self._timeout_s:g} s"
            ) from exc

    # -- partitions whose committed offset stops short of the log end ----------------------
    def _track_stuck(
        self, committed: Mapping[tuple[str, int], int], ends: Mapping[tuple[str, int], int]
    ) -> None:
        for tp, end in ends.items():
            have = committed.get(tp, 0)
            if have >= end:
                self._stuck.pop(tp, None)
                continue
            before = self._stuck.get(tp)
            if before is None or before[0] != have:
                self._stuck[tp] = (have, time.monotonic())

    def _is_drained(self, tp: tuple[str, int], start: int, end: int) -> bool:
        """Whether ``[start, end)`` of ``tp`` holds no committed record: asked only of a
        partition whose committed offset has stood still for ``probe_after_s`` (an idle one,
        whose last transaction's marker lies past it); answered once per range."""
        if (tp, start, end) in self._drained:
            return True
        stuck = self._stuck.get(tp)
        if stuck is None or stuck[0] != start or time.monotonic() - stuck[1] < self._probe_after_s:
            return False
        if self._probe is None:
            self._probe = clients.consumer(
                self._bootstrap,
                self._config,
                group=f"spark-statestore-leader-{self.application_id}",
                what=f"internal topic {tp[0]!r} of the leader {self.application_id!r}",
                # An offset already deleted (Kafka Streams purges what it has committed)
                # is an error here, not a reason to read from elsewhere.
                defaults={"auto.offset.reset": "error"},
                # Polled only while it probes: idle, its lines would pile up in its queue.
                quiet=True,
            )
        probe = self._probe
        probe.assign([TopicPartition(tp[0], tp[1], start)])
        deadline = time.monotonic() + _PROBE_S
        try:
            while time.monotonic() < deadline:
                for message in probe.consume(64, timeout=0.05):
                    error = message.error()
                    if error is not None and error.code() != KafkaError._PARTITION_EOF:
                        return False
                    if error is None and message.offset() < end:
                        return False  # a record the group has not processed yet
                (position,) = probe.position([TopicPartition(tp[0], tp[1])])
                if position.offset >= end:
                    self._drained.add((tp, start, end))
                    return True
            return False
        except KafkaException as exc:
            raise client_error(exc, f"cannot read {tp[0]}-{tp[1]}") from exc
        finally:
            with contextlib.suppress(KafkaException):
                probe.unassign()

    def _note_wait(self, completed: bool) -> None:
        waiting = self._chain.waiting_on
        now = time.monotonic()
        if completed or waiting is None:
            self._started_waiting = None
            self._set_note(None)
            return
        if self._started_waiting is None:
            self._started_waiting = now
        if now - self._started_waiting < _SLOW_NOTE_S:
            self._set_note(None)
        else:
            (topic, partition), end, have = waiting
            self._set_note(
                f"the leader {self.application_id!r} has not committed {topic}-{partition} "
                f"up to {end} for {now - self._started_waiting:.0f} s (committed: "
                f"{'none' if have is None else have}); reads bounded by its input offsets "
                "wait for it"
            )

    def _set_note(self, note: str | None) -> None:
        with self._lock:
            self._note = note
