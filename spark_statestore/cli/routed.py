"""``spark-statestore query --changelog``: a query routed over a changelog's live replicas.

The replicas announce themselves on ``<changelog>-replicas``
(:class:`~spark_statestore.connectors.kafka.discovery.ReplicaRegistry`); the
:class:`~spark_statestore.discovery.Router` asks, per partition, the leader first, then the
least lagging follower within ``--max-lag``, failing over on errors; each answer is checked
against ``--position-bound`` by the replica that gives it and again here, by the router and
the replica's client (a replica that answers a bound it has not reached is failed over
too). Keys become IQv2 ``KeyQuery`` requests (one per key, to the key's partition; their
rows' partition, offset and timestamp are unknown: ``-``). A range, a prefix and ``--all``
are a :class:`~spark_statestore.discovery.RoutedScan`: one snapshot pinned per replica,
read in pages of ``--page-rows`` rows and merged in key order as they print, so memory
holds a page per replica whatever the store's size; ``--limit`` caps what each replica is
asked for.

Every replica is reached with the one token of ``--token-file``: each store server has its
own token unless its owner was given one, so routing across replicas needs them to share it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any

from spark_statestore.cli.errors import CommandError, StaleStoreError
from spark_statestore.position import Position

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_statestore.cli.query_types import Answer, QueryOptions
    from spark_statestore.discovery import RoutedScan, RoutedScanError, Router
    from spark_statestore.query import StateQueryResult

__all__ = ["open_routed_answer"]


@contextlib.contextmanager
def open_routed_answer(options: QueryOptions) -> Iterator[Answer]:
    """The rows of ``options.scan`` from the live replicas of ``options.target.changelog``.

    Raises
    ------
    StaleStoreError
        A partition's replicas are all behind the bound (NOT_UP_TO_BOUND).
    CommandError
        A partition has no replica that could answer (the message says why).
    DiscoveryError
        No replica of the changelog is live.
    """
    from spark_statestore.cli.query_types import Answer
    from spark_statestore.connectors.kafka.discovery import ReplicaRegistry
    from spark_statestore.discovery import RoutedScan, RoutedScanError, Router
    from spark_statestore.discovery.trust import connect_replica
    from spark_statestore.serve.auth import ServeCredentials

    target = options.target
    changelog, bootstrap = target.changelog, options.bootstrap_servers
    assert changelog is not None and bootstrap is not None and target.token is not None
    credentials = ServeCredentials(
        target.token, None, target.tls_root_certs, target.tls_client_cert, target.tls_client_key
    )

    def connect(replica: Any) -> Any:
        return connect_replica(replica, credentials)

    where = f"the replicas of {changelog}"
    with (
        ReplicaRegistry(
            bootstrap, changelog, config=options.kafka_config, keys=target.membership_keys
        ) as registry,
        Router(registry.view, connect, max_lag=options.max_lag) as router,
    ):
        registry.refresh()
        if options.scan.keys is not None:
            rows, position = _key_rows(router, options, changelog)
            yield Answer(iter([_batch(rows)]), position, None, where)
            return
        try:
            scan = RoutedScan.open(
                router,
                _request(options, changelog),
                wait_s=options.bound_timeout_s,
                limit=options.scan.limit,
                page_rows=options.page_rows,
            )
        except RoutedScanError as exc:
            raise _refusal(exc, changelog) from exc
        with scan:
            batches = _checked_batches(scan, changelog)
            try:
                yield Answer(
                    batches, scan.position, None, where, read_position=lambda: scan.position
                )
            finally:
                batches.close()


def _request(options: QueryOptions, changelog: str) -> Any:
    from spark_statestore.query import PrefixQuery, RangeQuery, RawScanQuery, StateQueryRequest

    scan = options.scan
    if scan.as_of is not None:
        raise CommandError("--as-of is not routed yet: query a replica by its path or location")
    if scan.prefix is not None:
        query: Any = PrefixQuery.with_prefix(scan.prefix)
    elif scan.lower is not None or scan.upper is not None:
        query = RangeQuery.with_range(scan.lower, scan.upper)
    else:
        query = RawScanQuery.scan()
    return (
        StateQueryRequest.in_store(changelog)
        .with_query(query)
        .with_position_bound(options.position_bound)
    )


def _key_rows(
    router: Router, options: QueryOptions, changelog: str
) -> tuple[list[tuple[bytes, bytes]], Position]:
    """The rows of ``--key`` lookups, keys ascending, up to ``--limit``, and their merged
    position (one routed ``KeyQuery`` per key, until the limit is met)."""
    from spark_statestore.query import KeyQuery, StateQueryRequest

    scan = options.scan
    assert scan.keys is not None
    rows: list[tuple[bytes, bytes]] = []
    position = Position.empty()
    for key in scan.keys:  # sorted and distinct
        if scan.limit is not None and len(rows) >= scan.limit:
            break
        request = (
            StateQueryRequest.in_store(changelog)
            .with_query(KeyQuery.with_key(key))
            .with_position_bound(options.position_bound)
        )
        result = router.query(request, wait_s=options.bound_timeout_s)
        _check(result, changelog)
        position = position.merge(result.position)
        rows.extend((key, r.result) for r in result.partition_results.values() if r.result)
    return rows, position


def _checked_batches(scan: RoutedScan, changelog: str) -> Generator[pa.RecordBatch, None, None]:
    """The scan's batches; a replica lost mid-scan that none could replace ends them with
    the command's error."""
    from spark_statestore.discovery import RoutedScanError

    try:
        yield from scan.batches()
    except RoutedScanError as exc:
        raise _refusal(exc, changelog) from exc


def _refusal(exc: RoutedScanError, changelog: str) -> CommandError:
    """The command's error for a scan no replica could serve: exit 3 (stale) when the first
    partition that failed had its replicas all behind the bound or ``--max-lag``, else 2."""
    from spark_statestore.query import FailureReason

    failed = [answer for _, answer in sorted(exc.failures.items())]
    if failed and failed[0].failure_reason is FailureReason.NOT_UP_TO_BOUND:
        return StaleStoreError(f"{changelog}: {exc}")
    return CommandError(f"{changelog}: {exc}")


def _check(result: StateQueryResult[Any], changelog: str) -> None:
    from spark_statestore.query import FailureReason

    for partition, answer in sorted(result.partition_results.items()):
        if answer.is_success:
            continue
        message = f"partition {partition} of {changelog}: {answer.failure_message}"
        if answer.failure_reason is FailureReason.NOT_UP_TO_BOUND:
            raise StaleStoreError(f"NOT_UP_TO_BOUND: {message}")
        reason = answer.failure_reason.value if answer.failure_reason else "failure"
        raise CommandError(f"{reason}: {message}")


def _batch(rows: list[tuple[bytes, bytes]]) -> pa.RecordBatch:
    """The rows in the snapshot schema, partition, offset and timestamp unknown (null)."""
    import pyarrow as pa

    from spark_statestore.store.snapshot import arrow_schema

    schema = arrow_schema()
    count = len(rows)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([key for key, _ in rows], pa.binary()),
            pa.array([value for _, value in rows], pa.binary()),
            pa.nulls(count, pa.int32()),
            pa.nulls(count, pa.int64()),
            pa.nulls(count, schema.field("timestamp").type),
            pa.nulls(count, schema.field("headers").type),
        ],
        schema=schema,
    )
