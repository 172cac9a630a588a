"""Partition lists as people write them: ``"0,2,5-7"``.

The one parser behind the ``partitions`` option of the Spark source and the ``--partitions``
flag of ``spark-statestore follow``, so both accept and refuse exactly the same text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from spark_statestore.errors import OptionError

__all__ = ["MAX_LISTED_PARTITIONS", "MAX_PARTITION", "format_partitions", "parse_partitions"]

MAX_PARTITION = 2**31 - 1
"""The largest partition number Kafka can address (an int32)."""
MAX_LISTED_PARTITIONS = 1_000_000
"""A list naming more partitions than this is a typo (``0-99999999``), not a topic."""

_ITEM = re.compile(r"([0-9]+)(?:\s*-\s*([0-9]+))?", re.ASCII)
_EXAMPLE = "e.g. 0,2,5-7"


def parse_partitions(text: str, *, option: str = "partitions") -> tuple[int, ...]:
    """Parse a comma-separated list of partitions and inclusive ranges.

    Parameters
    ----------
    text
        ``"0,2,5-7"``: partition numbers and ``first-last`` ranges (both ends included),
        separated by commas; blanks around items are ignored, repeats and overlaps are
        allowed.
    option
        The option or flag the text came from (``partitions``, ``--partitions``), named in
        error messages.

    Returns
    -------
    tuple of int
        The partitions, sorted, without repeats: ``(0, 2, 5, 6, 7)``.

    Raises
    ------
    OptionError
        If the text is empty, has an empty item, an item that is not a number or a range of
        numbers, a range whose end is below its start, a number above :data:`MAX_PARTITION`,
        or names more than :data:`MAX_LISTED_PARTITIONS` partitions. The message names
        ``option`` and the offending item.

    Examples
    --------
    >>> parse_partitions("5-7, 0,2,6")
    (0, 2, 5, 6, 7)
    """
    if not isinstance(text, str):
        raise OptionError(f"option {option} must be a string like {_EXAMPLE}, got {text!r}")
    if not text.strip():
        raise OptionError(f"option {option} is empty: list partitions and ranges, {_EXAMPLE}")
    chosen: set[int] = set()
    for item in text.split(","):
        first, last = _parse_item(item.strip(), text, option)
        if len(chosen) + (last - first + 1) > MAX_LISTED_PARTITIONS:
            raise OptionError(
                f"option {option}: {text!r} names more than {MAX_LISTED_PARTITIONS:,} "
                "partitions; check the ranges"
            )
        chosen.update(range(first, last + 1))
    return tuple(sorted(chosen))


def _parse_item(item: str, text: str, option: str) -> tuple[int, int]:
    if not item:
        raise OptionError(
            f"option {option}: empty item in {text!r} (a stray comma?); write {_EXAMPLE}"
        )
    match = _ITEM.fullmatch(item)
    if match is None:
        raise OptionError(
            f"option {option}: {item!r} in {text!r} is not a partition number or a range "
            f"first-last of partition numbers >= 0; write {_EXAMPLE}"
        )
    first = int(match.group(1))
    last = first if match.group(2) is None else int(match.group(2))
    if max(first, last) > MAX_PARTITION:
        raise OptionError(
            f"option {option}: partition {max(first, last)} in {text!r} is above the largest "
            f"Kafka partition number {MAX_PARTITION}"
        )
    if last < first:
        raise OptionError(
            f"option {option}: range {item!r} in {text!r} ends before it starts; "
            f"write it as {last}-{first}"
        )
    return first, last


def format_partitions(partitions: Iterable[int]) -> str:
    """The shortest text :func:`parse_partitions` reads back as ``partitions``.

    Examples
    --------
    >>> format_partitions([7, 0, 5, 2, 6])
    '0,2,5-7'
    """
    items: list[str] = []
    ordered = sorted(set(partitions))
    start = 0
    for i, partition in enumerate(ordered):
        if i + 1 < len(ordered) and ordered[i + 1] == partition + 1:
            continue
        first = ordered[start]
        items.append(str(first) if first == partition else f"{first}-{partition}")
        start = i + 1
    return ",".join(items)
