"""Positions and position bounds (KIP-796).

A :class:`Position` maps topic -> partition -> offset, where the offset is the offset *of the
last processed input record* (not +1, unlike a consumer's committed offset). Stores carry the
position of the input that produced their content; queries can demand a minimum position
with a :class:`PositionBound` ("read your writes").

JSON uses the shape of Spark's Kafka offsets JSON: ``{"topic": {"0": 42, "1": 7}}``. The same
shape as a dict (``to_dict``/``from_dict``) is how positions and bounds cross process
boundaries (the store server's protocol); the JSON text is for users (options, output).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from spark_statestore.errors import InvalidPositionError

__all__ = ["Position", "PositionBound"]

_Entry = tuple[str, int, int]
_INT32_MAX = 2**31 - 1


def _check_entry(topic: object, partition: object, offset: object) -> _Entry:
    if not isinstance(topic, str) or not topic:
        raise InvalidPositionError(f"position topic must be a non-empty string, got {topic!r}")
    if (
        isinstance(partition, bool)
        or not isinstance(partition, int)
        or not 0 <= partition <= _INT32_MAX
    ):
        raise InvalidPositionError(
            f"position partition of topic {topic!r} must be an int in [0, 2**31-1], "
            f"got {partition!r}"
        )
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidPositionError(
            f"position offset of {topic}-{partition} must be an int >= 0, got {offset!r}"
        )
    if offset > 2**63 - 1:
        raise InvalidPositionError(f"position offset of {topic}-{partition} exceeds int64")
    return (topic, partition, offset)


def _partition_number(topic: object, partition: object) -> int:
    """A partition given as an object key: the canonical decimal text of an int."""
    if not isinstance(partition, str):
        raise InvalidPositionError(
            f"position JSON for topic {topic!r} has partition {partition!r}; partitions are "
            'decimal text, like "0"'
        )
    try:
        number = int(partition)
    except ValueError:
        raise InvalidPositionError(
            f"position JSON for topic {topic!r} has a non-integer partition {partition!r}"
        ) from None
    if str(number) != partition:
        raise InvalidPositionError(
            f"position JSON for topic {topic!r} has a malformed partition {partition!r}"
        )
    return number


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """json object hook: a key given twice is an error, not "last one wins"."""
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice")
        out[key] = value
    return out


@dataclass(frozen=True, slots=True)
class Position:
    """An immutable topic -> partition -> offset vector.

    Build one with :meth:`empty`, :meth:`from_map`, :meth:`from_dict`, :meth:`from_json` or
    :meth:`with_offset`; combine with :meth:`merge`.

    Parameters
    ----------
    entries
        ``(topic, partition, offset)`` triples, sorted, one per topic-partition. Prefer the
        named constructors, which validate and normalise.
    """

    entries: tuple[_Entry, ...] = ()

    def __post_init__(self) -> None:
        # The raw constructor is used on hot paths with pre-validated entries; still refuse
        # anything that would break equality (unsorted, duplicate topic-partitions) or the
        # wire format (bad types or ranges).
        previous: tuple[str, int] | None = None
        for entry in self.entries:
            if not isinstance(entry, tuple) or len(entry) != 3:
                raise InvalidPositionError(
                    f"Position entries must be (topic, partition, offset) triples, got {entry!r}"
                )
            _check_entry(*entry)
            key = (entry[0], entry[1])
            if previous is not None and key <= previous:
                raise InvalidPositionError(
                    "Position entries must be sorted with one entry per topic-partition; "
                    "use Position.from_map() or Position.from_json() to build one"
                )
            previous = key

    # -- constructors -------------------------------------------------------------------
    @classmethod
    def empty(cls) -> Position:
        """The position of a store that has processed nothing."""
        return _EMPTY

    @classmethod
    def from_map(cls, offsets: Mapping[str, Mapping[int, int]]) -> Position:
        """Build from ``{topic: {partition: offset}}``.

        Raises
        ------
        InvalidPositionError
            If a topic, partition or offset has the wrong type or a negative value.
        """
        if not isinstance(offsets, Mapping):
            raise InvalidPositionError(
                f"a position must be a mapping of topic -> partition -> offset, got {offsets!r}"
            )
        entries: list[_Entry] = []
        for topic, partitions in offsets.items():
            if not isinstance(topic, str) or not topic:
                raise InvalidPositionError(
                    f"position topic must be a non-empty string, got {topic!r}"
                )
            if not isinstance(partitions, Mapping):
                raise InvalidPositionError(
                    f"position of topic {topic!r} must map partition -> offset, got {partitions!r}"
                )
            for partition, offset in partitions.items():
                entries.append(_check_entry(topic, partition, offset))
        return cls(tuple(sorted(entries)))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Position:
        """Rebuild a position from :meth:`to_dict`'s form, ``{"topic": {"0": 42}}``.

        Partitions are the canonical decimal text of an int (as JSON object keys must be
        strings); offsets are ints. The dict may come from an untrusted peer: anything else
        is refused.

        Raises
        ------
        InvalidPositionError
            On a non-object, non-integer partitions or offsets, or negative values.
        """
        if not isinstance(data, Mapping):
            raise InvalidPositionError(
                f'a position must be an object like {{"topic": {{"0": 42}}}}, got {data!r}'
            )
        converted: dict[str, dict[int, int]] = {}
        for topic, partitions in data.items():
            if not isinstance(partitions, Mapping):
                raise InvalidPositionError(
                    f"position JSON for topic {topic!r} must be an object of partition -> "
                    f"offset, got {partitions!r}"
                )
            converted[topic] = {}
            for partition, offset in partitions.items():
                number = _partition_number(topic, partition)
                converted[topic][number] = offset
        return cls.from_map(converted)

    @classmethod
    def from_json(cls, text: str | bytes) -> Position:
        """Parse Spark's offsets-JSON shape, ``{"topic": {"0": 42}}`` (see :meth:`from_dict`).

        Raises
        ------
        InvalidPositionError
            On malformed JSON, a key given twice, non-integer partitions or offsets, or
            negative values.
        """
        try:
            raw = json.loads(text, object_pairs_hook=_unique_keys)
        except (ValueError, TypeError, RecursionError) as exc:
            raise InvalidPositionError(
                f'position JSON is not valid JSON ({exc}); expected {{"topic": {{"0": 42}}}}'
            ) from exc
        if not isinstance(raw, dict):
            raise InvalidPositionError(
                f'position JSON must be an object like {{"topic": {{"0": 42}}}}, got {text!r}'
            )
        return cls.from_dict(raw)

    # -- queries ------------------------------------------------------------------------
    def topics(self) -> frozenset[str]:
        """The topics this position has an offset for."""
        return frozenset(topic for topic, _, _ in self.entries)

    def partition_offsets(self, topic: str) -> dict[int, int]:
        """``{partition: offset}`` of one topic (empty if the topic is unknown)."""
        return {p: o for t, p, o in self.entries if t == topic}

    def offset(self, topic: str, partition: int) -> int | None:
        """The offset of one topic-partition, or None when this position has not seen it."""
        for t, p, o in self.entries:
            if t == topic and p == partition:
                return o
        return None

    def is_empty(self) -> bool:
        """True when no topic-partition has an offset."""
        return not self.entries

    def to_map(self) -> dict[str, dict[int, int]]:
        """``{topic: {partition: offset}}``, a fresh mutable copy."""
        out: dict[str, dict[int, int]] = {}
        for topic, partition, offset in self.entries:
            out.setdefault(topic, {})[partition] = offset
        return out

    def to_dict(self) -> dict[str, dict[str, int]]:
        """The JSON-ready form, ``{"topic": {"0": 42}}`` (partitions as text, as in JSON);
        :meth:`from_dict` reads it back."""
        out: dict[str, dict[str, int]] = {}
        for topic, partition, offset in self.entries:
            out.setdefault(topic, {})[str(partition)] = offset
        return out

    def to_json(self) -> str:
        """Spark's offsets-JSON shape, deterministic (sorted keys, compact)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def __iter__(self) -> Iterator[_Entry]:
        return iter(self.entries)

    def __str__(self) -> str:
        return self.to_json()

    # -- algebra ------------------------------------------------------------------------
    def with_offset(self, topic: str, partition: int, offset: int) -> Position:
        """A copy with one topic-partition set to ``offset`` (replacing, not merging)."""
        entry = _check_entry(topic, partition, offset)
        kept = [e for e in self.entries if (e[0], e[1]) != (topic, partition)]
        kept.append(entry)
        return Position(tuple(sorted(kept)))

    def merge(self, other: Position) -> Position:
        """The per-partition maximum of two positions (commutative, associative, idempotent)."""
        if not other.entries:
            return self
        if not self.entries:
            return other
        best: dict[tuple[str, int], int] = {}
        for topic, partition, offset in (*self.entries, *other.entries):
            key = (topic, partition)
            if offset > best.get(key, -1):
                best[key] = offset
        return Position(tuple(sorted((t, p, o) for (t, p), o in best.items())))

    def dominates(self, other: Position) -> bool:
        """True when this position has seen every topic-partition of ``other`` at least as far.

        Equivalent to ``PositionBound.at(other).permits(self)``.
        """
        mine = {(t, p): o for t, p, o in self.entries}
        return all(mine.get((t, p), -1) >= o for t, p, o in other.entries)


