"""Scans of a versioned store as of a time (:attr:`ScanSpec.as_of`): each key's version valid
then, read from its latest value and its history records in one pass in key order.

A time older than a partition's stream time minus the history retention is refused for
that partition rather than answered: Kafka Streams answers only the latest values there
(:func:`~spark_statestore.store.versions.version_as_of`), so a scan would silently miss the
keys whose version then has expired, which a table read must not do.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING

from spark_statestore.changelog.partitioner import partition_for_key
from spark_statestore.store.errors import InvalidScanError
from spark_statestore.store.versions import (
    cutoff_of,
    grouped_versions,
    history_range,
    version_as_of,
)

if TYPE_CHECKING:
    from spark_statestore.store.scan_spec import ScanSpec, ScanStats
    from spark_statestore.store.snapshot import Snapshot
    from spark_statestore.store.versions import Version

__all__ = ["as_of_rows"]

_Row = tuple[bytes, bytes, "int | None", "int | None", "int | None"]


def as_of_rows(snapshot: Snapshot, spec: ScanSpec, stats: ScanStats) -> Generator[_Row, None, None]:
    """``(key, value, partition, offset, valid_from)`` of each selected key's version valid
    at ``spec.as_of``, keys ascending (partitions and limit are the caller's to apply).

    Raises
    ------
    InvalidScanError
        If the store is not versioned, or ``spec.as_of`` is older than a selected
        partition's stream time minus the history retention.
    """
    manifest = snapshot.manifest
    retention = manifest.history_retention_ms
    path = snapshot.path
    if retention is None:
        raise InvalidScanError(
            f"store {path} is a key-value store: it keeps no versions to read as of "
            f"{spec.as_of}; only a versioned store (a follower of a Kafka Streams versioned "
            "store's changelog, storeType 'versioned') can be read as of a time",
            path,
        )
    as_of = spec.as_of
    assert as_of is not None
    times = snapshot.stream_times()
    counts = manifest.partitions
    wanted = spec.partitions if spec.partitions is not None else manifest.holds
    for partition in sorted(wanted):
        cutoff = cutoff_of(times.get(partition), retention)
        if as_of < cutoff:
            raise InvalidScanError(
                f"store {path} keeps versions of changelog partition {partition} from "
                f"{cutoff} on (its stream time {times[partition]} minus the history retention "
                f"of {retention} ms), not as of {as_of}: versions valid then have expired, "
                "as they have in Kafka Streams; read as of a later time",
                path,
            )
    _, scan = snapshot.raw_reads()
    keyed: Iterator[tuple[bytes, list[Version]]]
    if spec.keys is not None:
        keyed = ((key, snapshot.versions(key)) for key in spec.keys if spec.matches_key(key))
    else:
        bounds = spec.key_range()
        if bounds is None:
            return
        lower, upper, _ = bounds
        history = scan(*history_range(lower, upper))
        latest = snapshot.envelopes(lower, upper, False, None, None)
        keyed = grouped_versions(history, latest, path)
    for key, versions in keyed:
        stats.rows_examined += len(versions)
        if not versions or not spec.matches_key(key):
            continue
        partition = _partition_of(key, versions, counts)
        found = version_as_of(versions, as_of, cutoff_of(times.get(partition), retention))
        if found is None:
            continue
        record, version = found
        yield key, record.value, partition, version.offset, record.timestamp


def _partition_of(key: bytes, versions: list[Version], counts: int) -> int:
    for version in versions:
        if version.partition is not None:
            return version.partition
    return 0 if counts == 1 else partition_for_key(key, counts)
