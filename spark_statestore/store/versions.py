"""Versioned stores: every key's versions over time, as Kafka Streams' versioned stores keep them.

Kafka Streams' ``VersionedKeyValueStore`` (KIP-889; queries KIP-960/968) logs each
``put(key, value, timestamp)`` to its changelog as a record with the key, the value (None:
"deleted as of" the timestamp) and the version's timestamp, in put order, which is not
timestamp order. Its RocksDB store (``RocksDBVersionedStore``) then behaves as follows, and so
does a versioned store here, partition by partition:

- a record older than the partition's *observed stream time* (the largest timestamp put so
  far) minus the history retention is dropped (the retention doubles as the grace period);
- otherwise it becomes the key's version at its timestamp, replacing one at the same
  timestamp; a version is valid from its timestamp until the next version's (``valid_to``),
  the latest until further notice; a tombstone version means "no value" over its interval;
- a read of the latest value ignores the retention; a read "as of" a time before stream time
  minus retention returns only a latest value that began by then (Kafka Streams returns null
  for the rest, "for predictability", even while older data is still on disk).

On disk (docs/store.md, "Versioned stores") the latest version of a key, when it is a value,
is the key's ordinary record in the data namespace, so every key-value read (SQL, range and
key queries, the Flight server) sees the latest values. Every other version (older ones, and
a latest tombstone) is a history record ``b"h" + escaped key + b"\\x00\\x00" + int64
timestamp``: keys escape ``0x00`` as ``0x00 0xff``, so history records sort by key, then by
timestamp. The partitions' observed stream times are one metadata record, committed with the
data. Versions that ended before stream time minus retention are removed when their key is
next written; reads never return them.
"""

from __future__ import annotations

import bisect
import json
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from spark_statestore.query import VersionedRecord
from spark_statestore.store.errors import StoreCorruptedError

if TYPE_CHECKING:
    from spark_statestore.store.gate import Gate

from spark_statestore.store.layout import (
    DATA_PREFIX,
    HISTORY_PREFIX,
    HISTORY_STOP,
    META_STREAM_TIME,
    NO_VALUE,
    decode_record,
    iterate,
    pack_header,
)

__all__ = [
    "HISTORY_PREFIX",
    "META_STREAM_TIME",
    "Version",
    "VersionedRecord",
    "VersionedWriter",
    "history_key",
    "history_range",
    "key_versions",
    "version_as_of",
    "versions_between",
]

_TERMINATOR: Final = b"\x00\x00"
_TIME: Final = struct.Struct(">Q")
_TIME_BIAS: Final = 2**63  # signed epoch millis -> unsigned, order-preserving
_VALUE_HEADER: Final = struct.Struct(">Biq")  # kind, partition, offset
_VALUE, _TOMBSTONE = 0, 1
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Version:
    """One version of a key as stored: valid from ``valid_from`` until the next version.

    Parameters
    ----------
    valid_from
        The version's timestamp (epoch milliseconds).
    value
        The value bytes, or None for a tombstone ("deleted as of ``valid_from``").
    partition, offset
        The changelog partition and offset of the record that wrote it (None: unknown).
    """

    valid_from: int
    value: bytes | None
    partition: int | None
    offset: int | None


# -- encoding -----------------------------------------------------------------------------
def _escape(key: bytes) -> bytes:
    return key.replace(b"\x00", b"\x00\xff")


def history_key(key: bytes, valid_from: int) -> bytes:
    """The history record key of ``key``'s version at ``valid_from``."""
    return HISTORY_PREFIX + _escape(key) + _TERMINATOR + _TIME.pack(valid_from + _TIME_BIAS)


def history_range(
    lower: bytes | None = None, upper: bytes | None = None, prefix: bytes | None = None
) -> tuple[bytes, bytes]:
    """LevelDB ``[start, stop)`` of the history records of the user keys in ``[lower, upper]``
    (inclusive, None: open) or starting with ``prefix``."""
    if prefix is not None:
        start = HISTORY_PREFIX + _escape(prefix)
        return start, _after_prefix(start)
    start = HISTORY_PREFIX if lower is None else HISTORY_PREFIX + _escape(lower)
    if upper is None:
        return start, HISTORY_STOP
    return start, _after_prefix(HISTORY_PREFIX + _escape(upper) + _TERMINATOR)


