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
* answers the action ``sink_alive`` on a thread of its own while a commit runs, so the
  commit process tells a server that is committing a big batch from one that answers
  nothing (stopped, frozen), which it kills and replaces (:mod:`.liveness`);
* stops on the action ``sink_stop``, on SIGTERM/SIGINT, when the Spark driver JVM that
  started it is gone, or after ``serveIdleTimeoutMs`` without a commit (a query stopped in
  a driver that lives on: a notebook, a Spark Connect server). A stop waits for a commit in
  progress up to ``serveLivenessTimeoutMs``; past that the process exits at once, as if
  killed. A SIGKILL leaves nothing to clean up: the kernel releases the store's lock, the
  next commit starts a new server, the store completes or discards an interrupted commit
  on open, the next producer's transactional id fences the old one's open transaction,
  and the announcement goes stale after its TTL.

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
import time
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
    "ACTION_ALIVE",
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
ACTION_ALIVE = "sink_alive"
STOPPING = "stopping"
"""The key of a commit's reply when the server stopped before it began: the commit process
waits for it to go and commits through a new one."""
EXIT_ABANDONED = 75
"""The exit code of a server that stopped with a commit still running (left to the store's
recovery)."""


@dataclass(frozen=True, slots=True)
class ServerRecord:
    """``<store>/_sink_server.json``: the running server (owner-only: it holds the secret)."""

    pid: int
    location: str
    secret: str
    fingerprint: str
    start: str
    """The process's start time (see :class:`ProcessId`): a kill never hits a later process
    with its pid."""

    @property
    def process(self) -> ProcessId:
        """The server's process."""
        return ProcessId(self.pid, self.start)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "location": self.location,
            "secret": self.secret,
            "fingerprint": self.fingerprint,
            "start": self.start,
        }


