"""Scan descriptions shared by the local and the remote (Flight) read paths.

A :class:`ScanSpec` says which rows of a snapshot to read: exact keys (a multi-get), key
bounds (each inclusive or exclusive), a key prefix, a set of changelog partitions and a row
limit, in any combination (they AND together). The Spark snapshot reader builds one from its
pushed-down filters; :func:`~spark_statestore.store.scan.scan_batches` runs it against a
:class:`~spark_statestore.store.snapshot.Snapshot`, and
:func:`~spark_statestore.store.versioned_scan.as_of_rows` as of a time. Specs travel between
processes as JSON (:meth:`ScanSpec.to_json`, keys as base64), decoded strictly (they may come
from an untrusted peer).
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from spark_statestore.errors import closest_hint
from spark_statestore.store.errors import InvalidScanError

__all__ = ["KeyRange", "ScanSpec", "ScanStats", "in_range", "prefix_end"]

_FIELDS = (
    "keys",
    "lower",
    "lower_inclusive",
    "upper",
    "upper_inclusive",
    "prefix",
    "partitions",
    "limit",
    "as_of",
    "framed_ids",
)
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


KeyRange = tuple[bytes | None, bytes | None, bool]
"""An effective key range: (inclusive lower or None, upper or None, upper inclusive?)."""


@dataclass(frozen=True, slots=True)
class ScanSpec:
    """Which rows of a store snapshot to read; every given condition must hold.

    Build one with :meth:`everything`, :meth:`for_keys`, :meth:`between` or
    :meth:`with_prefix`, narrow it with :meth:`with_partitions`, :meth:`with_limit` or
    :meth:`intersect`. Rows come out in ascending key order.

    Parameters
    ----------
    keys
        Exact keys to look up (a multi-get, read as point reads), or None for "not a key
        lookup". Normalised to sorted, distinct keys; ``()`` selects nothing.
    lower, upper
        Key bounds (None: open), inclusive unless ``lower_inclusive`` / ``upper_inclusive``
        is False. ``lower > upper`` selects nothing.
    prefix
        Keep only keys starting with it (None: no prefix condition).
    partitions
        Keep only rows whose changelog partition (from the record envelope) is in it;
        rows of unknown partition never match. None: every partition.
    limit
        At most this many rows (None: no limit; 0 selects nothing).
    as_of
        For a versioned store: each key's version valid at this time (epoch milliseconds)
        instead of its latest value; the row's timestamp is when that version began. None:
        the latest values.
    framed_ids
        The keys and bounds are a schema registry's framed keys (magic byte 0, a 4-byte
        schema id, the payload) encoded under these schema ids only. A scan first checks
        that the snapshot holds no key framed with another id (nor a key that is not
        framed), and fails with :class:`~spark_statestore.store.errors.UncoveredKeySchemaError`
        if it does: the same logical key stored under another id would have other bytes, so
        answering without it could say "absent" for a key that is there. None: no check.

    Raises
    ------
    InvalidScanError
        If a field has the wrong type (keys and bounds must be bytes) or a negative value.
    """

    keys: tuple[bytes, ...] | None = None
    lower: bytes | None = None
    lower_inclusive: bool = True
    upper: bytes | None = None
    upper_inclusive: bool = True
    prefix: bytes | None = None
    partitions: frozenset[int] | None = None
    limit: int | None = None
    as_of: int | None = None
    framed_ids: frozenset[int] | None = None

    def __post_init__(self) -> None:
        if self.keys is not None:
            keys = self.keys
            if isinstance(keys, (bytes, bytearray, memoryview, str)):
                raise InvalidScanError(
                    f"ScanSpec keys must be a collection of bytes keys, got the single value "
                    f"{keys!r}; wrap it: ScanSpec.for_keys([key])"
                )
            try:
                items = list(keys)
            except TypeError:
                raise InvalidScanError(
                    f"ScanSpec keys must be a collection of bytes keys, got {keys!r}"
                ) from None
            if set(map(type, items)) <= _BYTES:  # the common case, checked in C
                normalized = sorted(set(items))
            else:
                normalized = sorted({_as_bytes(key, "key") for key in items})
            object.__setattr__(self, "keys", tuple(normalized))
        for name in ("lower", "upper", "prefix"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _as_bytes(value, name))
        for name in ("lower_inclusive", "upper_inclusive"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidScanError(
                    f"ScanSpec {name} must be True or False, got {getattr(self, name)!r}"
                )
        if self.partitions is not None:
            object.__setattr__(self, "partitions", _as_partitions(self.partitions))
        limit = self.limit
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise InvalidScanError(f"ScanSpec limit must be an int >= 0 or None, got {limit!r}")
        if limit is not None and not 0 <= limit <= _INT64_MAX:
            raise InvalidScanError(f"ScanSpec limit must be in [0, 2**63-1] (or None), got {limit}")
        as_of = self.as_of
        if as_of is not None and (
            isinstance(as_of, bool)
            or not isinstance(as_of, int)
            or not -_INT64_MAX - 1 <= as_of <= _INT64_MAX
        ):
            raise InvalidScanError(
                f"ScanSpec as_of must be epoch milliseconds (an int64) or None, got {as_of!r}"
            )
        if self.framed_ids is not None:
            object.__setattr__(self, "framed_ids", _as_schema_ids(self.framed_ids))

    # -- named constructors ---------------------------------------------------------------
    @classmethod
    def everything(cls) -> ScanSpec:
        """Every row of the snapshot."""
        return cls()

    @classmethod
    def for_keys(cls, keys: Iterable[bytes]) -> ScanSpec:
        """Exactly these keys (those that exist), read as point reads."""
        if isinstance(keys, (bytes, bytearray, memoryview, str)):
            raise InvalidScanError(
                f"ScanSpec.for_keys() takes a collection of keys, got the single value "
                f"{keys!r}; use ScanSpec.for_keys([key])"
            )
        return cls(keys=tuple(keys))

    @classmethod
    def between(
        cls,
        lower: bytes | None,
        upper: bytes | None,
        *,
        lower_inclusive: bool = True,
        upper_inclusive: bool = True,
    ) -> ScanSpec:
        """Keys between ``lower`` and ``upper`` (None: open end), inclusive by default."""
        return cls(
            lower=lower,
            upper=upper,
            lower_inclusive=lower_inclusive,
            upper_inclusive=upper_inclusive,
        )

    @classmethod
    def with_prefix(cls, prefix: bytes) -> ScanSpec:
        """Keys starting with ``prefix``."""
        return cls(prefix=prefix)

    # -- narrowing ------------------------------------------------------------------------
    def with_partitions(self, partitions: Iterable[int]) -> ScanSpec:
        """A copy that keeps only rows of these changelog partitions (replacing any set)."""
        return replace(self, partitions=_as_partitions(partitions))

    def with_as_of(self, as_of: int | None) -> ScanSpec:
        """A copy reading each key's version valid at ``as_of`` (a versioned store)."""
        return replace(self, as_of=as_of)

    def with_limit(self, limit: int | None) -> ScanSpec:
        """A copy returning at most ``limit`` rows (None: no limit)."""
        return replace(self, limit=limit)

    def intersect(self, other: ScanSpec) -> ScanSpec:
        """The spec of the rows both specs select (filters ANDed together).

        Keys and partitions intersect, the tighter bound of each end wins, the smaller
        limit wins; two prefixes where neither extends the other select nothing.
        """
        if not isinstance(other, ScanSpec):
            raise InvalidScanError(f"ScanSpec.intersect() takes a ScanSpec, got {other!r}")
        keys = _meet(self.keys, other.keys, lambda a, b: tuple(sorted(set(a) & set(b))))
        partitions = _meet(self.partitions, other.partitions, lambda a, b: a & b)
        framed_ids = _meet(self.framed_ids, other.framed_ids, lambda a, b: a & b)
        limit = _meet(self.limit, other.limit, min)
        if None not in (self.as_of, other.as_of) and self.as_of != other.as_of:
            raise InvalidScanError(
                f"cannot intersect scans as of two times ({self.as_of} and {other.as_of})"
            )
        as_of = self.as_of if self.as_of is not None else other.as_of
        prefix = self.prefix
        if other.prefix is not None:
            if prefix is None or other.prefix.startswith(prefix):
                prefix = other.prefix
            elif not prefix.startswith(other.prefix):
                keys = ()  # disjoint prefixes: nothing matches
        lower, lower_inclusive = self.lower, self.lower_inclusive
        if other.lower is not None and (
            lower is None
            or other.lower > lower
            or (other.lower == lower and not other.lower_inclusive)
        ):
            lower, lower_inclusive = other.lower, other.lower_inclusive
        upper, upper_inclusive = self.upper, self.upper_inclusive
        if other.upper is not None and (
            upper is None
            or other.upper < upper
            or (other.upper == upper and not other.upper_inclusive)
        ):
            upper, upper_inclusive = other.upper, other.upper_inclusive
        return ScanSpec(
            keys=keys,
            lower=lower,
            lower_inclusive=lower_inclusive,
            upper=upper,
            upper_inclusive=upper_inclusive,
            prefix=prefix,
            partitions=partitions,
            limit=limit,
            as_of=as_of,
            framed_ids=framed_ids,
        )

    # -- what it selects ------------------------------------------------------------------
    def is_empty(self) -> bool:
        """True when the spec selects nothing whatever the store holds (scans read nothing)."""
        return (
            self.keys == ()
            or self.limit == 0
            or self.partitions == frozenset()
            or self.key_range() is None
        )

    def matches_key(self, key: bytes) -> bool:
        """Whether ``key`` satisfies the key conditions (keys, bounds, prefix)."""
        if self.keys is not None and key not in self.keys:
            return False
        bounds = self.key_range()
        return bounds is not None and in_range(key, bounds)

    def key_range(self) -> KeyRange | None:
        """Bounds and prefix as one range (inclusive lower, upper, upper inclusive?), or
        None when it is empty."""
        lower: bytes | None = None
        if self.lower is not None:
            # The smallest key above ``lower`` is ``lower + b"\x00"``.
            lower = self.lower if self.lower_inclusive else self.lower + b"\x00"
        upper, upper_inclusive = self.upper, self.upper_inclusive
        if self.prefix:
            if lower is None or self.prefix > lower:
                lower = self.prefix
            end = prefix_end(self.prefix)
            if end is not None and (upper is None or end <= upper):
                upper, upper_inclusive = end, False
        if (
            lower is not None
            and upper is not None
            and (lower > upper or (lower == upper and not upper_inclusive))
        ):
            return None
        return lower, upper, upper_inclusive

    # -- JSON -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON-compatible form (bytes as base64 strings), see :meth:`to_json`."""
        return {
            "keys": None if self.keys is None else _b64_all(self.keys),
            "lower": _b64(self.lower),
            "lower_inclusive": self.lower_inclusive,
            "upper": _b64(self.upper),
            "upper_inclusive": self.upper_inclusive,
            "prefix": _b64(self.prefix),
            "partitions": None if self.partitions is None else sorted(self.partitions),
            "limit": self.limit,
            "as_of": self.as_of,
            "framed_ids": None if self.framed_ids is None else sorted(self.framed_ids),
        }

    def to_json(self) -> str:
        """Compact deterministic JSON: ``{"keys": ["<base64>", ...] | null, "lower":
        "<base64>" | null, "lower_inclusive": true, "upper": ..., "upper_inclusive": ...,
        "prefix": ..., "partitions": [0, 2] | null, "limit": 10 | null, "as_of": null,
        "framed_ids": [3, 7] | null}``."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScanSpec:
        """Build from :meth:`to_dict`'s form; missing fields take their defaults.

        Raises
        ------
        InvalidScanError
            On unknown fields (naming the closest valid one), wrong types or bad base64.
        """
        if not isinstance(data, Mapping):
            raise InvalidScanError(f"a scan spec must be a JSON object, got {data!r}")
        for name in data:
            if name not in _FIELDS:
                raise InvalidScanError(
                    f"scan spec JSON has an unknown field {name!r}"
                    + closest_hint(str(name), _FIELDS, noun="fields")
                )
        keys = data.get("keys")
        if keys is not None and not isinstance(keys, list):
            raise InvalidScanError(f"scan spec field 'keys' must be a list or null, got {keys!r}")
        partitions = data.get("partitions")
        framed_ids = data.get("framed_ids")
        for name, items in (("partitions", partitions), ("framed_ids", framed_ids)):
            if items is not None and not isinstance(items, list):
                raise InvalidScanError(
                    f"scan spec field {name!r} must be a list or null, got {items!r}"
                )
        return cls(
            keys=None if keys is None else _unb64_keys(keys),
            lower=_unb64(data.get("lower"), "lower"),
            lower_inclusive=data.get("lower_inclusive", True),
            upper=_unb64(data.get("upper"), "upper"),
            upper_inclusive=data.get("upper_inclusive", True),
            prefix=_unb64(data.get("prefix"), "prefix"),
            partitions=None if partitions is None else _as_partitions(partitions),
            limit=data.get("limit"),
            as_of=data.get("as_of"),
            framed_ids=None if framed_ids is None else _as_schema_ids(framed_ids),
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> ScanSpec:
        """Parse :meth:`to_json`'s output.

        Raises
        ------
        InvalidScanError
            If ``text`` is not JSON, not an object, or has malformed fields.
        """
        try:
            data = json.loads(text)
        except (ValueError, TypeError, RecursionError) as exc:
            raise InvalidScanError(
                f"scan spec is not valid JSON ({exc}); expected an object like "
                f'{{"keys": null, "lower": "YQ==", "upper": null, "limit": 10}}'
            ) from exc
        return cls.from_dict(data)


@dataclass(slots=True)
class ScanStats:
    """Counters of :func:`scan_batches` (accumulated over every scan given the same object).

    Parameters
    ----------
    rows_examined
        Records read from LevelDB, before the partition filter.
    rows_returned
        Rows yielded.
    """

    rows_examined: int = 0
    rows_returned: int = 0


# -- helpers ------------------------------------------------------------------------------
def in_range(key: bytes, bounds: KeyRange) -> bool:
    """Whether ``key`` lies in ``bounds`` (:meth:`ScanSpec.key_range`)."""
    lower, upper, upper_inclusive = bounds
    if lower is not None and key < lower:
        return False
    if upper is None:
        return True
    return key < upper or (upper_inclusive and key == upper)


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key above every key starting with ``prefix`` (None: there is none)."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


def _meet(a: Any, b: Any, combine: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return combine(a, b)


def _as_bytes(value: object, name: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    hint = " (encode it, e.g. value.encode())" if isinstance(value, str) else ""
    raise InvalidScanError(f"ScanSpec {name} must be bytes, got {value!r}{hint}")


def _as_partitions(partitions: Iterable[int]) -> frozenset[int]:
    if isinstance(partitions, (str, bytes)) or not isinstance(partitions, Iterable):
        raise InvalidScanError(
            f"ScanSpec partitions must be a collection of ints, got {partitions!r}"
        )
    out = set()
    for partition in partitions:
        if (
            isinstance(partition, bool)
            or not isinstance(partition, int)
            or not 0 <= partition <= _INT32_MAX
        ):
            raise InvalidScanError(
                f"ScanSpec partitions must be ints in [0, 2**31-1], got {partition!r}"
            )
        out.add(partition)
    return frozenset(out)


def _as_schema_ids(ids: Iterable[int]) -> frozenset[int]:
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise InvalidScanError(f"ScanSpec framed_ids must be a collection of ints, got {ids!r}")
    out = set()
    for schema_id in ids:
        if isinstance(schema_id, bool) or not isinstance(schema_id, int):
            raise InvalidScanError(f"ScanSpec framed_ids must be ints, got {schema_id!r}")
        if not -_INT32_MAX - 1 <= schema_id <= _INT32_MAX:
            raise InvalidScanError(f"ScanSpec framed_ids must be 32-bit schema ids: {schema_id}")
        out.add(schema_id)
    return frozenset(out)


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode("ascii")


_BYTES = frozenset({bytes})
_STR = frozenset({str})
# One C call per key, looped over in C (map): the key lists of multi-gets are long.
_B2A = functools.partial(binascii.b2a_base64, newline=False)
_A2B = functools.partial(binascii.a2b_base64, strict_mode=True)  # base64.b64decode(validate=True)


def _b64_all(keys: Iterable[bytes]) -> list[str]:
    """``_b64`` of many keys (one C call each: the key lists of multi-gets are long)."""
    return list(map(bytes.decode, map(_B2A, keys)))


def _unb64_keys(values: list[object]) -> tuple[bytes, ...]:
    """The keys of a scan spec's ``keys`` field: base64 strings, each strictly checked."""
    try:
        if set(map(type, values)) <= _STR:
            return tuple(map(_A2B, values))
    except (binascii.Error, ValueError):
        pass  # name the bad one below
    return tuple(_unb64_key(value) for value in values)


def _unb64_key(value: object) -> bytes:
    if value is None:
        raise InvalidScanError("scan spec field 'keys' holds null; keys must be base64 strings")
    key = _unb64(value, "keys")
    assert key is not None
    return key


def _unb64(value: object, name: str) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidScanError(
            f"scan spec field {name!r} must hold base64 strings or null, got {value!r}"
        )
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise InvalidScanError(
            f"scan spec field {name!r} holds {value[:40]!r}, which is not base64 ({exc})"
        ) from None
