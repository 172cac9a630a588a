"""``spark-statestore query --changelog``: a query routed over a changelog's live replicas.

The replicas announce themselves on ``<changelog>-replicas``
(:class:`~spark_statestore.connectors.kafka.discovery.ReplicaRegistry`); the
:class:`~spark_statestore.discovery.Router` asks, per partition, the leader first, then the
least lagging follower within ``--max-lag``, failing over on errors; each answer is checked
against ``--position-bound`` by the replica that gives it and again here, by the router and
the replica's client (a replica that answers a bound it has not reached is failed over
too). Keys become IQv2 ``KeyQuery``
requests (one per key, to the key's partition), a range a ``RangeQuery``, a prefix a
``PrefixQuery``, ``--all`` a ``RawScanQuery``; scans are merged in key order. IQv2 answers
carry keys and values only: the rows' partition, offset and timestamp are unknown (``-``).

Every replica is reached with the one token of ``--token-file``: each store server has its
own token unless its owner was given one, so routing across replicas needs them to share it.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from spark_statestore.cli.errors import CommandError, StaleStoreError
from spark_statestore.position import Position

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_statestore.cli.query import Answer, QueryOptions
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
    import spark_statestore
    from spark_statestore.connectors.kafka.discovery import ReplicaRegistry
    from spark_statestore.discovery import Router
    from spark_statestore.query import StateQueryRequest

    target = options.target
    changelog, bootstrap = target.changelog, options.bootstrap_servers
    assert changelog is not None and bootstrap is not None

    def connect(replica: Any) -> Any:
        return spark_statestore.connect(
            replica.location,
            token=target.token,
            tls_root_certs=target.tls_root_certs,
            tls_client_cert=target.tls_client_cert,
            tls_client_key=target.tls_client_key,
        )

    with (
        ReplicaRegistry(bootstrap, changelog, config=options.kafka_config) as registry,
        Router(registry.view, connect, max_lag=options.max_lag) as router,
    ):
        registry.refresh()
        rows: list[tuple[bytes, bytes]] = []
        position = Position.empty()
        for query in _queries(options):
            request = (
                StateQueryRequest.in_store(changelog)
                .with_query(query)
                .with_position_bound(options.position_bound)
            )
            result = router.query(request, wait_s=options.bound_timeout_s)
            _check(result, changelog)
            position = position.merge(result.position)
            rows.extend(_rows(query, result))
    rows.sort(key=lambda row: row[0])
    if options.scan.limit is not None:
        rows = list(itertools.islice(rows, options.scan.limit))
    from spark_statestore.cli.query import Answer

    yield Answer(iter([_batch(rows)]), position, None, f"the replicas of {changelog}")


def _queries(options: QueryOptions) -> list[Any]:
    from spark_statestore.query import KeyQuery, PrefixQuery, RangeQuery, RawScanQuery

    scan = options.scan
    if scan.as_of is not None:
        raise CommandError("--as-of is not routed yet: query a replica by its path or location")
    if scan.keys is not None:
        return [KeyQuery.with_key(key) for key in scan.keys]
    if scan.prefix is not None:
        return [PrefixQuery.with_prefix(scan.prefix)]
    if scan.lower is not None or scan.upper is not None:
        return [RangeQuery.with_range(scan.lower, scan.upper)]
    return [RawScanQuery.scan()]


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


def _rows(query: Any, result: StateQueryResult[Any]) -> list[tuple[bytes, bytes]]:
    from spark_statestore.discovery import merged_rows
    from spark_statestore.query import KeyQuery

    if isinstance(query, KeyQuery):
        found = [r.result for r in result.partition_results.values() if r.result is not None]
        return [(query.key, value) for value in found]
    return [(bytes(key), bytes(value)) for key, value in merged_rows(result)]


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
