"""Who a store server's per-caller caps count a call against.

Every call declares a client id (the ``x-spark-statestore-client`` header, a random id per
:class:`~spark_statestore.serve.client.StoreClient`), but any token holder chooses it freely,
so a cap counted by it alone holds nobody: a client that changes its id starts afresh.
Caps therefore count by two keys:

* the **peer**: the identity of the client certificate when the call came over mutual TLS
  (authenticated: a client cannot choose it), else the network address the call came from,
  without its port (a client cannot change it by a header; every client on one host is one
  peer, and over loopback every local client is);
* the **client**: the declared id *within* its peer, so one peer's ids never count against
  another's.

A per-peer cap is what a client cannot dodge by changing its id; per-client caps share a
peer's allowance fairly among its clients. The server-wide caps bound all callers together.
"""

from __future__ import annotations

from typing import Final

__all__ = ["CallerCounts", "caller_key", "peer_of"]

_SEPARATOR: Final = "\x00"  # in neither a gRPC header value nor a peer address


def caller_key(declared: str, transport_peer: str, identity: bytes = b"") -> str:
    """The key a call's caps count under (see the module docstring).

    Parameters
    ----------
    declared
        The client id the call declared (cut to 64 characters).
    transport_peer
        gRPC's peer of the call, e.g. ``ipv4:10.0.0.7:51234`` (its port is dropped).
    identity
        The authenticated identity of the client certificate (mutual TLS); empty without.
    """
    if identity:
        peer = "tls:" + identity.decode("utf-8", "replace").replace(_SEPARATOR, "")
    else:
        scheme, _, address = transport_peer.partition(":")
        host = address.rsplit(":", 1)[0] if scheme in ("ipv4", "ipv6") else address
        peer = f"{scheme}:{host}" if address else transport_peer
    return f"{peer}{_SEPARATOR}{declared[:64]}"


def peer_of(key: str) -> str:
    """The peer part of a :func:`caller_key` (for messages and per-peer counts)."""
    return key.partition(_SEPARATOR)[0]


class CallerCounts:
    """How many of something (pins, waiting calls) each client and each peer holds, against
    a cap per client and a cap per peer. Not thread-safe: its owner holds its own lock.

    Parameters
    ----------
    per_client, per_peer
        The caps (None: none).
    client_option, peer_option
        The options that set them, named in refusals.
    """

    def __init__(
        self,
        *,
        per_client: int | None,
        per_peer: int | None,
        client_option: str,
        peer_option: str,
    ) -> None:
        self.per_client = per_client
        self.per_peer = per_peer
        self._options = (client_option, peer_option)
        self._by_client: dict[str, int] = {}
        self._by_peer: dict[str, int] = {}

    def refusal(self, key: str) -> str | None:
        """Why one more for ``key`` is refused (``"this client holds 2 (max_..=2)"``), or
        None when it fits."""
        mine = self._by_client.get(key, 0)
        if self.per_client is not None and mine >= self.per_client:
            return f"this client holds {mine} ({self._options[0]}={self.per_client})"
        peer = peer_of(key)
        theirs = self._by_peer.get(peer, 0)
        if self.per_peer is not None and theirs >= self.per_peer:
            return (
                f"the clients of its peer {peer!r} hold {theirs} ({self._options[1]}="
                f"{self.per_peer}; a peer is a client certificate, else a network address)"
            )
        return None

    def add(self, key: str) -> None:
        self._by_client[key] = self._by_client.get(key, 0) + 1
        peer = peer_of(key)
        self._by_peer[peer] = self._by_peer.get(peer, 0) + 1

    def remove(self, key: str) -> None:
        for counts, counted in ((self._by_client, key), (self._by_peer, peer_of(key))):
            left = counts[counted] - 1
            if left:
                counts[counted] = left
            else:
                del counts[counted]

    def clear(self) -> None:
        self._by_client.clear()
        self._by_peer.clear()
