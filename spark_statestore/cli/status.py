"""``spark-statestore status``: one screen of what is happening to a store, or to every replica
of a changelog.

For a store (a directory or a server's location): its owner and role, the owner's state
(:class:`~spark_statestore.health.Health`: RESTORING, RUNNING, FAILED with the reason, ...) and
since when, the latest commit and how long ago the owner made it, the position, the lag per
partition (the owner's own, else the changelog's end offsets with ``--bootstrap-servers``), and
with ``--bootstrap-servers`` the announcements on ``<changelog>-replicas`` with their age.

For ``--changelog TOPIC``: every replica that announced itself there, live, expired (a killed
owner stops announcing: its announcement goes stale after its TTL) or withdrawn, with its
heartbeat's age and its lag; with ``--token-file`` each live replica's server is asked for its
state too.

The exit code says whether all is well, for scripts and probes: 0 when the store's owner (every
live replica, for ``--changelog``) is RUNNING, 3 otherwise (as ``systemctl status`` for a unit
that is not running), 2 for an error.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_statestore.cli.inspect import owner_text
from spark_statestore.cli.store_state import (
    StoreState,
    StoreTarget,
    changelog_lag_infos,
    read_state,
)
from spark_statestore.cli.table import render_table
from spark_statestore.errors import StateStoreError
from spark_statestore.health import NOT_OPEN, Health, HealthState, served

if TYPE_CHECKING:
    from spark_statestore.discovery import ReplicaAnnouncement
    from spark_statestore.discovery.signing import MembershipKeys
    from spark_statestore.query import LagInfo
    from spark_statestore.store.ownership import OwnerInfo

__all__ = ["NOT_RUNNING_EXIT", "StoreStatus", "run_changelog_status", "run_status"]

NOT_RUNNING_EXIT = 3
"""The exit code when the store's owner (a replica) is not RUNNING."""

_PARTITION_HEADERS = ("PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG")
_REPLICA_HEADERS = (
    "REPLICA",
    "ROLE",
    "HOST",
    "PID",
    "LOCATION",
    "ANNOUNCED",
    "HEARTBEAT-AGE",
    "LAG",
    "STATE",
)


@dataclass(frozen=True)
class StoreStatus:
    """What ``status`` shows of one store.

    Parameters
    ----------
    name, path
        The store's name (None when its owner holds it and serves nothing to ask) and
        directory (or the location it was read through).
    state
        The store's description, owner and lags as read (None: the owner holds the store
        without serving it, so only the owner is known).
    owner
        The owner (live, or the stale file of a dead one), or None.
    owner_live
        True while the owner holds the store.
    health
        The owner's health, or what is known of it.
    lags
        ``{partition: LagInfo}``, or None when unknown.
    announcements
        ``(as of epoch ms, the changelog's replicas' newest announcements)``, or None when not
        asked (no ``--bootstrap-servers``, or no changelog).
    """

    name: str | None
    path: str
    state: StoreState | None
    owner: OwnerInfo | None
    owner_live: bool
    health: Health
    lags: Mapping[int, LagInfo] | None
    announcements: tuple[int, tuple[ReplicaAnnouncement, ...]] | None


def read_status(
    target: StoreTarget,
    *,
    bootstrap_servers: str | None,
    kafka_config: Mapping[str, Any],
    membership_keys: MembershipKeys | None = None,
) -> StoreStatus:
    """The status of the target store (see the module docstring).

    Raises
    ------
    StoreNotFoundError
        No store at the path.
    ServeError, KafkaClientError
        The owner's server or Kafka cannot be read.
    """
    from spark_statestore.store.errors import StoreLockedError
    from spark_statestore.store.ownership import live_owner

    try:
        state = read_state(target, purpose="spark-statestore status")
    except StoreLockedError:
        assert target.path is not None  # a location is read through its server
        owner = live_owner(target.path)
        health = Health(
            HealthState.UNKNOWN,
            "the owner serves no Flight server to ask; read its /health endpoint "
            "(--metrics-port, option metricsPort)",
            time.time(),
        )
        return StoreStatus(None, target.path, None, owner, owner is not None, health, None, None)
    description = state.description
    if state.health is not None:
        health = state.health
    elif state.owner_live and state.owner is not None:
        health = served(state.owner.purpose, state.owner.started_at)
    else:
        health = Health(HealthState.STOPPED, NOT_OPEN, None)
    lags = changelog_lag_infos(description, state.lags, bootstrap_servers, kafka_config)
    announcements = None
    if bootstrap_servers is not None and description.changelog_topic is not None:
        announcements = _announcements(
            description.changelog_topic, bootstrap_servers, kafka_config, membership_keys
        )
    return StoreStatus(
        description.store,
        description.path,
        state,
        state.owner,
        state.owner_live,
        health,
        lags,
        announcements,
    )


