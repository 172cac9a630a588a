"""What the sink's commit protocol hands a changelog publisher and gets back: the changes
of a batch (rows, or columns), the last batch a changelog holds, a batch to publish from its
staged files and where its records went; and the publisher's protocol itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from spark_statestore.position import Position

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_statestore.sink.staging import StagedFile

__all__ = [
    "Change",
    "ChangeChunk",
    "ChangeChunks",
    "ChangelogPublisher",
    "ChangelogRow",
    "PublishedBatch",
    "StagedBatch",
    "StagedPublication",
]


Change = tuple[bytes, "bytes | None", "Position | None", "int | None", int]
"""A change as published: key, value (None: delete), position, timestamp (epoch ms, > 0) and
its changelog partition (Kafka's murmur2 partition of the key).

The timestamp is never 0: librdkafka's producer reads 0 as "stamp it now", so a record
produced with 0 would carry another timestamp than the leader's envelope."""


@dataclass(frozen=True, slots=True)
class ChangeChunk:
    """Changes in columns, all carrying one position: row ``i`` is the :data:`Change`
    ``(keys[i], values[i], position, timestamps[i], partitions[i])``."""

    keys: list[bytes]
    values: list[bytes | None]
    timestamps: list[int]
    partitions: list[int]
    position: Position | None


class ChangeChunks:
    """A batch's changes as :class:`ChangeChunk` columns, read once.

    A publisher that takes columns reads :meth:`chunks` (no Python object per change); one
    that takes changes one by one iterates, getting :data:`Change` tuples.
    """

    def __init__(self, chunks: Iterator[ChangeChunk]) -> None:
        self._chunks = chunks

    def chunks(self) -> Iterator[ChangeChunk]:
        """The chunks, in order (the same iterator as :meth:`__iter__` consumes)."""
        return self._chunks

    def __iter__(self) -> Iterator[Change]:
        for chunk in self._chunks:
            position = chunk.position
            for key, value, stamp, partition in zip(
                chunk.keys, chunk.values, chunk.timestamps, chunk.partitions, strict=True
            ):
                yield key, value, position, stamp, partition


ChangelogRow = tuple[int, int, bytes, "bytes | None", "Position | None", int]
"""A committed changelog record as read back: partition, offset, key, value, position, ts."""


@dataclass(frozen=True, slots=True)
class PublishedBatch:
    """The last batch a store's changelog holds (from its progress record)."""

    query_id: str
    batch_id: int
    end_offsets: Mapping[int, int]
    """``{partition: offset after the batch's last record}`` for the partitions it wrote."""


class ChangelogPublisher(Protocol):
    """The changelog side of a commit (implemented with Kafka transactions in
    ``spark_statestore.connectors.kafka``).

    Two optional methods let a publisher publish a batch while its tasks stage it (the
    driver's store host does): ``publish_staged(staging, batch: StagedBatch) ->
    StagedPublication`` publishes a batch's staged files (else :func:`publish_staged_changes`
    does, through :meth:`publish`), and ``expect_batch(store_id, query_id, batch_id,
    position, budget_bytes)``, called after each commit, names the batch that comes next."""

    @property
    def topic(self) -> str:
        """The changelog topic."""
        ...

    def partition_count(self) -> int:
        """The changelog's partition count."""
        ...

    def published_batch(self, store_id: str) -> PublishedBatch | None:
        """The last batch published for this store, or None."""
        ...

    def publish(
        self,
        changes: Iterable[Change],
        *,
        store_id: str,
        query_id: str,
        batch_id: int,
        source_offsets: Any,
        position: Position | None = None,
    ) -> dict[int, int]:
        """Publish ``changes`` and the batch's progress (with ``position``, the one its
        records carry) in one transaction; returns the end offsets (last record + 1) of the
        partitions written. ``changes`` may be :class:`ChangeChunks`, which a publisher may
        read in columns."""
        ...

    def read(self, starts: Mapping[int, int], ends: Mapping[int, int]) -> Iterator[ChangelogRow]:
        """The committed records in ``[starts[p], ends[p])``, in offset order per partition."""
        ...


@dataclass(frozen=True, slots=True)
class StagedBatch:
    """A batch to publish from its staged files (what :meth:`ChangelogPublisher.publish_staged`
    takes): the files in commit order, complete mode's tombstones and the position header."""

    store_id: str
    query_id: str
    batch_id: int
    files: Sequence[StagedFile]
    source_offsets: Any
    header: Position | None
    """The position every record carries (the store's merged with the batch's), or None."""
    absent: Sequence[bytes] = ()
    """Complete mode: the committed keys the batch lacks, published as tombstones first."""


@dataclass(frozen=True, slots=True)
class StagedPublication:
    """Where a batch's changes went in the changelog: what the store commit needs to name
    each record in its key's envelope."""

    ends: Mapping[int, int]
    """``{partition: offset after the batch's last record}`` of the partitions written."""
    stamp_ms: int
    """The timestamp the records of rows without one (or with 0) carry."""
    absent: tuple[Sequence[int], Sequence[int]]
    """Partitions and offsets of the tombstones, in :attr:`StagedBatch.absent` order."""
    files: Sequence[tuple[Sequence[int] | pa.Array, Sequence[int] | pa.Array]]
    """Per staged file (commit order): each row's partition and offset, in row order."""
