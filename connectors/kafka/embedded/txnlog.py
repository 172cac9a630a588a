"""Per-partition transaction state derived from the log, as a Kafka broker keeps it.

librdkafka's mock cluster writes COMMIT/ABORT control batches when a transaction ends but its
Fetch handler reports ``LastStableOffset = high watermark`` and never lists aborted
transactions, so read_committed consumers would see aborted and still-open transactional
records. The proxy in front of the mock rebuilds what a real broker knows from the log itself:

* ``open``: producer id -> offset of its first batch in the ongoing transaction;
* ``aborted``: ``(producer id, first offset, abort marker offset)`` of every aborted
  transaction;
* the last stable offset (LSO): the first offset of the oldest open transaction, else the
  scanned end of the log.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from spark_statestore.connectors.kafka.embedded.wire import CONTROL_ABORT, BatchInfo

__all__ = ["AbortedTxn", "PartitionTxnLog"]


@dataclass(frozen=True, slots=True, order=True)
class AbortedTxn:
    """One aborted transaction on one partition."""

    first_offset: int
    producer_id: int
    marker_offset: int


@dataclass(slots=True)
class PartitionTxnLog:
    """Transaction index of one partition, fed with batches in offset order."""

    scanned_to: int = 0
    open: dict[int, int] = field(default_factory=dict)
    aborted: list[AbortedTxn] = field(default_factory=list)

    def apply(self, batches: list[BatchInfo]) -> None:
        """Fold batches (in log order) into the index.

        Already-seen batches are skipped, and folding stops at the first batch that does not
        continue the scanned log: the index must never jump over offsets it has not seen.
        """
        for batch in batches:
            if batch.last_offset < self.scanned_to:
                continue
            if batch.base_offset > self.scanned_to:
                return
            pid = batch.producer_id
            if batch.control_type is not None:
                first = self.open.pop(pid, None)
                if batch.control_type == CONTROL_ABORT and first is not None:
                    bisect.insort(self.aborted, AbortedTxn(first, pid, batch.base_offset))
            elif batch.transactional and pid not in self.open:
                self.open[pid] = batch.base_offset
            self.scanned_to = batch.last_offset + 1

    def skip_to(self, log_start: int) -> None:
        """The log was truncated before ``scanned_to`` could reach it (retention): jump ahead."""
        if log_start > self.scanned_to:
            self.scanned_to = log_start

    def last_stable_offset(self) -> int:
        """The first offset a read_committed consumer may not read yet."""
        if self.open:
            return min(self.scanned_to, *self.open.values())
        return self.scanned_to

    def aborted_since(self, fetch_offset: int, upto: int) -> list[AbortedTxn]:
        """Aborted transactions a consumer fetching from ``fetch_offset`` may still run into.

        Only transactions whose abort marker is at or after the fetch offset (a consumer has
        already passed the others) and that start before ``upto``.
        """
        return [
            txn
            for txn in self.aborted
            if txn.marker_offset >= fetch_offset and txn.first_offset < upto
        ]
