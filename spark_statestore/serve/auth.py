"""Who may talk to a store server: bearer tokens, the owner-only credentials file, TLS rules.

Every call to a :class:`~spark_statestore.serve.server.StoreServer` carries
``authorization: Bearer <token>``; the server refuses a call without the right token before
any handler runs. The token is the user's (``StoreServer(token=...)``) or one the server
draws when it starts. A server that advertises itself (the owner of a store) writes a
*credentials file* next to the store, ``<store>/_serve.json``, readable by its owner only:
the token, the store id the server serves and, for TLS, the certificate clients should trust.
A process that can read the store directory can therefore read the store through its owner,
and nobody else can; :func:`~spark_statestore.serve.client.connect_to_owner` reads the file,
and a reader checks that the server it reached serves the store id written there.

Binding beyond loopback requires TLS (:func:`require_tls_beyond_loopback`): a token sent in
clear text over a network is no secret. A server in mutual-TLS mode also writes into the file
the client certificate and key it made for its own readers
(:mod:`~spark_statestore.serve.mutual_tls`).
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import os
import secrets
from dataclasses import dataclass, field
from typing import Any

from spark_statestore.errors import OptionError
from spark_statestore.serve.errors import ServerConfigError

__all__ = [
    "AUTH_HEADER",
    "CLIENT_HEADER",
    "CREDENTIALS_FILE",
    "ServeCredentials",
    "bearer",
    "check_token",
    "is_loopback",
    "new_token",
    "read_credentials",
    "read_option_file",
    "read_token_file",
    "remove_credentials",
    "require_tls_beyond_loopback",
    "token_matches",
    "write_credentials",
]

CREDENTIALS_FILE = "_serve.json"
AUTH_HEADER = "authorization"
CLIENT_HEADER = "x-spark-statestore-client"
"""A client's self-chosen id, so per-client caps (pins, waiting pins) count its calls."""
_BEARER = "Bearer "
_MIN_TOKEN_CHARS = 16
_MAX_TOKEN_CHARS = 4096


@dataclass(frozen=True, slots=True)
class ServeCredentials:
    """What a client needs to read a store through its owner's server (picklable: it
    travels in Spark plans to the executors, like a connection string with its password).

    Parameters
    ----------
    token
        The bearer token the server accepts.
    store_id
        The id of the store the server serves (checked by readers against the reply).
    tls_root_certs
        PEM certificate(s) to trust for a ``grpc+tls`` server (None: plain ``grpc+tcp``).
    tls_client_cert, tls_client_key
        The PEM client certificate chain and private key to present to a server in
        mutual-TLS mode, which refuses a client without them in the TLS handshake (None: no
        client certificate). In a store's credentials file: the certificate its server made
        for the store's own readers (:mod:`~spark_statestore.serve.mutual_tls`).
    """

    token: str = field(repr=False)
    store_id: str | None = None
    tls_root_certs: bytes | None = field(default=None, repr=False)
    tls_client_cert: bytes | None = field(default=None, repr=False)
    tls_client_key: bytes | None = field(default=None, repr=False)

    @property
    def mutual_tls(self) -> bool:
        """Whether a client certificate is presented (the server requires one)."""
        return self.tls_client_cert is not None

    def to_dict(self) -> dict[str, Any]:
        def text(pem: bytes | None) -> str | None:
            return None if pem is None else pem.decode()

        return {
            "token": self.token,
            "store_id": self.store_id,
            "tls_root_certs": text(self.tls_root_certs),
            "tls_client_cert": text(self.tls_client_cert),
            "tls_client_key": text(self.tls_client_key),
        }

    @classmethod
    def from_dict(cls, data: Any) -> ServeCredentials | None:
        """The credentials in ``data``, or None when it is not a credentials object."""
        if not isinstance(data, dict):
            return None
        token, store_id = data.get("token"), data.get("store_id")
        if not isinstance(token, str) or not isinstance(store_id, (str, type(None))):
            return None
        pems = [data.get(name) for name in ("tls_root_certs", "tls_client_cert", "tls_client_key")]
        if not all(isinstance(pem, (str, type(None))) for pem in pems):
            return None
        certs, client_cert, client_key = (None if pem is None else pem.encode() for pem in pems)
        if (client_cert is None) != (client_key is None):
            return None
        return cls(token, store_id, certs, client_cert, client_key)


