"""Self-signed TLS certificates for servers the plugin starts on its own beyond loopback.

A server that executors on other hosts reach must use TLS (its token would otherwise cross
the network in clear text), but nobody configured a certificate for a server the plugin
starts by itself (the store host of a Spark driver, a follower query's server on a cluster
without ``serveTlsCert``). Such a server makes its own key and certificate; the certificate
then travels to its clients in what the driver plans (the only root they trust for it), so
no certificate authority is involved and no other server can pose as it.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence

from spark_statestore.serve.errors import ServerConfigError

__all__ = ["self_signed_certificate", "self_signed_client_certificate"]

VALIDITY_DAYS = 3650


def self_signed_certificate(names: Sequence[str], *, common_name: str) -> tuple[bytes, bytes]:
    """``(certificate PEM, private key PEM)`` of a new self-signed certificate valid for
    ``names`` (IP addresses or DNS names, as clients dial them).

    Raises
    ------
    ServerConfigError
        If ``names`` is empty or the ``cryptography`` package is missing.
    """
    if not names:
        raise ServerConfigError("a self-signed certificate needs at least one address or name")
    return _self_signed(names, common_name=common_name, client=False)


def self_signed_client_certificate(*, common_name: str) -> tuple[bytes, bytes]:
    """``(certificate PEM, private key PEM)`` of a new self-signed TLS *client* certificate:
    the identity a mutual-TLS server makes for its own clients, and trusts as a root of its
    own (:mod:`~spark_statestore.serve.mutual_tls`).

    Raises
    ------
    ServerConfigError
        If the ``cryptography`` package is missing.
    """
    return _self_signed((), common_name=common_name, client=True)


def _self_signed(names: Sequence[str], *, common_name: str, client: bool) -> tuple[bytes, bytes]:
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError as exc:  # a dependency: only a broken install lacks it
        raise ServerConfigError(
            f"cannot make a TLS certificate: the 'cryptography' package is missing ({exc}); "
            "reinstall spark-statestore with its dependencies"
        ) from exc
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])])
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALIDITY_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
    )
    if client:
        usage = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])
        builder = builder.add_extension(usage, critical=False)
    else:
        alternatives: list[x509.GeneralName] = []
        for name in dict.fromkeys(names):
            try:
                alternatives.append(x509.IPAddress(ipaddress.ip_address(name.strip("[]"))))
            except ValueError:
                alternatives.append(x509.DNSName(name))
        builder = builder.add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
    certificate = builder.sign(key, hashes.SHA256())
    return (
        certificate.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
