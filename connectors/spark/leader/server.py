"""The sink's store server: one process that keeps a sink's leader store open while its query
runs, takes the micro-batch commits, serves the store over Arrow Flight and announces it.

Spark runs a Python sink's ``commit`` in a fresh process per micro-batch, so without this
process nobody holds the leader store between two commits: nothing could serve it or
announce it as the leader on ``<changelog>-replicas``. With option ``serve`` the first commit
starts this process (:mod:`.remote`); it

* opens the store as the leader (the single-owner lock, ``serves`` in ``_owner.json``) and
  the changelog's transactional publisher, once;
* serves the store with a :class:`~spark_statestore.serve.server.StoreServer` (snapshot
  reads, IQv2 queries, ``describe``), so Spark's snapshot reader and remote clients read the
  live leader store through it;
* takes each batch's commit as the Flight action ``sink_commit`` and runs the same
  :func:`~spark_statestore.sink.commit.commit_batch` a commit process runs without it; the
  commit process waits for the reply, so Spark's commit log is written only after the store
  and the changelog are;
* announces the store as the leader (lag 0 on every partition) while it runs, and withdraws
  the announcement (a tombstone) when it stops;
* stops on the action ``sink_stop``, on SIGTERM/SIGINT, or when the Spark driver JVM that
  started it is gone. A SIGKILL leaves nothing to clean up: the kernel releases the store's
  lock, the next commit starts a new server, the store completes or discards an interrupted
  commit on open, and the announcement goes stale after its TTL.

The commit actions carry a secret the server draws and writes owner-only into
``<store>/_sink_server.json`` (with its pid, location and the options it was started with):
the store's read token (which may be shared with routers on other hosts) does not let
anyone commit.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_statestore.connectors.spark.driver import ProcessId

if TYPE_CHECKING:
    from spark_statestore.connectors.kafka.discovery import ReplicaAnnouncer
    from spark_statestore.connectors.spark.options import SinkOptions
    from spark_statestore.query import LagInfo
    from spark_statestore.sink.commit import BatchToCommit

__all__ = [
    "ACTION_COMMIT",
    "ACTION_STOP",
    "LOG_FILE",
    "SERVER_FILE",
    "LeaderServer",
    "ServerRecord",
    "batch_from_json",
    "batch_to_json",
    "fingerprint",
    "main",
    "read_server_record",
]

_log = logging.getLogger(__name__)

SERVER_FILE = "_sink_server.json"
LOG_FILE = "_sink_server.log"
ACTION_COMMIT = "sink_commit"
ACTION_STOP = "sink_stop"


@dataclass(frozen=True, slots=True)
class ServerRecord:
    """``<store>/_sink_server.json``: the running server (owner-only: it holds the secret)."""

    pid: int
    location: str
    secret: str
    fingerprint: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "location": self.location,
            "secret": self.secret,
            "fingerprint": self.fingerprint,
        }


def read_server_record(path: str) -> ServerRecord | None:
    """The server record of the store at ``path`` (possibly a dead server's), or None."""
    try:
        with open(os.path.join(path, SERVER_FILE), encoding="utf-8") as handle:
            data = json.load(handle)
        record = ServerRecord(data["pid"], data["location"], data["secret"], data["fingerprint"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(record.pid, int) or not all(
        isinstance(v, str) for v in (record.location, record.secret, record.fingerprint)
    ):
        return None
    return record


def fingerprint(options: SinkOptions) -> str:
    """What a server is started with that a commit must agree with (store, changelog,
    Kafka settings, serving): a commit with other options restarts the server."""
    import hashlib
    from dataclasses import asdict

    serve = None if options.serve is None else asdict(options.serve)
    settings = [
        options.path,
        options.bootstrap_servers,
        sorted(options.kafka.items()),
        options.changelog,
        options.application_id,
        options.allow_foreign_changelog,
        options.uncommitted_max_bytes,
        serve,
    ]
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def batch_to_json(batch: BatchToCommit) -> dict[str, Any]:
    """``batch`` as the body of a ``sink_commit`` action (without the secret)."""
    return {
        "query_id": batch.query_id,
        "batch_id": batch.batch_id,
        "staged": [staged.to_json() for staged in batch.staged],
        "source_offsets": batch.source_offsets,
        "complete": batch.complete,
    }


def batch_from_json(data: Mapping[str, Any]) -> BatchToCommit:
    """The batch of a ``sink_commit`` action's body.

    Raises
    ------
    BadRequestError
        If the body does not describe a batch.
    """
    from spark_statestore.errors import StateStoreError
    from spark_statestore.serve.errors import BadRequestError
    from spark_statestore.sink.commit import BatchToCommit
    from spark_statestore.sink.staging import StagedFile, query_id_problem

    query_id, batch_id = data.get("query_id"), data.get("batch_id")
    staged, complete = data.get("staged"), data.get("complete")
    if not isinstance(query_id, str) or query_id_problem(query_id) is not None:
        raise BadRequestError(f"action {ACTION_COMMIT!r}: bad query_id {str(query_id)[:80]!r}")
    if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
        raise BadRequestError(f"action {ACTION_COMMIT!r}: batch_id must be an int >= 0")
    if not isinstance(staged, list) or not isinstance(complete, bool):
        raise BadRequestError(f"action {ACTION_COMMIT!r}: staged must be a list, complete a bool")
    try:
        files = [StagedFile.from_json(item) for item in staged]
    except StateStoreError as exc:
        raise BadRequestError(f"action {ACTION_COMMIT!r}: {exc}") from exc
    return BatchToCommit(query_id, batch_id, files, data.get("source_offsets"), complete)


class LeaderServer:
    """The store, the publisher, the Flight server and the announcement of one sink.

    Parameters
    ----------
    options
        The sink's parsed options; ``options.serve`` says how to serve and announce.
    """

    def __init__(self, options: SinkOptions) -> None:
        from spark_statestore.connectors.spark.leader.store import (
            changelog_publisher,
            open_leader_store,
        )
        from spark_statestore.connectors.spark.serve_options import (
            ServeSettings,
            serving_endpoint,
        )
        from spark_statestore.serve import StoreServer
        from spark_statestore.serve.auth import new_token, read_token_file
        from spark_statestore.store.files import write_private_json

        self.options = options
        self.settings = options.serve or ServeSettings()
        self.fingerprint = fingerprint(options)
        self._secret = new_token()
        self._commit_lock = threading.Lock()
        self.stopped = threading.Event()
        self.announcer: ReplicaAnnouncer | None = None
        self._publisher = changelog_publisher(options)
        try:
            partitions = 1 if self._publisher is None else self._publisher.partition_count()
            self.store = open_leader_store(
                options,
                partitions,
                purpose=f"spark_statestore sink store server (pid {os.getpid()})",
                serves=True,
            )
        except BaseException:
            if self._publisher is not None:
                self._publisher.close()
            raise
        try:
            endpoint = serving_endpoint(
                self.settings.host,
                tls_cert=self.settings.tls_cert,
                tls_key=self.settings.tls_key,
                tls_client_ca=self.settings.tls_client_ca,
            )
            self.server = StoreServer(
                self.store,
                host=endpoint.host,
                port=self.settings.port,
                lag_provider=self._lags,
                tls_certificates=endpoint.tls_certificates,
                tls_client_ca=endpoint.tls_client_ca,
                require_client_cert=endpoint.require_client_cert,
                token=read_token_file(self.settings.token_file, "'serveTokenFile'")
                if self.settings.token_file is not None
                else None,
                actions={
                    ACTION_COMMIT: ("Commit a sink micro-batch (the sink's own)", self._commit),
                    ACTION_STOP: ("Stop the sink's store server (the sink's own)", self._stop),
                },
            )
            self.location = self.server.start()
            record = ServerRecord(os.getpid(), self.location, self._secret, self.fingerprint)
            write_private_json(os.path.join(self.store.path, SERVER_FILE), record.to_dict())
            if self.settings.announce and options.changelog is not None:
                self.announcer = self._announce()
        except BaseException:
            self.close()
            raise

    def _lags(self) -> Mapping[int, LagInfo]:
        """The leader's lags: 0 on every partition (its changelog holds what it committed)."""
        from spark_statestore.query import LagInfo

        offsets = self.store.metadata.changelog_offsets
        count = self.store.manifest.partitions
        return {p: LagInfo(offsets.get(p, 0), offsets.get(p, 0)) for p in range(count)}

    def _announce(self) -> ReplicaAnnouncer | None:
        from spark_statestore.connectors.kafka.discovery import announce_store

        assert self.options.bootstrap_servers is not None
        return announce_store(
            self.store,
            self.location,
            self._lags,
            bootstrap_servers=self.options.bootstrap_servers,
            config=self.options.kafka,
            interval_ms=self.settings.announce_interval_ms,
            key_file=self.settings.announce_key_file,
        )

    # -- actions (on gRPC threads) ----------------------------------------------------------
    def _check_secret(self, body: Mapping[str, Any]) -> None:
        from spark_statestore.serve.errors import AuthenticationError

        secret = body.get("secret")
        if not isinstance(secret, str) or not hmac.compare_digest(
            secret.encode("utf-8", "surrogatepass"), self._secret.encode()
        ):
            raise AuthenticationError(
                f"the sink's store server of {self.store.path} takes commits only from its "
                f"sink (with the secret in {SERVER_FILE})",
                self.location,
            )

    def _commit(self, body: Mapping[str, Any], client: str) -> dict[str, Any]:
        from spark_statestore.serve.errors import BadRequestError
        from spark_statestore.sink.commit import commit_batch
        from spark_statestore.sink.staging import StagingArea

        self._check_secret(body)
        if body.get("fingerprint") != self.fingerprint:
            raise BadRequestError(
                f"the sink's store server of {self.store.path} runs with other options than "
                "this commit's; stop it (stop_sink_server) and commit again"
            )
        batch = batch_from_json(body)
        with self._commit_lock:
            if self.stopped.is_set():
                raise BadRequestError(f"the sink's store server of {self.store.path} is stopping")
            try:
                outcome = commit_batch(
                    self.store, StagingArea(self.store.path), batch, self._publisher
                )
            except BaseException:
                self._renew_publisher()
                raise
        return {"outcome": outcome.value, "position": self.store.metadata.position.to_dict()}

    def _renew_publisher(self) -> None:
        """After a failed commit, a fresh producer: the old one's transaction state is
        unknown (a fatal error leaves it unusable)."""
        from spark_statestore.connectors.spark.leader.store import changelog_publisher

        if self._publisher is not None:
            self._publisher.close()
            self._publisher = changelog_publisher(self.options)

    def _stop(self, body: Mapping[str, Any], client: str) -> dict[str, Any]:
        self._check_secret(body)
        self.stopped.set()
        return {"stopping": True}

    # -- running ----------------------------------------------------------------------------
    def run(self, watch: ProcessId | None) -> None:
        """Serve until stopped, or until ``watch`` (the Spark driver JVM) is gone."""
        from spark_statestore.connectors.spark.detached import wait_until_stopped

        wait_until_stopped(self.stopped, watch, "the sink's store server")

    def close(self) -> None:
        """Withdraw the announcement, stop serving, close the publisher and the store
        (after a commit in progress)."""
        self.stopped.set()
        if self.announcer is not None:
            self.announcer.close()
        server = getattr(self, "server", None)
        if server is not None:
            server.close()
        with self._commit_lock:
            if self._publisher is not None:
                self._publisher.close()
                self._publisher = None
            record = read_server_record(self.store.path)
            if record is not None and record.pid == os.getpid():
                os.unlink(os.path.join(self.store.path, SERVER_FILE))
            self.store.close()


def main() -> int:
    """The server process (see
    :func:`~spark_statestore.connectors.spark.detached.serve_detached`): its start request
    holds the sink's options; it answers ``{"ready": location}``."""
    from spark_statestore.connectors.spark.detached import serve_detached
    from spark_statestore.connectors.spark.options import parse_sink_options

    def start(request: dict[str, Any]) -> LeaderServer:
        return LeaderServer(parse_sink_options(request["options"], streaming=request["streaming"]))

    def ready(server: Any) -> dict[str, Any]:
        return {"ready": server.location}

    return serve_detached("sink store server", start, ready)
