"""The store host's check that a batch streamed into the changelog may commit as it is
(connectors/kafka/sink/streamed.py ``order_conflict``): the commit applies the staged files in
Spark partition order, so every key several task attempts wrote must have its last record in
the changelog from its last write in that order. Without Kafka: attempts built by hand."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_statestore.connectors.kafka.sink.streamed import StreamedAttempt, order_conflict


def attempt(partition_id: int, rows: list[tuple[bytes, int]]) -> StreamedAttempt:
    """An attempt that published ``rows``: ``(key, rank)``, all in changelog partition 0 (the
    rank is the record's place among the batch's records of its partition)."""
    made = StreamedAttempt(partition_id, 0, True, rows=len(rows))
    ranks = pa.array([rank for _, rank in rows], pa.int64())
    made.chunks.append((pa.array([0] * len(rows), pa.int32()), ranks))
    made.keys.append(pa.array([key for key, _ in rows], pa.binary()))
    return made


def test_keys_of_one_attempt_each_never_conflict() -> None:
    first = attempt(0, [(b"a", 0), (b"b", 2)])
    second = attempt(1, [(b"c", 1), (b"d", 3)])
    assert order_conflict([first, second]) is None
    assert order_conflict([first]) is None


def test_a_shared_key_whose_last_record_is_the_later_task_s_is_fine() -> None:
    # Task 1 (later in commit order) published "k" last: its value wins in both orders.
    first = attempt(0, [(b"k", 0), (b"x", 1)])
    second = attempt(1, [(b"k", 2)])
    assert order_conflict([first, second]) is None
    # Even when its other rows came first, and the earlier task wrote k twice.
    first = attempt(0, [(b"k", 1), (b"k", 2)])
    second = attempt(1, [(b"y", 0), (b"k", 3)])
    assert order_conflict([first, second]) is None


def test_a_shared_key_last_published_by_the_earlier_task_is_a_conflict() -> None:
    first = attempt(0, [(b"k", 2), (b"x", 3)])
    second = attempt(1, [(b"k", 1)])
    reason = order_conflict([first, second])
    assert reason is not None and "1 keys written by several tasks" in reason
    # The commit order is the list's: reversed, the same records agree with it.
    assert order_conflict([second, first]) is None


@settings(max_examples=200, deadline=None)
@given(
    events=st.lists(
        st.tuples(st.integers(0, 3), st.sampled_from([b"a", b"b", b"c", b"d", b"e"])),
        max_size=40,
    )
)
def test_the_check_finds_exactly_the_keys_whose_last_record_another_task_wrote(
    events: list[tuple[int, bytes]],
) -> None:
    """Records of up to four attempts interleaved in the changelog (one partition, ranks in
    arrival order): the keys whose last record is not from the last attempt (in commit
    order) that wrote them are the conflicts, counted."""
    rows: dict[int, list[tuple[bytes, int]]] = {n: [] for n in range(4)}
    for rank, (number, key) in enumerate(events):
        rows[number].append((key, rank))
    attempts = [attempt(n, rows[n]) for n in range(4) if rows[n]]
    numbers = [n for n in range(4) if rows[n]]
    last_record = {key: numbers.index(number) for number, key in events}
    last_writer = {key: i for i, n in enumerate(numbers) for key, _ in rows[n]}
    wrong = sum(1 for key, i in last_record.items() if last_writer[key] != i)
    reason = order_conflict(attempts)
    if wrong:
        assert reason is not None and f"{wrong:,} keys written by several tasks" in reason
    else:
        assert reason is None
