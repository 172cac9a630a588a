"""The changelog follower: continuous restore of a changelog into a read-only store (KIP-813).

A :class:`Follower` reads a changelog through a :class:`ChangelogSource` (the Kafka binding
lives in ``spark_statestore.connectors.kafka``) and applies it to a follower store in chunks.
Each chunk is one atomic store commit of its records, the changelog offsets it reached and the
merge of the records' ``c``-header positions, so the store is consistent with its recorded
offsets at every instant and a restart resumes exactly where the last commit ended.

The follower starts RESTORING and becomes RUNNING once it has reached the end offsets the
changelog had when it started; it never stops listening after that. It has no producer: it
cannot write anywhere but its own store.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any

from spark_statestore.changelog.columns import RecordColumns
from spark_statestore.errors import FollowerError, PositionUnavailableError, StateStoreError
from spark_statestore.follower.versioned import check_versioned
from spark_statestore.health import Health, HealthState
from spark_statestore.position import Position
from spark_statestore.query import LagInfo

if TYPE_CHECKING:
    from spark_statestore.follower.protocols import ChangelogSource, LeaderProgress, PollResult
    from spark_statestore.store import Store

__all__ = ["LEADER_SAMPLE_INTERVAL_S", "MAX_PENDING_SAMPLES", "Follower", "FollowerState"]

_log = logging.getLogger(__name__)

LEADER_SAMPLE_INTERVAL_S = 0.05
"""How often a follower with a ``leader`` asks it how far it has committed (and, once
RUNNING, the longest a poll waits, so a completed sample is granted without waiting for the
next record)."""
MAX_PENDING_SAMPLES = 16
"""Samples a follower keeps while it has not reached their log ends."""
UNDECIDED_RETRY_S = 1.0
"""How often a follower asks again whether its changelog is a sink's, while it cannot tell."""


class FollowerState(str, Enum):
    """Lifecycle of a :class:`Follower`."""

    CREATED = "created"
    RESTORING = "restoring"
    RUNNING = "running"
    STOPPED = "stopped"
    FAILED = "failed"


_HEALTH_STATES = {
    FollowerState.CREATED: HealthState.CREATED,
    FollowerState.RESTORING: HealthState.RESTORING,
    FollowerState.RUNNING: HealthState.RUNNING,
    FollowerState.STOPPED: HealthState.STOPPED,
    FollowerState.FAILED: HealthState.FAILED,
}


