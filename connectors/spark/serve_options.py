"""The options of a store's Flight server and its announcement (``serve*``, ``announce*``),
shared by the follower source (whose query always serves its store) and the sink (whose store
server serves it with option ``serve``)."""

from __future__ import annotations

from dataclasses import dataclass

from spark_statestore.connectors.spark.option_table import OptionReader
from spark_statestore.connectors.spark.paths import resolve_local_path
from spark_statestore.errors import OptionError

__all__ = [
    "SERVE_OPTIONS",
    "ServeSettings",
    "ServingEndpoint",
    "read_tls_files",
    "serve_settings",
    "serving_address",
    "serving_endpoint",
]


@dataclass(frozen=True, slots=True)
class ServeSettings:
    """How a store's owner serves it over Flight and announces it (``serve*``, ``announce*``)."""

    host: str | None = None
    """Where to listen; None: where the driver's executors reach it (:func:`serving_address`)."""
    port: int = 0
    tls_cert: str | None = None
    """PEM certificate chain file of the Flight server (TLS); with tls_key."""
    tls_key: str | None = None
    """PEM private key file of the Flight server (TLS); with tls_cert."""
    tls_client_ca: str | None = None
    """PEM file of the CAs whose client certificates the server accepts (mutual TLS)."""
    announce: bool = True
    """Announce the store on ``<changelog>-replicas`` while it is served."""
    announce_interval_ms: int = 5000
    """The announcement's heartbeat interval (it is stale after three)."""
    token_file: str | None = None
    """A file holding the server's bearer token (None: a random one)."""
    announce_key_file: str | None = None
    """The membership key (PEM) announcements are signed with (None: this user's default)."""


SERVE_OPTIONS = (
    "serveHost",
    "servePort",
    "serveTlsCert",
    "serveTlsKey",
    "serveTlsClientCa",
    "serveTokenFile",
    "announce",
    "announceIntervalMs",
    "announceKeyFile",
)


def read_tls_files(cert: str | None, key: str | None) -> tuple[bytes, bytes] | None:
    """The ``serveTlsCert`` / ``serveTlsKey`` PEM files' contents, or None (no TLS).

    Raises
    ------
    OptionError
        Naming the option whose file cannot be read.
    """
    if cert is None or key is None:
        return None
    contents = []
    for option, path in (("serveTlsCert", cert), ("serveTlsKey", key)):
        try:
            with open(path, "rb") as handle:
                contents.append(handle.read())
        except OSError as exc:
            raise OptionError(f"option {option!r}: cannot read {path}: {exc}") from exc
    return contents[0], contents[1]


def serve_settings(options: OptionReader) -> ServeSettings:
    """The ``serve*`` and ``announce*`` options, checked (TLS beyond loopback)."""
    serve_port = options.integer("servePort")
    interval = options.integer("announceIntervalMs")
    assert interval is not None  # has a default
    serve_host = options.text("serveHost")
    tls_cert, tls_key = _local_file(options, "serveTlsCert"), _local_file(options, "serveTlsKey")
    if (tls_cert is None) != (tls_key is None):
        raise OptionError(
            "options 'serveTlsCert' and 'serveTlsKey' go together: the PEM certificate chain "
            "file and the PEM private key file of the store's Flight server"
        )
    from spark_statestore.serve.auth import is_loopback

    if tls_cert is None and serve_host is not None and not is_loopback(serve_host):
        raise OptionError(
            f"option 'serveHost' {serve_host!r} is beyond loopback, so the store's Flight "
            "server must use TLS: set 'serveTlsCert' and 'serveTlsKey' (PEM files), or serve "
            "on 127.0.0.1"
        )
    tls_client_ca = _local_file(options, "serveTlsClientCa")
    if tls_client_ca is not None:
        if tls_cert is None:
            raise OptionError(
                "option 'serveTlsClientCa' (mutual TLS) needs TLS: set 'serveTlsCert' and "
                "'serveTlsKey' too (the PEM certificate chain and key of the store's Flight "
                "server). Without them, a server beyond loopback makes its own certificate "
                "and accepts only its own readers' client certificate"
            )
        from spark_statestore.serve.mutual_tls import read_client_ca

        read_client_ca(tls_client_ca, "'serveTlsClientCa'")  # fails at load(), not later
    token_file = _local_file(options, "serveTokenFile")
    if token_file is not None:
        from spark_statestore.serve.auth import read_token_file

        # Read here too, so a bad file fails at load(), not later in the serving process.
        read_token_file(token_file, "'serveTokenFile'")
    key_file = _local_file(options, "announceKeyFile")
    if key_file is not None:
        from spark_statestore.discovery.errors import DiscoveryError
        from spark_statestore.discovery.signing import MembershipKey

        try:  # read here too, so a bad file fails at load(), not in the serving process
            MembershipKey.load(key_file, "'announceKeyFile'")
        except DiscoveryError as exc:
            raise OptionError(str(exc)) from None
    return ServeSettings(
        host=serve_host,
        port=0 if serve_port is None else serve_port,
        tls_cert=tls_cert,
        tls_key=tls_key,
        tls_client_ca=tls_client_ca,
        announce=options.boolean("announce"),
        announce_interval_ms=interval,
        token_file=token_file,
        announce_key_file=key_file,
    )


