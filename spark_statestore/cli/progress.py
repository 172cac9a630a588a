"""The restore progress line of ``spark-statestore follow``.

Pure rendering: the caller feeds it the follower's counters and lags, this module decides
when to draw and what to draw. On a terminal the line is redrawn in place (``\\r``) a few
times per second; elsewhere (a log file, a pipe) a plain line is written every few seconds.
The clock is injectable, so the timing is testable without sleeping.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TextIO

__all__ = ["ProgressLine", "format_count", "format_lag", "format_rate"]

LIVE_INTERVAL_S = 0.25
"""Least time between two redraws of a live (``\\r``) line: at most four a second."""
PLAIN_INTERVAL_S = 5.0
"""Least time between two plain lines."""
RATE_WINDOW_S = 5.0
"""The rate shown is over about this many seconds (a follower commits in chunks, so a rate
over a shorter span jumps between zero and the chunk's rate)."""
TOP_PARTITIONS = 3
"""How many of the most lagging partitions the line names."""


def format_count(count: int) -> str:
    """``1234567`` -> ``"1,234,567"``."""
    return f"{count:,}"


def format_rate(per_second: float) -> str:
    """``85210.4`` -> ``"85.2k"``; ``1234567.0`` -> ``"1.23M"``; ``12.3`` -> ``"12"``."""
    if per_second >= 1e6:
        return f"{per_second / 1e6:.2f}M"
    if per_second >= 1e3:
        return f"{per_second / 1e3:.1f}k"
    return f"{per_second:.0f}"


def format_lag(lags: Mapping[int, int], *, top: int = TOP_PARTITIONS) -> str:
    """The total lag and the ``top`` most lagging partitions.

    Parameters
    ----------
    lags
        ``{partition: offset lag}``.
    top
        How many partitions to name.

    Returns
    -------
    str
        ``"lag 1,500 (p3 900, p0 400, p7 200, +2 more)"``; ``"lag 0"`` when caught up.
        Partitions without lag are not named; ties are named in partition order.
    """
    total = sum(lags.values())
    lagging = sorted(((lag, p) for p, lag in lags.items() if lag > 0), key=lambda e: (-e[0], e[1]))
    if not lagging:
        return f"lag {format_count(total)}"
    named = [f"p{p} {format_count(lag)}" for lag, p in lagging[:top]]
    if len(lagging) > top:
        named.append(f"+{len(lagging) - top} more")
    return f"lag {format_count(total)} ({', '.join(named)})"


class ProgressLine:
    """Draws restore progress on a text stream, no more often than it is readable.

    Parameters
    ----------
    stream
        Where to draw (stderr in the CLI).
    label
        What is being restored (the changelog topic), shown at the start of the line.
    live
        True: redraw one line in place with ``\\r`` (a terminal). False: write a new plain
        line each time (logs and pipes).
    clock
        Seconds from a monotonic clock (``time.monotonic``; a fake one in tests).
    interval_s
        Least time between two draws; defaults to :data:`LIVE_INTERVAL_S` when live and
        :data:`PLAIN_INTERVAL_S` otherwise.

    Examples
    --------
    >>> line = ProgressLine(sys.stderr, "orders-changelog", live=sys.stderr.isatty())
    ... # doctest: +SKIP
    >>> line.update(records_applied, {p: lag.offset_lag for p, lag in lags.items()})
    ... # doctest: +SKIP
    >>> line.close()  # doctest: +SKIP
    """

    def __init__(
        self,
        stream: TextIO,
        label: str,
        *,
        live: bool,
        clock: Callable[[], float] = time.monotonic,
        interval_s: float | None = None,
    ) -> None:
        self._stream = stream
        self._label = label
        self._live = live
        self._clock = clock
        self._interval_s = (
            interval_s
            if interval_s is not None
            else (LIVE_INTERVAL_S if live else PLAIN_INTERVAL_S)
        )
        start = clock()
        self._last_draw = start
        self._drawn_width = 0
        # (time, records applied) samples of the rate window; the first is the start.
        self._samples: deque[tuple[float, int]] = deque([(start, 0)])

    @property
    def live(self) -> bool:
        """True when the line is redrawn in place."""
        return self._live

    def update(self, records_applied: int, lags: Mapping[int, int], *, force: bool = False) -> bool:
        """Draw the progress if the interval has passed since the last draw (or ``force``).

        Parameters
        ----------
        records_applied
            Records applied since the restore started.
        lags
            ``{partition: offset lag}``.
        force
            Draw now regardless of the interval.

        Returns
        -------
        bool
            True when something was drawn.
        """
        now = self._clock()
        if not force and now - self._last_draw < self._interval_s:
            return False
        self._last_draw = now
        text = self.render(records_applied, lags, now)
        if self._live:
            pad = " " * max(0, self._drawn_width - len(text))
            self._stream.write(f"\r{text}{pad}")
            self._drawn_width = len(text)
        else:
            self._stream.write(text + "\n")
        self._stream.flush()
        return True

    def render(self, records_applied: int, lags: Mapping[int, int], now: float) -> str:
        """The progress text at ``now`` (also records the sample for the rate)."""
        samples = self._samples
        samples.append((now, records_applied))
        # Keep one sample at or before the window's start, so the rate spans the window.
        while len(samples) > 2 and samples[1][0] <= now - RATE_WINDOW_S:
            samples.popleft()
        since, base = samples[0]
        elapsed = now - since
        rate = (records_applied - base) / elapsed if elapsed > 0 else 0.0
        return (
            f"restoring {self._label}: {format_count(records_applied)} records applied, "
            f"{format_rate(rate)} records/s, {format_lag(lags)}"
        )

    def close(self) -> None:
        """End a live line (move to the next line) so later output starts on its own line."""
        if self._live and self._drawn_width:
            self._stream.write("\n")
            self._stream.flush()
            self._drawn_width = 0
