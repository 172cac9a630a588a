"""How the store commands reach a store: through its live owner's server, or from disk.

A store has one owner process at a time (LevelDB's rule). When a live owner serves the store
(a follower query, a ``spark-statestore serve``), ``inspect``, ``lag`` and ``query`` ask its
server; otherwise they open the store read-only for the moment they need it. An owner that
holds the store without serving it (``spark-statestore follow``) makes the open fail with
:class:`~spark_statestore.store.errors.StoreLockedError`, which names it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spark_statestore.query import LagInfo
from spark_statestore.serve.protocol import StoreDescription
from spark_statestore.store.ownership import OwnerInfo

__all__ = [
    "StoreState",
    "changelog_lag_infos",
    "held_partitions",
    "kafka_settings",
    "read_state",
]

_QUIET_KAFKA = {"log_level": "0"}
"""librdkafka logs every failed connection attempt on stderr; these commands report a Kafka
failure as their one error line instead (``--kafka log_level=6`` brings the logs back)."""


def kafka_settings(pairs: Sequence[str]) -> dict[str, str]:
    """The ``--kafka KEY=VALUE`` settings of ``lag`` and ``query``, over quiet defaults.

    Raises
    ------
    OptionError
        For a malformed pair (see :func:`~spark_statestore.cli.follow.parse_kafka_settings`).
    """
    from spark_statestore.cli.follow import parse_kafka_settings

    return {**_QUIET_KAFKA, **parse_kafka_settings(pairs)}


@dataclass(frozen=True, slots=True)
class StoreState:
    """What ``inspect`` and ``lag`` show of a store.

    Parameters
    ----------
    description
        The store's latest commit and identity.
    owner
        The live owner, or the owner file a dead process left behind (stale), or None.
    owner_live
        True when ``owner`` holds the store now.
    lags
        ``{partition: LagInfo}`` the live owner reports (a follower's); None when unknown.
    location
        The Flight location the state was read through; None when read from disk.
    pins
        Snapshots pinned on the owner's server (None when read from disk).
    """

    description: StoreDescription
    owner: OwnerInfo | None
    owner_live: bool
    lags: Mapping[int, LagInfo] | None
    location: str | None
    pins: int | None

    @property
    def held_partitions(self) -> tuple[int, ...]:
        """The changelog partitions whose data the store holds."""
        return held_partitions(self.description)


def read_state(path: str, *, purpose: str) -> StoreState:
    """The state of the store at ``path``, from its live owner's server or from disk.

    Raises
    ------
    StoreNotFoundError
        If there is no store at ``path``.
    StoreLockedError
        If a live process owns the store without serving it.
    ServeError
        If the owner's server is unreachable or refuses this client's credentials.
    """
    from spark_statestore.serve import connect_to_owner
    from spark_statestore.store import Store
    from spark_statestore.store.ownership import read_owner

    store_path = os.path.abspath(path)
    client = connect_to_owner(store_path)
    if client is not None:
        with client:
            reply = client.describe()
        return StoreState(
            reply.description, reply.owner, True, reply.lags, client.location, reply.pins
        )
    stale = read_owner(store_path)  # opening the store replaces a dead owner's file
    with Store.open(store_path, purpose=purpose) as store:
        description = StoreDescription.of_state(store.path, store.manifest, store.metadata)
    return StoreState(description, stale, False, None, None, None)


def held_partitions(description: StoreDescription) -> tuple[int, ...]:
    """The changelog partitions whose data the described store holds."""
    held = description.held_partitions
    return tuple(range(description.partitions)) if held is None else held


def changelog_lag_infos(
    description: StoreDescription,
    reported: Mapping[int, LagInfo] | None,
    bootstrap_servers: str | None,
    kafka_config: Mapping[str, Any],
) -> Mapping[int, LagInfo] | None:
    """The lags of the commit ``description``: those its live owner ``reported``, else
    (with ``bootstrap_servers``) its changelog offsets against the changelog's end offsets
    now; None when neither is available (or the store publishes no changelog).

    Raises
    ------
    KafkaClientError
        If the changelog's end offsets cannot be read.
    """
    topic = description.changelog_topic
    if reported is not None or bootstrap_servers is None or topic is None:
        return reported
    from spark_statestore.connectors.kafka.follower.source import changelog_lags

    return changelog_lags(
        bootstrap_servers,
        topic,
        held_partitions(description),
        description.changelog_offsets,
        config=kafka_config,
    )
