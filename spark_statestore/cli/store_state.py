"""How the store commands reach a store: through its live owner's server, or from disk.

A store has one owner process at a time (LevelDB's rule). When a live owner serves the store
(a follower query, a ``spark-statestore serve``), ``inspect``, ``lag`` and ``query`` ask its
server; otherwise they open the store read-only for the moment they need it. Given a Flight
location instead of a path (:class:`StoreTarget`), they ask the server there, with the token
the user gives. An owner that
holds the store without serving it (``spark-statestore follow``) makes the open fail with
:class:`~spark_statestore.store.errors.StoreLockedError`, which names it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_statestore.errors import OptionError
from spark_statestore.query import LagInfo
from spark_statestore.serve.auth import read_option_file, read_token_file
from spark_statestore.serve.protocol import StoreDescription
from spark_statestore.store.ownership import OwnerInfo

if TYPE_CHECKING:
    from spark_statestore.discovery.signing import MembershipKeys
    from spark_statestore.health import Health
    from spark_statestore.serve.client import StoreClient

__all__ = [
    "StoreState",
    "StoreTarget",
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
class StoreTarget:
    """The store a command is about: a directory, or a store server's Flight location.

    Parameters
    ----------
    path
        The store directory (None for a location).
    location
        A server's location, ``grpc+tcp://host:port`` or ``grpc+tls://host:port``.
    token
        The server's bearer token (a location only; a path's owner wrote it next to it).
    tls_root_certs
        PEM certificates to trust for a ``grpc+tls`` location (None: the system's roots).
    changelog
        ``--changelog``: the live replicas of this changelog instead of one store.
    tls_client_cert, tls_client_key
        The client certificate chain and key of ``--tls-client-cert`` and
        ``--tls-client-key`` (PEM), for servers in mutual-TLS mode (a location only).
    """

    path: str | None
    location: str | None = None
    token: str | None = None
    tls_root_certs: bytes | None = None
    changelog: str | None = None
    tls_client_cert: bytes | None = None
    tls_client_key: bytes | None = None
    membership_keys: MembershipKeys | None = None
    """The keys the replicas' announcements must be signed with (None: the user's default)."""

    @classmethod
    def for_changelog(
        cls,
        changelog: str,
        *,
        token_file: str | None,
        tls_root_cert: str | None = None,
        tls_client_cert: str | None = None,
        tls_client_key: str | None = None,
        membership_keys: str | None = None,
    ) -> StoreTarget:
        """The live replicas of ``changelog`` (``--changelog``), reached with the token
        they share (and the client certificate of ``--tls-client-cert``), as announced
        under the keys of ``--membership-keys`` (None: this user's default key).

        Raises
        ------
        OptionError
            For an empty topic, no ``--token-file``, or a file that cannot be read.
        """
        if not changelog.strip():
            raise OptionError("option --changelog must not be empty")
        if token_file is None:
            raise OptionError(
                "--changelog: give the replicas' token with --token-file (every store server "
                "authenticates; the router reaches each replica with that one token)"
            )
        credentials = _credentials(token_file, tls_root_cert, tls_client_cert, tls_client_key)
        keys = None if membership_keys is None else read_membership_keys(membership_keys)
        return cls(None, changelog=changelog, membership_keys=keys, **credentials)

    @classmethod
    def from_cli(
        cls,
        store: str,
        *,
        token_file: str | None = None,
        tls_root_cert: str | None = None,
        tls_client_cert: str | None = None,
        tls_client_key: str | None = None,
    ) -> StoreTarget:
        """``STORE`` (a path, or a location when it has ``://``) with ``--token-file``,
        ``--tls-root-cert``, ``--tls-client-cert`` and ``--tls-client-key``.

        Raises
        ------
        OptionError
            For an empty ``STORE``, a location without ``--token-file``, a path with any
            of these flags, or a file that cannot be read.
        """
        if not store.strip():
            raise OptionError("STORE must not be empty: give a store directory or a location")
        if "://" not in store:
            given = (token_file, tls_root_cert, tls_client_cert, tls_client_key)
            if any(flag is not None for flag in given):
                raise OptionError(
                    "options --token-file, --tls-root-cert, --tls-client-cert and "
                    f"--tls-client-key go with a location, not a store directory ({store}): "
                    "its owner wrote its credentials next to it"
                )
            return cls(os.path.abspath(store))
        if token_file is None:
            raise OptionError(
                f"{store} is a location: give its server's token with --token-file (a file "
                "holding the token; the owner of a store writes it into <store>/_serve.json)"
            )
        credentials = _credentials(token_file, tls_root_cert, tls_client_cert, tls_client_key)
        return cls(None, store, **credentials)

    @property
    def name(self) -> str:
        """The path, the location or the changelog's replicas, for messages."""
        if self.changelog is not None:
            return f"the replicas of {self.changelog}"
        return self.location or self.path or "?"

    def client(self) -> StoreClient | None:
        """A client of the store's server: the location's, or the live owner's of the path
        (None when no live owner serves it: read it from disk).

        Raises
        ------
        ServeError
            For a token the client refuses or credentials that cannot be read.
        """
        from spark_statestore.serve import connect, connect_to_owner

        if self.location is not None:
            return connect(
                self.location,
                token=self.token,
                tls_root_certs=self.tls_root_certs,
                tls_client_cert=self.tls_client_cert,
                tls_client_key=self.tls_client_key,
            )
        assert self.path is not None
        return connect_to_owner(self.path)


def _credentials(
    token_file: str, root_cert: str | None, client_cert: str | None, client_key: str | None
) -> dict[str, Any]:
    """The :class:`StoreTarget` fields of ``--token-file``, ``--tls-root-cert``,
    ``--tls-client-cert`` and ``--tls-client-key``: their files read and checked."""
    from spark_statestore.serve.mutual_tls import read_client_identity

    cert, key = read_client_identity(
        client_cert, client_key, cert_option="--tls-client-cert", key_option="--tls-client-key"
    ) or (None, None)
    return {
        "token": read_token_file(token_file, "--token-file"),
        "tls_root_certs": None
        if root_cert is None
        else read_option_file(root_cert, "--tls-root-cert"),
        "tls_client_cert": cert,
        "tls_client_key": key,
    }


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
    health
        The owner's health as its server reports it (None when read from disk, or from a
        server that reports none).
    """

    description: StoreDescription
    owner: OwnerInfo | None
    owner_live: bool
    lags: Mapping[int, LagInfo] | None
    location: str | None
    pins: int | None
    health: Health | None = None

    @property
    def held_partitions(self) -> tuple[int, ...]:
        """The changelog partitions whose data the store holds."""
        return held_partitions(self.description)


def read_state(target: StoreTarget, *, purpose: str) -> StoreState:
    """The state of the target store, from its server (the location's, or the live owner's
    of the path) or from disk.

    Raises
    ------
    StoreNotFoundError
        If there is no store at the path.
    StoreLockedError
        If a live process owns the store without serving it.
    ServeError
        If the server is unreachable or refuses this client's credentials.
    """
    from spark_statestore.store import Store
    from spark_statestore.store.ownership import read_owner

    client = target.client()
    if client is not None:
        with client:
            reply = client.describe()
        return StoreState(
            reply.description,
            reply.owner,
            True,
            reply.lags,
            client.location,
            reply.pins,
            reply.health,
        )
    assert target.path is not None
    stale = read_owner(target.path)  # opening the store replaces a dead owner's file
    with Store.open(target.path, purpose=purpose) as store:
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


def read_membership_keys(paths: str) -> MembershipKeys:
    """The public keys in the ``--membership-keys`` file(s) (comma-separated).

    Raises
    ------
    OptionError
        Naming the flag and the file, when one is unreadable or holds no key.
    """
    from spark_statestore.discovery.errors import DiscoveryError
    from spark_statestore.discovery.signing import MembershipKeys

    try:
        return MembershipKeys.load(paths, "--membership-keys")
    except DiscoveryError as exc:
        raise OptionError(str(exc)) from None
