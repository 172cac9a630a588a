"""``spark-statestore lag``: how far a store is behind its changelog, per partition.

The columns follow ``kafka-consumer-groups --describe``: the store plays the group, its
applied changelog offsets the committed offsets. Offsets are positions (the next offset to
read), so ``LAG = LOG-END-OFFSET - CURRENT-OFFSET``. The live owner (a follower) reports its
lags; a store nobody follows is compared with the changelog's end offsets when
``--bootstrap-servers`` is given, and shows ``-`` for what is unknown otherwise.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from spark_statestore.cli.store_state import (
    StoreState,
    StoreTarget,
    changelog_lag_infos,
    read_state,
)
from spark_statestore.cli.table import render_table
from spark_statestore.query import LagInfo

__all__ = ["HEADERS", "lag_rows", "run_lag"]

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
    rows = lag_rows(state, lags)
    if as_json:
        for row in rows:
            print(json.dumps(dict(zip(_JSON_NAMES, row, strict=True))), flush=True)
    else:
        print(render_table(HEADERS, [[_cell(v) for v in row] for row in rows]), flush=True)
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