_EMPTY = Position(())


@dataclass(frozen=True, slots=True)
class PositionBound:
    """The minimum position a query result must reflect.

    ``PositionBound.unbounded()`` accepts any store; ``PositionBound.at(position)`` accepts a
    store whose position has reached ``position`` (see :meth:`permits`).
    """

    position: Position | None = None

    @classmethod
    def unbounded(cls) -> PositionBound:
        """A bound every store satisfies (no freshness requirement)."""
        return _UNBOUNDED

    @classmethod
    def at(cls, position: Position) -> PositionBound:
        """A bound requiring the store to have processed at least ``position``."""
        if not isinstance(position, Position):
            raise InvalidPositionError(
                f"PositionBound.at() takes a Position, got {type(position).__name__}"
            )
        return cls(position)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> PositionBound:
        """Rebuild a bound from :meth:`to_dict`'s form: None is the unbounded bound, a
        position's dict (:meth:`Position.from_dict`) the bound at that position.

        Raises
        ------
        InvalidPositionError
            If ``data`` is neither None nor a valid position dict.
        """
        return _UNBOUNDED if data is None else cls.at(Position.from_dict(data))

    @classmethod
    def from_json(cls, text: str | bytes) -> PositionBound:
        """``PositionBound.at(Position.from_json(text))``."""
        return cls.at(Position.from_json(text))

    def is_unbounded(self) -> bool:
        """True for the bound that accepts every store."""
        return self.position is None

    def permits(self, seen: Position, partition: int | None = None) -> bool:
        """Whether a store at position ``seen`` satisfies this bound.

        Kafka's rule (``StoreQueryUtils.isPermitted``): for every topic-partition of the bound
        that applies, the store must have seen that topic-partition and be at or beyond the
        bound's offset. A bounded topic-partition the store has never seen does *not* satisfy
        the bound: nothing proves the write it asks for has arrived.

        Parameters
        ----------
        seen
            The store's (or snapshot's) position.
        partition
            When given, only the bound's entries for this partition number apply, as in Kafka
            Streams where store partition *n* holds input partition *n*. When None (the whole
            store), every entry of the bound applies.
        """
        if self.position is None:
            return True
        mine = {(t, p): o for t, p, o in seen.entries}
        for topic, bound_partition, offset in self.position.entries:
            if partition is not None and bound_partition != partition:
                continue
            have = mine.get((topic, bound_partition))
            if have is None or have < offset:
                return False
        return True

    def to_dict(self) -> dict[str, dict[str, int]] | None:
        """The bound's position as :meth:`Position.to_dict`, or None when unbounded."""
        return None if self.position is None else self.position.to_dict()

    def to_json(self) -> str | None:
        """The bound's position as offsets JSON, or None when unbounded."""
        return None if self.position is None else self.position.to_json()

    def __str__(self) -> str:
        return "unbounded" if self.position is None else f"at {self.position.to_json()}"


_UNBOUNDED = PositionBound(None)
