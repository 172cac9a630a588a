"""Translating a leader's input position into the changelog offsets a Kafka Streams store
following the sink's changelog must reach (connectors/kafka/sink/bound.py), without Kafka:
progress records built in memory the way the sink publishes them (each names its batch's
position and the changelog offsets after the batch's records)."""

from __future__ import annotations

import pytest

from spark_statestore.connectors.kafka.sink.bound import changelog_bound_from_progress
from spark_statestore.connectors.kafka.sink.progress import ProgressRecord
from spark_statestore.errors import InvalidPositionError
from spark_statestore.position import Position
from spark_statestore.sink.errors import PositionNotPublishedError

TOPIC = "app-store-changelog"


def orders(**offsets: int) -> Position:
    """``orders(p0=3, p1=5)``: a position in the input topic ``orders``."""
    return Position.from_map({"orders": {int(k[1:]): v for k, v in offsets.items()}})


def progress(
    batches: list[tuple[Position | None, list[int]]], store_id: str = "s1", first_batch: int = 0
) -> list[ProgressRecord]:
    """The progress records of ``batches``: (the batch's position, the partition of each
    change), offsets growing per partition in publishing order, a transaction marker after
    each batch's records in a partition."""
    next_offset: dict[int, int] = {}
    records = []
    for number, (position, partitions) in enumerate(batches, start=first_batch):
        ends = {}
        for partition in partitions:
            offset = next_offset.get(partition, 0)
            next_offset[partition] = offset + 1
            ends[partition] = offset + 1
        for partition in ends:
            next_offset[partition] += 1  # the commit marker
        record = ProgressRecord.for_batch(store_id, "q1", number, [], position=position)
        records.append(
            ProgressRecord(
                record.store_id,
                record.query_id,
                record.batch_id,
                record.source_offsets,
                changelog_end_offsets=ends,
                position=position,
            )
        )
    return records


def changelog(offsets: dict[int, int]) -> Position:
    return Position.from_map({TOPIC: offsets})


BATCHES = [
    (orders(p0=4), [0, 1, 0]),  # offsets p0: 0, 1; p1: 0 (markers at p0 2, p1 1)
    (orders(p0=9, p1=2), [2, 0]),  # p2: 0; p0: 3
    (orders(p0=12, p1=2), [1, 1]),  # p1: 2, 3
]


@pytest.mark.parametrize(
    ("position", "bound"),
    [
        (orders(p0=4), {0: 1, 1: 0}),
        (orders(p0=1), {0: 1, 1: 0}),  # reached by the first batch
        (orders(p1=2), {0: 3, 1: 0, 2: 0}),
        (orders(p0=9), {0: 3, 1: 0, 2: 0}),
        (orders(p0=10), {0: 3, 1: 3, 2: 0}),
        (orders(p0=12, p1=1), {0: 3, 1: 3, 2: 0}),
    ],
)
def test_the_bound_covers_the_batches_up_to_the_first_that_reached_the_position(
    position: Position, bound: dict[int, int]
) -> None:
    assert changelog_bound_from_progress(TOPIC, progress(BATCHES), position) == changelog(bound)


def test_a_batch_that_published_nothing_still_reaches_its_position() -> None:
    batches = [*BATCHES, (orders(p0=15, p1=2), [])]
    assert changelog_bound_from_progress(TOPIC, progress(batches), orders(p0=14)) == changelog(
        {0: 3, 1: 3, 2: 0}
    )


def test_a_position_no_batch_reached_is_an_error_not_a_guess() -> None:
    with pytest.raises(PositionNotPublishedError, match=r"reached \{\"orders\":\{\"0\":20\}\}"):
        changelog_bound_from_progress(TOPIC, progress(BATCHES), orders(p0=20))
    with pytest.raises(PositionNotPublishedError):
        changelog_bound_from_progress(TOPIC, [], orders(p0=20))


def test_only_one_store_s_batches_count() -> None:
    older = progress([(orders(p0=50), [0, 0, 0])], store_id="gone")
    records = older + progress(BATCHES)
    # By default the changelog's current writer: the store of the last record.
    assert changelog_bound_from_progress(TOPIC, records, orders(p0=4)) == changelog({0: 1, 1: 0})
    assert changelog_bound_from_progress(TOPIC, records, orders(p0=4), "gone") == changelog({0: 2})


def test_batches_without_a_position_cannot_be_translated() -> None:
    with pytest.raises(InvalidPositionError, match="names no position"):
        changelog_bound_from_progress(TOPIC, progress([(None, [0])]), orders(p0=1))


def test_positions_that_do_not_grow_batch_by_batch_are_refused() -> None:
    records = progress([(orders(p0=5, p1=1), [0]), (orders(p0=1, p1=5), [1])])
    with pytest.raises(InvalidPositionError, match="does not contain the previous"):
        changelog_bound_from_progress(TOPIC, records, orders(p0=1, p1=5))