def serving_address(
    host: str | None, tls: tuple[bytes, bytes] | None
) -> tuple[str, tuple[bytes, bytes] | None]:
    """Where a store's owner on the driver's host listens, and its TLS certificate and key.

    An explicit ``serveHost`` is kept as given (checked at load: TLS beyond loopback). Without
    one: loopback when the Spark driver's executors run on this host (local mode), else the
    driver's address that executors reach, over TLS: with the configured certificate, or a
    self-signed one made here (readers in the same application get it in what the driver
    plans; give ``serveTlsCert`` for routers and clients elsewhere to verify).
    """
    if host is not None:
        return host, tls
    from spark_statestore.connectors.spark.driver import driver_deployment

    deployment = driver_deployment()
    if deployment.executors_local:
        return "127.0.0.1", tls
    if tls is None:
        from spark_statestore.serve.certificates import self_signed_certificate

        tls = self_signed_certificate([deployment.host], common_name="spark-statestore store")
    return deployment.host, tls


@dataclass(frozen=True, slots=True)
class ServingEndpoint:
    """Where and how a store's owner on the driver's host serves it: the
    :class:`~spark_statestore.serve.server.StoreServer` arguments of that name."""

    host: str
    tls_certificates: tuple[bytes, bytes] | None = None
    tls_client_ca: bytes | None = None
    """The CAs of ``serveTlsClientCa`` (mutual TLS)."""
    require_client_cert: bool = False
    """Mutual TLS with the server's own client certificate only: the plugin made the
    server's certificate, which only the store's own readers can verify."""


def serving_endpoint(
    host: str | None,
    *,
    tls_cert: str | None,
    tls_key: str | None,
    tls_client_ca: str | None,
) -> ServingEndpoint:
    """The endpoint of options ``serveHost``, ``serveTlsCert``, ``serveTlsKey`` and
    ``serveTlsClientCa`` (their files read here, where the server starts).

    Where :func:`serving_address` makes the server's certificate itself (a cluster, without
    ``serveTlsCert``), the server is in mutual-TLS mode with its own client certificate only
    (:mod:`~spark_statestore.serve.mutual_tls`): nobody else can verify that certificate
    anyway, and a peer without the client certificate never gets a message buffered.

    Raises
    ------
    OptionError
        Naming the option whose file cannot be read.
    """
    given = read_tls_files(tls_cert, tls_key)
    where, tls = serving_address(host, given)
    client_ca = None
    if tls_client_ca is not None:
        from spark_statestore.serve.mutual_tls import read_client_ca

        client_ca = read_client_ca(tls_client_ca, "'serveTlsClientCa'")
    return ServingEndpoint(where, tls, client_ca, tls is not None and given is None)


def _local_file(options: OptionReader, name: str) -> str | None:
    path = options.text(name)
    return None if path is None else resolve_local_path(path)
