"""Routing IQv2 requests across the live replicas of one store (KIP-535's routing, done for
the caller).

For each partition a request needs, the candidates are the live replicas that serve it and
hold it (for a key query, hold the key: a key-prefix subset follower holds only its keys;
scans skip such subsets, which hold part of a partition): the leader first, then followers
from the least lagging, as announced. With ``max_lag`` a follower whose announced lag on the
partition is larger is not a candidate (the leader's lag is 0), and a candidate follower is
asked its lag again right before its store is queried (announcements are as old as their
heartbeat), so no answer lags by more than ``max_lag`` when it is read. A key query goes to the
key's partition only (murmur2, as the changelog's writers partition); a range, prefix or
scan query fans out: each replica is asked once for the partitions it is the best
candidate of, and the answers are put together partition by partition
(:func:`merged_rows` merges them in key order).

Each replica is asked under its own store name (announced with it), so replicas of one
changelog need not share a name. A request's ``wait_s`` (how long replicas may wait for its
position bound) is one deadline for the whole call: each candidate asked is given what is
left of it, so a call never waits ``wait_s`` once per candidate.

A partition whose replica fails (it does not answer, the call times out, or it answers
NOT_UP_TO_BOUND, NOT_ACTIVE, NOT_PRESENT or STORE_EXCEPTION) is asked of its next candidate.
So is one whose replica answers it as a success at a position that has not reached the
request's bound: the router checks every answer's position against the bound itself (the
whole bound for a leader, whose position holds store-wide; the bound's entries for the
answer's partition for a follower, which a follower's honest answer satisfies by either
rule), and a :class:`~spark_statestore.serve.StoreClient` checks it before, by the rule the
server says its store applied. Such an answer is refused (logged, naming the replica, its
location, the answer's position and the bound), never passed on. When none qualifies or all
fail, the partition's result is a failure that says why (NOT_PRESENT: no live replica holds
it; NOT_ACTIVE: the request needs the leader and none is live; NOT_UP_TO_BOUND: the replicas
are behind the bound or ``max_lag``, or answered under a bound they had not reached;
otherwise the last replica's failure), naming the replicas tried, the lags seen and each
replica's failure. Every answer the router passes on is a replica's own, so it carries that
replica's position, checked against the bound by that replica and by the router.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any

from spark_statestore.changelog.partitioner import partition_for_key
from spark_statestore.discovery.announcement import ReplicaAnnouncement
from spark_statestore.discovery.errors import DiscoveryError
from spark_statestore.discovery.metadata import ReplicaSet
from spark_statestore.position import Position
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
)
from spark_statestore.store.manifest import Role

__all__ = ["ReplicaAsk", "Router", "RouterStats", "merged_rows"]

_log = logging.getLogger(__name__)

_KEY_QUERIES = (KeyQuery, RawKeyQuery, VersionedKeyQuery, MultiVersionedKeyQuery)
_SCANS = (RangeQuery, PrefixQuery, RawScanQuery)
_RETRIED = {
    FailureReason.NOT_UP_TO_BOUND,
    FailureReason.NOT_ACTIVE,
    FailureReason.NOT_PRESENT,
    FailureReason.STORE_EXCEPTION,
}
_UNLAGGED = 0

ReplicaAsk = Callable[[ReplicaAnnouncement, Any, StateQueryRequest, float], "StateQueryResult[Any]"]
"""How :meth:`Router.route` asks one replica: ``(replica, its client, the request for the
partitions it is asked, seconds left to wait for the bound) -> its answer``."""


class RouterStats:
    """What a :class:`Router` has done, counted per request and per partition asked (never
    per row), thread-safe: ``requests`` routed; ``failovers`` (a partition asked of its next
    candidate after the one asked failed); ``replica_failures`` by reason (``unreachable``:
    no answer, a timeout, a refused token; else the answer's failure reason, such as
    ``NOT_UP_TO_BOUND`` for an answer short of the bound, refused by the router or the
    replica); ``unanswered`` partitions (no candidate left: their result is a failure)."""

    def __init__(self) -> None:
        import threading
        from collections import Counter

        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()

    def count(self, name: str, reason: str = "") -> None:
        """Count one ``name`` event (with ``reason`` for ``replica_failures``)."""
        with self._lock:
            self._counts[name, reason] += 1

    def counts(self) -> dict[tuple[str, str], int]:
        """``{(name, reason): count}`` now; ``reason`` is "" but for ``replica_failures``."""
        with self._lock:
            counts = dict(self._counts)
        for name in ("requests", "failovers", "unanswered"):
            counts.setdefault((name, ""), 0)
        return counts


class Router:
    """Answers IQv2 requests with the live replicas of one store.

    Parameters
    ----------
    replicas
        The live replicas now (e.g. ``ReplicaRegistry.view``); called once per request.
    connect
        A client of a replica (``spark_statestore.connect(location, token=...)``, or by
        the replica's store path on its host); its ``query(request, wait_s=)`` answers as
        the replica's store would. Clients are kept for later requests until they fail or
        :meth:`close` (or the ``with`` block's end) closes them.
    max_lag
        Skip followers whose announced offset lag on a partition is larger (None: any).
    """

    def __init__(
        self,
        replicas: Callable[[], ReplicaSet],
        connect: Callable[[ReplicaAnnouncement], Any],
        *,
        max_lag: int | None = None,
    ) -> None:
        if max_lag is not None and (
            isinstance(max_lag, bool) or not isinstance(max_lag, int) or max_lag < 0
        ):
            raise DiscoveryError(f"max_lag must be an int >= 0 or None, got {max_lag!r}")
        self._replicas = replicas
        self._connect = connect
        self.max_lag = max_lag
        self._clients: dict[tuple[str, str | None], Any] = {}
        self.stats = RouterStats()
        """What the router has done so far (:class:`RouterStats`; metrics read it)."""

    def query(self, request: StateQueryRequest, *, wait_s: float = 0.0) -> StateQueryResult[Any]:
        """Route ``request``; one result per partition asked (a key query: the key's).

        ``wait_s`` is the longest the whole call waits for replicas to reach the request's
        bound: one deadline across the candidates asked in turn, each given what is left of
        it (once it has passed, the next candidates answer at once).

        Raises
        ------
        DiscoveryError
            When no replica is live, so not even the partition count is known.
        """
        return self.route(request, _query_replica, wait_s=wait_s)

    def route(
        self, request: StateQueryRequest, ask: ReplicaAsk, *, wait_s: float = 0.0
    ) -> StateQueryResult[Any]:
        """Route ``request`` as :meth:`query` does (the same candidates, lag checks, bound
        checks of each answer, failover and failures), asking each replica with
        ``ask(replica, client, request, wait_s)`` instead of its ``query`` (e.g. to pin a
        snapshot per replica: :mod:`~spark_statestore.discovery.scan`)."""
        deadline = time.monotonic() + wait_s
        view = self._replicas()
        count = view.partitions
        if count is None:
            refused = (
                f"; records refused on its replicas topic: {'; '.join(view.refused)}"
                if view.refused
                else ""
            )
            raise DiscoveryError(
                f"no live replica of {view.changelog!r} announces itself: nothing to route "
                f"{type(request.query).__name__} to{refused}"
            )
        query = request.query
        key = _key_of(query)
        if key is not None:
            partitions = [partition_for_key(key, count)]
            if request.partitions is not None and partitions[0] not in request.partitions:
                partitions = []
        elif request.partitions is not None:
            partitions = sorted(request.partitions)
        else:
            partitions = list(range(count))
        self.stats.count("requests")
        results: dict[int, QueryResult[Any]] = {}
        candidates = {p: self._candidates(view, request, p, key) for p in partitions}
        tried: dict[int, list[str]] = {p: [] for p in partitions}
        last: dict[int, QueryResult[Any]] = {}
        failures: dict[int, list[str]] = {p: [] for p in partitions}  # every replica's, in order
        errors: dict[int, str] = {}  # the last replica that did not answer, and why
        pending = [p for p in partitions if candidates[p]]
        while pending:
            by_replica: dict[str, list[int]] = {}
            chosen: dict[str, ReplicaAnnouncement] = {}
            for partition in pending:
                replica = candidates[partition].pop(0)
                by_replica.setdefault(replica.replica_id, []).append(partition)
                chosen[replica.replica_id] = replica
            retry: list[int] = []
            for replica_id, asked in by_replica.items():
                replica = chosen[replica_id]
                asking = request.with_partitions(set(asked))
                if replica.store_name is not None:  # each replica answers to its own name
                    asking = replace(asking, store_name=replica.store_name)
                left = max(0.0, deadline - time.monotonic())
                answers = self._ask(replica, asking, ask, left)
                for partition in asked:
                    tried[partition].append(_describe(replica, partition))
                    if isinstance(answers, str):
                        errors[partition] = answers
                        failures[partition].append(answers)
                        self.stats.count("replica_failures", "unreachable")
                    answer = None if isinstance(answers, str) else answers.get(partition)
                    if answer is not None and (
                        answer.is_success or answer.failure_reason not in _RETRIED
                    ):
                        results[partition] = answer
                        continue
                    if answer is not None:
                        last[partition] = answer
                        failures[partition].append(
                            f"{_describe(replica, partition)}: {answer.failure_message}"
                        )
                        reason = answer.failure_reason
                        self.stats.count("replica_failures", "" if reason is None else reason.value)
                    if candidates[partition]:
                        retry.append(partition)
                        self.stats.count("failovers")
            pending = retry
        for partition in partitions:
            if partition not in results:
                self.stats.count("unanswered")
                results[partition] = self._unanswered(
                    view,
                    request,
                    partition,
                    key,
                    tried[partition],
                    last.get(partition),
                    failures[partition],
                    errors.get(partition),
                )
        return StateQueryResult.for_partitions(results)

    # -- candidates -------------------------------------------------------------------------
    def _candidates(
        self, view: ReplicaSet, request: StateQueryRequest, partition: int, key: bytes | None
    ) -> list[ReplicaAnnouncement]:
        found = []
        for replica in view.replicas:
            if replica.location is None or not replica.holds(partition):
                continue
            if key is not None and not replica.holds_key(key, partition):
                continue
            if key is None and replica.key_prefix is not None:
                continue  # a key-prefix subset holds part of the partition only
            if request.active_only and replica.role is not Role.LEADER:
                continue
            lag = _lag(replica, partition)
            if self.max_lag is not None and (lag is None or lag > self.max_lag):
                continue
            found.append(replica)
        leader = view.leader()

        def rank(replica: ReplicaAnnouncement) -> tuple[bool, float, int, str]:
            lag = _lag(replica, partition)
            unknown = float("inf")
            return (
                replica is not leader,
                unknown if lag is None else lag,
                -replica.heartbeat_ms,
                replica.replica_id,
            )

        return sorted(found, key=rank)

    def _ask(
        self,
        replica: ReplicaAnnouncement,
        request: StateQueryRequest,
        ask: ReplicaAsk,
        wait_s: float,
    ) -> dict[int, QueryResult[Any]] | str:
        """The replica's answers by partition, or why it could not be asked (the client's
        error: unreachable, timed out, refused our token, ...).

        Clients are kept per replica (and location) for the next requests; one that fails is
        closed and made again next time."""
        from spark_statestore.discovery.trust import UnverifiableReplicaError
        from spark_statestore.serve.errors import ServeError

        slot = (replica.replica_id, replica.location)
        lagging: dict[int, QueryResult[Any]] = {}
        try:
            client = self._clients.get(slot)
            if client is None:
                client = self._clients[slot] = self._connect(replica)
            if self.max_lag is not None and replica.role is Role.FOLLOWER:
                # Announced lags are as old as the last heartbeat: ask the replica now (it
                # reads its changelog's end offsets), and only then its store, which can
                # only have moved on since.
                lagging = self._too_far_behind(replica, client.lags(), request)
                if lagging:
                    asked = set(request.partitions or ()) - set(lagging)
                    if not asked:
                        return lagging
                    request = request.with_partitions(asked)
            answer = self._checked(replica, request, ask(replica, client, request, wait_s))
        except (ServeError, UnverifiableReplicaError, OSError, TimeoutError) as exc:
            _log.warning(
                "replica %s at %s of %s did not answer: %s",
                replica.replica_id,
                replica.location,
                replica.changelog,
                exc,
            )
            self._drop(slot)
            return f"{replica.role.value} {replica.replica_id[:8]} at {replica.location}: {exc}"
        return {**dict(answer.partition_results), **lagging}

    def _checked(
        self, replica: ReplicaAnnouncement, request: StateQueryRequest, answer: Any
    ) -> StateQueryResult[Any]:
        """``answer`` with every success refused whose position has not reached the
        request's bound: by the whole bound for a leader (a leader's position holds
        store-wide), else by its entries for the answer's partition, which every honest
        answer satisfies whichever rule its store applied (a store-wide follower's answers
        are checked by the whole bound in its client, as its server says)."""
        checked: StateQueryResult[Any] = answer.checked_against(
            request.position_bound,
            store_wide=replica.role is Role.LEADER,
            answered_by=f"{replica.role.value} {replica.replica_id} of {replica.changelog} at "
            f"{replica.location}",
        )
        return checked

    def _too_far_behind(
        self, replica: ReplicaAnnouncement, lags: Any, request: StateQueryRequest
    ) -> dict[int, QueryResult[Any]]:
        """NOT_UP_TO_BOUND results for the asked partitions the replica lags on by more than
        ``max_lag`` (or does not know its lag on), as it says now."""
        behind: dict[int, QueryResult[Any]] = {}
        for partition in sorted(request.partitions or ()):
            info = None if lags is None else lags.get(partition)
            if info is None or info.offset_lag > (self.max_lag or 0):
                lag = "unknown" if info is None else str(info.offset_lag)
                behind[partition] = QueryResult.for_failure(
                    FailureReason.NOT_UP_TO_BOUND,
                    f"replica {replica.replica_id[:8]} at {replica.location} lags by {lag} on "
                    f"partition {partition}, more than max_lag={self.max_lag}",
                    Position.empty(),
                )
        return behind

    def _drop(self, slot: tuple[str, str | None]) -> None:
        client = self._clients.pop(slot, None)
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()

    def close(self) -> None:
        """Close the clients kept for the replicas."""
        for slot in list(self._clients):
            self._drop(slot)

    def __enter__(self) -> Router:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unanswered(
        self,
        view: ReplicaSet,
        request: StateQueryRequest,
        partition: int,
        key: bytes | None,
        tried: list[str],
        last: QueryResult[Any] | None,
        failures: list[str],
        error: str | None,
    ) -> QueryResult[Any]:
        holders = [
            r
            for r in view.replicas
            if r.holds(partition) and (key is None or r.holds_key(key, partition))
        ]
        seen = ", ".join(_describe(r, partition) for r in holders) or "none"
        attempts = f"; asked: {', '.join(tried)}" if tried else ""
        position = last.position if last is not None else Position.empty()
        if not holders:
            reason = FailureReason.NOT_PRESENT
            why = f"no live replica of {view.changelog!r} holds partition {partition}"
        elif request.active_only and not any(r.role is Role.LEADER for r in holders):
            reason = FailureReason.NOT_ACTIVE
            why = (
                f"the request needs the active (leader) store of partition {partition}, "
                "and none is live"
            )
        elif last is not None:
            reason = last.failure_reason or FailureReason.STORE_EXCEPTION
            why = f"no replica could answer for partition {partition}: {'; '.join(failures)}"
        elif not tried:
            reason = FailureReason.NOT_UP_TO_BOUND
            why = f"every replica of partition {partition} lags by more than max_lag={self.max_lag}"
        else:
            reason = FailureReason.STORE_EXCEPTION
            why = f"no replica of partition {partition} answered"
            if error is not None:
                why += f"; the last one asked did not: {error}"
        return QueryResult.for_failure(reason, f"{why} (replicas: {seen}{attempts})", position)


def _query_replica(
    replica: ReplicaAnnouncement, client: Any, request: StateQueryRequest, wait_s: float
) -> StateQueryResult[Any]:
    answer: StateQueryResult[Any] = client.query(request, wait_s=wait_s)
    return answer


def _key_of(query: Any) -> bytes | None:
    if isinstance(query, _KEY_QUERIES):
        key = query.key
        if isinstance(key, (bytes, bytearray, memoryview)):
            return bytes(key)
    return None


def _lag(replica: ReplicaAnnouncement, partition: int) -> int | None:
    if replica.role is Role.LEADER:
        return _UNLAGGED
    info = replica.lags.get(partition)
    return None if info is None else info.offset_lag


def _describe(replica: ReplicaAnnouncement, partition: int) -> str:
    lag = _lag(replica, partition)
    shown = "?" if lag is None else str(lag)
    return f"{replica.role.value} {replica.replica_id[:8]} at {replica.location} (lag {shown})"


def merged_rows(result: StateQueryResult[Any], *, descending: bool = False) -> Iterator[Any]:
    """The ``(key, value)`` rows of a routed range, prefix or scan query's partitions, merged
    in key order (successful partitions only; check the failures first)."""
    lists: Iterable[list[Any]] = (
        r.result for r in result.partition_results.values() if r.is_success and r.result
    )
    return heapq.merge(*lists, key=lambda row: row[0], reverse=descending)
