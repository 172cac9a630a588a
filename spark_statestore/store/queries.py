"""Local interactive queries: IQv2 requests executed against one snapshot of a store.

The store keeps every partition in one database, so a query runs once over the snapshot and
its rows are split by the changelog partition recorded in each envelope. Each requested
partition gets its own :class:`QueryResult`, checked against the request's position bound;
every failure is a result, never an exception (KIP-796).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from spark_statestore.changelog.partitioner import partition_for_key
from spark_statestore.errors import StateStoreError
from spark_statestore.query import (
    FailureReason,
    KeyQuery,
    MultiVersionedKeyQuery,
    PrefixQuery,
    QueryResult,
    RangeQuery,
    RawKeyQuery,
    RawScanQuery,
    StateQueryRequest,
    StateQueryResult,
    VersionedKeyQuery,
    VersionedRecord,
)
from spark_statestore.store.layout import envelope_header, envelope_value
from spark_statestore.store.manifest import Role
from spark_statestore.store.versions import (
    INT64_MAX,
    INT64_MIN,
    cutoff_of,
    version_as_of,
    versions_between,
)

if TYPE_CHECKING:
    from spark_statestore.position import PositionBound
    from spark_statestore.store.manifest import StoreManifest, StoreMetadata
    from spark_statestore.store.snapshot import Snapshot

__all__ = ["ROW_BYTES", "QueriedStore", "bound_permits", "execute", "is_store_wide"]

ROW_BYTES = 32
"""What each row of a range, prefix or scan result counts towards ``max_result_bytes``
besides its key's and value's bytes (its share of the containers that hold it)."""


class QueriedStore(Protocol):
    """What a query reads of a store: :class:`~spark_statestore.store.Store` is one (the
    handle runs its queries through :func:`execute` without this module importing it)."""

    @property
    def name(self) -> str: ...

    @property
    def path(self) -> str: ...

    @property
    def partitions(self) -> range: ...

    @property
    def manifest(self) -> StoreManifest: ...

    @property
    def role(self) -> Role | None: ...

    @property
    def position_note(self) -> str | None: ...

    def snapshot(self) -> Snapshot: ...


class _BadQuery(StateStoreError, TypeError):
    """A query this store cannot run as given (e.g. a key that is not bytes)."""


class _TooLarge(StateStoreError):
    """A range, prefix or scan result outgrew its ``max_result_bytes``."""


def execute(
    store: QueriedStore, request: StateQueryRequest, *, max_result_bytes: int | None = None
) -> StateQueryResult[Any]:
    """Run ``request`` on one snapshot of ``store``; see :meth:`Store.query`."""
    requested = sorted(request.partitions) if request.partitions is not None else None
    if request.store_name != store.name:
        return _fail_all(
            requested or list(store.partitions),
            FailureReason.DOES_NOT_EXIST,
            f"this is store {store.name!r} ({store.path}), not {request.store_name!r}",
            None,
        )
    started = time.perf_counter_ns()
    with store.snapshot() as snapshot:
        position = snapshot.position
        partitions = requested if requested is not None else list(store.partitions)
        if request.active_only and store.manifest.role is Role.FOLLOWER:
            return _fail_all(
                partitions,
                FailureReason.NOT_ACTIVE,
                f"store {store.name!r} is a follower of changelog "
                f"{store.manifest.changelog_topic!r}, and the request requires the active "
                "(leader) store",
                position,
            )
        results: dict[int, QueryResult[Any]] = {}
        runnable = []
        held = store.partitions
        store_wide = is_store_wide(store, snapshot.metadata)
        for partition in partitions:
            by_partition = None if store_wide else partition
            if partition not in held:
                results[partition] = QueryResult.for_failure(
                    FailureReason.NOT_PRESENT,
                    f"store {store.name!r} holds partitions 0-{len(held) - 1}; partition "
                    f"{partition} is not here",
                    position,
                )
            elif not request.position_bound.permits(position, by_partition):
                results[partition] = QueryResult.not_up_to_bound(
                    position, request.position_bound, by_partition, store.position_note
                )
            else:
                runnable.append(partition)
        if runnable:
            results.update(_run(store, snapshot, request, runnable, started, max_result_bytes))
    return StateQueryResult.for_partitions(results)


def is_store_wide(store: QueriedStore, metadata: StoreMetadata) -> bool:
    """Whether an IQv2 position bound applies whole to each partition of ``store``.

    Kafka Streams' rule, a bound's entries for partition *n* only, holds where store
    partition *n* is input partition *n*: a follower of Kafka Streams' changelog. A leader's
    position (our sink commits across partitions at once), or a follower's taken from a
    sink's whole batches (``metadata.store_wide``), holds for the whole store: any partition
    may hold a write of any input partition.
    """
    return store.role is Role.LEADER or metadata.store_wide


def bound_permits(
    store: QueriedStore, metadata: StoreMetadata, bound: PositionBound, partition: int
) -> bool:
    """Whether ``store`` at ``metadata`` may answer ``partition`` under ``bound``."""
    return bound.permits(metadata.position, None if is_store_wide(store, metadata) else partition)


def _run(
    store: QueriedStore,
    snapshot: Snapshot,
    request: StateQueryRequest,
    partitions: list[int],
    started: int,
    max_result_bytes: int | None,
) -> dict[int, QueryResult[Any]]:
    query = request.query
    position = snapshot.position
    counts = len(store.partitions)
    try:
        if isinstance(query, (KeyQuery, RawKeyQuery)):
            kind = "point get"
            key = _key(query.key, "key")
            record = snapshot.get_record(key)
            examined = 0 if record is None else 1
            holder = None if record is None else _partition_of(key, record.partition, counts)
            values: dict[int, Any] = {
                p: (record.value if record is not None and holder == p else None)
                for p in partitions
            }
        elif isinstance(query, (VersionedKeyQuery, MultiVersionedKeyQuery)):
            retention = store.manifest.history_retention_ms
            if retention is None:  # as Kafka Streams answers it for a key-value store
                return {
                    p: QueryResult.for_unknown_query_type(query, store.name, position)
                    for p in partitions
                }
            kind = "versions lookup"
            key = _key(query.key, "key")
            versions = snapshot.versions(key)
            examined = len(versions)
            holder = _partition_of(key, versions[-1].partition if versions else None, counts)
            cutoff = cutoff_of(snapshot.stream_times().get(holder), retention)
            found: Any
            if isinstance(query, VersionedKeyQuery):
                found = _versioned_get(versions, query.as_of_timestamp, cutoff)
                values = {p: (found if p == holder else None) for p in partitions}
            else:
                found = versions_between(
                    versions,
                    INT64_MIN if query.from_timestamp is None else query.from_timestamp,
                    INT64_MAX if query.to_timestamp is None else query.to_timestamp,
                    cutoff,
                    ascending=query.ascending,
                )
                values = {p: (found if p == holder else []) for p in partitions}
        elif isinstance(query, (RangeQuery, PrefixQuery, RawScanQuery)):
            if isinstance(query, RangeQuery):
                kind = "descending range scan" if query.descending else "range scan"
                lower = None if query.lower is None else _key(query.lower, "range lower bound")
                upper = None if query.upper is None else _key(query.upper, "range upper bound")
                rows = snapshot.envelopes(lower, upper, query.descending, None, None)
                limit = None
            elif isinstance(query, PrefixQuery):
                kind = "prefix scan"
                rows = snapshot.envelopes(None, None, False, query.prefix, None)
                limit = None
            else:
                kind = "full scan"
                rows = snapshot.envelopes(None, None, False, None, None)
                limit = query.limit
            values, examined = _bucket(rows, partitions, counts, limit, max_result_bytes)
        else:
            return {
                p: QueryResult.for_unknown_query_type(query, store.name, position)
                for p in partitions
            }
    except _TooLarge as exc:
        message = (
            f"store {store.name!r} ({store.path}) refused {type(query).__name__} over "
            f"partitions {partitions}: {exc}. Read it in pages instead (a routed scan: "
            "spark_statestore.discovery.RoutedScan or spark-statestore query --changelog; "
            "one store: StoreClient.pin and scan), or ask for a narrower range or prefix"
        )
        return {
            p: QueryResult.for_failure(FailureReason.STORE_EXCEPTION, message, position)
            for p in partitions
        }
    except Exception as exc:  # every store failure becomes a result (KIP-796)
        message = (
            f"store {store.name!r} ({store.path}) failed to execute {type(query).__name__}: "
            f"{type(exc).__name__}: {exc}"
        )
        return {
            p: QueryResult.for_failure(FailureReason.STORE_EXCEPTION, message, position)
            for p in partitions
        }
    elapsed_us = (time.perf_counter_ns() - started) // 1000
    results: dict[int, QueryResult[Any]] = {}
    absent: QueryResult[Any] | None = None  # a key's other partitions share one (immutable)
    for partition in partitions:
        value = values[partition]
        if request.execution_info_enabled:
            returned = len(value) if isinstance(value, list) else 0 if value is None else 1
            info = (
                f"store {store.name!r} partition {partition}: {type(query).__name__} as a "
                f"{kind} over snapshot commit {snapshot.commit_seq}; examined {examined} "
                f"rows, returned {returned}, in {elapsed_us} us",
            )
            results[partition] = QueryResult.for_result(value, position, info)
        elif value is None:
            if absent is None:
                absent = QueryResult.for_result(None, position)
            results[partition] = absent
        else:
            results[partition] = QueryResult.for_result(value, position)
    return results


def _versioned_get(versions: list[Any], as_of: int | None, cutoff: int) -> VersionedRecord | None:
    """Kafka Streams' ``get(key)`` (latest) or ``get(key, asOfTimestamp)``."""
    if as_of is None:
        latest = versions[-1] if versions else None
        if latest is None or latest.value is None:
            return None
        return VersionedRecord(latest.value, latest.valid_from)
    found = version_as_of(versions, as_of, cutoff)
    return None if found is None else found[0]


