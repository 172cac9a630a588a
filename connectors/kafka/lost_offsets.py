"""What a reader of a changelog does when an offset it needs is no longer in the topic:
shared by the follower's source and range reads and the sink's roll-forward reads."""

from __future__ import annotations

import logging

from spark_statestore.connectors.kafka.errors import DataLossError

__all__ = ["handle_out_of_range"]

_log = logging.getLogger(__name__)


def handle_out_of_range(
    topic: str,
    partition: int,
    wanted: int,
    watermarks: tuple[int, int],
    *,
    fail_on_data_loss: bool,
) -> int:
    """Decide what to do when ``wanted`` is no longer in ``topic``-``partition``.

    Returns the offset to resume at (the earliest available one) when the loss may be
    skipped; raises :class:`DataLossError` otherwise. An offset past the end of the
    partition is never skipped: the topic was deleted and re-created (or truncated), and
    the offsets already applied belong to another history.
    """
    low, high = watermarks
    where = f"{topic}-{partition}"
    if wanted > high:
        raise DataLossError(
            f"changelog {where} ends at offset {high} but offset {wanted} was already read: "
            "the topic was deleted and re-created or truncated; delete the store and follow "
            "the changelog again",
            topic,
            partition,
            wanted,
            watermarks,
        )
    if wanted >= low:
        return wanted  # still there (the partition moved or was being truncated): retry
    if fail_on_data_loss:
        raise DataLossError(
            f"changelog {where}: offsets {wanted}-{low - 1} are gone (the earliest available "
            f"offset is {low}; retention or an unsafe compaction removed them), so the store "
            "would miss changes: restore it from a complete changelog (delete the store), or "
            "set failOnDataLoss=false to skip the lost offsets",
            topic,
            partition,
            wanted,
            watermarks,
        )
    _log.warning(
        "changelog %s: offsets %d-%d are gone (failOnDataLoss=false): skipping to %d",
        where,
        wanted,
        low - 1,
        low,
    )
    return low
