"""Option ``startingOffsets`` of the follower source: where a new query's change feed starts.

``earliest`` (the default), ``latest``, or Spark's Kafka offsets JSON, ``{"0": 12, "1": -2}``
or ``{"topic": {"0": 12}}``, with :data:`EARLIEST` and :data:`LATEST` as Kafka's markers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from spark_statestore.errors import OptionError
from spark_statestore.integer_spec import INT64_MAX, ascii_integer
from spark_statestore.partition_spec import MAX_PARTITION

__all__ = ["EARLIEST", "LATEST", "StartingOffsets", "parse_starting_offsets"]

EARLIEST = -2
"""Kafka's (and Spark's offsets JSON) marker for the earliest available offset."""
LATEST = -1
"""Kafka's (and Spark's offsets JSON) marker for the end of a partition."""


@dataclass(frozen=True, slots=True)
class StartingOffsets:
    """Where the change feed of a new query starts (``startingOffsets``).

    ``kind`` is ``earliest``, ``latest`` or ``json``; for ``json``, ``offsets`` maps every
    followed partition to an offset or to :data:`EARLIEST` / :data:`LATEST`.
    """

    kind: str
    offsets: Mapping[int, int] = field(default_factory=dict)


def parse_starting_offsets(text: str | None) -> StartingOffsets:
    """Parse option ``startingOffsets`` (None: not given, i.e. ``earliest``).

    Raises
    ------
    OptionError
        Naming the option, with the malformed entry.
    """
    if text is None or text.lower() == "earliest":
        return StartingOffsets("earliest")
    if text.lower() == "latest":
        return StartingOffsets("latest")
    from spark_statestore.connectors.spark.json_values import exceeds_json_depth

    example = 'earliest, latest, or JSON like {"0": 12, "1": -2} (-2 earliest, -1 latest)'
    shown = text if len(text) <= 200 else text[:200] + "..."
    # Both forms nest at most two levels ({"topic": {"0": 12}}): deeper text is refused
    # before the recursive JSON decoder sees it.
    if exceeds_json_depth(text.encode("utf-8"), 2):  # option text is valid Unicode (_check_text)
        raise OptionError(
            f'option \'startingOffsets\' nests deeper than {{"topic": {{"0": 12}}}}; it '
            f"must be {example}, got {shown!r}"
        )
    try:
        raw = json.loads(text)
    except ValueError:
        raise OptionError(f"option 'startingOffsets' must be {example}, got {shown!r}") from None
    if isinstance(raw, dict) and len(raw) == 1 and isinstance(next(iter(raw.values())), dict):
        raw = next(iter(raw.values()))  # Spark's Kafka form: {"topic": {"0": 12}}
    if not isinstance(raw, dict) or not raw:
        raise OptionError(f"option 'startingOffsets' must be {example}, got {shown!r}")
    offsets: dict[int, int] = {}
    for key, offset in raw.items():
        partition = ascii_integer(key)
        if (
            partition is None
            or not 0 <= partition <= MAX_PARTITION
            or partition in offsets
            or isinstance(offset, bool)
            or not isinstance(offset, int)
            or not EARLIEST <= offset <= INT64_MAX
        ):
            why = "names its partition twice" if partition in offsets else "is malformed"
            raise OptionError(
                f"option 'startingOffsets': entry {key[:40]!r}: {str(offset)[:40]} {why}; "
                f"expected {example}, with partitions in ASCII digits from 0 to "
                f"{MAX_PARTITION} and offsets up to {INT64_MAX}"
            )
        offsets[partition] = offset
    return StartingOffsets("json", offsets)
