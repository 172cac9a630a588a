"""Mutual TLS: servers that refuse, in the TLS handshake, a client without a certificate.

A bearer token is checked by a Flight middleware, and gRPC runs middleware only after it has
received and buffered the call's whole message: a peer without the token can still make a
server hold a message of any size before it is refused. A server in mutual-TLS mode
(``StoreServer(tls_client_ca=...)``, the Spark options' ``serveTlsClientCa``, ``serve
--tls-client-ca``) asks every client for a certificate during the TLS handshake and closes
the connection of a client without a valid one, before gRPC reads a byte of its calls; the
token is still checked on every call.

Accepted are client certificates signed by the configured CAs, and the server's *own client
certificate*: a self-signed one it makes when it starts and trusts as a root of its own, so
that the processes of the store's user that read its owner-only credentials file (the
snapshot reader's planning, the store host, the sink's commits, ``spark-statestore query
PATH``) keep reaching it without a certificate of the user's CA. Its key is written into the
credentials file next to the token (which already grants everything the key does), travels
in a Spark plan with it and is valid for that one server only, until it stops.

Servers the plugin starts with a certificate of its own making (beyond loopback without
``serveTlsCert``, and the store host) are always in mutual-TLS mode, trusting only their own
client certificate: the only clients able to verify such a server are those that read its
credentials file, or a plan made from it, and those get the client certificate with it.

This module also reads the client and CA files the options name, and explains a failed
handshake (:func:`handshake_refusal`), which gRPC reports only as an unavailable server.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from spark_statestore.errors import OptionError
from spark_statestore.serve.auth import read_option_file
from spark_statestore.serve.errors import ServerConfigError

__all__ = [
    "OWN_CLIENT_NAME",
    "check_client_ca",
    "check_client_identity",
    "handshake_refusal",
    "read_client_ca",
    "read_client_identity",
]

OWN_CLIENT_NAME = "spark-statestore store reader"
"""The common name of a server's own client certificate."""
_PROBE_TIMEOUT_S = 2.0


