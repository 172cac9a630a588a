"""Paged scans over the live replicas of a store: bounded memory, whatever the store's size.

A :class:`RoutedScan` reads a range, prefix or full scan the way :meth:`Router.query
<spark_statestore.discovery.Router.query>` routes one (per partition the leader first, then
the least lagging follower within ``max_lag``, each checked against the position bound,
failing over), but through a cursor instead of one reply: each replica chosen pins one
snapshot of its store (:meth:`Router.route
<spark_statestore.discovery.Router.route>` with a pin in place of the query, so the
candidates, lag checks, bound checks and failover are the router's own), and the rows are
read from that snapshot in pages of at most ``page_rows`` rows, each page continuing after
the last key of the one before (a ``do_get`` scan of the pinned snapshot), so every page of
a replica comes from the same commit. The replicas' pages are merged lazily in key order
(a heap over their current pages): memory holds about ``page_rows`` rows per replica read,
not the store. With a ``limit``, no replica is asked for more rows than the limit still
needs, and the merge stops at it.

A replica that fails in the middle (it stops answering, its pin expires or its server
restarts) is replaced where it stopped: its partitions are routed again (the same
candidates; the failed replica too, if it answers again), each new replica pinning a
snapshot that has reached both the request's bound and the failed replica's snapshot (by
the same rule as the bound: the whole of it for a leader, the entries of the partitions it
is asked for a follower; the wait is what is left of ``wait_s``), and reading from the key
after the last one read. No row is lost or read twice; the rows after that key then come
from the newer snapshot, and :attr:`RoutedScan.position` is the merge of every snapshot
read (:attr:`RoutedScan.resumed` counts such resumptions). When no replica can continue,
or a replacement fails again before reading a page three times in a row, the scan raises
:class:`~spark_statestore.discovery.errors.RoutedScanError`.

Rows stream in the snapshot schema (:func:`~spark_statestore.store.snapshot.arrow_schema`:
key, value, changelog partition, offset, timestamp, headers). A replica asked for some of
the partitions it holds keeps the rows whose recorded changelog partition is one of them
(a row written without one, which IQv2 places by its key's hash, is then not read); asked
for all it holds, it sends every row.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from spark_statestore.discovery.errors import DiscoveryError, RoutedScanError
from spark_statestore.discovery.page_merge import merge_pages
from spark_statestore.discovery.router import Router
from spark_statestore.position import Position, PositionBound
from spark_statestore.query import (
    FailureReason,
    PrefixQuery,
    QueryError,
    QueryResult,
    RangeQuery,
    RawScanQuery,
    StateQueryRequest,
    StateQueryResult,
)
from spark_statestore.store.errors import InvalidScanError
from spark_statestore.store.manifest import Role
from spark_statestore.store.scan import ScanSpec

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_statestore.discovery.announcement import ReplicaAnnouncement

__all__ = ["DEFAULT_PAGE_ROWS", "RoutedScan"]

_log = logging.getLogger(__name__)

DEFAULT_PAGE_ROWS: Final = 4096
"""The most rows one page of a routed scan holds (one ``do_get`` of a pinned snapshot)."""
_MAX_STALLS: Final = 3  # replacements in a row that fail before their first page


@dataclass(eq=False)
class _Pin:
    """A snapshot one replica pinned for some partitions of the scan."""

    replica: ReplicaAnnouncement
    client: Any
    snapshot_id: str
    position: Position
    held: frozenset[int]  # the partitions the replica's store holds


@dataclass(eq=False)
class _Cursor:
    """Where the scan of some partitions stands on one pinned snapshot."""

    pin: _Pin
    partitions: frozenset[int]
    after: bytes | None  # the last key read (None: none yet)
    left: int | None  # rows the limit still allows from here (None: no limit)
    stalls: int  # replacements in a row that had read nothing before this one
    done: bool = False
    read: int = 0  # rows read from this cursor

    def describe(self) -> str:
        replica = self.pin.replica
        return (
            f"{replica.role.value} {replica.replica_id} at {replica.location} (partitions "
            f"{sorted(self.partitions)}, snapshot {self.pin.snapshot_id})"
        )


class RoutedScan:
    """A range, prefix or full scan of a store's live replicas, read in pages from one
    pinned snapshot per replica and merged in key order (see the module docstring).

    Build it with :meth:`open`; read it once, with :meth:`batches` or :meth:`rows`; close
    it (or leave its ``with`` block) to release the pinned snapshots.

    Examples
    --------
    >>> request = StateQueryRequest.in_store("totals").with_query(RawScanQuery.scan())
    >>> with Router(registry.view, connect) as router, RoutedScan.open(
    ...     router, request, limit=1000
    ... ) as scan:  # doctest: +SKIP
    ...     for key, value in scan.rows():
    ...         ...
    """

    def __init__(
        self,
        router: Router,
        request: StateQueryRequest,
        base: ScanSpec,
        *,
        deadline: float,
        limit: int | None,
        page_rows: int,
    ) -> None:
        self._router = router
        self._request = request
        self._base = base
        self._deadline = deadline
        self._limit = limit
        self._page_rows = page_rows
        self._cursors: list[_Cursor] = []
        self._pins: list[_Pin] = []
        self._position = Position.empty()
        self._read = False
        self._closed = False
        self.resumed = 0
        """How many times a failed replica's partitions were continued on another snapshot."""

    @classmethod
    def open(
        cls,
        router: Router,
        request: StateQueryRequest,
        *,
        wait_s: float = 0.0,
        limit: int | None = None,
        page_rows: int = DEFAULT_PAGE_ROWS,
    ) -> RoutedScan:
        """Pin a snapshot on the best replica of each partition ``request`` asks.

        Parameters
        ----------
        router
            The router whose replicas, ``max_lag`` and clients (``StoreClient``: they pin
            and scan) are used.
        request
            A :class:`~spark_statestore.query.RangeQuery` (ascending), a
            :class:`~spark_statestore.query.PrefixQuery` or a
            :class:`~spark_statestore.query.RawScanQuery` without a limit (its limit counts
            per partition: give ``limit``), with bytes keys; its partitions (None: all),
            position bound and ``require_active()`` apply as in ``Router.query``.
        wait_s
            The longest the scan waits in all for replicas to reach the bound (one deadline,
            for the pins now and for any replacement later).
        limit
            At most this many rows in all (None: every row).
        page_rows
            The most rows of one page.

        Raises
        ------
        QueryError
            If the query is not a scan a cursor can page (a descending range, a raw scan
            with a limit, a key query) or ``limit``/``page_rows``/``wait_s`` are invalid.
        RoutedScanError
            If a partition has no replica that could pin a snapshot for it (each
            partition's failure says why, as ``Router.query``'s would).
        DiscoveryError
            If no replica is live.
        """
        base = _scan_spec(request)
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        ):
            raise QueryError(f"limit must be an int >= 0 or None, got {limit!r}")
        if isinstance(page_rows, bool) or not isinstance(page_rows, int) or page_rows < 1:
            raise QueryError(f"page_rows must be an int >= 1, got {page_rows!r}")
        if isinstance(wait_s, bool) or not isinstance(wait_s, (int, float)) or not wait_s >= 0:
            raise QueryError(f"wait_s must be a number of seconds >= 0, got {wait_s!r}")
        scan = cls(
            router,
            request,
            base,
            deadline=time.monotonic() + wait_s,
            limit=limit,
            page_rows=page_rows,
        )
        if limit == 0:
            return scan
        try:
            scan._cursors = scan._pin(request, after=None, left=limit, stalls=0)
        except BaseException:
            scan.close()
            raise
        return scan

    @property
    def position(self) -> Position:
        """The merged position of every snapshot read so far (one per replica unless the scan
        was resumed on another snapshot: see :attr:`resumed`)."""
        return self._position

    # -- reading ---------------------------------------------------------------------------
    def batches(self) -> Iterator[pa.RecordBatch]:
        """The rows in ascending key order, as record batches of at most ``page_rows`` rows
        (schema :func:`~spark_statestore.store.snapshot.arrow_schema`).

        Raises
        ------
        RoutedScanError
            (while iterating) If a replica failed and none could continue from there.
        DiscoveryError
            If the scan was already read or closed.
        """
        if self._read or self._closed:
            raise DiscoveryError("a RoutedScan is read once; open another to read it again")
        self._read = True
        return self._merged()

    def rows(self) -> Iterator[tuple[bytes, bytes]]:
        """The ``(key, value)`` rows in ascending key order (see :meth:`batches`)."""
        for batch in self.batches():
            yield from zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True)

    def _merged(self) -> Iterator[pa.RecordBatch]:
        first = [page for cursor in self._cursors for page in self._next_pages(cursor)]
        yield from merge_pages(
            first, self._next_pages, batch_rows=self._page_rows, limit=self._limit
        )

    def _next_pages(self, cursor: _Cursor) -> list[tuple[_Cursor, pa.RecordBatch]]:
        """The cursor's next page (none at its end), or where it failed, the first pages of
        the cursors that continue it."""
        from spark_statestore.serve.errors import ServeError

        try:
            page = self._page(cursor)
        except (ServeError, OSError, TimeoutError) as exc:
            self._unpin(cursor.pin)
            return self._replace(cursor, exc)
        if page is None:
            self._unpin(cursor.pin)  # read to its end: its server may drop the snapshot
            return []
        return [(cursor, page)]

    def _unpin(self, handle: _Pin) -> None:
        self._pins = [pin for pin in self._pins if pin is not handle]
        _release([handle])

    def _page(self, cursor: _Cursor) -> pa.RecordBatch | None:
        """Read the next page of ``cursor`` from its pinned snapshot (None: it is done)."""
        import pyarrow as pa

        if cursor.done or cursor.left == 0:
            return None
        size = self._page_rows if cursor.left is None else min(self._page_rows, cursor.left)
        spec = self._base
        if cursor.after is not None:
            spec = spec.intersect(ScanSpec.between(cursor.after, None, lower_inclusive=False))
        if not cursor.partitions >= cursor.pin.held:
            spec = spec.with_partitions(cursor.partitions)
        scanned = cursor.pin.client.scan(spec.with_limit(size), cursor.pin.snapshot_id)
        batches = [batch for batch in scanned if batch.num_rows]
        if not batches:
            cursor.done = True
            return None
        page = batches[0] if len(batches) == 1 else pa.concat_batches(batches)
        cursor.read += page.num_rows
        cursor.stalls = 0
        cursor.after = page.column(0)[-1].as_py()
        if cursor.left is not None:
            cursor.left -= page.num_rows
        cursor.done = page.num_rows < size  # a short page is the last one
        return page

    def _replace(self, cursor: _Cursor, error: BaseException) -> list[tuple[_Cursor, Any]]:
        """Continue ``cursor``'s partitions after its last key on snapshots that have reached
        its own; their first pages. Raises when none can."""
        stalls = cursor.stalls + 1 if cursor.read == 0 else 0
        where = (
            f"after key {cursor.after!r}" if cursor.after is not None else "before its first row"
        )
        failed = f"{cursor.describe()} failed {where}: {error}"
        _log.warning(
            "routed scan of %s: %s; continuing elsewhere", self._request.store_name, failed
        )
        if stalls >= _MAX_STALLS:
            raise RoutedScanError(
                f"the scan of partitions {sorted(cursor.partitions)} failed {stalls} times in a "
                f"row before reading a row; last: {failed}",
                {},
            ) from error
        bound = self._request.position_bound
        seen = cursor.pin.position
        if bound.position is not None:
            seen = seen.merge(bound.position)
        request = self._request.with_partitions(cursor.partitions).with_position_bound(
            PositionBound.at(seen)
        )
        try:
            cursors = self._pin(request, after=cursor.after, left=cursor.left, stalls=stalls)
        except RoutedScanError as exc:
            raise RoutedScanError(
                f"{failed}; no replica could continue from there: {exc}", exc.failures
            ) from error
        self.resumed += 1
        out = []
        for continued in cursors:
            out.extend(self._next_pages(continued))
        return out

    # -- pinning ---------------------------------------------------------------------------
    def _pin(
        self, request: StateQueryRequest, *, after: bytes | None, left: int | None, stalls: int
    ) -> list[_Cursor]:
        """Cursors over snapshots pinned by the router's choice of replica for each
        partition ``request`` asks, starting after ``after``."""
        made: list[_Pin] = []

        def pin(
            replica: ReplicaAnnouncement, client: Any, asked: StateQueryRequest, wait_s: float
        ) -> StateQueryResult[Any]:
            partitions = sorted(asked.partitions or ())
            pinned = client.pin(_pin_bound(replica, asked), wait_s=wait_s)
            description = pinned.metadata
            held = description.held_partitions
            handle = _Pin(
                replica,
                client,
                pinned.snapshot_id,
                pinned.position,
                frozenset(range(description.partitions) if held is None else held),
            )
            made.append(handle)
            results: dict[int, QueryResult[Any]] = {}
            for partition in partitions:
                if partition in handle.held:
                    results[partition] = QueryResult.for_result(handle, pinned.position)
                else:
                    results[partition] = QueryResult.for_failure(
                        FailureReason.NOT_PRESENT,
                        f"the store of replica {replica.replica_id} at {replica.location} "
                        f"does not hold partition {partition}",
                        pinned.position,
                    )
            return StateQueryResult.for_partitions(results)

        left_s = max(0.0, self._deadline - time.monotonic())
        try:
            result = self._router.route(request, pin, wait_s=left_s)
        except BaseException:
            _release(made)
            raise
        by_pin: dict[int, tuple[_Pin, set[int]]] = {}
        failures: dict[int, QueryResult[Any]] = {}
        for partition, answer in sorted(result.partition_results.items()):
            if answer.is_success and isinstance(answer.result, _Pin):
                by_pin.setdefault(id(answer.result), (answer.result, set()))[1].add(partition)
            else:
                failures[partition] = answer
        used = [handle for handle, _ in by_pin.values()]
        _release([handle for handle in made if all(handle is not u for u in used)])
        if failures:
            _release(used)
            raise RoutedScanError(_failure_text(failures, request), failures)
        cursors = []
        for handle, partitions in by_pin.values():
            self._pins.append(handle)
            self._position = self._position.merge(handle.position)
            cursors.append(_Cursor(handle, frozenset(partitions), after, left, stalls))
        return cursors

    # -- closing ---------------------------------------------------------------------------
    def close(self) -> None:
        """Release every pinned snapshot (idempotent); the router keeps its clients."""
        self._closed = True
        pins, self._pins = self._pins, []
        _release(pins)

    def __enter__(self) -> RoutedScan:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _scan_spec(request: StateQueryRequest) -> ScanSpec:
    """The rows of ``request``'s query as a scan of a snapshot."""
    if not isinstance(request, StateQueryRequest):
        raise QueryError(f"a routed scan needs a StateQueryRequest, got {type(request).__name__}")
    query = request.query
    try:
        if isinstance(query, RangeQuery):
            if query.descending:
                raise QueryError(
                    "a routed scan reads keys in ascending order; ask for ascending keys and "
                    "reverse them, or use Router.query for a small descending range"
                )
            return ScanSpec.between(query.lower, query.upper)
        if isinstance(query, PrefixQuery):
            return ScanSpec.with_prefix(query.prefix)
        if isinstance(query, RawScanQuery):
            if query.limit is not None:
                raise QueryError(
                    "a RawScanQuery's limit counts per partition; give the routed scan's "
                    "limit=... (rows in all) instead"
                )
            return ScanSpec.everything()
    except InvalidScanError as exc:  # a key that is not bytes
        raise QueryError(f"a routed scan needs bytes keys: {exc}") from exc
    raise QueryError(
        f"a routed scan pages range, prefix and raw scan queries, not {type(query).__name__}: "
        "use Router.query"
    )