def read_server_record(path: str) -> ServerRecord | None:
    """The server record of the store at ``path`` (possibly a dead server's), or None."""
    try:
        with open(os.path.join(path, SERVER_FILE), encoding="utf-8") as handle:
            data = json.load(handle)
        record = ServerRecord(
            data["pid"], data["location"], data["secret"], data["fingerprint"], data["start"]
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(record.pid, int) or not all(
        isinstance(v, str)
        for v in (record.location, record.secret, record.fingerprint, record.start)
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
        options.serve_liveness_timeout_ms,
        options.serve_idle_timeout_ms,
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
    detached
        It is the server process (:func:`main`): a stop that finds a commit still running
        after ``serveLivenessTimeoutMs`` ends the process at once. Otherwise (in a test's
        process) :meth:`close` raises then, leaving the store open.
    """

    def __init__(self, options: SinkOptions, *, detached: bool = False) -> None:
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
        self._detached = detached
        # One commit at a time holds the store (_committing); the others wait for their turn
        # or for a stop. Read with stopped and _last_commit under this one lock, so an idle
        # stop and a commit's admission exclude each other.
        self._turn = threading.Condition()
        self._committing = False
        self._last_commit = time.monotonic()
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
                    ACTION_ALIVE: ("Say the server answers (the sink's own)", self._alive),
                },
            )
            self.location = self.server.start()
            me = ProcessId.of(os.getpid())
            assert me is not None  # this process
            record = ServerRecord(me.pid, self.location, self._secret, self.fingerprint, me.start)
            write_private_json(os.path.join(self.store.path, SERVER_FILE), record.to_dict())
            if self.settings.announce and options.changelog is not None:
                self.announcer = self._announce()
        except BaseException:
            self.close()
            raise
        self._last_commit = time.monotonic()  # idle from when it serves, not from its start

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
        with self._turn:
            # A commit waiting behind another (a restarted query's, say) leaves at a stop.
            while self._committing and not self.stopped.is_set():
                self._turn.wait()
            if self.stopped.is_set():
                return {STOPPING: True}
            self._committing = True
        try:
            outcome = commit_batch(self.store, StagingArea(self.store.path), batch, self._publisher)
        except BaseException:
            self._renew_publisher()
            raise
        finally:
            with self._turn:
                self._committing = False
                self._last_commit = time.monotonic()
                self._turn.notify_all()
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
        self.stopped.set()  # run() returns, then close() stops the rest
        return {STOPPING: True}

    def _alive(self, body: Mapping[str, Any], client: str) -> dict[str, Any]:
        """The liveness probe of a waiting commit: answered on a gRPC thread, never waiting
        for the commit lock, so a commit in progress does not delay it."""
        self._check_secret(body)
        with self._turn:
            committing, stopping = self._committing, self.stopped.is_set()
        return {"pid": os.getpid(), "committing": committing, STOPPING: stopping}

    # -- running ----------------------------------------------------------------------------
    def run(self, watch: ProcessId | None) -> None:
        """Serve until stopped, until ``watch`` (the Spark driver JVM) is gone, or until
        ``serveIdleTimeoutMs`` pass without a commit."""
        from spark_statestore.connectors.spark.detached import wait_until_stopped

        wait_until_stopped(self.stopped, watch, "the sink's store server", also=self._idle)

    def _idle(self) -> bool:
        """Whether no commit came for ``serveIdleTimeoutMs``; then it stops taking commits
        (atomically with :meth:`_commit`'s check, so none starts after this)."""
        idle_s = self.options.serve_idle_timeout_ms / 1000
        if idle_s <= 0:
            return False
        with self._turn:
            if self._committing or time.monotonic() - self._last_commit < idle_s:
                return False
            self.stopped.set()
            self._turn.notify_all()
        _log.info(
            "the sink's store server of %s: no commit for %g s (option 'serveIdleTimeoutMs'): "
            "stopping; the next commit starts a new one",
            self.store.path,
            idle_s,
        )
        return True

    def close(self) -> None:
        """Withdraw the announcement, wait for a commit in progress (up to
        ``serveLivenessTimeoutMs``), stop serving, close the publisher and the store.

        Raises
        ------
        SinkError
            If a commit still runs after the wait (not in the server process, which exits
            at once then: see ``detached``); the store stays open.
        """
        with self._turn:
            self.stopped.set()
            self._turn.notify_all()  # commits waiting for their turn leave now
        if self.announcer is not None:
            self.announcer.close()
            self.announcer = None
        # Flight still serves meanwhile: the commit's reply reaches its commit process, and
        # its liveness probes are answered, so it does not kill this server for hanging.
        # Once stopped, no commit starts: the store is this thread's after the wait.
        wait_s = self.options.serve_liveness_timeout_ms / 1000
        with self._turn:
            if not self._turn.wait_for(lambda: not self._committing, timeout=wait_s):
                self._abandon(wait_s)
        # The record first: no commit process finds this server once it stops serving.
        record = read_server_record(self.store.path)
        if record is not None and record.pid == os.getpid():
            os.unlink(os.path.join(self.store.path, SERVER_FILE))
        server = getattr(self, "server", None)
        if server is not None:
            server.close()
        if self._publisher is not None:
            self._publisher.close()
            self._publisher = None
        self.store.close()

    def _abandon(self, waited_s: float) -> None:
        """A stop found a commit still running after ``waited_s``: leave it to the store's
        recovery. In the server process that means exiting now, as a SIGKILL would: the
        kernel frees the store's lock, the next open completes or discards the commit, the
        next producer fences its Kafka transaction."""
        from spark_statestore.connectors.spark.errors import SinkError

        message = (
            f"the sink's store server of {self.store.path}: a commit still runs {waited_s:g} s "
            "after the server was asked to stop (option 'serveLivenessTimeoutMs'); leaving it "
            "to the store's recovery on its next open"
        )
        if not self._detached:
            raise SinkError(message)
        _log.error("%s: exiting now (code %d)", message, EXIT_ABANDONED)
        logging.shutdown()
        os._exit(EXIT_ABANDONED)


def main() -> int:
    """The server process (see
    :func:`~spark_statestore.connectors.spark.detached.serve_detached`): its start request
    holds the sink's options; it answers ``{"ready": location}``."""
    from spark_statestore.connectors.spark.detached import serve_detached
    from spark_statestore.connectors.spark.options import parse_sink_options

    def start(request: dict[str, Any]) -> LeaderServer:
        options = parse_sink_options(request["options"], streaming=request["streaming"])
        return LeaderServer(options, detached=True)

    def ready(server: Any) -> dict[str, Any]:
        return {"ready": server.location}

    return serve_detached("sink store server", start, ready)
