"""Merge of sorted (key, envelope-or-None) streams, earlier sources shadowing later ones.

A transaction reads through three layers: its in-memory writes, its spilled writes, and the
committed store. ``None`` marks a delete that hides the key in every later layer.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence

Entry = tuple[bytes, bytes | None]


def merge_layers(layers: Sequence[Iterable[Entry]], reverse: bool) -> Iterator[tuple[bytes, bytes]]:
    """Keys of all ``layers`` in order; the first layer holding a key decides its value."""
    if len(layers) == 1:
        for key, value in layers[0]:
            if value is not None:
                yield key, value
        return
    tagged = [((key, rank, value) for key, value in layer) for rank, layer in enumerate(layers)]
    if reverse:
        # Descending keys; for equal keys the lowest rank (highest priority) must come first.
        merged: Iterator[tuple[bytes, int, bytes | None]] = heapq.merge(
            *tagged, key=lambda item: (item[0], -item[1]), reverse=True
        )
    else:
        merged = heapq.merge(*tagged, key=lambda item: (item[0], item[1]))
    previous: bytes | None = None
    for key, _, value in merged:
        if key == previous:
            continue
        previous = key
        if value is not None:
            yield key, value


def slice_sorted(
    keys: list[bytes],
    values: Mapping[bytes, bytes | None],
    start: bytes,
    stop: bytes,
    include_stop: bool,
    reverse: bool,
) -> Iterator[Entry]:
    """The entries of ``values`` (whose sorted keys are ``keys``) in ``[start, stop)`` or
    ``[start, stop]``, in the requested order."""
    low = bisect_left(keys, start)
    high = bisect_right(keys, stop) if include_stop else bisect_left(keys, stop)
    window = keys[low:high]
    if reverse:
        window.reverse()
    return ((key, values[key]) for key in window)
