"""What the follower reads through: a changelog source and a leader's progress.

The engine (:mod:`spark_statestore.follower.engine`) is written against these protocols; the
Kafka connector implements them (``spark_statestore.connectors.kafka.follower``) and the unit
tests implement them in memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from spark_statestore.changelog.columns import RecordColumns
from spark_statestore.position import Position

if TYPE_CHECKING:
    from spark_statestore.store.layout import Headers

__all__ = ["ChangelogSource", "LeaderProgress", "PollResult", "Row"]


Row = tuple[bytes, "bytes | None", int, int, int]
"""One changelog record as the store applies it: key, value (None: delete), partition,
offset, timestamp (epoch ms, -1 unknown)."""


@dataclass(frozen=True, slots=True)
class PollResult:
    """What one poll of a :class:`ChangelogSource` returned.

    Parameters
    ----------
    rows
        Committed records in offset order per partition: :data:`Row` tuples, or the same
        records in columns (:class:`~spark_statestore.changelog.columns.RecordColumns`, the
        fast path: no Python object per record).
    positions
        ``{partition: next offset}`` the source has read up to after these records; it can
        be past the last record's offset + 1 (transaction markers take offsets too).
    position
        The merge of the rows' ``c``-header positions (None when none had one).
    without_position
        Rows without a position (no ``v`` header, or a version this reader ignores).
    skipped_positions
        Rows whose malformed position headers were skipped (the source was asked to).
    headers
        ``{row index: headers}`` of the rows whose record has headers besides the ``v``/``c``
        position headers (those others, in record order): the store keeps them with the
        row (Kafka Streams 4.3 header-aware stores log their headers this way).
    """

    rows: Sequence[Row] | RecordColumns
    positions: Mapping[int, int]
    position: Position | None = None
    without_position: int = 0
    skipped_positions: int = 0
    headers: Mapping[int, Headers] = field(default_factory=dict)


class ChangelogSource(Protocol):
    """A changelog as the follower reads it (implemented by the Kafka connector)."""

    @property
    def topic(self) -> str:
        """The changelog topic."""
        ...

    def partition_count(self) -> int:
        """How many partitions the changelog has."""
        ...

    def end_offsets(self, partitions: Sequence[int]) -> dict[int, int]:
        """``{partition: next offset after the last committed record}`` (the LSO)."""
        ...

    def versioned_store_retention_ms(self) -> int | None:
        """When the changelog is a Kafka Streams versioned store's, the ``min.compaction.lag.ms``
        that says so (history retention plus a day); None for any other changelog."""
        ...

    def batch_progress(self) -> LeaderProgress | None:
        """For a changelog a sink writes in batches (each record carrying its batch's
        position, a batch spanning partitions): the latest batch's position and its end
        offsets per partition; None for any other changelog."""
        ...

    def assign(self, starts: Mapping[int, int]) -> None:
        """Start reading each partition at ``starts[partition]``."""
        ...

    def poll(self, max_records: int, timeout_s: float, *, fill: bool = True) -> PollResult:
        """Up to ``max_records`` committed records, waiting at most ``timeout_s``.

        ``fill``: wait (up to ``timeout_s``) for a whole ``max_records`` chunk, as a restore
        wants; otherwise return as soon as anything has arrived, with what has, as a caught-up
        follower wants (each change visible without waiting for more).
        """
        ...

    def close(self) -> None:
        """Release the source's resources."""
        ...


class LeaderProgress(Protocol):
    """How far a leader has committed, granted as a store position once the follower has
    applied the changelog up to given ends (implemented by the Kafka connector: an
    exactly-once Kafka Streams leader's group, a sink's batches)."""

    def sample(self) -> tuple[Position, dict[int, int]] | None:
        """``(position, log_ends)`` completed since the last call, or None: the position
        holds for a store that has applied every partition up to ``log_ends``. Never
        blocks on Kafka for long (the follower's thread calls it between polls)."""
        ...

    def note(self) -> str | None:
        """Why the leader's position may not be advancing (something that cannot be read,
        a wait that has lasted), for the store's NOT_UP_TO_BOUND answers; None if nothing."""
        ...
