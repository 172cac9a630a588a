"""A batch's staged rows as a changelog publisher produces them: columns for the producer
and each record's partition and offset (the store writes them as
:func:`~spark_statestore.store.deferred.published_columns`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from spark_statestore.sink.changes import (
    ChangeChunk,
    ChangeChunks,
    ChangelogPublisher,
    StagedBatch,
    StagedPublication,
)
from spark_statestore.store.deferred import published_stamps

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_statestore.sink.staging import StagingArea

__all__ = [
    "consecutive_offsets",
    "publish_staged_changes",
    "publishing_columns",
]


def publish_staged_changes(
    publisher: ChangelogPublisher, staging: StagingArea, batch: StagedBatch
) -> StagedPublication:
    """Publish ``batch`` through ``publisher.publish`` in one transaction, in commit order
    (the tombstones, then each file's rows), and say where each record went."""
    from spark_statestore.changelog import partitions_for_keys

    partitions = publisher.partition_count()
    absent = list(batch.absent)
    header = batch.header
    # Each key's partition is computed once (column-wise in Arrow), while publishing, and
    # reused for the envelopes.
    absent_parts = partitions_for_keys(absent, partitions)
    file_parts: list[list[list[int]]] = [[] for _ in batch.files]
    # Rows without a timestamp get the batch's commit time, chosen once, so the changelog
    # record, the leader's envelope and every follower (or a roll-forward) agree on it. So do
    # rows stamped 0: a changelog record cannot carry 0 (see Change).
    now_ms = int(time.time() * 1000)

    def chunks() -> Iterator[ChangeChunk]:
        if absent:
            count = len(absent)
            yield ChangeChunk(list(absent), [None] * count, [now_ms] * count, absent_parts, header)
        for staged, parts_of_file in zip(batch.files, file_parts, strict=True):
            for records in staging.read(staged):
                keys, values, _, _, stamps = _columns(records, now_ms)
                parts = partitions_for_keys(keys, partitions)
                parts_of_file.append(parts)
                yield ChangeChunk(keys, values, stamps, parts, header)

    ends = publisher.publish(
        ChangeChunks(chunks()),
        store_id=batch.store_id,
        query_id=batch.query_id,
        batch_id=batch.batch_id,
        source_offsets=batch.source_offsets,
        position=header,
    )
    # The sink is the changelog's only writer (fenced by its transactional id), so a
    # partition's records of this batch hold the offsets just below its end, in order.
    counts: Counter[int] = Counter(absent_parts)
    for chunks_of_file in file_parts:
        for parts in chunks_of_file:
            counts.update(parts)
    next_offset = {p: ends[p] - n for p, n in counts.items()}
    absent_offsets, next_offset = consecutive_offsets(absent_parts, next_offset)
    files: list[tuple[Sequence[int], Sequence[int]]] = []
    for chunks_of_file in file_parts:
        parts_all: list[int] = []
        offsets_all: list[int] = []
        for parts in chunks_of_file:
            offsets, next_offset = consecutive_offsets(parts, next_offset)
            parts_all += parts
            offsets_all += offsets
        files.append((parts_all, offsets_all))
    return StagedPublication(ends, now_ms, (absent_parts, absent_offsets), files)


def consecutive_offsets(
    partitions: list[int], next_offset: dict[int, int]
) -> tuple[list[int], dict[int, int]]:
    """The offsets of records written in order to ``partitions``, each partition's numbered
    on from ``next_offset``; and the next offsets after them."""
    from spark_statestore import native

    extension = native.module()
    if extension is not None:
        offsets, after = extension.consecutive_offsets(partitions, next_offset)
        return offsets, after
    offsets = []
    for p in partitions:
        offsets.append(next_offset[p])
        next_offset[p] += 1
    return offsets, next_offset


def publishing_columns(
    records: pa.RecordBatch, stamp_ms: int
) -> tuple[list[bytes], list[bytes | None], list[int]]:
    """A staged record batch's keys, values and timestamps as a publisher produces them
    (Python lists; rows without a timestamp, or with 0, stamped ``stamp_ms``)."""
    keys, values, _, _, stamps = _columns(records, stamp_ms)
    return keys, values, stamps


def _columns(records: pa.RecordBatch, stamp_ms: int) -> tuple[list[Any], ...]:
    """Publisher arguments from a staged record batch: keys, values, -1 partitions and
    offsets, and its published timestamps (as Python lists, which the producer takes)."""
    keys = records.column("key").to_pylist()
    count = len(keys)
    stamps = published_stamps(records, stamp_ms).to_pylist()
    return keys, records.column("value").to_pylist(), [-1] * count, [-1] * count, stamps
