"""Translating a leader's input position into the changelog offsets a Kafka Streams store
following the sink's changelog must reach (connectors/kafka/sink/bound.py), without Kafka:
records built in memory the way the sink publishes them (every record of a batch carries
the leader's position after that batch in its ``c`` header)."""

from __future__ import annotations

import pytest

from spark_statestore.changelog import ChangelogRecord, position_headers
from spark_statestore.connectors.kafka.sink.bound import changelog_bound_from_records
from spark_statestore.errors import InvalidPositionError
from spark_statestore.position import Position
from spark_statestore.sink.errors import PositionNotPublishedError

TOPIC = "app-store-changelog"


def orders(**offsets: int) -> Position:
    """``orders(p0=3, p1=5)``: a position in the input topic ``orders``."""
    return Position.from_map({"orders": {int(k[1:]): v for k, v in offsets.items()}})


def published(batches: list[tuple[Position | None, list[int]]]) -> list[ChangelogRecord]:
    """The changelog of ``batches``: (the header, the partition of each change), offsets
    growing per partition in publishing order."""
    next_offset: dict[int, int] = {}
    records = []
    for header, partitions in batches:
        for i, partition in enumerate(partitions):
            offset = next_offset.get(partition, 0)
            next_offset[partition] = offset + 2  # a transaction marker after each record
            headers = None if header is None else list(position_headers(header))
            records.append(
                ChangelogRecord.from_parts(
                    TOPIC, partition, offset, b"k%d" % i, b"v", headers=headers
                )
            )
    return records


def changelog(offsets: dict[int, int]) -> Position:
    return Position.from_map({TOPIC: offsets})


BATCHES = [
    (orders(p0=4), [0, 1, 0]),  # offsets p0: 0, 2; p1: 0
    (orders(p0=9, p1=2), [2, 0]),  # p2: 0; p0: 4
    (orders(p0=12, p1=2), [1, 1]),  # p1: 2, 4
]


@pytest.mark.parametrize(
    ("position", "bound"),
    [
        (orders(p0=4), {0: 2, 1: 0}),
        (orders(p0=1), {0: 2, 1: 0}),  # reached by the first batch
        (orders(p1=2), {0: 4, 1: 0, 2: 0}),
        (orders(p0=9), {0: 4, 1: 0, 2: 0}),
        (orders(p0=10), {0: 4, 1: 4, 2: 0}),
        (orders(p0=12, p1=1), {0: 4, 1: 4, 2: 0}),
    ],
)
def test_the_bound_covers_the_batches_up_to_the_first_that_reached_the_position(
    position: Position, bound: dict[int, int]
) -> None:
    # Records come partition by partition, as a reader yields them, not in publishing order.
    records = sorted(published(BATCHES), key=lambda r: (r.partition, r.offset))
    assert changelog_bound_from_records(TOPIC, records, position) == changelog(bound)


def test_a_position_no_header_reaches_is_an_error_not_a_guess() -> None:
    # Not published yet, or reached by batches that published nothing: "every record so
    # far" would be too weak a bound in the first case.
    with pytest.raises(PositionNotPublishedError, match=r"reaches \{\"orders\":\{\"0\":20\}\}"):
        changelog_bound_from_records(TOPIC, published(BATCHES), orders(p0=20))
    with pytest.raises(PositionNotPublishedError):
        changelog_bound_from_records(TOPIC, [], orders(p0=20))


def test_records_without_position_headers_cannot_be_translated() -> None:
    records = published([(None, [0])])
    with pytest.raises(InvalidPositionError, match=r"partition 0 offset 0 has no position header"):
        changelog_bound_from_records(TOPIC, records, orders(p0=1))


def test_headers_that_do_not_grow_batch_by_batch_are_refused() -> None:
    records = published([(orders(p0=5, p1=1), [0]), (orders(p0=1, p1=5), [1])])
    with pytest.raises(InvalidPositionError, match="neither contains the other"):
        changelog_bound_from_records(TOPIC, records, orders(p0=1, p1=1))
