"""``spark-statestore lag``: how far a store is behind its changelog, per partition.

The columns follow ``kafka-consumer-groups --describe``: the store plays the group, its
applied changelog offsets the committed offsets. Offsets are positions (the next offset to
read), so ``LAG = LOG-END-OFFSET - CURRENT-OFFSET``. The live owner (a follower) reports its
lags; a store nobody follows is compared with the changelog's end offsets when
``--bootstrap-servers`` is given, and shows ``-`` for what is unknown otherwise.

With ``--changelog`` instead of a store, the rows are every live replica's of that changelog,
as each announces itself on ``<changelog>-replicas`` (replica discovery): one row per replica
and held partition, the replica in the consumer's place.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from spark_statestore.cli.store_state import (
    StoreState,
    StoreTarget,
    changelog_lag_infos,
    read_state,
)
from spark_statestore.cli.table import render_table
from spark_statestore.query import LagInfo

if TYPE_CHECKING:
    from spark_statestore.discovery import ReplicaAnnouncement
    from spark_statestore.discovery.signing import MembershipKeys

__all__ = [
    "HEADERS",
    "REPLICA_HEADERS",
    "lag_rows",
    "replica_lag_rows",
    "run_lag",
    "run_replica_lag",
]

HEADERS = (
    "STORE",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "OWNER",
    "LOCATION",
)


REPLICA_HEADERS = (
    "REPLICA",
    "ROLE",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "HOST",
    "LOCATION",
)
_REPLICA_JSON_NAMES = (
    "replica",
    "role",
    "topic",
    "partition",
    "current_offset",
    "end_offset",
    "lag",
    "host",
    "location",
)


def run_replica_lag(
    changelog: str,
    *,
    bootstrap_servers: str,
    kafka_config: Mapping[str, Any],
    as_json: bool,
    membership_keys: MembershipKeys | None = None,
) -> int:
    """Print one row per live replica of ``changelog`` and held partition, from their
    announcements signed under ``membership_keys`` (None: this user's default key); returns
    the exit code (0 also when no replica is live: it says so, and why records were
    refused)."""
    from spark_statestore.connectors.kafka.discovery import ReplicaRegistry

    with ReplicaRegistry(
        bootstrap_servers, changelog, config=kafka_config, keys=membership_keys
    ) as registry:
        view = registry.replicas()
        replicas = view.all_metadata()
    rows = replica_lag_rows(replicas)
    _print_rows(REPLICA_HEADERS, _REPLICA_JSON_NAMES, rows, as_json=as_json)
    if not replicas:
        refused = "".join(f"\n  refused {why}" for why in view.refused)
        print(
            f"no live replica of {changelog} announces itself on {changelog}-replicas{refused}",
            file=sys.stderr,
        )
    return 0


def replica_lag_rows(replicas: Sequence[ReplicaAnnouncement]) -> list[tuple[Any, ...]]:
    """``(replica, role, topic, partition, current, end, lag, host, location)`` per replica
    and held partition, by replica id; offsets None when the replica announced no lag."""
    rows = []
    for replica in sorted(replicas, key=lambda r: r.replica_id):
        for partition in replica.held_partitions:
            info = replica.lags.get(partition)
            rows.append(
                (
                    replica.replica_id,
                    replica.role.value,
                    replica.changelog,
                    partition,
                    None if info is None else info.current_offset_position,
                    None if info is None else info.end_offset_position,
                    None if info is None else info.offset_lag,
                    replica.host,
                    replica.location,
                )
            )
    return rows


def _print_rows(
    headers: Sequence[str], names: Sequence[str], rows: list[tuple[Any, ...]], *, as_json: bool
) -> None:
    if as_json:
        for row in rows:
            print(json.dumps(dict(zip(names, row, strict=True))), flush=True)
    else:
        print(render_table(headers, [[_cell(v) for v in row] for row in rows]), flush=True)


def run_lag(
    target: StoreTarget,
    *,
    bootstrap_servers: str | None,
    kafka_config: Mapping[str, Any],
    as_json: bool,
) -> int:
    """Print one row per held partition (a table, or JSON lines); returns the exit code."""
    state = read_state(target, purpose="spark-statestore lag")
    if state.description.changelog_topic is None:
        print(
            f"store {state.description.path} publishes no changelog: it has no lag",
            file=sys.stderr,
        )
        return 0
    lags = changelog_lag_infos(state.description, state.lags, bootstrap_servers, kafka_config)
    _print_rows(HEADERS, _JSON_NAMES, lag_rows(state, lags), as_json=as_json)
    if lags is None:
        print(
            "the end offsets are unknown: no live follower reports them; give "
            "--bootstrap-servers to ask the changelog",
            file=sys.stderr,
        )
    return 0


_JSON_NAMES = (
    "store",
    "topic",
    "partition",
    "current_offset",
    "end_offset",
    "lag",
    "owner",
    "location",
)


def lag_rows(state: StoreState, lags: Mapping[int, LagInfo] | None) -> list[tuple[Any, ...]]:
    """``(store, topic, partition, current, end, lag, owner, location)`` per held partition;
    ``end`` and ``lag`` are None when unknown, ``owner`` is ``pid@host`` of a live owner."""
    d = state.description
    owner = state.owner
    who = f"{owner.pid}@{owner.host}" if owner is not None and state.owner_live else None
    rows = []
    for partition in state.held_partitions:
        info = None if lags is None else lags.get(partition)
        current = (
            d.changelog_offsets.get(partition, 0) if info is None else info.current_offset_position
        )
        end = None if info is None else info.end_offset_position
        lag = None if info is None else info.offset_lag
        rows.append((d.store, d.changelog_topic, partition, current, end, lag, who, state.location))
    return rows


def _cell(value: object) -> str:
    return "-" if value is None else str(value)