def new_token() -> str:
    """A fresh random token (256 bits)."""
    return secrets.token_urlsafe(32)


def check_token(token: str, what: str = "token") -> str:
    """``token`` if it is usable as a bearer token.

    Raises
    ------
    ServerConfigError
        If it is not a str of 16 to 4096 printable ASCII characters without spaces.
    """
    if (
        not isinstance(token, str)
        or not _MIN_TOKEN_CHARS <= len(token) <= _MAX_TOKEN_CHARS
        or not token.isascii()
        or not token.isprintable()
        or " " in token
    ):
        raise ServerConfigError(
            f"{what} must be {_MIN_TOKEN_CHARS} to {_MAX_TOKEN_CHARS} printable ASCII characters "
            "without spaces (e.g. from secrets.token_urlsafe(32))"
        )
    return token


def read_token_file(path: str, option: str) -> str:
    """The bearer token held in the file at ``path`` (blanks around it stripped).

    Replicas that share a token file can be reached by one router with that token.

    Parameters
    ----------
    path
        The file holding the token.
    option
        The option or flag that named the file, as error messages show it
        (``--token-file``, ``'serveTokenFile'``).

    Raises
    ------
    OptionError
        Naming ``option`` and ``path``, when the file cannot be read, is empty or does not
        hold a usable token (:func:`check_token`).
    """
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise OptionError(f"option {option}: cannot read {path}: {exc.strerror}") from None
    token = data.decode("utf-8", "replace").strip()
    if not token:
        raise OptionError(f"option {option}: {path} is empty; write the token into it")
    try:
        return check_token(token, what=f"the token in {path}")
    except ServerConfigError as exc:
        raise OptionError(f"option {option}: {exc}") from None


def read_option_file(path: str, option: str) -> bytes:
    """The bytes of the file an option or flag names (a certificate, a key, CAs).

    Raises
    ------
    OptionError
        Naming ``option`` and ``path``, when the file cannot be read or is empty.
    """
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise OptionError(f"option {option}: cannot read {path}: {exc.strerror}") from None
    if not data.strip():
        raise OptionError(f"option {option}: {path} is empty")
    return data


def bearer(token: str) -> bytes:
    """The ``authorization`` header value for ``token``."""
    return (_BEARER + token).encode("ascii")


def token_matches(headers: dict[str, Any], token: str) -> bool:
    """Whether the call's headers carry ``authorization: Bearer <token>`` (constant time)."""
    values = headers.get(AUTH_HEADER) or []
    if len(values) != 1:
        return False
    value = values[0]
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            return False
    if not isinstance(value, str) or not value.startswith(_BEARER):
        return False
    return hmac.compare_digest(value[len(_BEARER) :].encode(), token.encode())


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    bare = host.strip("[]")
    if bare.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False


def require_tls_beyond_loopback(host: str, tls: bool, *, names: str) -> None:
    """Refuse a plain-text server on a non-loopback ``host``.

    Raises
    ------
    ServerConfigError
        Naming ``names`` (the settings that give a certificate and key).
    """
    if not tls and not is_loopback(host):
        raise ServerConfigError(
            f"a store server on {host!r} (beyond loopback) must use TLS: its token and the "
            f"store's rows would cross the network in clear text. Give a certificate and key "
            f"({names}), or serve on 127.0.0.1"
        )


def write_credentials(store_path: str, credentials: ServeCredentials) -> str:
    """Write the credentials file of the store at ``store_path`` (mode 0600, atomically);
    returns its path."""
    from spark_statestore.store.files import write_private_json

    return write_private_json(os.path.join(store_path, CREDENTIALS_FILE), credentials.to_dict())


def read_credentials(store_path: str) -> ServeCredentials | None:
    """The credentials file of the store at ``store_path``, or None when absent or
    unreadable (no owner serves it, or this user may not read it)."""
    try:
        with open(os.path.join(store_path, CREDENTIALS_FILE), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError, RecursionError):
        return None
    return ServeCredentials.from_dict(data)


def remove_credentials(store_path: str, token: str) -> None:
    """Remove the credentials file if it still holds ``token`` (a later owner's stays)."""
    current = read_credentials(store_path)
    if current is not None and hmac.compare_digest(current.token.encode(), token.encode()):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(store_path, CREDENTIALS_FILE))
