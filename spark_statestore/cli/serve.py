"""``spark-statestore serve``: serve a store over Arrow Flight while no query runs.

Opens the store read-only (so this process owns it; a follower or a sink wanting it must wait
until this command stops), runs a :class:`~spark_statestore.serve.server.StoreServer` that
advertises itself in the store's ``_owner.json`` like a follower query's, prints its location
and serves until SIGINT/SIGTERM; then it stops the server and closes the store. Readers
(``spark-statestore inspect``/``query``, Spark's snapshot reader) find it through the owner
file. Beyond loopback the server needs TLS, as the Spark source's server does.
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass

from spark_statestore.errors import OptionError

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
    """

    path: str
    host: str = "127.0.0.1"
    port: int = 0
    tls_certificates: tuple[bytes, bytes] | None = None

    @classmethod
    def from_cli(
        cls,
        *,
        path: str,
        host: str = "127.0.0.1",
        port: int = 0,
        tls_cert: str | None = None,
        tls_key: str | None = None,
    ) -> ServeOptions:
        """Build the options from the command's flags, reading the TLS files.

        Raises
        ------
        OptionError
            For an empty path or host, a port outside 0-65535, one of ``--tls-cert`` and
            ``--tls-key`` without the other, an unreadable TLS file, or a host beyond
            loopback without TLS.
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
        certificates = None
        if tls_cert is not None and tls_key is not None:
            from spark_statestore.cli.store_state import read_file

            certificates = (read_file(tls_cert, "--tls-cert"), read_file(tls_key, "--tls-key"))
        elif not is_loopback(host):
            raise OptionError(
                f"option --host {host}: serving beyond loopback needs TLS (the token and the "
                "store's rows would cross the network in clear text): give --tls-cert and "
                "--tls-key, or serve on 127.0.0.1"
            )
        return cls(os.path.abspath(path), host, port, certificates)


def run_serve(options: ServeOptions) -> int:
    """Serve until SIGINT/SIGTERM; returns the exit code (0 after a clean stop).

    Raises
    ------
    StoreNotFoundError, StoreLockedError
        No store at the path; another process owns it (the error names it).
    ServeError
        The server cannot listen on the host and port.
    """
    from spark_statestore.cli.main import catch_stop_signals
    from spark_statestore.serve import StoreServer
    from spark_statestore.store import Store

    # Before the store is opened: a signal at any later moment stops cleanly.
    wait = catch_stop_signals()
    with Store.open(options.path, purpose="spark-statestore serve", serves=True) as store:
        server = StoreServer(
            store, host=options.host, port=options.port, tls_certificates=options.tls_certificates
        )
        with server:
            print(f"serving store {store.name} ({store.path}) at {server.location}", flush=True)
            print("stop with Ctrl-C or SIGTERM", file=sys.stderr, flush=True)
            signum = wait()
            print(f"received {signal.Signals(signum).name}, stopping the server", file=sys.stderr)
    return 0
