"""A test PKI made with the ``cryptography`` package: a CA, a server certificate for this
host and client certificates from the CA and from another CA (mutual-TLS tests)."""

from __future__ import annotations

import datetime
import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Pki", "make_pki"]


@dataclass(frozen=True)
class Pki:
    """PEM bytes and their files (``directory/<name>.pem``).

    ``ca``: the CA of the server and of ``client``; ``server``/``server_key``: the server's
    certificate (localhost, this host's name, 127.0.0.1, more addresses if asked);
    ``client``/``client_key``: a
    client certificate from ``ca``; ``stranger``/``stranger_key``: one from another CA.
    """

    directory: Path
    ca: bytes
    server: bytes
    server_key: bytes
    client: bytes
    client_key: bytes
    stranger: bytes
    stranger_key: bytes

    def file(self, name: str) -> str:
        """The path of the file holding field ``name``."""
        return str(self.directory / f"{name}.pem")


def make_pki(directory: Path, addresses: Sequence[str] = ()) -> Pki:
    """A fresh PKI, its PEM files written into ``directory``; the server certificate is
    valid for ``addresses`` (IP addresses) too."""
    from cryptography.x509.oid import ExtendedKeyUsageOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca, ca_key = _certificate("test CA", None, now)
    other, other_key = _certificate("another CA", None, now)
    server, server_key = _certificate(
        "test server", (ca, ca_key), now, ExtendedKeyUsageOID.SERVER_AUTH, server=addresses
    )
    client, client_key = _certificate(
        "test client", (ca, ca_key), now, ExtendedKeyUsageOID.CLIENT_AUTH
    )
    stranger, stranger_key = _certificate(
        "stranger", (other, other_key), now, ExtendedKeyUsageOID.CLIENT_AUTH
    )
    pki = Pki(
        directory,
        _pem(ca),
        _pem(server),
        _key_pem(server_key),
        _pem(client),
        _key_pem(client_key),
        _pem(stranger),
        _key_pem(stranger_key),
    )
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("ca", "server", "server_key", "client", "client_key", "stranger", "stranger_key"):
        Path(pki.file(name)).write_bytes(getattr(pki, name))
    return pki


def _certificate(
    name: str,
    issuer: tuple[Any, Any] | None,
    now: datetime.datetime,
    usage: Any = None,
    *,
    server: Sequence[str] | None = None,
) -> tuple[Any, Any]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject if issuer is None else issuer[0].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if server is not None:
        names: list[x509.GeneralName] = [
            x509.DNSName("localhost"),
            x509.DNSName(socket.gethostname()),
            *(x509.IPAddress(ipaddress.ip_address(a)) for a in {"127.0.0.1", *server}),
        ]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(key if issuer is None else issuer[1], hashes.SHA256()), key


def _pem(certificate: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    pem: bytes = certificate.public_bytes(serialization.Encoding.PEM)
    return pem


def _key_pem(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    pem: bytes = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return pem
