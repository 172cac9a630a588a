"""What a sink's commits did, counted where the work happens (:class:`SinkStats`): one update
per batch, never per record.

The commit protocol (:func:`~spark_statestore.sink.commit.commit_batch`) counts each batch's
outcome, duration and staged rows and bytes, and each failed commit by the class of its error;
the changelog publisher counts the records it published and times its Kafka transaction.
A long-lived committer (the sink's store server) keeps one :class:`SinkStats` across its
batches; its metrics (:class:`~spark_statestore.metrics.sink_metrics.SinkMetrics`) read the
counters when Prometheus scrapes and observe the durations through the observers.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spark_statestore.sink.staging import StagedFile

__all__ = ["CommitReport", "PublishReport", "SinkCounters", "SinkStats"]


@dataclass(frozen=True, slots=True)
class CommitReport:
    """One batch's commit as :func:`~spark_statestore.sink.commit.commit_batch` ran it.

    Parameters
    ----------
    outcome
        The :class:`~spark_statestore.sink.commit.CommitOutcome`'s value (``committed``,
        ``rolled_forward``, ``skipped``).
    seconds
        The whole commit: the replay check, publishing (with a changelog) and the store commit.
    staged_rows, staged_bytes
        The rows and file bytes the batch's tasks staged; 0 unless the staged files were
        applied (outcome ``committed``).
    """

    outcome: str
    seconds: float
    staged_rows: int = 0
    staged_bytes: int = 0

    @classmethod
    def of(cls, outcome: str, seconds: float, applied: Iterable[StagedFile]) -> CommitReport:
        """The report of a commit that applied the staged files ``applied``."""
        files = list(applied)
        return cls(outcome, seconds, sum(f.rows for f in files), sum(f.size for f in files))


@dataclass(frozen=True, slots=True)
class PublishReport:
    """One batch's Kafka transaction as the changelog writer ran it.

    Parameters
    ----------
    records
        Changelog records produced (the batch's changes; not its progress record).
    produce_seconds
        From the transaction's begin until every record (and the progress record) was
        acknowledged: producing, including reading the staged rows, and flushing.
    commit_seconds
        Committing the transaction (Kafka's producer metric ``txn-commit-time``).
    """

    records: int
    produce_seconds: float
    commit_seconds: float


@dataclass(frozen=True, slots=True)
class SinkCounters:
    """The totals of a :class:`SinkStats` at one instant."""

    batches: dict[str, int]
    """Batches by outcome (``committed``, ``rolled_forward``, ``skipped``)."""
    failures: dict[str, int]
    """Failed commits by the class name of their error."""
    staged_rows: int
    staged_bytes: int
    records_published: int
    last_commit_at: float | None = None
    """When a batch was last committed, seconds since the epoch (None: not yet)."""


class SinkStats:
    """Counters of one committer's batches (thread-safe), and observers of each batch's
    durations (for histograms).

    Attributes
    ----------
    commit_observers
        Called with each :class:`CommitReport` (a commit that succeeded).
    publish_observers
        Called with each :class:`PublishReport` (a Kafka transaction that committed).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._batches: Counter[str] = Counter()
        self._failures: Counter[str] = Counter()
        self._staged_rows = 0
        self._staged_bytes = 0
        self._records_published = 0
        self._last_commit_at: float | None = None
        self.commit_observers: list[Callable[[CommitReport], None]] = []
        self.publish_observers: list[Callable[[PublishReport], None]] = []

    def committed(self, report: CommitReport) -> None:
        """Count a batch's commit (called by the commit protocol once per batch)."""
        with self._lock:
            self._last_commit_at = time.time()
            self._batches[report.outcome] += 1
            self._staged_rows += report.staged_rows
            self._staged_bytes += report.staged_bytes
        for observe in self.commit_observers:
            observe(report)

    def failed(self, error: BaseException) -> None:
        """Count a commit that raised ``error`` (by its class: bounded, and what an alert
        tells apart: a fenced producer, a transaction timeout, a missing staged file)."""
        with self._lock:
            self._failures[type(error).__name__] += 1

    def published(self, report: PublishReport) -> None:
        """Count a batch's committed Kafka transaction (called by the changelog writer)."""
        with self._lock:
            self._records_published += report.records
        for observe in self.publish_observers:
            observe(report)

    def counters(self) -> SinkCounters:
        """The totals now."""
        with self._lock:
            return SinkCounters(
                batches=dict(self._batches),
                failures=dict(self._failures),
                staged_rows=self._staged_rows,
                staged_bytes=self._staged_bytes,
                records_published=self._records_published,
                last_commit_at=self._last_commit_at,
            )
