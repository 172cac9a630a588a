"""``spark-statestore serve``: serve a store over Arrow Flight while no query runs.

Opens the store read-only (so this process owns it; a follower or a sink wanting it must wait
until this command stops), runs a :class:`~spark_statestore.serve.server.StoreServer` that
advertises itself in the store's ``_owner.json`` like a follower query's, prints its location
and serves until SIGINT/SIGTERM; then it stops the server and closes the store. Readers
(``spark-statestore inspect``/``query``, Spark's snapshot reader) find it through the owner
file. Beyond loopback the server needs TLS, as the Spark source's server does.

With ``--tls-client-ca`` it is in mutual-TLS mode: a client without a certificate signed by
one of those CAs fails the TLS handshake (:mod:`~spark_statestore.serve.mutual_tls`). With
``--token-file`` the server takes that token instead of a random one (replicas that share
it can be queried through one router); with ``--bootstrap-servers`` the store is announced as a
replica of its changelog on ``<changelog>-replicas`` while it is served (heartbeats with its
position and its lags against the changelog's end offsets, a tombstone on stop), and its
server reports those lags.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from spark_statestore.errors import OptionError

if TYPE_CHECKING:
    from spark_statestore.connectors.kafka.discovery import ReplicaAnnouncer
    from spark_statestore.discovery.signing import MembershipKey
    from spark_statestore.health import Health
    from spark_statestore.metrics.server import MetricsEndpoint, MetricsServer
    from spark_statestore.query import LagInfo
    from spark_statestore.serve import StoreServer
    from spark_statestore.store import Store

__all__ = ["ServeOptions", "run_serve"]


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """What ``spark-statestore serve`` was asked, parsed and checked.

    Parameters
    ----------
    path
        The store directory (it must exist).
    host, port
        Where the server listens (port 0: any free port).
    tls_certificates
        ``(certificate chain PEM, private key PEM)``, or None for plain gRPC on loopback.
    tls_client_ca
        PEM certificates of the CAs whose client certificates the server accepts (mutual
        TLS, ``--tls-client-ca``); None: any client may connect (the token is still checked).
    token
        The server's bearer token; None draws a random one.
    bootstrap_servers, kafka_config
        The changelog's cluster, to announce the store and report its lags; None: neither.
    announce_interval_s
        Seconds between two heartbeats of the announcement.
    announce_key
        The membership key announcements are signed with (None: this user's default).
    metrics
        The metrics endpoint (``--metrics-*``): the store server's and the store's metrics
        at ``/metrics``, RUNNING at ``/health`` while it serves; None: no endpoint.
    """

    path: str
    host: str = "127.0.0.1"
    port: int = 0
    tls_certificates: tuple[bytes, bytes] | None = None
    token: str | None = None
    bootstrap_servers: str | None = None
    kafka_config: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    announce_interval_s: float = 5.0
    announce_key: MembershipKey | None = None
    tls_client_ca: bytes | None = None
    metrics: MetricsEndpoint | None = None

    @classmethod
    def from_cli(
        cls,
        *,
        path: str,
        host: str = "127.0.0.1",
        port: int = 0,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        token_file: str | None = None,
        bootstrap_servers: str | None = None,
        kafka: Sequence[str] = (),
        announce_key: str | None = None,
        tls_client_ca: str | None = None,
        metrics: MetricsEndpoint | None = None,
    ) -> ServeOptions:
        """Build the options from the command's flags, reading the TLS files.

        Raises
        ------
        OptionError
            For an empty path or host, a port outside 0-65535, one of ``--tls-cert`` and
            ``--tls-key`` without the other, ``--tls-client-ca`` without them, an unreadable
            TLS or token file, a host beyond loopback without TLS, or a malformed ``--kafka``
            setting.
        """
        from spark_statestore.serve.auth import is_loopback

        if not path.strip():
            raise OptionError("serve: PATH must not be empty")
        if not host.strip():
            raise OptionError("option --host must not be empty")
        if not 0 <= port <= 65535:
            raise OptionError(f"option --port must be in 0-65535 (0: any free port), got {port}")
        if (tls_cert is None) != (tls_key is None):
            raise OptionError("options --tls-cert and --tls-key go together: give both or neither")
        client_ca = None
        if tls_client_ca is not None:
            if tls_cert is None:
                raise OptionError(
                    "option --tls-client-ca (mutual TLS) needs TLS: give the server's "
                    "certificate and key with --tls-cert and --tls-key too"
                )
            from spark_statestore.serve.mutual_tls import read_client_ca

            client_ca = read_client_ca(tls_client_ca, "--tls-client-ca")
        certificates = None
        if tls_cert is not None and tls_key is not None:
            from spark_statestore.serve.auth import read_option_file

            certificates = (
                read_option_file(tls_cert, "--tls-cert"),
                read_option_file(tls_key, "--tls-key"),
            )
        elif not is_loopback(host):
            raise OptionError(
                f"option --host {host}: serving beyond loopback needs TLS (the token and the "
                "store's rows would cross the network in clear text): give --tls-cert and "
                "--tls-key, or serve on 127.0.0.1"
            )
        token = None
        if token_file is not None:
            from spark_statestore.serve.auth import read_token_file

            token = read_token_file(token_file, "--token-file")
        kafka_config: Mapping[str, str] = MappingProxyType({})
        if bootstrap_servers is not None or kafka:
            from spark_statestore.cli.store_state import kafka_settings

            kafka_config = MappingProxyType(kafka_settings(kafka))
        key = None
        if announce_key is not None:
            from spark_statestore.discovery.errors import DiscoveryError
            from spark_statestore.discovery.signing import MembershipKey

            try:
                key = MembershipKey.load(announce_key, "--announce-key")
            except DiscoveryError as exc:
                raise OptionError(str(exc)) from None
        return cls(
            os.path.abspath(path),
            host,
            port,
            certificates,
            token=token,
            bootstrap_servers=bootstrap_servers,
            kafka_config=kafka_config,
            announce_key=key,
            tls_client_ca=client_ca,
            metrics=metrics,
        )


def run_serve(options: ServeOptions) -> int:
    """Serve until SIGINT/SIGTERM; returns the exit code (0 after a clean stop).

    Raises
    ------
    StoreNotFoundError, StoreLockedError
        No store at the path; another process owns it (the error names it).
    ServeError
        The server cannot listen on the host and port.
    """
    from spark_statestore.cli.signals import catch_stop_signals
    from spark_statestore.health import served
    from spark_statestore.serve import StoreServer
    from spark_statestore.store import Store

    # Before the store is opened: a signal at any later moment stops cleanly.
    wait = catch_stop_signals()
    with contextlib.ExitStack() as stack:
        store = stack.enter_context(
            Store.open(options.path, purpose="spark-statestore serve", serves=True)
        )
        lags = None if options.bootstrap_servers is None else _lag_provider(store, options)
        health = served("spark-statestore serve", store.owner.started_at)
        server = StoreServer(
            store,
            host=options.host,
            port=options.port,
            tls_certificates=options.tls_certificates,
            tls_client_ca=options.tls_client_ca,
            token=options.token,
            lag_provider=lags,
            health_provider=lambda: health,
        )
        stack.enter_context(server)
        if options.metrics is not None:
            endpoint = stack.enter_context(_metrics(options.metrics, server, lambda: health))
            print(f"metrics at {endpoint.url}", file=sys.stderr, flush=True)
        if lags is not None:
            announcer = _announcer(store, server.location, lags, options)
            stack.callback(announcer.close)
            announcer.start()
            print(f"announced on {announcer.topic}", file=sys.stderr, flush=True)
        print(f"serving store {store.name} ({store.path}) at {server.location}", flush=True)
        print("stop with Ctrl-C or SIGTERM", file=sys.stderr, flush=True)
        signum = wait()
        print(f"received {signal.Signals(signum).name}, stopping the server", file=sys.stderr)
    return 0


def _metrics(
    endpoint: MetricsEndpoint, server: StoreServer, health: Callable[[], Health]
) -> MetricsServer:
    """The endpoint of the store server's and the store's metrics and the store's health."""
    from prometheus_client.registry import CollectorRegistry

    from spark_statestore.metrics import ServerMetrics, StoreMetrics

    registry = CollectorRegistry()
    ServerMetrics(server, registry)
    StoreMetrics(server.store, registry)
    return endpoint.start(registry, health={str(server.store.path): health})


def _lag_provider(store: Store, options: ServeOptions) -> Callable[[], Mapping[int, LagInfo]]:
    """The store's lags against its changelog's end offsets now (asked at each call)."""
    from spark_statestore.cli.store_state import changelog_lag_infos
    from spark_statestore.serve.protocol import StoreDescription

    bootstrap = options.bootstrap_servers

    def lags() -> Mapping[int, LagInfo]:
        description = StoreDescription.of_state(store.path, store.manifest, store.metadata)
        found = changelog_lag_infos(description, None, bootstrap, options.kafka_config)
        return {} if found is None else found

    return lags


def _announcer(
    store: Store,
    location: str,
    lags: Callable[[], Mapping[int, LagInfo]],
    options: ServeOptions,
) -> ReplicaAnnouncer:
    from spark_statestore.connectors.kafka.discovery import ReplicaAnnouncer
    from spark_statestore.discovery import ReplicaAnnouncement, announce_ttl_ms

    assert options.bootstrap_servers is not None
    interval_ms = int(options.announce_interval_s * 1000)
    announcement = ReplicaAnnouncement.of_store(
        store, location=location, ttl_ms=announce_ttl_ms(interval_ms)
    )
    return ReplicaAnnouncer(
        options.bootstrap_servers,
        announcement,
        lambda: (store.metadata.position, lags()),
        config=options.kafka_config,
        interval_s=options.announce_interval_s,
        key=options.announce_key,
    )
