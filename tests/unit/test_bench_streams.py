"""Kafka Streams' own restore timing, read from the interop app's event lines."""

from __future__ import annotations

import pytest

from spark_statestore.bench import BenchError
from spark_statestore.bench.measure import BenchOptions
from spark_statestore.bench.streams import (
    DEFAULT_CHANGES,
    QUICK_CHANGES,
    streams_changes,
)
from spark_statestore.bench.streams_peer import StreamsRestore, restore_timing

TOPIC = "bench-streams-totals-changelog"


def restore(event: str, partition: int, at: int, store: str = "totals", **more: int) -> dict:
    return {
        "event": event,
        "store": store,
        "topic": TOPIC,
        "partition": partition,
        "at": at,
        **more,
    }


def test_the_restore_spans_the_first_start_to_the_last_end_of_the_store() -> None:
    events = [
        {"event": "starting", "at": 1_000},
        {"event": "state", "state": "REBALANCING", "at": 1_005},
        restore("restore-start", 0, 1_200, start_offset=0, end_offset=11),
        restore("restore-start", 1, 1_250, start_offset=0, end_offset=11),
        # Another store's restore is not counted.
        restore("restore-start", 0, 1_100, store="latest"),
        restore("restore-end", 0, 3_000, store="latest", restored=99),
        restore("restore-end", 1, 2_000, restored=10),
        restore("restore-end", 0, 2_450, restored=10),
        {"event": "state", "state": "RUNNING", "at": 2_600},
    ]
    assert restore_timing(events, "totals") == StreamsRestore(
        start_to_running_s=1.6, restore_s=1.25, restored=20, partitions=2
    )


def test_a_restore_within_one_millisecond_is_not_infinitely_fast() -> None:
    events = [
        {"event": "starting", "at": 5},
        restore("restore-start", 0, 7),
        restore("restore-end", 0, 7, restored=0),
        {"event": "state", "state": "RUNNING", "at": 8},
    ]
    assert restore_timing(events, "totals").restore_s == 0.001


@pytest.mark.parametrize(
    ("events", "message"),
    [
        ([restore("restore-start", 0, 1), restore("restore-end", 0, 2)], "no start or no RUNNING"),
        (
            [
                {"event": "starting", "at": 1},
                restore("restore-start", 0, 2),
                restore("restore-start", 1, 2),
                restore("restore-end", 0, 3),
                {"event": "state", "state": "RUNNING", "at": 4},
            ],
            "did not report a complete restore",
        ),
        (
            [{"event": "starting", "at": 1}, {"event": "state", "state": "RUNNING", "at": 4}],
            "did not report a complete restore",
        ),
        ([{"event": "starting"}], "has no 'at'"),
    ],
)
def test_missing_events_are_an_error_not_a_rate(events: list[dict], message: str) -> None:
    with pytest.raises(BenchError, match=message):
        restore_timing(events, "totals")


def test_the_latency_sample_count_follows_quick() -> None:
    assert streams_changes(BenchOptions.for_run()) == DEFAULT_CHANGES
    assert streams_changes(BenchOptions.for_run(quick=True)) == QUICK_CHANGES
