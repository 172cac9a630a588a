"""The snapshot reader's views other than the data (option ``view``): their schemas and their
rows, from a store's description, owner, lags and health."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from spark_statestore.connectors.spark.options import View

if TYPE_CHECKING:
    from spark_statestore.health import Health
    from spark_statestore.serve.protocol import StoreDescription
    from spark_statestore.store.ownership import OwnerInfo

__all__ = ["VIEW_DDL", "health_row", "view_rows"]

VIEW_DDL = {
    View.POSITION: "topic STRING, partition INT, offset BIGINT",
    View.LAG: "partition INT, current_offset BIGINT, end_offset BIGINT, lag BIGINT",
    View.HOST: (
        "location STRING, token STRING, tls_root_certs STRING, store STRING, "
        "tls_client_cert STRING, tls_client_key STRING"
    ),
    View.METADATA: (
        "name STRING, role STRING, changelog_topic STRING, partitions INT, "
        "held_partitions ARRAY<INT>, key_prefix BINARY, store_id STRING, created_at STRING, "
        "commit_seq BIGINT, position STRING, changelog_offsets MAP<INT, BIGINT>, "
        "owner_pid INT, owner_host STRING, owner_purpose STRING, flight_location STRING"
    ),
    View.HEALTH: (
        "name STRING, path STRING, role STRING, state STRING, reason STRING, "
        "since TIMESTAMP, commit_seq BIGINT, lag BIGINT, owner_pid INT, owner_host STRING, "
        "flight_location STRING"
    ),
}
"""Each view's schema."""


def view_rows(
    view: View,
    path: str,
    description: StoreDescription,
    owner: OwnerInfo | None,
    lags: Mapping[int, tuple[int, int | None]] | None,
    health: Health | None,
) -> list[tuple[Any, ...]]:
    """The rows of ``view`` (any but ``data`` and ``host``) of the store at ``path``."""
    if view is View.HEALTH:
        assert health is not None
        return [health_row(path, description, owner, lags, health)]
    if view is View.POSITION:
        return [(t, p, o) for t, p, o in description.position.entries]
    if view is View.LAG:
        if lags is None:
            offsets = description.changelog_offsets
            return [(p, o, None, None) for p, o in sorted(offsets.items())]
        return [
            (p, cur, end, None if end is None else end - cur)
            for p, (cur, end) in sorted(lags.items())
        ]
    held = description.held_partitions
    return [
        (
            description.store,
            description.role.value,
            description.changelog_topic,
            description.partitions,
            None if held is None else list(held),
            description.key_prefix,
            description.store_id,
            description.created_at,
            description.commit_seq,
            description.position.to_json(),
            dict(description.changelog_offsets),
            None if owner is None else owner.pid,
            None if owner is None else owner.host,
            None if owner is None else owner.purpose,
            None if owner is None else owner.flight_location,
        )
    ]


def health_row(
    path: str,
    description: StoreDescription | None,
    owner: OwnerInfo | None,
    lags: Mapping[int, tuple[int, int | None]] | None,
    health: Health,
) -> tuple[Any, ...]:
    """The health view's row of one store."""
    known = [end - cur for cur, end in (lags or {}).values() if end is not None]
    return (
        os.path.basename(path.rstrip("/")) if description is None else description.store,
        path,
        (None if owner is None else owner.role) if description is None else description.role.value,
        health.state.value,
        health.reason,
        None if health.since is None else dt.datetime.fromtimestamp(health.since, dt.timezone.utc),
        None if description is None else description.commit_seq,
        sum(known) if lags and len(known) == len(lags) else None,
        None if owner is None else owner.pid,
        None if owner is None else owner.host,
        None if owner is None else owner.flight_location,
    )
