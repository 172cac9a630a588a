"""Errors of the Arrow Flight store server and its client.

Each error class has a ``kind``: the server sends it with a failed call (in the Flight
error's ``extra_info``) and the client raises the class of that kind again
(:func:`error_class_for`), so a caller catches the same exception whether the failure
happened locally or on the server. Flight's transport errors are classified once, in the
client adapter.
"""

from __future__ import annotations

from typing import ClassVar

from spark_statestore.errors import StateStoreError

__all__ = [
    "AuthenticationError",
    "BadRequestError",
    "RemoteStoreError",
    "ReplyTooLargeError",
    "ServeError",
    "ServerConfigError",
    "ServerUnavailableError",
    "SnapshotExpiredError",
    "TlsHandshakeError",
    "TooManyPinsError",
    "UnknownActionError",
    "WrongStoreError",
    "error_class_for",
]


class ServeError(StateStoreError):
    """Root of the Flight server's and client's errors.

    ``location`` is the server's Flight location when known.
    """

    kind: ClassVar[str] = "error"

    def __init__(self, message: str, location: str | None = None) -> None:
        super().__init__(message)
        self.location = location


class ServerConfigError(ServeError, ValueError):
    """A :class:`~spark_statestore.serve.server.StoreServer` or client argument is invalid
    (host, port, TTL, limits, location)."""

    kind = "config"


class ServerUnavailableError(ServeError, ConnectionError):
    """No store server answers at the location (stopped, unreachable, or timed out)."""

    kind = "unavailable"


class TlsHandshakeError(ServerUnavailableError):
    """A server listens at the location but the TLS handshake with it fails: it requires a
    client certificate (mutual TLS) this client did not present or it does not accept, or
    this client does not trust the server's certificate; the message says which. A client
    cannot call such a server at all, as if it were down (hence the base class)."""

    kind = "tls_handshake"


class SnapshotExpiredError(ServeError, LookupError):
    """The pinned snapshot is gone: released, expired after its TTL, or the server
    restarted. Re-run the query to read a new snapshot."""

    kind = "snapshot_expired"


class TooManyPinsError(ServeError):
    """The server already holds its maximum number of pinned snapshots."""

    kind = "too_many_pins"


class BadRequestError(ServeError, ValueError):
    """The server could not understand a ticket or action body (malformed JSON or scan)."""

    kind = "bad_request"


class UnknownActionError(BadRequestError):
    """The server has no action of that name; the message lists the valid ones."""

    kind = "unknown_action"


class AuthenticationError(ServeError, PermissionError):
    """The server refused the call's credentials (no token, or the wrong one)."""

    kind = "unauthenticated"


class WrongStoreError(ServeError):
    """The server reached serves another store than the one the caller meant (its
    ``_owner.json`` points elsewhere)."""

    kind = "wrong_store"


class RemoteStoreError(ServeError):
    """The store failed on the server side (closed, corrupted, ...); the message says how."""

    kind = "store_error"


class ReplyTooLargeError(ServeError):
    """A reply outgrew the client's ``max_reply_bytes``: gRPC refused it before it was
    buffered whole. Read large answers in pages (a pinned snapshot's scan)."""

    kind = "reply_too_large"


_KINDS: dict[str, type[ServeError]] = {
    cls.kind: cls
    for cls in (
        ServeError,
        ServerConfigError,
        ServerUnavailableError,
        TlsHandshakeError,
        SnapshotExpiredError,
        TooManyPinsError,
        BadRequestError,
        UnknownActionError,
        RemoteStoreError,
        AuthenticationError,
        WrongStoreError,
        ReplyTooLargeError,
    )
}


def error_class_for(kind: str) -> type[ServeError]:
    """The error class of ``kind`` (:class:`ServeError` for kinds this version does not
    know, e.g. from a newer server)."""
    return _KINDS.get(kind, ServeError)