class Follower:
    """Applies a changelog to a follower store, chunk by chunk, forever (until stopped).

    Parameters
    ----------
    store
        A store opened with a follower :class:`~spark_statestore.store.StoreSpec` of the
        source's topic and partition count.
    source
        The changelog to read.
    partitions
        The partitions to follow; None follows the ones the store holds (all of them, or
        the subset recorded in its manifest). Anything else must equal the store's subset.
    chunk_records
        Records per store commit.
    poll_timeout_s
        How long one poll waits for records. While RESTORING a poll waits for a whole chunk
        (large atomic commits); once RUNNING it returns with the first records that arrive,
        so a change is in the store as soon as the changelog has it.
    leader
        For a changelog whose leader runs exactly-once: where the store's position comes
        from. A sample ``(position, log_ends)`` becomes part of the store's position once the
        store has applied every partition up to ``log_ends``; the leader's progress completes
        a sample only when every change its input offsets caused is below those ends (through
        the leader's internal topics: :mod:`spark_statestore.follower.leader`). The position
        then holds for the whole store (the store is marked store-wide at the start). Only
        for a follower of every partition.

    A sink's changelog (``source.batch_progress()`` is not None, and no ``leader``) gets its
    position the same way, from its batches: each of its records carries its whole batch's
    position, so the store takes a batch's position only once it has applied the batch up
    to its end offsets in every partition it holds, never from the headers of part of it.
    """

    def __init__(
        self,
        store: Store,
        source: ChangelogSource,
        *,
        partitions: Sequence[int] | None = None,
        chunk_records: int = 50_000,
        poll_timeout_s: float = 0.5,
        leader: LeaderProgress | None = None,
    ) -> None:
        from spark_statestore.store import Role

        manifest = store.manifest
        if store.role is not Role.FOLLOWER or manifest.changelog_topic != source.topic:
            raise FollowerError(
                f"store {store.path} must be opened as a follower of {source.topic!r} "
                f"(it is a {manifest.role.value} store of {manifest.changelog_topic!r})"
            )
        count = source.partition_count()
        if count != manifest.partitions:
            raise FollowerError(
                f"changelog {source.topic!r} has {count} partitions but store {store.path} "
                f"was built for {manifest.partitions}; delete the store and follow again"
            )
        check_versioned(store, source)
        held = list(manifest.holds)
        chosen = held if partitions is None else sorted(set(partitions))
        if chosen != held:
            raise FollowerError(
                f"store {store.path} holds partitions {held} of {source.topic!r}, it cannot "
                f"follow partitions {chosen}: open a store created for that subset (another "
                "path)"
            )
        if (
            isinstance(chunk_records, bool)
            or not isinstance(chunk_records, int)
            or (chunk_records < 1)
        ):
            raise FollowerError(f"chunk_records must be an int >= 1, got {chunk_records!r}")
        if leader is not None and len(held) != manifest.partitions:
            raise FollowerError(
                f"store {store.path} holds partitions {held} of {source.topic!r}: a position "
                "from the leader's committed offsets needs a follower of every partition"
            )
        self.store = store
        self.source = source
        self.partitions = tuple(chosen)
        self.key_prefix = manifest.key_prefix
        self.chunk_records = chunk_records
        self.poll_timeout_s = poll_timeout_s
        self._state = FollowerState.CREATED
        self.state_since = time.time()
        """When the follower entered its state, seconds since the epoch."""
        self.restore_targets: dict[int, int] = {}
        self.end_offsets: dict[int, int] = {}
        self.records_applied = 0
        self.records_skipped = 0
        self.records_expired = 0
        self.records_without_position = 0
        self.error: BaseException | None = None
        self.commit_observers: list[Callable[[float, int], None]] = []
        """Called after each store commit with its seconds and records (metrics)."""
        self.last_commit_at: float | None = None
        """When this follower last committed to its store, seconds since the epoch."""
        self._applied = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._leader = leader
        # A sink's changelog: positions from whole batches, not from the records' headers.
        self._batches: LeaderProgress | None = None
        # Why it is not known yet whether the changelog is a sink's (then no header counts).
        self._undecided: str | None = None
        self._decide_at = float("-inf")
        if leader is None:
            self._decide_batches()
        self._pending: list[tuple[Position, dict[int, int]]] = []
        self._sampled_at = float("-inf")

    @property
    def state(self) -> FollowerState:
        """The follower's state now."""
        return self._state

    @state.setter
    def state(self, state: FollowerState) -> None:
        if state is not self._state:
            self._state = state
            self.state_since = time.time()

    def health(self) -> Health:
        """The follower's health now (a ``health`` view, ``/health``, ``status``): its state,
        and why when not plainly RUNNING (the error of a FAILED one in one line, the records a
        RESTORING one still has to apply)."""
        state = self._state
        details: dict[str, Any] = {"records_applied": self.records_applied}
        if self.last_commit_at is not None:
            details["last_commit_at"] = self.last_commit_at
        reason: str | None = None
        if state is FollowerState.FAILED:
            error = self.error
            reason = " ".join(str(error).split()) if error is not None else "failed"
            if error is not None and not isinstance(error, StateStoreError):
                reason = f"{type(error).__name__}: {reason}"
        elif state is FollowerState.RESTORING:
            remaining = self.restore_remaining()
            details["restore_remaining_records"] = remaining
            reason = (
                f"restoring {self.source.topic}: {remaining:,} record(s) to go to the end "
                f"offsets {dict(sorted(self.restore_targets.items()))}"
            )
        elif state is FollowerState.STOPPED:
            reason = "the follower was stopped"
        return Health(_HEALTH_STATES[state], reason, self.state_since, details)

    def restore_remaining(self) -> int:
        """Records still to apply to reach the restore's targets (0 unless RESTORING)."""
        if self._state is not FollowerState.RESTORING:
            return 0
        applied = self.store.metadata.changelog_offsets
        return sum(
            max(0, target - applied.get(partition, 0))
            for partition, target in self.restore_targets.items()
        )

    # -- driving --------------------------------------------------------------------------
    def start_restore(self) -> None:
        """Assign the source from the store's offsets and note the end offsets to reach."""
        if self.state is not FollowerState.CREATED:
            return
        offsets = self.store.metadata.changelog_offsets
        starts = {p: offsets.get(p, 0) for p in self.partitions}
        self.restore_targets = self.source.end_offsets(self.partitions)
        self.end_offsets = dict(self.restore_targets)
        self.source.assign(starts)
        self._mark_store_wide()
        self.state = FollowerState.RESTORING
        _log.info(
            "following %s into %s from %s up to %s",
            self.source.topic,
            self.store.path,
            starts,
            self.restore_targets,
        )
        self._check_caught_up(offsets)

    def step(self) -> int:
        """Poll one chunk and commit it; returns the number of records applied."""
        if self.state is FollowerState.CREATED:
            self.start_restore()
        if self.state not in (FollowerState.RESTORING, FollowerState.RUNNING):
            raise FollowerError(f"follower of {self.source.topic!r} is {self.state.value}")
        if self._undecided is not None and time.monotonic() >= self._decide_at:
            self._decide_batches()
            self._mark_store_wide()
        waiting = self.poll_timeout_s
        if self.state is FollowerState.RUNNING and (self._leader or self._batches) is not None:
            waiting = min(waiting, LEADER_SAMPLE_INTERVAL_S)
        polled = self.source.poll(
            self.chunk_records, waiting, fill=self.state is FollowerState.RESTORING
        )
        current = self.store.metadata.changelog_offsets
        moved = {
            p: o
            for p, o in polled.positions.items()
            if p in self.partitions and o > current.get(p, 0)
        }
        derived = self._leader_position({**current, **moved})
        if not polled.rows and not moved and derived is None:
            return 0
        return self._commit(polled, moved, derived)

    def _decide_batches(self) -> None:
        """Ask the source whether the changelog is a sink's; until it can say, no position
        header counts (a sink's batch spans partitions, so a header of part of it would grant
        the whole batch early) and bounded reads wait, naming why."""
        try:
            self._batches = self.source.batch_progress()
        except PositionUnavailableError as exc:
            self._undecided = str(exc)
            self._decide_at = time.monotonic() + UNDECIDED_RETRY_S
            self.store.position_note = self._undecided
            _log.warning("%s", exc)
            return
        self._undecided = None
        self.store.position_note = None

    def _mark_store_wide(self) -> None:
        """A leader's group or a sink's batches give positions for the whole store: any
        partition may hold the effect of any input partition (a repartition, a batch), so a
        bound applies whole to every partition from the start, before any position is
        granted (Kafka Streams' per-partition rule would answer partitions the bound does not
        name at once)."""
        if (self._leader is not None or self._batches is not None) and not (
            self.store.metadata.store_wide
        ):
            with self.store.begin() as txn:
                txn.mark_store_wide()
                txn.commit()

    def _leader_position(self, applied: Mapping[int, int]) -> Position | None:
        """The newest sampled position whose log ends ``applied`` has reached (merged with
        the older ones it supersedes); None before that, when the store already has it, or
        without a leader.

        The progress is asked at most every :data:`LEADER_SAMPLE_INTERVAL_S`; samples wait
        here until the store reaches their ends (at most :data:`MAX_PENDING_SAMPLES`: when
        the follower lags, the oldest and the newest are kept, the ones between dropped).
        """
        progress = self._leader or self._batches
        if progress is None:
            return None
        now = time.monotonic()
        if now - self._sampled_at >= LEADER_SAMPLE_INTERVAL_S:
            self._sampled_at = now
            sampled = progress.sample()
            self.store.position_note = progress.note()
            if sampled is not None and (not self._pending or self._pending[-1] != sampled):
                self._pending.append(sampled)
                if len(self._pending) > MAX_PENDING_SAMPLES:
                    del self._pending[-2]
        reached = [
            i
            for i, (_, ends) in enumerate(self._pending)
            # A subset follower (only a sink's changelog) needs its own partitions of a batch.
            if all(applied.get(p, 0) >= end for p, end in ends.items() if p in self.partitions)
        ]
        if not reached:
            return None
        granted = Position.empty()
        for position, _ in self._pending[: reached[-1] + 1]:
            granted = granted.merge(position)
        del self._pending[: reached[-1] + 1]
        current = self.store.metadata.position
        return None if current.merge(granted) == current else granted

    def _commit(
        self, polled: PollResult, moved: Mapping[int, int], derived: Position | None = None
    ) -> int:
        rows = polled.rows
        headers = polled.headers
        prefix = self.key_prefix
        if prefix is not None:
            # A subset store has still read the records it does not keep: the chunk's
            # position counts for it (it is as fresh for its keys as the changelog it read).
            if isinstance(rows, RecordColumns):
                rows, selected = rows.with_key_prefix(prefix)
            else:
                selected = [i for i, row in enumerate(rows) if row[0].startswith(prefix)]
                rows = [rows[i] for i in selected]
            if headers:
                renumbered = {old: new for new, old in enumerate(selected)}
                headers = {renumbered[i]: h for i, h in headers.items() if i in renumbered}
        kept = len(rows)
        began = time.monotonic()
        with self.store.begin() as txn:
            if self.store.manifest.versioned:
                kept = txn.put_versions(rows.to_rows() if isinstance(rows, RecordColumns) else rows)
            elif isinstance(rows, RecordColumns):
                txn.put_records(rows, headers)
            else:
                txn.put_all(rows, headers)
            if self._batches is not None:
                txn.mark_store_wide()  # its positions hold for every partition it holds
            elif polled.position is not None and self._undecided is None:
                txn.merge_position(polled.position)
            if derived is not None:
                txn.merge_position(derived)
            for partition, next_offset in moved.items():
                txn.set_changelog_offset(partition, next_offset)
            metadata = txn.commit()
        seconds = time.monotonic() - began
        self.last_commit_at = time.time()
        for observe in self.commit_observers:
            observe(seconds, len(rows))
        with self._applied:
            self.records_applied += len(rows)
            self.records_skipped += len(polled.rows) - len(rows)
            self.records_expired += len(rows) - kept
            self.records_without_position += polled.without_position + polled.skipped_positions
            self._applied.notify_all()
        self._check_caught_up(metadata.changelog_offsets)
        return len(rows)

    def _check_caught_up(self, offsets: Mapping[int, int]) -> None:
        if self.state is FollowerState.RESTORING and all(
            offsets.get(p, 0) >= target for p, target in self.restore_targets.items()
        ):
            self.state = FollowerState.RUNNING
            _log.info("follower of %s is RUNNING (restored %s)", self.source.topic, offsets)
            with self._applied:
                self._applied.notify_all()

    def refresh_end_offsets(self) -> dict[int, int]:
        """Ask the changelog for its current end offsets (for :meth:`lags`)."""
        self.end_offsets = self.source.end_offsets(self.partitions)
        return dict(self.end_offsets)

    def lags(self) -> dict[int, LagInfo]:
        """Per partition: applied offset, last known end offset, and their difference."""
        applied = self.store.metadata.changelog_offsets
        lags = {}
        for partition in self.partitions:
            current = applied.get(partition, 0)
            end = max(self.end_offsets.get(partition, 0), current)
            lags[partition] = LagInfo(current, end)
        return lags

    # -- background thread ----------------------------------------------------------------
    def start(self) -> None:
        """Run the follower on a daemon thread (idempotent).

        The restore targets are fetched before the thread starts, so :meth:`wait_running`
        right after this call waits for the real end offsets.
        """
        if self._thread is not None:
            return
        self.start_restore()
        self._thread = threading.Thread(
            target=self._run, name=f"follower-{self.source.topic}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.step()
        except BaseException as exc:  # recorded for the thread's owner, who re-raises it
            self.error = exc
            self.state = FollowerState.FAILED
            if isinstance(exc, StateStoreError):
                # An expected failure (bad input, Kafka refusing): its owner reports it in
                # one line; the traceback is for debugging only.
                _log.debug("follower of %s failed", self.source.topic, exc_info=exc)
            else:
                _log.exception("follower of %s failed", self.source.topic)
            with self._applied:
                self._applied.notify_all()

    def wait_until(self, offsets: Mapping[int, int], timeout_s: float) -> bool:
        """Wait until the store has applied ``{partition: next offset}``; False on timeout.

        Raises
        ------
        FollowerError
            If the follower failed (with its error as the cause).
        """
        return self.wait_for(
            lambda applied: all(applied.get(p, 0) >= o for p, o in offsets.items()), timeout_s
        )

    def wait_for(self, predicate: Callable[[Mapping[int, int]], bool], timeout_s: float) -> bool:
        """Wait until ``predicate(applied offsets)`` holds, re-checked after every commit.

        Returns False on timeout.

        Raises
        ------
        FollowerError
            If the follower failed (with its error as the cause).
        """

        def reached() -> bool:
            return self.error is not None or predicate(self.store.metadata.changelog_offsets)

        with self._applied:
            done = self._applied.wait_for(reached, timeout_s)
        if self.error is not None:
            raise FollowerError(f"follower of {self.source.topic!r} failed") from self.error
        return done

    def wait_running(self, timeout_s: float) -> bool:
        """Wait until the initial restore is complete; False on timeout."""
        return self.wait_until(self.restore_targets, timeout_s) if self.restore_targets else True

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the thread (if any) and close the source; the store stays open."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        self.source.close()
        if self.state is not FollowerState.FAILED:
            self.state = FollowerState.STOPPED
