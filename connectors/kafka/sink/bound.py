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
into one: the ``c`` headers say which changelog records hold the writes up to that position.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from spark_statestore.changelog import ChangelogRecord
from spark_statestore.errors import InvalidPositionError
from spark_statestore.position import Position
from spark_statestore.sink.errors import PositionNotPublishedError

__all__ = ["changelog_bound", "changelog_bound_from_records"]


def changelog_bound_from_records(
    topic: str, records: Iterable[ChangelogRecord], position: Position
) -> Position:
    """The changelog offsets a follower of ``topic`` must have processed to reflect every
    write of the leader up to ``position``.

    ``records`` are the committed records of the sink's changelog, each with its ``c``
    header (the position of the leader after the batch that wrote it; every record of a
    batch carries the same one, and they grow batch by batch). The batch that first reached
    ``position`` is the one whose header is the smallest of those that reach it; the bound
    is, per partition, the offset of the last record of that batch or an earlier one.
    Partitions none of them wrote have no entry (nothing to wait for).

    Raises
    ------
    PositionNotPublishedError
        No record's header reaches ``position``: the leader has not published it (yet), or
        reached it with batches that changed nothing (which publish no record). Nothing
        tells these apart in the changelog, and guessing "every record so far" would give a
        bound too weak in the first case.
    InvalidPositionError
        A record has no position header (its leader knew no position: nothing links its
        changelog to input offsets), or the headers that reach ``position`` do not grow
        batch by batch (not one sink's changelog).
    """
    # Offsets per distinct header: as many entries as batches, not records.
    last: dict[Position, dict[int, int]] = {}
    count = 0
    for record in records:
        count += 1
        if record.position is None:
            raise InvalidPositionError(
                f"changelog {topic!r} partition {record.partition} offset {record.offset} has "
                "no position header: its leader had no input position, so no bound in input "
                "offsets can be translated; use the changelog's offsets directly"
            )
        offsets = last.setdefault(record.position, {})
        if record.offset > offsets.get(record.partition, -1):
            offsets[record.partition] = record.offset
    reaching = [header for header in last if header.dominates(position)]
    if not reaching:
        raise PositionNotPublishedError(
            f"none of the {count} records read from changelog {topic!r} carries a position "
            f"that reaches {position}: the leader has not published it, or its commit is not "
            "readable yet (wait for it and ask again), or it got there with batches that "
            "changed nothing"
        )
    # In a chain the smallest has the smallest sum of offsets, or as small a sum and fewer
    # topic-partitions.
    first = min(reaching, key=lambda h: (sum(o for _, _, o in h), len(h.entries)))
    unordered = [h for h in reaching if not h.dominates(first)]
    if unordered:
        raise InvalidPositionError(
            f"changelog {topic!r}: position headers {first} and {unordered[0]} both reach "
            f"{position} but neither contains the other; they do not come from one sink's "
            "batches"
        )
    bound: dict[int, int] = {}
    for header, offsets in last.items():
        if first.dominates(header):
            for partition, offset in offsets.items():
                bound[partition] = max(offset, bound.get(partition, -1))
    return Position.from_map({topic: bound})


def changelog_bound(
    bootstrap_servers: str,
    changelog: str,
    position: Position,
    *,
    timeout_s: float = 30.0,
    consumer_config: dict[str, Any] | None = None,
) -> Position:
    """:func:`changelog_bound_from_records` over the committed records of ``changelog``
    (read from its start to its current last stable offset with ``read_committed``).

    It reads the records committed and readable when it is called: call it once the commit
    that reached ``position`` is readable (its transaction markers written, a moment after
    the commit returned). It reads the whole changelog: meant for tests and occasional
    lookups, not per query.
    ``PositionBound.at(changelog_bound(...))`` is then a bound a Kafka Streams store
    following ``changelog`` (``addReadOnlyStateStore``) answers once it has those writes.

    Raises
    ------
    PositionNotPublishedError, InvalidPositionError
        See :func:`changelog_bound_from_records`.
    KafkaClientError
        The changelog cannot be read within ``timeout_s``.
    """
    from spark_statestore.connectors.kafka.tail import tail_changelog

    records = tail_changelog(
        bootstrap_servers, changelog, timeout_s=timeout_s, consumer_config=consumer_config
    )
    return changelog_bound_from_records(changelog, records, position)
