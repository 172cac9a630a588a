"""Read-your-writes for Kafka Streams following the sink's changelog.

Kafka Streams 4.3 keeps the position of a store that follows a topic (a read-only store,
``Topology#addReadOnlyStateStore``, or a global table) from the records its processor wrote:
``{followed topic: {partition: offset of the last record processed}}``
(``StoreQueryUtils.updatePosition`` takes the record's metadata), and a ``PositionBound``
is checked on each store partition against the bound's entries *for that partition number*
only (``StoreQueryUtils.isPermitted``). The sink's ``c`` headers carry the leader's *input*
positions (``{"orders": {0: 41}}``), which Kafka Streams merges into a store's position only
while it restores the store from the topic with its consistency option on: a bound made of
them is never reached by a store that processed the records (and checks the input's
partition *n* on store partition *n*, which holds other keys).

So the bound Kafka Streams can answer is in changelog offsets. :func:`changelog_bound`
translates a position of the leader (what a writer knows: "my order is orders-0 offset 41")
into one, from the sink's progress records: each names a batch's position (the store's, the
batch merged) and the changelog offsets after its records. The first batch whose position
reaches the wanted one holds the last of the writes up to it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from spark_statestore.connectors.kafka.sink.progress import ProgressRecord
from spark_statestore.errors import InvalidPositionError
from spark_statestore.position import Position
from spark_statestore.sink.errors import PositionNotPublishedError

__all__ = ["changelog_bound", "changelog_bound_from_progress"]


def changelog_bound_from_progress(
    topic: str, records: Iterable[ProgressRecord], position: Position, store_id: str | None = None
) -> Position:
    """The changelog offsets a follower of ``topic`` must have processed to reflect every
    write of the leader up to ``position``.

    ``records`` are the sink's progress records, in order; those of ``store_id`` count (by
    default the store of the last record: the changelog's current writer). Each batch's
    position contains the last one's, so the first batch whose position reaches
    ``position`` is the one that completed it, and the bound is, per partition, the offset
    of the last record of that batch or an earlier one. Partitions none of them wrote have
    no entry (nothing to wait for). So ``records`` must go back to the store's first batch:
    the progress topic keeps its records (the sink never compacts or deletes them; a
    compacted or short-retention topic would drop the end offsets of earlier batches).

    Raises
    ------
    PositionNotPublishedError
        No batch's position reaches ``position``: the leader has not committed it (yet), or
        its commit is not readable yet.
    InvalidPositionError
        The batches name no position (a leader that knew no input position, or an older
        sink), or their positions do not grow batch by batch (not one sink's).
    """
    chosen = [r for r in records if store_id is None or r.store_id == store_id]
    if store_id is None and chosen:
        last = chosen[-1].store_id
        chosen = [r for r in chosen if r.store_id == last]
    bound: dict[int, int] = {}
    previous: Position | None = None
    for record in chosen:
        if record.position is None:
            raise InvalidPositionError(
                f"changelog {topic!r}: batch {record.batch_id} of query {record.query_id} "
                "names no position (its leader had no input position, or is older): no bound "
                "in input offsets can be translated; use the changelog's offsets directly"
            )
        if previous is not None and not record.position.dominates(previous):
            raise InvalidPositionError(
                f"changelog {topic!r}: batch {record.batch_id}'s position {record.position} "
                f"does not contain the previous batch's {previous}; they do not come from one "
                "sink's batches"
            )
        previous = record.position
        for partition, end in record.changelog_end_offsets.items():
            if end > 0:
                bound[partition] = max(end - 1, bound.get(partition, -1))
        if record.position.dominates(position):
            return Position.from_map({topic: bound}) if bound else Position.from_map({})
    raise PositionNotPublishedError(
        f"none of the {len(chosen)} batches in {topic}-progress reached {position}: the "
        "leader has not committed it, or its commit is not readable yet (wait for it and ask "
        "again)"
    )


def changelog_bound(
    bootstrap_servers: str,
    changelog: str,
    position: Position,
    *,
    timeout_s: float = 30.0,
    consumer_config: dict[str, Any] | None = None,
    store_id: str | None = None,
) -> Position:
    """:func:`changelog_bound_from_progress` over the committed records of
    ``<changelog>-progress`` (one per batch; read up to its last stable offset).

    Call it once the commit that reached ``position`` is readable (its transaction markers
    written, a moment after the commit returned). ``PositionBound.at(changelog_bound(...))``
    is then a bound a Kafka Streams store following ``changelog``
    (``addReadOnlyStateStore``) answers once it has those writes.

    Raises
    ------
    PositionNotPublishedError, InvalidPositionError
        See :func:`changelog_bound_from_progress`.
    KafkaClientError
        The progress topic cannot be read within ``timeout_s``.
    """
    from spark_statestore.connectors.kafka.sink.progress import read_progress

    records = read_progress(
        bootstrap_servers, changelog, config=consumer_config, timeout_s=timeout_s
    )
    return changelog_bound_from_progress(changelog, records, position, store_id)
