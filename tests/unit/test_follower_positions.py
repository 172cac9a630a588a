"""Where a follower's position comes from, with an in-memory changelog and leader: never early.

The follower engine against fakes of its two protocols (:class:`ChangelogSource`,
:class:`LeaderProgress`): a bounded query is answered only under a position that holds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from spark_statestore.errors import PositionUnavailableError
from spark_statestore.follower import Follower, LeaderProgress, PollResult, Row
from spark_statestore.position import Position, PositionBound
from spark_statestore.query import FailureReason, KeyQuery, StateQueryRequest
from spark_statestore.store import Role, Store

TOPIC = "app-store-changelog"


class FakeChangelog:
    """A changelog in memory: ``feed`` queues one poll's records."""

    def __init__(self, partitions: int = 2, batches: Any = None) -> None:
        self.topic = TOPIC
        self._partitions = partitions
        self._batches = batches
        self._polls: list[PollResult] = []
        self.ends = {p: 0 for p in range(partitions)}

    def partition_count(self) -> int:
        return self._partitions

    def end_offsets(self, partitions: Sequence[int]) -> dict[int, int]:
        return {p: self.ends[p] for p in partitions}

    def versioned_store_retention_ms(self) -> int | None:
        return None

    def batch_progress(self) -> Any:
        if isinstance(self._batches, BaseException):
            raise self._batches
        return self._batches

    def assign(self, starts: Mapping[int, int]) -> None:
        pass

    def feed(self, rows: list[Row], position: Position | None = None) -> None:
        positions = {}
        for _, _, partition, offset, _ in rows:
            positions[partition] = max(positions.get(partition, 0), offset + 1)
            self.ends[partition] = max(self.ends[partition], offset + 1)
        self._polls.append(PollResult(rows, positions, position))

    def poll(self, max_records: int, timeout_s: float, *, fill: bool = True) -> PollResult:
        return self._polls.pop(0) if self._polls else PollResult([], {})

    def close(self) -> None:
        pass


class FakeProgress:
    """A leader whose samples the test hands out one by one."""

    def __init__(self) -> None:
        self.samples: list[tuple[Position, dict[int, int]]] = []
        self.why: str | None = None

    def sample(self) -> tuple[Position, dict[int, int]] | None:
        return self.samples.pop(0) if self.samples else None

    def note(self) -> str | None:
        return self.why


def bounded_get(store: Store, key: bytes, bound: Position, partition: int) -> Any:
    request = (
        StateQueryRequest.in_store(store.name)
        .with_query(KeyQuery.with_key(key))
        .with_partitions([partition])
        .with_position_bound(PositionBound.at(bound))
    )
    return store.query(request).partition_results[partition]


def step_until(follower: Follower, done: Callable[[], bool], steps: int = 50) -> None:
    import spark_statestore.follower.engine as engine

    for _ in range(steps):
        engine_interval, engine.LEADER_SAMPLE_INTERVAL_S = engine.LEADER_SAMPLE_INTERVAL_S, 0.0
        try:
            follower.step()
        finally:
            engine.LEADER_SAMPLE_INTERVAL_S = engine_interval
        if done():
            return


def test_a_sink_changelog_follower_refuses_bounds_before_its_first_batch(make_store) -> None:
    """It answered success (value None, position {}) for a partition the bound did not name,
    under Kafka Streams' per-partition rule, until the first batch made it store-wide."""
    store = make_store(role=Role.FOLLOWER, topic=TOPIC, partitions=2, store_name="store")
    follower = Follower(store, FakeChangelog(batches=FakeProgress()))
    follower.start_restore()
    result = bounded_get(store, b"k", Position.from_map({"orders": {1: 5}}), 0)
    assert result.failure_reason is FailureReason.NOT_UP_TO_BOUND


