"""Query value objects: what a store may be asked (KIP-796)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Generic, TypeAlias, TypeVar

from spark_statestore.query._errors import QueryError

K = TypeVar("K")
V = TypeVar("V")


# -- helpers -------------------------------------------------------------------------------
def _as_bytes(value: object, what: str, *, allow_empty: bool = True) -> bytes:
    if isinstance(value, str):
        raise QueryError(
            f"{what} must be bytes, got str {value!r}; encode it first, "
            f"e.g. {value!r}.encode('utf-8')"
        )
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise QueryError(f"{what} must be bytes, got {type(value).__name__}")
    data = bytes(value)
    if not allow_empty and not data:
        raise QueryError(f"{what} must not be empty")
    return data


def _check_not_none(value: object, what: str) -> None:
    if value is None:
        raise QueryError(f"{what} must not be None")


def _check_range(lower: object, upper: object) -> None:
    if lower is None or upper is None:
        return
    try:
        inverted = lower > upper  # type: ignore[operator]
    except TypeError:
        if type(lower) is not type(upper):
            raise QueryError(
                f"range bounds {lower!r} and {upper!r} have different, incomparable types"
            ) from None
        return  # an unordered key type: the store orders keys by their serialized bytes
    if isinstance(inverted, bool) and inverted:
        raise QueryError(
            f"range lower bound {lower!r} is greater than upper bound {upper!r}; "
            "both bounds are inclusive, swap them or use with_descending_keys() for reverse order"
        )


# -- queries -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class KeyQuery(Generic[K, V]):
    """Look up the value of one key; the result is the value, or None when absent.

    Build with :meth:`with_key`.
    """

    key: K

    @classmethod
    def with_key(cls, key: K) -> KeyQuery[K, Any]:
        """A query for the value of ``key`` (any key object the store's key serde accepts)."""
        _check_not_none(key, "KeyQuery key")
        return cls(key)


@dataclass(frozen=True, slots=True)
class RangeQuery(Generic[K, V]):
    """Scan the keys between two optional bounds, both inclusive (as Kafka's ``RangeQuery``).

    Build with :meth:`with_range`, :meth:`with_lower_bound`, :meth:`with_upper_bound` or
    :meth:`with_no_bounds` (class-level constructors: each builds a fresh ascending query),
    then choose the order with :meth:`with_descending_keys` / :meth:`with_ascending_keys`.
    """

    lower: K | None = None
    upper: K | None = None
    descending: bool = False

    @classmethod
    def with_range(cls, lower: K | None, upper: K | None) -> RangeQuery[K, Any]:
        """Keys in ``[lower, upper]``; a None bound leaves that end open.

        Raises
        ------
        QueryError
            If both bounds are comparable and ``lower > upper``.
        """
        _check_range(lower, upper)
        return cls(lower, upper)

    @classmethod
    def with_lower_bound(cls, lower: K) -> RangeQuery[K, Any]:
        """Keys ``>= lower``."""
        _check_not_none(lower, "RangeQuery lower bound")
        return cls(lower, None)

    @classmethod
    def with_upper_bound(cls, upper: K) -> RangeQuery[K, Any]:
        """Keys ``<= upper``."""
        _check_not_none(upper, "RangeQuery upper bound")
        return cls(None, upper)

    @classmethod
    def with_no_bounds(cls) -> RangeQuery[Any, Any]:
        """Every key of the store."""
        return cls(None, None)

    def with_descending_keys(self) -> RangeQuery[K, V]:
        """A copy that returns keys from the largest to the smallest."""
        return replace(self, descending=True)

    def with_ascending_keys(self) -> RangeQuery[K, V]:
        """A copy that returns keys from the smallest to the largest (the default)."""
        return replace(self, descending=False)


@dataclass(frozen=True, slots=True)
class PrefixQuery:
    """Scan the keys whose serialized bytes start with ``prefix``, in ascending order."""

    prefix: bytes

    @classmethod
    def with_prefix(cls, prefix: bytes) -> PrefixQuery:
        """Keys starting with ``prefix`` (non-empty bytes; scan with :class:`RawScanQuery`)."""
        return cls(_as_bytes(prefix, "PrefixQuery prefix", allow_empty=False))


@dataclass(frozen=True, slots=True)
class RawKeyQuery:
    """Look up the value bytes stored under raw key bytes; the result is bytes or None."""

    key: bytes

    @classmethod
    def with_key(cls, key: bytes) -> RawKeyQuery:
        """A query for the value stored under ``key`` (bytes-like, copied to bytes)."""
        return cls(_as_bytes(key, "RawKeyQuery key"))


@dataclass(frozen=True, slots=True)
class RawScanQuery:
    """Scan all ``(key, value)`` byte pairs of the store in key order, optionally limited."""

    limit: int | None = None

    @classmethod
    def scan(cls) -> RawScanQuery:
        """Every record of the store."""
        return cls(None)

    def with_limit(self, limit: int) -> RawScanQuery:
        """A copy that stops after ``limit`` records (an int >= 1)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise QueryError(f"RawScanQuery limit must be an int >= 1, got {limit!r}")
        return replace(self, limit=limit)


class CustomQuery:
    """Base class of queries defined outside this package (IQv2's custom ``Query``).

    A request may carry any subclass; a store that does not know how to execute it answers
    with ``FailureReason.UNKNOWN_QUERY_TYPE`` instead of raising.
    """

    __slots__ = ()


Query: TypeAlias = (
    KeyQuery[Any, Any]
    | RangeQuery[Any, Any]
    | PrefixQuery
    | RawKeyQuery
    | RawScanQuery
    | CustomQuery
)
"""Any query a store may be asked to execute."""

_QUERY_TYPES = (KeyQuery, RangeQuery, PrefixQuery, RawKeyQuery, RawScanQuery, CustomQuery)