def check_client_identity(cert: bytes, key: bytes, *, names: str) -> tuple[bytes, bytes]:
    """``(cert, key)`` when ``cert`` is a PEM certificate chain whose first certificate is
    that of the PEM private key ``key``.

    Parameters
    ----------
    names
        The settings that gave them, for messages (``"--tls-client-cert and
        --tls-client-key"``).

    Raises
    ------
    ServerConfigError
        Naming ``names``, when either is not PEM or the key is not the certificate's.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    if not isinstance(cert, bytes) or not isinstance(key, bytes):
        raise ServerConfigError(f"{names}: a client certificate and key are PEM bytes")
    try:
        chain = x509.load_pem_x509_certificates(cert)
    except ValueError as exc:
        raise ServerConfigError(f"{names}: the certificate is not PEM ({exc})") from None
    try:
        private = serialization.load_pem_private_key(key, password=None)
    except (ValueError, TypeError) as exc:
        raise ServerConfigError(
            f"{names}: the key is not an unencrypted PEM private key ({exc})"
        ) from None
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    if chain[0].public_key().public_bytes(serialization.Encoding.DER, spki) != (
        private.public_key().public_bytes(serialization.Encoding.DER, spki)
    ):
        raise ServerConfigError(
            f"{names}: the key is not the key of the (first) certificate; give the key the "
            "certificate was issued for"
        )
    return cert, key


def check_client_ca(roots: bytes, *, names: str) -> bytes:
    """``roots`` when it holds one or more PEM certificates (the CAs whose client
    certificates a server accepts).

    Raises
    ------
    ServerConfigError
        Naming ``names``, when it holds none.
    """
    from cryptography import x509

    if not isinstance(roots, bytes) or not roots.strip():
        raise ServerConfigError(f"{names}: give the PEM certificates of the client CAs")
    try:
        x509.load_pem_x509_certificates(roots)
    except ValueError as exc:
        raise ServerConfigError(f"{names}: not PEM certificates ({exc})") from None
    return roots


def read_client_identity(
    cert_path: str | None,
    key_path: str | None,
    *,
    cert_option: str,
    key_option: str,
) -> tuple[bytes, bytes] | None:
    """The client certificate chain and key in the files two options name, checked
    (:func:`check_client_identity`); None when neither is given.

    Raises
    ------
    OptionError
        Naming the options, when one is given without the other, a file cannot be read, or
        they are not a certificate and its key.
    """
    if cert_path is None and key_path is None:
        return None
    if cert_path is None or key_path is None:
        raise OptionError(
            f"options {cert_option} and {key_option} go together: the client's PEM "
            "certificate chain and its PEM private key (mutual TLS)"
        )
    cert = read_option_file(cert_path, cert_option)
    key = read_option_file(key_path, key_option)
    try:
        return check_client_identity(cert, key, names=f"options {cert_option} and {key_option}")
    except ServerConfigError as exc:
        raise OptionError(f"{exc} (files {cert_path}, {key_path})") from None


def read_client_ca(path: str, option: str) -> bytes:
    """The PEM certificates of the client CAs in the file ``option`` names, checked.

    Raises
    ------
    OptionError
        Naming ``option`` and ``path``, when the file cannot be read or holds no PEM
        certificate.
    """
    roots = read_option_file(path, option)
    try:
        return check_client_ca(roots, names=f"option {option}")
    except ServerConfigError as exc:
        raise OptionError(f"{exc} (file {path})") from None


def handshake_refusal(
    location: str, tls_root_certs: bytes | None, *, presented: bool
) -> str | None:
    """Why a ``grpc+tls`` server that gRPC called unavailable refuses this client's TLS
    handshake, or None when nothing listens there or the handshake is not the problem.

    gRPC reports a refused handshake as an unavailable server, so after such a failure the
    client tries one handshake itself, without a client certificate: a server certificate
    that ``tls_root_certs`` (None: the system's roots) do not verify is this client's
    refusal; a server that closes the connection right after the handshake requires a
    client certificate (``presented``: the client presented one, which it refused).
    """
    import socket
    import ssl

    parts = urlsplit(location)
    try:
        host, port = parts.hostname, parts.port
    except ValueError:  # a port out of range: not a location gRPC dialed
        return None
    if parts.scheme != "grpc+tls" or host is None or port is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the certificate and name
    try:
        if tls_root_certs is None:
            context.load_default_certs()
        else:
            context.load_verify_locations(cadata=tls_root_certs.decode("ascii"))
    except (ssl.SSLError, ValueError):
        return None  # roots the client itself could not use: its own error says so
    # As gRPC does: a trusted certificate is an anchor even when a CA issued it (a store's
    # credentials file trusts its server's own certificate).
    context.verify_flags = ssl.VERIFY_X509_PARTIAL_CHAIN
    context.set_alpn_protocols(["h2"])
    try:
        raw = socket.create_connection((host, port), timeout=_PROBE_TIMEOUT_S)
    except OSError:
        return None  # nothing listens: the server is down, as gRPC said
    try:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            try:
                first = tls.recv(1)
            except ssl.SSLError:
                first = b""  # an alert right after the handshake: refused, as a close
    except ssl.SSLCertVerificationError as exc:
        return (
            f"this client does not trust the server's certificate ({exc.verify_message}): "
            "give the certificate of its CA as the client's TLS roots (tls_root_certs, "
            "--tls-root-cert, tls_root_certs_file)"
        )
    except (ssl.SSLError, OSError):
        return None
    finally:
        raw.close()
    if first:
        return None  # it talks to a client without a certificate: no mutual TLS
    if presented:
        return (
            "the server requires a client certificate (mutual TLS) and refused this "
            "client's: it must be signed by a CA the server accepts (its serveTlsClientCa, "
            "--tls-client-ca or tls_client_ca) and be valid now"
        )
    return (
        "the server requires a client certificate (mutual TLS) and this client presented "
        "none: give a certificate signed by a CA the server accepts and its key "
        "(tls_client_cert and tls_client_key; --tls-client-cert and --tls-client-key; "
        "enrich's tls_client_cert_file and tls_client_key_file)"
    )
