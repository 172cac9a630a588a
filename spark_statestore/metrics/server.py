"""The opt-in metrics endpoint of one process (:class:`MetricsServer`): Prometheus' text
format at ``http://HOST:PORT/metrics``, served by the standard Python client's own HTTP
server from the process's own registry.

It binds to loopback by default. Beyond loopback it needs TLS (as the Flight servers do): not
built yet, so another address is refused.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import start_http_server
from prometheus_client.registry import CollectorRegistry

from spark_statestore.errors import OptionError
from spark_statestore.serve.auth import is_loopback

__all__ = ["MetricsServer"]


class MetricsServer:
    """Serves ``registry`` at ``http://host:port/metrics`` until :meth:`close`.

    Parameters
    ----------
    registry
        What to serve.
    host
        A loopback address (``127.0.0.1``, ``::1``, ``localhost``).
    port
        The port (0: a free one; see :attr:`port`).

    Raises
    ------
    OptionError
        A host beyond loopback, or a port that cannot be bound (naming it).
    """

    def __init__(self, registry: CollectorRegistry, *, host: str = "127.0.0.1", port: int = 0):
        if not is_loopback(host):
            raise OptionError(
                f"metrics host {host!r} is beyond loopback: the metrics endpoint serves "
                "loopback only for now (TLS beyond loopback is not built yet); scrape it "
                "through a local agent, or bind 127.0.0.1"
            )
        try:
            server, thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise OptionError(f"cannot serve metrics on {host}:{port}: {exc}") from None
        self._server: Any = server
        self._thread = thread
        self.host = host
        self.port = int(server.server_port)

    @property
    def url(self) -> str:
        """The scrape URL."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving (idempotent)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