def _bucket(
    rows: Iterable[tuple[bytes, bytes]],
    partitions: list[int],
    counts: int,
    limit: int | None,
    max_bytes: int | None,
) -> tuple[dict[int, Any], int]:
    buckets: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in partitions}
    open_buckets = len(buckets)
    examined = 0
    left = -1 if max_bytes is None else max_bytes  # -1: no cap
    for dkey, raw in rows:
        examined += 1
        key = dkey[1:]
        bucket = buckets.get(_partition_of(key, envelope_header(raw)[0], counts))
        if bucket is None or (limit is not None and len(bucket) >= limit):
            continue
        value = envelope_value(raw)
        if left >= 0:
            left -= len(key) + len(value) + ROW_BYTES
            if left < 0:
                kept = sum(len(b) for b in buckets.values())
                raise _TooLarge(
                    f"its result would hold more than max_result_bytes={max_bytes:,} bytes "
                    f"(keys and values, {ROW_BYTES} more per row) at row {kept + 1:,}"
                )
        bucket.append((key, value))
        if limit is not None and len(bucket) == limit:
            open_buckets -= 1
            if open_buckets == 0:
                break
    return dict(buckets), examined


def _partition_of(key: bytes, partition: int | None, counts: int) -> int:
    """The store partition of a record: its changelog partition, else its key's hash."""
    if partition is None or partition < 0:
        return 0 if counts == 1 else partition_for_key(key, counts)
    return partition


def _key(value: object, what: str) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise _BadQuery(
        f"the {what} must be bytes for this store (it stores serialized keys), got "
        f"{type(value).__name__} {value!r}; serialize it first"
    )


def _fail_all(
    partitions: Iterable[int], reason: FailureReason, message: str, position: Any
) -> StateQueryResult[Any]:
    return StateQueryResult.for_partitions(
        {p: QueryResult.for_failure(reason, message, position) for p in partitions}
    )
