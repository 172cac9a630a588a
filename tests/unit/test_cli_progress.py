"""The restore progress line: what it says and when it draws, with a fake clock."""

from __future__ import annotations

import io

import pytest

from spark_statestore.cli.progress import (
    LIVE_INTERVAL_S,
    PLAIN_INTERVAL_S,
    ProgressLine,
    format_count,
    format_lag,
    format_rate,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_line(live: bool) -> tuple[ProgressLine, io.StringIO, FakeClock]:
    stream, clock = io.StringIO(), FakeClock()
    return ProgressLine(stream, "orders-changelog", live=live, clock=clock), stream, clock


@pytest.mark.parametrize(
    ("rate", "text"), [(0.0, "0"), (12.3, "12"), (85_210.4, "85.2k"), (1_234_567.0, "1.23M")]
)
def test_format_rate(rate: float, text: str) -> None:
    assert format_rate(rate) == text


def test_format_count_groups_thousands() -> None:
    assert format_count(1_234_567) == "1,234,567"


def test_format_lag_names_the_most_lagging_partitions_first() -> None:
    lags = {0: 400, 1: 0, 2: 900, 3: 200, 4: 200, 5: 50}
    assert format_lag(lags) == "lag 1,750 (p2 900, p0 400, p3 200, +2 more)"
    assert format_lag(lags, top=5) == "lag 1,750 (p2 900, p0 400, p3 200, p4 200, p5 50)"


def test_format_lag_of_a_caught_up_store_names_no_partition() -> None:
    assert format_lag({0: 0, 1: 0}) == "lag 0"
    assert format_lag({}) == "lag 0"
    assert format_lag({0: 0, 7: 3}) == "lag 3 (p7 3)"


def test_live_line_redraws_in_place_at_most_every_interval() -> None:
    line, stream, clock = make_line(live=True)
    assert line.live

    assert not line.update(10, {0: 5})  # nothing to show yet: the interval has not passed
    clock.advance(LIVE_INTERVAL_S)
    assert line.update(1_000, {0: 9_000, 1: 500})
    for _ in range(5):  # many updates inside one interval draw nothing more
        clock.advance(LIVE_INTERVAL_S / 10)
        assert not line.update(1_100, {0: 8_900, 1: 500})
    clock.advance(LIVE_INTERVAL_S)
    assert line.update(2_000, {0: 8, 1: 0})

    out = stream.getvalue()
    assert "\n" not in out
    draws = out.split("\r")[1:]
    assert len(draws) == 2
    assert draws[0] == (
        "restoring orders-changelog: 1,000 records applied, 4.0k records/s, "
        "lag 9,500 (p0 9,000, p1 500)"
    )
    # The second line is shorter: it is padded so no tail of the first one stays visible.
    assert draws[1].rstrip() == (
        "restoring orders-changelog: 2,000 records applied, 3.2k records/s, lag 8 (p0 8)"
    )
    assert len(draws[1]) == len(draws[0])


def test_closing_a_live_line_ends_it_once() -> None:
    line, stream, clock = make_line(live=True)
    line.close()
    assert stream.getvalue() == ""  # nothing drawn, nothing to end
    clock.advance(1)
    line.update(5, {})
    line.close()
    line.close()
    assert stream.getvalue().endswith("lag 0\n")
    assert stream.getvalue().count("\n") == 1


def test_plain_lines_are_written_every_few_seconds_without_carriage_returns() -> None:
    line, stream, clock = make_line(live=False)
    assert not line.live
    for second in range(1, 13):
        clock.advance(1)
        line.update(second * 1_000, {3: 12_000 - second * 1_000})
    line.close()

    out = stream.getvalue()
    assert "\r" not in out
    lines = out.splitlines()
    assert len(lines) == 12 // int(PLAIN_INTERVAL_S)
    assert lines[0] == (
        "restoring orders-changelog: 5,000 records applied, 1.0k records/s, lag 7,000 (p3 7,000)"
    )
    assert lines[1].startswith("restoring orders-changelog: 10,000 records applied, 1.0k")


def test_force_draws_regardless_of_the_interval() -> None:
    line, stream, _clock = make_line(live=False)
    assert line.update(0, {0: 1}, force=True)
    assert stream.getvalue() == (
        "restoring orders-changelog: 0 records applied, 0 records/s, lag 1 (p0 1)\n"
    )


def test_the_rate_follows_recent_progress_not_the_whole_run() -> None:
    line, _stream, clock = make_line(live=False)
    for second in range(1, 11):  # 10 s at 10k records/s
        clock.advance(1)
        line.render(second * 10_000, {}, clock())
    for _ in range(10):  # then 10 s of nothing: a stall shows as a falling rate
        clock.advance(1)
        text = line.render(100_000, {}, clock())
    assert ", 0 records/s," in text
    clock.advance(1)
    assert ", 200 records/s," in line.render(101_000, {}, clock())


def test_a_custom_interval_is_honoured() -> None:
    stream, clock = io.StringIO(), FakeClock()
    line = ProgressLine(stream, "t", live=False, clock=clock, interval_s=1.0)
    clock.advance(1.0)
    assert line.update(1, {})
    clock.advance(0.5)
    assert not line.update(2, {})