def test_a_leader_followers_position_holds_for_the_whole_store(make_store) -> None:
    """Behind a repartition topic, store partition 0 may hold input partition 1's effect."""
    store = make_store(role=Role.FOLLOWER, topic=TOPIC, partitions=2, store_name="store")
    progress = FakeProgress()
    source = FakeChangelog()
    follower = Follower(store, source, leader=progress)
    follower.start_restore()
    bound = Position.from_map({"orders": {1: 5}})
    assert bounded_get(store, b"k", bound, 0).failure_reason is FailureReason.NOT_UP_TO_BOUND

    # A sample for orders@1:5 whose changelog ends the store has not reached yet.
    progress.samples.append((bound, {0: 3, 1: 0}))
    source.feed([(b"k", b"v1", 0, 0, -1)])
    step_until(follower, lambda: not progress.samples)
    assert follower.store.metadata.changelog_offsets.get(0) == 1
    assert bounded_get(store, b"k", bound, 0).failure_reason is FailureReason.NOT_UP_TO_BOUND
    source.feed([(b"k", b"v2", 0, 2, -1)])
    step_until(follower, lambda: store.metadata.position == bound)
    result = bounded_get(store, b"k", bound, 0)
    assert result.is_success and result.result == b"v2"


def test_pending_samples_are_granted_in_order_as_the_store_reaches_them(make_store) -> None:
    store = make_store(role=Role.FOLLOWER, topic=TOPIC, partitions=1, store_name="store")
    progress = FakeProgress()
    source = FakeChangelog(partitions=1)
    follower = Follower(store, source, leader=progress)
    follower.start_restore()
    first = Position.from_map({"orders": {0: 1}})
    second = Position.from_map({"orders": {0: 2}})
    progress.samples += [(first, {0: 1}), (second, {0: 2})]
    step_until(follower, lambda: not progress.samples)
    assert store.metadata.position == Position.empty()
    source.feed([(b"a", b"1", 0, 0, -1)])
    step_until(follower, lambda: store.metadata.position == first)
    assert store.metadata.position == first
    source.feed([(b"b", b"2", 0, 1, -1)])
    step_until(follower, lambda: store.metadata.position == second)
    assert store.metadata.position == second


def test_a_follower_that_cannot_tell_the_rule_merges_no_header_and_says_why(make_store) -> None:
    """The progress topic cannot be described (an ACL, say): the follower fell back to the
    per-partition header rule for good, silently; a sink's partial batch granted early."""
    store = make_store(role=Role.FOLLOWER, topic=TOPIC, partitions=2, store_name="store")
    why = PositionUnavailableError("cannot tell whether changelog is a sink's (ACL)")
    source = FakeChangelog(batches=why)
    follower = Follower(store, source)
    follower.start_restore()
    header = Position.from_map({"orders": {0: 7}})
    source.feed([(b"k", b"v", 0, 0, -1)], header)
    step_until(follower, lambda: store.metadata.changelog_offsets.get(0) == 1)
    assert store.metadata.changelog_offsets.get(0) == 1
    assert store.metadata.position == Position.empty()
    result = bounded_get(store, b"k", header, 0)
    assert result.failure_reason is FailureReason.NOT_UP_TO_BOUND
    assert "cannot tell whether changelog is a sink's (ACL)" in (result.failure_message or "")

    # Once it can tell (not a sink's changelog), headers count again.
    source._batches = None
    follower._decide_at = float("-inf")
    source.feed([(b"k", b"w", 0, 1, -1)], Position.from_map({"orders": {0: 8}}))
    step_until(follower, lambda: not store.metadata.position.is_empty())
    assert store.metadata.position == Position.from_map({"orders": {0: 8}})
    assert store.position_note is None


def test_the_leaders_note_reaches_not_up_to_bound_answers(make_store) -> None:
    store = make_store(role=Role.FOLLOWER, topic=TOPIC, partitions=1, store_name="store")
    progress = FakeProgress()
    progress.why = "cannot read the committed offsets of the leader 'app': not authorized"
    follower = Follower(store, FakeChangelog(partitions=1), leader=progress)
    follower.start_restore()
    step_until(follower, lambda: store.position_note is not None)
    result = bounded_get(store, b"k", Position.from_map({"orders": {0: 0}}), 0)
    assert result.failure_reason is FailureReason.NOT_UP_TO_BOUND
    assert "not authorized" in (result.failure_message or "")


def test_fakes_implement_the_protocols() -> None:
    progress: LeaderProgress = FakeProgress()
    assert progress.sample() is None
