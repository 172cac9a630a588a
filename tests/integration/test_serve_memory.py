"""Unauthenticated memory exhaustion (issue 25, finding 4): gRPC buffers a whole message
before the token check runs, so a peer without the token could make a bearer-only store
server hold any body it sends. A server in mutual-TLS mode refuses a peer without a client
certificate in the TLS handshake: its peak memory stays flat.

``spark-statestore serve`` runs in a child process whose peak resident memory (``VmHWM`` in
``/proc/<pid>/status``) is read before and after the body.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pyarrow.flight as flight
import pytest

from spark_statestore.serve import connect
from tests.integration.test_store_cli import make_inventory
from tests.pki import Pki

pytestmark = pytest.mark.integration

MIB = 1 << 20
FLAT = 50 * MIB
"""The most a mutual-TLS server's peak memory may grow while a peer without a client
certificate sends its body (the body itself is several times this)."""

Serve = Callable[..., tuple[subprocess.Popen[str], str]]


def _peak_memory(pid: int) -> int:
    """The peak resident memory of process ``pid`` so far, in bytes (``VmHWM``)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


def _send_without_credentials(location: str, roots: bytes, size: int) -> type[Exception]:
    """Send a ``describe`` action of ``size`` bytes with neither token nor client
    certificate; the class of the Flight error it ends with."""
    client = flight.FlightClient(location, tls_root_certs=roots)
    try:
        body = bytes(size)
        list(client.do_action(flight.Action("describe", body), flight.FlightCallOptions(60)))
    except flight.FlightError as exc:
        return type(exc)
    finally:
        client.close()
    raise AssertionError("the server answered a call without credentials")


def _body_against(serve: Serve, tmp_path: Path, pki: Pki, size: int, *flags: str) -> int:
    """How much the peak memory of a ``serve`` process (TLS, ``flags``) grows while a peer
    without credentials sends a body of ``size`` bytes, the server still serving after."""
    path = tmp_path / "inventory"
    make_inventory(path)
    tls = ("--tls-cert", pki.file("server"), "--tls-key", pki.file("server_key"))
    proc, location = serve(path, *tls, *flags)
    with connect(path) as client:  # the store's own reader warms the server up
        client.describe()
    before = _peak_memory(proc.pid)
    refused = _send_without_credentials(location, pki.ca, size)
    with connect(path) as client:
        assert client.describe().description.store == "inventory"
    grown = _peak_memory(proc.pid) - before
    print(f"{' '.join(flags) or 'bearer only'}: {refused.__name__}, peak +{grown / MIB:.1f} MiB")
    if flags:
        # Refused in the TLS handshake: never read, never parsed, never authenticated.
        assert refused is flight.FlightUnavailableError
    else:
        assert refused is flight.FlightUnauthenticatedError  # read whole, then refused
    return grown


def test_a_body_without_a_client_certificate_leaves_a_mutual_tls_servers_memory_flat(
    serve: Serve, tmp_path: Path, pki: Pki
) -> None:
    grown = _body_against(serve, tmp_path, pki, 256 * MIB, "--tls-client-ca", pki.file("ca"))
    assert grown < FLAT


@pytest.mark.soak
def test_the_same_body_grows_a_bearer_only_server_by_its_size(
    serve: Serve, tmp_path: Path, pki: Pki
) -> None:
    # The finding itself, and proof that the mode is what keeps the memory flat above.
    size = 500 * MIB
    assert _body_against(serve, tmp_path, pki, size) > size - FLAT
