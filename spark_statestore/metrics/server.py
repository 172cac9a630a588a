"""The opt-in metrics endpoint of one process (:class:`MetricsServer`), over HTTP:

* ``/metrics``: Prometheus' text format of the process's own registry, written by the
  standard Python client (``prometheus_client.make_wsgi_app``);
* ``/health``: the health of the process's stores as JSON (``{"status": "UP"|"DOWN",
  "stores": {path: {state, reason, since, details}}}``), HTTP 200 when every store is
  RUNNING and 503 otherwise, so that a load balancer's or Kubernetes' probe can use it.

It binds to loopback by default. Beyond loopback it follows the Flight servers' rules: TLS
(a certificate and key) and a bearer token are required, since a store's names and offsets
would otherwise cross the network in clear text to anyone who asks. A token can be asked on
loopback too; Prometheus sends it with ``authorization: {credentials_file: ...}``.
"""

from __future__ import annotations

import hmac
import json
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.registry import CollectorRegistry

from spark_statestore.errors import OptionError, StateStoreError
from spark_statestore.health import Health, HealthState
from spark_statestore.serve.auth import check_token, is_loopback

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIEnvironment

__all__ = ["HealthProvider", "MetricsEndpoint", "MetricsServer"]

_log = logging.getLogger(__name__)

HealthProvider = Callable[[], Health]
"""Returns one store's health now."""


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("metrics endpoint: " + format, *args)


