"""Filter pushdown of the snapshot reader: Spark filters turned into one store scan.

Only filters the store answers *exactly* are pushed (Spark does not re-check pushed
filters): ``key = x``, ``key IN (...)``, key ranges (``<``, ``<=``, ``>``, ``>=``) for the
binary and string key formats (whose byte order is Spark's order), ``startswith(key, p)``
for binary and string keys, and ``partition = n`` / ``partition IN (...)``. Everything
else is returned to Spark, which filters the rows itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)

from spark_statestore.store.scan import ScanSpec

__all__ = ["Pushdown", "push_filters"]


@dataclass
class Pushdown:
    """What the pushed filters amount to, built up filter by filter."""

    keys: set[bytes] | None = None
    lower: tuple[bytes, bool] | None = None  # (bound, inclusive)
    upper: tuple[bytes, bool] | None = None
    prefix: bytes | None = None
    partitions: set[int] | None = None
    pushed: list[str] = field(default_factory=list)

    def spec(self) -> ScanSpec:
        """The scan the pushed filters describe."""
        if self.keys is not None:
            spec = ScanSpec.for_keys(sorted(self.keys))
            if self.lower is not None or self.upper is not None:
                spec = _with_bounds(spec, self.lower, self.upper)
        elif self.lower is not None or self.upper is not None:
            spec = _with_bounds(ScanSpec.everything(), self.lower, self.upper)
        else:
            spec = ScanSpec.everything()
        if self.prefix is not None:
            spec = _replace(spec, prefix=self.prefix)
        if self.partitions is not None:
            spec = spec.with_partitions(frozenset(self.partitions))
        return spec

    def _key_values(self, values: Iterable[bytes]) -> None:
        wanted = set(values)
        self.keys = wanted if self.keys is None else self.keys & wanted

    def _bound(self, side: str, value: bytes, inclusive: bool) -> None:
        current = getattr(self, side)
        if current is None:
            setattr(self, side, (value, inclusive))
            return
        old, old_inclusive = current
        tighter = value > old if side == "lower" else value < old
        if tighter or (value == old and not inclusive):
            setattr(self, side, (value, inclusive and (value != old or old_inclusive)))


def _replace(spec: ScanSpec, **changes: Any) -> ScanSpec:
    import dataclasses

    return dataclasses.replace(spec, **changes)


def _with_bounds(
    spec: ScanSpec, lower: tuple[bytes, bool] | None, upper: tuple[bytes, bool] | None
) -> ScanSpec:
    return _replace(
        spec,
        lower=None if lower is None else lower[0],
        lower_inclusive=True if lower is None else lower[1],
        upper=None if upper is None else upper[0],
        upper_inclusive=True if upper is None else upper[1],
    )


def push_filters(
    filters: Iterable[Filter], key_codec: Any, *, keys: bool = True
) -> tuple[Pushdown, list[Filter]]:
    """Split ``filters`` into the pushed scan and the filters Spark must still apply.

    ``keys=False`` pushes no filter on ``key`` (a window or session store, whose stored keys
    are not the ``key`` column's values).
    """
    pushdown = Pushdown()
    rest: list[Filter] = []
    for item in filters:
        if (keys or getattr(item, "attribute", ()) != ("key",)) and _push(
            item, pushdown, key_codec
        ):
            pushdown.pushed.append(repr(item))
        else:
            rest.append(item)
    return pushdown, rest


def _encode(codec: Any, value: Any) -> bytes | None:
    try:
        return bytes(codec.encode(value))
    except (TypeError, ValueError, OverflowError):
        return None


def _push(item: Filter, pushdown: Pushdown, codec: Any) -> bool:
    column = getattr(item, "attribute", ())
    if column == ("partition",):
        if isinstance(item, EqualTo) and isinstance(item.value, int):
            wanted = {item.value}
        elif isinstance(item, In) and all(isinstance(v, int) for v in item.value):
            wanted = set(item.value)
        else:
            return False
        pushdown.partitions = (
            wanted if pushdown.partitions is None else pushdown.partitions & wanted
        )
        return True
    if column != ("key",):
        return False
    if isinstance(item, EqualTo):
        encoded = _encode(codec, item.value)
        if encoded is None:
            return False
        pushdown._key_values([encoded])
        return True
    if isinstance(item, In):
        values = [_encode(codec, v) for v in item.value if v is not None]
        if any(v is None for v in values):
            return False
        pushdown._key_values(v for v in values if v is not None)
        return True
    if not codec.order_preserving:
        return False
    if isinstance(item, StringStartsWith):
        if pushdown.prefix is not None or not item.value:
            return False
        pushdown.prefix = item.value.encode()
        return True
    bounds = {
        GreaterThan: ("lower", False),
        GreaterThanOrEqual: ("lower", True),
        LessThan: ("upper", False),
        LessThanOrEqual: ("upper", True),
    }
    for kind, (side, inclusive) in bounds.items():
        if isinstance(item, kind):
            encoded = _encode(codec, getattr(item, "value", None))
            if encoded is None:
                return False
            pushdown._bound(side, encoded, inclusive)
            return True
    return False