def _after_prefix(prefix: bytes) -> bytes:
    trimmed = prefix.rstrip(b"\xff")
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


def decode_history_key(raw: bytes, path: str | None = None) -> tuple[bytes, int]:
    """``(user key, valid_from)`` of a history record key."""
    body = raw[len(HISTORY_PREFIX) : -_TIME.size]
    if (
        not raw.startswith(HISTORY_PREFIX)
        or len(raw) < len(HISTORY_PREFIX) + len(_TERMINATOR) + _TIME.size
        or not body.endswith(_TERMINATOR)
    ):
        raise _corrupt(raw, "history key", path)
    escaped = body[: -len(_TERMINATOR)]
    key = escaped.replace(b"\x00\xff", b"\x00")
    if _escape(key) != escaped:
        raise _corrupt(raw, "history key", path)
    return key, _TIME.unpack_from(raw, len(raw) - _TIME.size)[0] - _TIME_BIAS


def _encode_version(version: Version) -> bytes:
    partition = NO_VALUE if version.partition is None else version.partition
    offset = NO_VALUE if version.offset is None else version.offset
    if version.value is None:
        return _VALUE_HEADER.pack(_TOMBSTONE, partition, offset)
    return _VALUE_HEADER.pack(_VALUE, partition, offset) + version.value


def _decode_version(valid_from: int, raw: bytes, path: str | None) -> Version:
    if len(raw) < _VALUE_HEADER.size or raw[0] not in (_VALUE, _TOMBSTONE):
        raise _corrupt(raw, "history value", path)
    kind, partition, offset = _VALUE_HEADER.unpack_from(raw)
    if kind == _TOMBSTONE and len(raw) != _VALUE_HEADER.size:
        raise _corrupt(raw, "history tombstone", path)
    return Version(
        valid_from,
        None if kind == _TOMBSTONE else raw[_VALUE_HEADER.size :],
        None if partition < 0 else partition,
        None if offset < 0 else offset,
    )


def _corrupt(raw: bytes, what: str, path: str | None) -> StoreCorruptedError:
    return StoreCorruptedError(
        f"store {path}: a {what} is malformed ({raw[:48]!r}); the store is corrupted or was "
        "written by another program: delete it and follow the changelog again",
        path,
    )


def decode_stream_times(raw: bytes | None, path: str | None = None) -> dict[int, int]:
    """The ``{partition: observed stream time}`` metadata record (empty when absent)."""
    if raw is None:
        return {}
    try:
        data = json.loads(raw)
        times = {int(p): t for p, t in data.items()}
    except (ValueError, TypeError, AttributeError):
        raise _corrupt(raw, "stream time record", path) from None
    if not all(type(t) is int for t in times.values()):
        raise _corrupt(raw, "stream time record", path)
    return times


def encode_stream_times(times: Mapping[int, int]) -> bytes:
    return json.dumps({str(p): t for p, t in sorted(times.items())}).encode()


# -- reading ------------------------------------------------------------------------------
RawGet = Callable[[bytes], "bytes | None"]
RawRange = Callable[[bytes, bytes], Iterable[tuple[bytes, bytes]]]


def gated_reads(source: Any, gate: Gate) -> tuple[RawGet, RawRange]:
    """``(get, scan)`` reading a plyvel DB or snapshot through the store's ``gate``."""

    def get(raw_key: bytes) -> bytes | None:
        with gate:
            raw: bytes | None = source.get(raw_key)
        return raw

    def scan(start: bytes, stop: bytes) -> Iterator[tuple[bytes, bytes]]:
        return iterate(source, start, stop, False, False, gate)

    return get, scan


def key_versions(get: RawGet, scan: RawRange, key: bytes, path: str | None = None) -> list[Version]:
    """Every stored version of ``key``, oldest first (the latest value from the data
    namespace last), read with ``get`` (one raw key) and ``scan`` (a raw ``[start, stop)``)."""
    start = HISTORY_PREFIX + _escape(key) + _TERMINATOR
    versions = [
        _decode_version(decode_history_key(raw_key, path)[1], raw, path)
        for raw_key, raw in scan(start, _after_prefix(start))
    ]
    latest = get(DATA_PREFIX + key)
    if latest is not None:
        versions.append(_latest_version(key, latest, path))
    return versions