class MetricsServer:
    """Serves ``registry`` at ``/metrics`` and ``health`` at ``/health`` until :meth:`close`.

    Parameters
    ----------
    registry
        What ``/metrics`` serves.
    host
        The address to bind: loopback by default; any other needs ``tls_cert_file``,
        ``tls_key_file`` and ``token``.
    port
        The port (0: a free one; see :attr:`port`).
    health
        ``{store path: provider}`` for ``/health`` (none: ``/health`` reports no stores, UP).
    tls_cert_file, tls_key_file
        PEM files of the endpoint's certificate chain and private key: HTTPS.
    token
        A bearer token every request must carry (``Authorization: Bearer <token>``).

    Raises
    ------
    OptionError
        A host beyond loopback without TLS or a token, a bad token, unreadable TLS files, or a
        port that cannot be bound (naming it).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        health: Mapping[str, HealthProvider] | None = None,
        tls_cert_file: str | None = None,
        tls_key_file: str | None = None,
        token: str | None = None,
    ) -> None:
        if (tls_cert_file is None) != (tls_key_file is None):
            raise OptionError(
                "the metrics endpoint's TLS needs both a certificate and a key file "
                f"(got certificate {tls_cert_file!r}, key {tls_key_file!r})"
            )
        tls = tls_cert_file is not None
        if not is_loopback(host) and not (tls and token is not None):
            raise OptionError(
                f"metrics host {host!r} is beyond loopback: it must use TLS and a bearer token "
                "there, as the Flight servers do (give a certificate, a key and a token file: "
                "metricsTlsCert/metricsTlsKey/metricsTokenFile, or --metrics-tls-cert/"
                "--metrics-tls-key/--metrics-token-file), or bind 127.0.0.1"
            )
        if token is not None:
            try:
                token = check_token(token, "metrics token")
            except StateStoreError as exc:
                raise OptionError(str(exc)) from None
        self._token = token
        self._health = dict(health or {})
        self._lock = threading.Lock()
        metrics_app = make_wsgi_app(registry)

        def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
            if not self._authorized(environ.get("HTTP_AUTHORIZATION", "")):
                start_response(
                    "401 Unauthorized",
                    [("Content-Type", "text/plain"), ("WWW-Authenticate", "Bearer")],
                )
                return [b"a bearer token is required\n"]
            path = environ.get("PATH_INFO", "/")
            if path == "/health":
                code, body = self.health_report()
                start_response(code, [("Content-Type", "application/json")])
                return [json.dumps(body, sort_keys=True).encode() + b"\n"]
            if path in ("/metrics", "/"):
                scraped: Iterable[bytes] = metrics_app(environ, start_response)
                return scraped
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: try /metrics or /health\n"]

        family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
        server_class: type[_Server] = type("_BoundServer", (_Server,), {"address_family": family})
        try:
            server: WSGIServer = make_server(
                host.strip("[]"), port, app, server_class, handler_class=_QuietHandler
            )
        except OSError as exc:
            raise OptionError(f"cannot serve metrics on {host}:{port}: {exc}") from None
        if tls:
            assert tls_cert_file is not None and tls_key_file is not None
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            try:
                context.load_cert_chain(tls_cert_file, tls_key_file)
            except (OSError, ssl.SSLError) as exc:
                server.server_close()
                raise OptionError(
                    f"cannot load the metrics endpoint's certificate {tls_cert_file!r} and key "
                    f"{tls_key_file!r}: {exc}"
                ) from None
            server.socket = context.wrap_socket(server.socket, server_side=True)
        self._server: WSGIServer | None = server
        self._thread = threading.Thread(
            target=server.serve_forever, name=f"metrics-{host}:{port}", daemon=True
        )
        self._thread.start()
        self.host = host
        self.port = int(server.server_port)
        self.scheme = "https" if tls else "http"

    def add_health(self, store: str, provider: HealthProvider) -> None:
        """Report ``store``'s health at ``/health`` too."""
        with self._lock:
            self._health[store] = provider

    def _authorized(self, header: str) -> bool:
        if self._token is None:
            return True
        scheme, _, presented = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            presented.strip().encode(), self._token.encode()
        )

    def health_report(self) -> tuple[str, dict[str, Any]]:
        """The ``/health`` reply: its HTTP status line and JSON body."""
        with self._lock:
            providers = dict(self._health)
        stores: dict[str, Any] = {}
        up = True
        for store, provider in sorted(providers.items()):
            try:
                health = provider()
            except Exception as exc:  # a provider's failure is the store's health, not ours
                _log.debug("health of %s unknown", store, exc_info=True)
                reason = f"its health could not be read: {type(exc).__name__}: {exc}"
                stores[store] = Health(HealthState.UNKNOWN, reason).to_dict()
                up = False
                continue
            stores[store] = health.to_dict()
            up = up and health.state.healthy
        return ("200 OK" if up else "503 Service Unavailable"), {
            "status": "UP" if up else "DOWN",
            "stores": stores,
        }

    @property
    def url(self) -> str:
        """The scrape URL (``/metrics``)."""
        host = f"[{self.host.strip('[]')}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}/metrics"

    @property
    def health_url(self) -> str:
        """The health URL (``/health``)."""
        return self.url[: -len("/metrics")] + "/health"

    def close(self) -> None:
        """Stop serving (idempotent)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
            self._thread.join(5.0)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class MetricsEndpoint:
    """Where and how a process serves its metrics: its options, parsed (``--metrics-*``
    flags, ``metrics*`` options), started with :meth:`start`.

    Parameters
    ----------
    port
        The port (0: a free one).
    host
        The address (loopback by default).
    tls_cert_file, tls_key_file
        PEM files of the endpoint's certificate chain and key (HTTPS).
    token_file
        A file holding the bearer token scrapers must send.
    token_option
        How messages name the token file's option (``--metrics-token-file``,
        ``'metricsTokenFile'``).
    """

    port: int
    host: str = "127.0.0.1"
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    token_file: str | None = None
    token_option: str = "--metrics-token-file"

    def start(
        self,
        registry: CollectorRegistry,
        *,
        health: Mapping[str, HealthProvider] | None = None,
    ) -> MetricsServer:
        """Serve ``registry`` (and ``health``) as these options say.

        Raises
        ------
        OptionError
            As :class:`MetricsServer`, or the token file cannot be read (naming it).
        """
        from spark_statestore.serve.auth import read_token_file

        token = None
        if self.token_file is not None:
            token = read_token_file(self.token_file, self.token_option)
        return MetricsServer(
            registry,
            host=self.host,
            port=self.port,
            health=health,
            tls_cert_file=self.tls_cert_file,
            tls_key_file=self.tls_key_file,
            token=token,
        )