def run_status(
    target: StoreTarget,
    *,
    bootstrap_servers: str | None,
    kafka_config: Mapping[str, Any],
    as_json: bool,
    membership_keys: MembershipKeys | None = None,
    clock: Callable[[], float] = time.time,
) -> int:
    """Print the store's status (text, or one JSON object); returns the exit code (0 when
    RUNNING, :data:`NOT_RUNNING_EXIT` otherwise)."""
    status = read_status(
        target,
        bootstrap_servers=bootstrap_servers,
        kafka_config=kafka_config,
        membership_keys=membership_keys,
    )
    now = clock()
    if as_json:
        print(json.dumps(status_json(status, now), sort_keys=True), flush=True)
    else:
        print("\n".join(status_lines(status, now)), flush=True)
    return 0 if status.health.state.healthy else NOT_RUNNING_EXIT


def run_changelog_status(
    changelog: str,
    *,
    bootstrap_servers: str,
    kafka_config: Mapping[str, Any],
    as_json: bool,
    membership_keys: MembershipKeys | None = None,
    credentials: Mapping[str, Any] | None = None,
    clock: Callable[[], float] = time.time,
) -> int:
    """Print every replica of ``changelog`` as announced (one table, or JSON lines), with each
    live one's state when ``credentials`` (the replicas' shared token, ...) are given; returns
    0 when at least one replica is live and every live one that was asked is RUNNING."""
    as_of_ms, found = _announcements(changelog, bootstrap_servers, kafka_config, membership_keys)
    healths = {} if credentials is None else _replica_healths(found, as_of_ms, credentials)
    rows = [_replica_row(a, as_of_ms, healths.get(a.replica_id)) for a in found]
    if as_json:
        names = [h.lower().replace("-", "_") for h in _REPLICA_HEADERS]
        for row in rows:
            print(json.dumps(dict(zip(names, row, strict=True))), flush=True)
    else:
        print(f"replicas of {changelog} (announced on {changelog}-replicas)")
        print(render_table(_REPLICA_HEADERS, [[_cell(v) for v in row] for row in rows]))
    live = [a for a in found if _announced(a, as_of_ms) == "live"]
    if not live:
        print(f"no live replica of {changelog} announces itself", file=sys.stderr)
        return NOT_RUNNING_EXIT
    asked = [healths[a.replica_id] for a in live if a.replica_id in healths]
    return 0 if all(h.state.healthy for h in asked) else NOT_RUNNING_EXIT


# -- rendering --------------------------------------------------------------------------------
def status_lines(status: StoreStatus, now: float) -> list[str]:
    """The human-readable status: ``label  value`` lines, then the partitions' and the
    replicas' tables."""
    health = status.health
    rows: list[tuple[str, str]] = [
        ("store", f"{status.name or '?'} ({status.path})"),
    ]
    state = status.state
    if state is not None:
        d = state.description
        changelog = d.changelog_topic or "no changelog"
        rows.append(("role", f"{d.role.value} of {changelog}, {d.partitions} partition(s)"))
    rows.append(("owner", owner_text(status.owner, status.owner_live)))
    since = "" if health.since is None else f" since {_when(health.since, now)}"
    rows.append(("state", f"{health.state.value}{since}"))
    if health.reason:
        rows.append(("reason", health.reason))
    if state is not None:
        d = state.description
        last = health.details.get("last_commit_at")
        age = "" if last is None else f", made {_age(now - float(last))} ago"
        rows.append(("commit", f"#{d.commit_seq}{age}"))
        rows.append(("position", d.position.to_json()))
    width = max(len(label) for label, _ in rows)
    lines = [f"{label.ljust(width)}  {value}" for label, value in rows]
    if state is not None and state.description.changelog_topic is not None:
        lines += ["", render_table(_PARTITION_HEADERS, _partition_rows(status))]
        if status.lags is None:
            lines.append("(end offsets unknown: give --bootstrap-servers to ask the changelog)")
    if status.announcements is not None:
        as_of_ms, found = status.announcements
        topic = f"{state.description.changelog_topic}-replicas" if state else "replicas"
        rows_ = [[_cell(v) for v in _replica_row(a, as_of_ms, None)] for a in found]
        lines += ["", f"announcements on {topic}:"]
        lines.append(render_table(_REPLICA_HEADERS, rows_) if rows_ else "  none")
    return lines


