"""How executors reach the store host (:class:`HostRef`, in what the driver plans) and how
the driver's processes find the one that runs (:class:`HostRecord`, an owner-only file)."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from typing import Any

from spark_statestore.connectors.spark.driver import ProcessId

__all__ = [
    "HostRecord",
    "HostRef",
    "commit_ref_from_json",
    "commit_ref_to_json",
    "read_record",
    "runtime_dir",
    "write_record",
]


@dataclass(frozen=True, slots=True)
class HostRef:
    """The store host of a Spark driver, as its executors dial it (picklable: it travels in
    the plan, like a connection string with its password).

    Parameters
    ----------
    location
        ``grpc+tcp://127.0.0.1:port`` for executors on the driver's host, else
        ``grpc+tls://<driver host>:port``.
    token
        The bearer token every call carries.
    tls_root_certs
        The host's own self-signed certificate (PEM): the only root trusted for it.
    tls_client_cert, tls_client_key
        The client certificate and key (PEM) a task presents: a host on TLS is in mutual-TLS
        mode, trusting only this certificate, which its driver made with the host's own
        (:mod:`~spark_statestore.serve.mutual_tls`).
    """

    location: str
    token: str
    tls_root_certs: bytes | None = None
    tls_client_cert: bytes | None = None
    tls_client_key: bytes | None = None

    def __repr__(self) -> str:  # never the token
        return f"HostRef({self.location!r})"


@dataclass(frozen=True, slots=True)
class HostRecord:
    """A store host as its driver's processes record it (owner-only: it holds the secrets).

    Parameters
    ----------
    process
        The host process (pid and start time).
    driver
        The Spark driver JVM it serves and watches.
    host, port
        Where it listens (a restart listens there again, so plans stay valid).
    ref
        How executors reach it.
    tls_key
        The private key of its certificate (PEM), to restart it with the same one.
    metrics_url
        Where it serves its metrics (``SPARK_STATESTORE_HOST_METRICS_PORT``), or None.
    commit_token
        The token the sink's commits carry to have it publish a changelog (never in the
        plan); None for a host started by an earlier version.
    """

    process: ProcessId
    driver: ProcessId
    host: str
    port: int
    ref: HostRef
    tls_key: bytes | None = None
    metrics_url: str | None = None
    commit_token: str | None = None

    def for_commits(self) -> tuple[HostRef, str] | None:
        """How the sink's commits reach this host to have it publish: its ref and commit
        token; None for a host without one."""
        return None if self.commit_token is None else (self.ref, self.commit_token)

    def to_dict(self) -> dict[str, Any]:
        certs = self.ref.tls_root_certs
        client_cert, client_key = self.ref.tls_client_cert, self.ref.tls_client_key
        return {
            "process": [self.process.pid, self.process.start],
            "driver": [self.driver.pid, self.driver.start],
            "host": self.host,
            "port": self.port,
            "location": self.ref.location,
            "token": self.ref.token,
            "tls_cert": None if certs is None else certs.decode("ascii"),
            "tls_key": None if self.tls_key is None else self.tls_key.decode("ascii"),
            "tls_client_cert": None if client_cert is None else client_cert.decode("ascii"),
            "tls_client_key": None if client_key is None else client_key.decode("ascii"),
            "metrics_url": self.metrics_url,
            "commit_token": self.commit_token,
        }

    @classmethod
    def from_dict(cls, data: Any) -> HostRecord | None:
        """The record ``data`` describes, or None when it is not one (a torn or alien file)."""
        try:
            cert, key = data["tls_cert"], data["tls_key"]
            # A host started by an earlier version has no client certificate (no mutual TLS).
            client_cert, client_key = data.get("tls_client_cert"), data.get("tls_client_key")
            metrics_url = data.get("metrics_url")
            commit_token = data.get("commit_token")
            return cls(
                ProcessId(int(data["process"][0]), str(data["process"][1])),
                ProcessId(int(data["driver"][0]), str(data["driver"][1])),
                str(data["host"]),
                int(data["port"]),
                HostRef(
                    str(data["location"]),
                    str(data["token"]),
                    None if cert is None else str(cert).encode("ascii"),
                    None if client_cert is None else str(client_cert).encode("ascii"),
                    None if client_key is None else str(client_key).encode("ascii"),
                ),
                None if key is None else str(key).encode("ascii"),
                None if metrics_url is None else str(metrics_url),
                None if commit_token is None else str(commit_token),
            )
        except (KeyError, IndexError, TypeError, ValueError, UnicodeError):
            return None


def commit_ref_to_json(record: HostRecord) -> dict[str, Any] | None:
    """How a committer on the driver's host reaches ``record``'s host to have it publish (its
    location, tokens and client certificate; not its private key), for a sink's store
    server; None for a host without a commit token."""
    reached = record.for_commits()
    if reached is None:
        return None
    ref, commit_token = reached

    def text(data: bytes | None) -> str | None:
        return None if data is None else data.decode("ascii")

    return {
        "location": ref.location,
        "token": ref.token,
        "tls_root_certs": text(ref.tls_root_certs),
        "tls_client_cert": text(ref.tls_client_cert),
        "tls_client_key": text(ref.tls_client_key),
        "commit_token": commit_token,
    }


def commit_ref_from_json(data: Any) -> tuple[HostRef, str] | None:
    """The host and commit token :func:`commit_ref_to_json` described, or None when ``data``
    is not such a description."""
    if not isinstance(data, dict):
        return None
    texts = [data.get(k) for k in ("location", "token", "commit_token")]
    if not all(isinstance(t, str) and t for t in texts):
        return None
    pems = [data.get(k) for k in ("tls_root_certs", "tls_client_cert", "tls_client_key")]
    if not all(p is None or isinstance(p, str) for p in pems):
        return None
    certs = [None if p is None else p.encode("ascii") for p in pems]
    return HostRef(str(texts[0]), str(texts[1]), *certs), str(texts[2])


def runtime_dir() -> str:
    """This user's directory of store-host records and logs (owner-only)."""
    from spark_statestore.store.files import make_private_dir

    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    path = os.path.join(base, f"spark-statestore-{os.getuid()}")
    make_private_dir(path)
    return path


def record_path(driver: ProcessId) -> str:
    """The record file of ``driver``'s store host."""
    return os.path.join(runtime_dir(), f"store-host-{driver.pid}-{driver.start}.json")


def read_record(driver: ProcessId) -> HostRecord | None:
    """The record of ``driver``'s store host (possibly a dead one's), or None."""
    try:
        with open(record_path(driver), encoding="utf-8") as handle:
            return HostRecord.from_dict(json.load(handle))
    except (OSError, ValueError):
        return None


def write_record(record: HostRecord) -> None:
    """Write ``record`` owner-only and atomically."""
    from spark_statestore.store.files import write_private_json

    write_private_json(record_path(record.driver), record.to_dict())
