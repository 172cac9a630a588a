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


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _check_time(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise QueryError(f"{what} must be epoch milliseconds (an int), got {value!r}")
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise QueryError(f"{what} {value} is outside the int64 range of Kafka timestamps")
    return value


@dataclass(frozen=True, slots=True)
class VersionedKeyQuery(Generic[K, V]):
    """One key's value in a versioned store, as Kafka Streams' ``VersionedKeyQuery``: the
    latest, or the one valid at a time. The result is a
    :class:`~spark_statestore.query.VersionedRecord`, or None.

    Build with :meth:`with_key`, then optionally :meth:`as_of`. As in Kafka Streams, a time
    older than the key's partition's stream time minus the history retention only finds a
    latest value that was valid by then.
    """

    key: K
    as_of_timestamp: int | None = None

    @classmethod
    def with_key(cls, key: K) -> VersionedKeyQuery[K, Any]:
        """A query for the latest value of ``key``."""
        _check_not_none(key, "VersionedKeyQuery key")
        return cls(key)

    def as_of(self, timestamp: int) -> VersionedKeyQuery[K, V]:
        """A copy asking for the value valid at ``timestamp`` (epoch milliseconds)."""
        return replace(self, as_of_timestamp=_check_time(timestamp, "VersionedKeyQuery as_of"))


@dataclass(frozen=True, slots=True)
class MultiVersionedKeyQuery(Generic[K, V]):
    """The versions of one key valid during a time interval, as Kafka Streams'
    ``MultiVersionedKeyQuery``. The result is a list of
    :class:`~spark_statestore.query.VersionedRecord`, newest first unless
    :meth:`with_ascending_timestamps`.

    Build with :meth:`with_key`, then :meth:`from_time` / :meth:`to_time` (both inclusive,
    open by default). A version is returned when its validity ``[timestamp, valid_to)``
    overlaps ``[from_time, to_time]``; tombstones are not returned. Versions that ended
    before the partition's stream time minus the history retention are never returned
    (Kafka Streams may still return some of them until their segment is dropped).
    """

    key: K
    from_timestamp: int | None = None
    to_timestamp: int | None = None
    ascending: bool = False

    @classmethod
    def with_key(cls, key: K) -> MultiVersionedKeyQuery[K, Any]:
        """Every retained version of ``key``, newest first."""
        _check_not_none(key, "MultiVersionedKeyQuery key")
        return cls(key)

    def from_time(self, timestamp: int) -> MultiVersionedKeyQuery[K, V]:
        """A copy returning only versions still valid at or after ``timestamp``."""
        time = _check_time(timestamp, "MultiVersionedKeyQuery from_time")
        if self.to_timestamp is not None and time > self.to_timestamp:
            raise QueryError(
                f"MultiVersionedKeyQuery from_time {time} is after to_time {self.to_timestamp}"
            )
        return replace(self, from_timestamp=time)

    def to_time(self, timestamp: int) -> MultiVersionedKeyQuery[K, V]:
        """A copy returning only versions that began at or before ``timestamp``."""
        time = _check_time(timestamp, "MultiVersionedKeyQuery to_time")
        if self.from_timestamp is not None and time < self.from_timestamp:
            raise QueryError(
                f"MultiVersionedKeyQuery to_time {time} is before from_time {self.from_timestamp}"
            )
        return replace(self, to_timestamp=time)

    def with_ascending_timestamps(self) -> MultiVersionedKeyQuery[K, V]:
        """A copy returning the oldest version first."""
        return replace(self, ascending=True)

    def with_descending_timestamps(self) -> MultiVersionedKeyQuery[K, V]:
        """A copy returning the newest version first (the default)."""
        return replace(self, ascending=False)


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
    | VersionedKeyQuery[Any, Any]
    | MultiVersionedKeyQuery[Any, Any]
    | CustomQuery
)
"""Any query a store may be asked to execute."""

QUERY_TYPES = (
    KeyQuery,
    RangeQuery,
    PrefixQuery,
    RawKeyQuery,
    RawScanQuery,
    VersionedKeyQuery,
    MultiVersionedKeyQuery,
    CustomQuery,
)
"""The query classes a request may carry (the ``isinstance`` check of a request)."""