def _pin_bound(replica: ReplicaAnnouncement, request: StateQueryRequest) -> PositionBound | None:
    """The bound a replica's pin waits for: the whole bound for a leader (its position holds
    store-wide), the bound's entries for the asked partitions for a follower (Kafka Streams'
    rule, by which the router checks a follower's answer)."""
    bound = request.position_bound
    if bound.position is None:
        return None
    if replica.role is Role.LEADER:
        return bound
    asked = request.partitions or frozenset()
    entries = tuple(e for e in bound.position.entries if e[1] in asked)
    return PositionBound.at(Position(entries)) if entries else None


def _release(pins: list[_Pin]) -> None:
    """Release pinned snapshots; a server that is gone has released them already."""
    from spark_statestore.serve.errors import ServeError

    for handle in pins:
        try:
            handle.client.release(handle.snapshot_id)
        except (ServeError, OSError, TimeoutError) as exc:  # the pin expires by its TTL
            _log.debug(
                "could not release snapshot %s on %s: %s",
                handle.snapshot_id,
                handle.replica.location,
                exc,
            )


def _failure_text(failures: dict[int, QueryResult[Any]], request: StateQueryRequest) -> str:
    parts = [
        f"partition {p}: {a.failure_reason.value if a.failure_reason else 'failure'}: "
        f"{a.failure_message}"
        for p, a in sorted(failures.items())
    ]
    return f"no replica of {request.store_name!r} could be scanned for " + "; ".join(parts)