def _latest_version(key: bytes, raw: bytes, path: str | None) -> Version:
    """The version a data record holds: a versioned store's latest value."""
    record = decode_record(key, raw, path)
    stamp = NO_VALUE if record.timestamp is None else record.timestamp
    return Version(stamp, record.value, record.partition, record.offset)


def grouped_versions(
    history: Iterable[tuple[bytes, bytes]],
    latest: Iterable[tuple[bytes, bytes]],
    path: str | None = None,
) -> Iterator[tuple[bytes, list[Version]]]:
    """``(key, versions)`` in key order, merging raw history records and raw data records
    (each in LevelDB order, over the same keys)."""
    history_items = iter(history)
    latest_items = iter(latest)
    pending_history = next(history_items, None)
    pending_latest = next(latest_items, None)
    while pending_history is not None or pending_latest is not None:
        history_key_ = (
            None if pending_history is None else decode_history_key(pending_history[0], path)[0]
        )
        latest_key = None if pending_latest is None else pending_latest[0][len(DATA_PREFIX) :]
        key = min(k for k in (history_key_, latest_key) if k is not None)
        versions: list[Version] = []
        while pending_history is not None:
            found, valid_from = decode_history_key(pending_history[0], path)
            if found != key:
                break
            versions.append(_decode_version(valid_from, pending_history[1], path))
            pending_history = next(history_items, None)
        if pending_latest is not None and latest_key == key:
            versions.append(_latest_version(key, pending_latest[1], path))
            pending_latest = next(latest_items, None)
        yield key, versions


def version_as_of(
    versions: Sequence[Version], as_of: int, cutoff: int
) -> tuple[VersionedRecord, Version] | None:
    """The version of a key valid at ``as_of`` (Kafka Streams' ``get(key, asOfTimestamp)``),
    with the stored version, or None.

    ``cutoff`` is the key's partition's observed stream time minus the history retention:
    before it, only a latest value that began by ``as_of`` is returned.
    """
    if not versions:
        return None
    if as_of < cutoff:
        latest = versions[-1]
        if latest.value is not None and latest.valid_from <= as_of:
            return VersionedRecord(latest.value, latest.valid_from), latest
        return None
    index = bisect.bisect_right([v.valid_from for v in versions], as_of) - 1
    if index < 0 or versions[index].value is None:
        return None
    found = versions[index]
    valid_to = versions[index + 1].valid_from if index + 1 < len(versions) else None
    assert found.value is not None
    return VersionedRecord(found.value, found.valid_from, valid_to), found


def versions_between(
    versions: Sequence[Version],
    from_time: int,
    to_time: int,
    cutoff: int,
    *,
    ascending: bool = False,
) -> list[VersionedRecord]:
    """The values of a key whose validity overlaps ``[from_time, to_time]`` (Kafka Streams'
    ``MultiVersionedKeyQuery``), newest first unless ``ascending``.

    Versions that ended by ``cutoff`` (stream time minus history retention) are never
    returned; when ``to_time`` is before it, only a latest value that began by ``to_time``.
    """
    found: list[VersionedRecord] = []
    if not versions:
        return found
    if to_time < cutoff:
        latest = versions[-1]
        if latest.value is not None and latest.valid_from <= to_time:
            found.append(VersionedRecord(latest.value, latest.valid_from))
        return found
    for index, version in enumerate(versions):
        valid_to = versions[index + 1].valid_from if index + 1 < len(versions) else None
        if version.value is None or version.valid_from > to_time:
            continue
        if valid_to is not None and (valid_to <= from_time or valid_to <= cutoff):
            continue
        found.append(VersionedRecord(version.value, version.valid_from, valid_to))
    if not ascending:
        found.reverse()
    return found


def cutoff_of(stream_time: int | None, retention_ms: int) -> int:
    """Stream time minus history retention (the oldest time versions are kept for)."""
    if stream_time is None:
        return INT64_MIN
    return max(INT64_MIN, stream_time - retention_ms)


def put_version(versions: list[Version], version: Version) -> None:
    """Insert ``version`` into ``versions`` (sorted by ``valid_from``), replacing the one
    with the same timestamp."""
    stamps = [v.valid_from for v in versions]
    index = bisect.bisect_left(stamps, version.valid_from)
    if index < len(versions) and versions[index].valid_from == version.valid_from:
        versions[index] = version
    else:
        versions.insert(index, version)


