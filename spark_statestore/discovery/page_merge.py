"""The lazy k-way merge of paged sources in key order, as record batches.

Each source (a cursor over one replica's snapshot, in :mod:`~spark_statestore.discovery.scan`)
gives its rows a page at a time, keys ascending and distinct across sources; the merge keeps
one page per source and a heap of their next keys, and takes the rows it picks out of the
pages column-wise (one ``take`` per output batch), so memory holds the sources' current
pages and one output batch, whatever the total.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["NextPages", "merge_pages"]

NextPages = Callable[[Any], "list[tuple[Any, pa.RecordBatch]]"]
"""``next_pages(source) -> [(source, page), ...]``: a source's next page (none at its end),
or the first pages of the sources that replace it (a failed replica's successors)."""


@dataclass(eq=False)
class _Head:
    """A source's current page and the next row of it to merge."""

    source: Any
    keys: list[bytes]
    number: int  # the page's number (to find it when its rows are taken)
    row: int = 0


@dataclass
class _Taken:
    """The rows picked but not yet sent, as (page number, row), and the pages they are in."""

    picks: list[tuple[int, int]] = field(default_factory=list)
    pages: dict[int, pa.RecordBatch] = field(default_factory=dict)


def merge_pages(
    first: Iterable[tuple[Any, pa.RecordBatch]],
    next_pages: NextPages,
    *,
    batch_rows: int,
    limit: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of every source in ascending key order (the key is column 0), as batches of
    at most ``batch_rows`` rows, stopping after ``limit`` rows (None: at the end).

    ``first`` gives each source's first page; ``next_pages`` is called when a source's page
    is used up. Pages must be non-empty.
    """
    heap: list[tuple[bytes, int, _Head]] = []
    taken = _Taken()
    numbers = itertools.count()

    def push(pages: Iterable[tuple[Any, pa.RecordBatch]]) -> None:
        for source, page in pages:
            head = _Head(source, page.column(0).to_pylist(), next(numbers))
            taken.pages[head.number] = page
            heapq.heappush(heap, (head.keys[0], head.number, head))

    push(first)
    left = limit
    while heap and left != 0:
        _, _, head = heapq.heappop(heap)
        taken.picks.append((head.number, head.row))
        if left is not None:
            left -= 1
        head.row += 1
        if head.row < len(head.keys):
            heapq.heappush(heap, (head.keys[head.row], head.number, head))
        else:
            push(next_pages(head.source))
        if len(taken.picks) >= batch_rows:
            yield _take(taken, {entry[1] for entry in heap})
    if taken.picks:
        yield _take(taken, set())


def _take(taken: _Taken, current: set[int]) -> pa.RecordBatch:
    """The picked rows as one batch, in pick order; forgets every page but those still
    being merged (``current``)."""
    import pyarrow as pa

    numbers = sorted({number for number, _ in taken.picks})
    offsets: dict[int, int] = {}
    total = 0
    for number in numbers:
        offsets[number] = total
        total += taken.pages[number].num_rows
    pages = [taken.pages[number] for number in numbers]
    combined = pages[0] if len(pages) == 1 else pa.concat_batches(pages)
    indices = pa.array([offsets[number] + row for number, row in taken.picks], pa.int64())
    taken.picks = []
    taken.pages = {number: page for number, page in taken.pages.items() if number in current}
    return combined.take(indices)
