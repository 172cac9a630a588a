"""Which announced replicas a reader sends its credentials to.

A verified announcement (:mod:`~spark_statestore.discovery.signing`) says who the replica is
and where it serves; the credential a router holds (the replicas' shared bearer token) still
goes only where the reader can check who answers:

* ``grpc+tls://`` locations only with the TLS roots the reader was given: never the system's
  roots, under which any certificate a public authority signed for that name would do;
* plain ``grpc://`` / ``grpc+tcp://`` locations only on loopback, and only when the
  announcement's loopback is the reader's own (:func:`loopback_identity`: the same boot of
  the same machine and the same network namespace), so a router elsewhere never dials its own
  port of that number, where any local user could listen;
* never another scheme (``grpc+unix://`` ...) taken from an announcement;
* and the client refuses a server whose store id is not the announced replica id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from spark_statestore.discovery.errors import UnverifiableReplicaError
from spark_statestore.discovery.loopback import loopback_identity

if TYPE_CHECKING:
    from spark_statestore.discovery.announcement import ReplicaAnnouncement
    from spark_statestore.serve.auth import ServeCredentials
    from spark_statestore.serve.client import StoreClient

__all__ = ["UnverifiableReplicaError", "connect_replica", "dialable_location", "loopback_identity"]

_PLAIN = ("grpc", "grpc+tcp")
_TLS = "grpc+tls"


def dialable_location(replica: ReplicaAnnouncement, *, tls_roots: bool) -> str:
    """The replica's location, when a reader holding TLS roots (``tls_roots``) may send it
    its credential.

    Raises
    ------
    UnverifiableReplicaError
        Naming the replica and the rule: no location, a scheme other than ``grpc+tls`` or a
        plain loopback one, TLS without roots, or a loopback that is not this one.
    """
    from spark_statestore.serve.auth import is_loopback

    location = replica.location
    who = f"{replica.role.value} {replica.replica_id[:8]} of {replica.changelog}"
    if location is None:
        raise UnverifiableReplicaError(f"{who} does not serve")
    scheme = urlsplit(location).scheme.lower()
    if scheme == _TLS:
        if not tls_roots:
            raise UnverifiableReplicaError(
                f"{who} serves at {location}, but no TLS root certificates are configured: the "
                "replicas' token is never sent under the system's roots. Give the CA of the "
                "replicas' certificates (--tls-root-certs, tlsRootCerts)"
            )
        return location
    if scheme not in _PLAIN:
        raise UnverifiableReplicaError(
            f"{who} announces location {location!r}: only grpc+tls (or plain grpc on this "
            "host's loopback) locations are dialed from announcements"
        )
    host = replica.host_info
    here = loopback_identity()
    if host is None or not is_loopback(host.host):
        raise UnverifiableReplicaError(
            f"{who} announces the plain-text location {location}: beyond loopback only "
            "grpc+tls is dialed (serve it with TLS)"
        )
    if here is None or replica.loopback != here:
        raise UnverifiableReplicaError(
            f"{who} serves on the loopback of another host or network namespace "
            f"({location}, host {replica.host!r}): it is not reachable from here. Serve it "
            "beyond loopback with TLS (serveHost, serveTlsCert) to route to it from other hosts"
        )
    return location


def connect_replica(
    replica: ReplicaAnnouncement, credentials: ServeCredentials, *, timeout_s: float = 30.0
) -> StoreClient:
    """A client of ``replica`` with ``credentials`` (the replicas' shared token, their TLS
    roots, a client certificate for replicas in mutual-TLS mode), made only when
    :func:`dialable_location` allows it; the client checks that the server serves the store
    whose id the replica announced.

    Raises
    ------
    UnverifiableReplicaError
        As :func:`dialable_location`.
    """
    from spark_statestore.serve.client import connect

    location = dialable_location(replica, tls_roots=credentials.tls_root_certs is not None)
    return connect(
        location,
        token=credentials.token,
        tls_root_certs=credentials.tls_root_certs,
        tls_client_cert=credentials.tls_client_cert,
        tls_client_key=credentials.tls_client_key,
        store_id=replica.replica_id,
        timeout_s=timeout_s,
    )