def prune(versions: list[Version], cutoff: int) -> None:
    """Drop the versions no read can return any more, and that no later record can change:
    those that ended by ``cutoff``, then tombstones left first that began by it (a record
    must begin at ``cutoff`` or later, so it lands after them or replaces them)."""
    keep_from = 0
    while keep_from + 1 < len(versions) and versions[keep_from + 1].valid_from <= cutoff:
        keep_from += 1
    while (
        keep_from < len(versions)
        and versions[keep_from].value is None
        and versions[keep_from].valid_from <= cutoff
    ):
        keep_from += 1
    del versions[:keep_from]


# -- writing ------------------------------------------------------------------------------
class VersionedWriter:
    """Applies changelog records to a versioned store inside one transaction.

    It reads each touched key's versions once from the transaction's base snapshot, applies
    the records in changelog order in memory (per-partition stream time, grace, replacement,
    pruning), and :meth:`writes` yields the raw puts and deletes that turn the base into the
    result: the latest value in the data namespace, every other version in the history.

    Parameters
    ----------
    get, scan
        Raw reads of the transaction's base snapshot.
    retention_ms
        The store's history retention (also its grace period, as in Kafka Streams).
    stream_times
        The committed ``{partition: observed stream time}``.
    path
        The store's path, for messages.
    """

    @property
    def pending(self) -> bool:
        """True while :meth:`writes` has something to write."""
        return bool(self._changed)

    def __init__(
        self,
        get: RawGet,
        scan: RawRange,
        retention_ms: int,
        stream_times: Mapping[int, int],
        path: str | None,
    ) -> None:
        self._get = get
        self._scan = scan
        self._retention = retention_ms
        self.stream_times = dict(stream_times)
        self._path = path
        self._base: dict[bytes, list[Version]] = {}
        self._current: dict[bytes, list[Version]] = {}
        self._changed: dict[bytes, None] = {}  # keys applied since the last writes()
        self.expired = 0

    def apply(
        self, key: bytes, value: bytes | None, partition: int, offset: int, timestamp: int
    ) -> bool:
        """Apply one changelog record; False when it was older than the grace period."""
        stream_time = self.stream_times.get(partition)
        if stream_time is not None and timestamp < stream_time - self._retention:
            self.expired += 1
            return False
        if stream_time is None or timestamp > stream_time:
            self.stream_times[partition] = stream_time = timestamp
        versions = self._current.get(key)
        if versions is None:
            base = key_versions(self._get, self._scan, key, self._path)
            self._base[key] = base
            versions = self._current[key] = list(base)
        self._changed[key] = None
        put_version(
            versions,
            Version(timestamp, value, partition, None if offset < 0 else offset),
        )
        prune(versions, cutoff_of(stream_time, self._retention))
        return True

    def writes(self) -> Iterator[tuple[bytes, bytes | None]]:
        """``(raw key, raw value or None to delete)`` turning the base into the result.

        What it yields becomes the base: call it again after more records and it yields only
        the further changes (the transaction's base snapshot does not have the earlier ones,
        so the writer keeps every key it read). The stream times are :attr:`stream_times`
        (:func:`encode_stream_times` gives their metadata record).
        """
        for key in self._changed:
            versions = self._current[key]
            yield from _diff(key, self._base[key], versions)
            self._base[key] = list(versions)
        self._changed.clear()


def _diff(
    key: bytes, base: list[Version], versions: list[Version]
) -> Iterator[tuple[bytes, bytes | None]]:
    before_latest, before = _split(base)
    after_latest, after = _split(versions)
    for valid_from, version in after.items():
        if before.get(valid_from) != version:
            yield history_key(key, valid_from), _encode_version(version)
    for valid_from in before.keys() - after.keys():
        yield history_key(key, valid_from), None
    if after_latest != before_latest:
        if after_latest is None:
            yield DATA_PREFIX + key, None
        else:
            assert after_latest.value is not None
            header = pack_header(
                NO_VALUE if after_latest.partition is None else after_latest.partition,
                NO_VALUE if after_latest.offset is None else after_latest.offset,
                after_latest.valid_from,
            )
            yield DATA_PREFIX + key, header + after_latest.value


def _split(versions: list[Version]) -> tuple[Version | None, dict[int, Version]]:
    """(the latest version when it is a value, every other version by timestamp)."""
    if versions and versions[-1].value is not None:
        return versions[-1], {v.valid_from: v for v in versions[:-1]}
    return None, {v.valid_from: v for v in versions}