def status_json(status: StoreStatus, now: float) -> dict[str, Any]:
    """The status as one JSON object."""
    from dataclasses import asdict

    from spark_statestore.serve.protocol import lags_to_dict

    state = status.state
    announcements = None
    if status.announcements is not None:
        as_of_ms, found = status.announcements
        names = [h.lower().replace("-", "_") for h in _REPLICA_HEADERS]
        announcements = [
            dict(zip(names, _replica_row(a, as_of_ms, None), strict=True)) for a in found
        ]
    owner = status.owner
    return {
        "name": status.name,
        "path": status.path,
        "owner": None if owner is None else {**asdict(owner), "live": status.owner_live},
        "health": status.health.to_dict(),
        "description": None if state is None else state.description.to_dict(),
        "lags": None if status.lags is None else lags_to_dict(status.lags),
        "announcements": announcements,
        "as_of": now,
    }


def _partition_rows(status: StoreStatus) -> list[list[str]]:
    assert status.state is not None
    offsets = status.state.description.changelog_offsets
    rows = []
    for partition in status.state.held_partitions:
        info = None if status.lags is None else status.lags.get(partition)
        current = offsets.get(partition, 0) if info is None else info.current_offset_position
        end = None if info is None else info.end_offset_position
        lag = None if info is None else info.offset_lag
        rows.append([_cell(v) for v in (partition, current, end, lag)])
    return rows


def _replica_row(
    announcement: ReplicaAnnouncement, as_of_ms: int, health: Health | None
) -> tuple[Any, ...]:
    since = announcement.heartbeat_ms if announcement.seen_ms is None else announcement.seen_ms
    lags = announcement.lags
    lag = sum(info.offset_lag for info in lags.values()) if lags else None
    return (
        announcement.replica_id,
        announcement.role.value,
        announcement.host,
        announcement.pid or None,
        announcement.location,
        _announced(announcement, as_of_ms),
        round(max(0, as_of_ms - since) / 1000, 1),
        lag,
        None if health is None else health.state.value,
    )


def _announced(announcement: ReplicaAnnouncement, as_of_ms: int) -> str:
    if announcement.withdrawn:
        return "withdrawn"
    if announcement.is_live(as_of_ms):
        return "live"
    expired = (as_of_ms - announcement.expires_ms()) / 1000
    return f"expired {_age(expired)} ago"


def _when(epoch_s: float, now: float) -> str:
    stamp = dt.datetime.fromtimestamp(epoch_s, dt.timezone.utc).isoformat(timespec="seconds")
    return f"{stamp.replace('+00:00', 'Z')} ({_age(now - epoch_s)} ago)"


def _age(seconds: float) -> str:
    """``4.2 s``, ``3m 12s``, ``2h 5m``, ``3d 4h``."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    minutes, secs = divmod(whole, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s"


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


# -- reading ----------------------------------------------------------------------------------
def _announcements(
    changelog: str,
    bootstrap_servers: str,
    kafka_config: Mapping[str, Any],
    membership_keys: MembershipKeys | None,
) -> tuple[int, tuple[ReplicaAnnouncement, ...]]:
    from spark_statestore.connectors.kafka.discovery import ReplicaRegistry

    with ReplicaRegistry(
        bootstrap_servers, changelog, config=kafka_config, keys=membership_keys
    ) as registry:
        registry.refresh()
        return registry.announcements()


def _replica_healths(
    found: Sequence[ReplicaAnnouncement], as_of_ms: int, credentials: Mapping[str, Any]
) -> dict[str, Health]:
    """Each live, served replica's health as its server reports it (UNKNOWN with the reason
    when it cannot be asked)."""
    from spark_statestore.serve import connect

    healths: dict[str, Health] = {}
    for announcement in found:
        if announcement.location is None or _announced(announcement, as_of_ms) != "live":
            continue
        try:
            with connect(announcement.location, **credentials) as client:
                reply = client.describe()
        except StateStoreError as exc:
            healths[announcement.replica_id] = Health(
                HealthState.UNKNOWN, " ".join(str(exc).split())
            )
            continue
        healths[announcement.replica_id] = reply.health or served(
            reply.owner.purpose, reply.owner.started_at
        )
    return healths
