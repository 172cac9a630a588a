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

It says what it does to an operator: with option ``metricsPort`` it serves the sink's
metrics (its commits, its store, its Flight server; see
:mod:`~spark_statestore.metrics.sink_metrics`) and records their URL in its record, and
:meth:`LeaderServer.health` is RUNNING while it takes commits, FAILED after a failed commit
until one succeeds.

The commit actions carry a secret the server draws and writes owner-only into
``<store>/_sink_server.json`` (with its pid, location and the options it was started with;
:mod:`.protocol`): the store's read token (which may be shared with routers on other hosts)
does not let anyone commit.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from spark_statestore.connectors.spark.driver import ProcessId

# The protocol's names were first defined here: they stay importable from here.
from spark_statestore.connectors.spark.leader.protocol import (
    ACTION_ALIVE,
    ACTION_COMMIT,
    ACTION_STOP,
    SERVER_FILE,
    STOPPING,
    ServerRecord,
    batch_from_json,
    fingerprint,
    read_server_record,
)
from spark_statestore.connectors.spark.leader.protocol import LOG_FILE as LOG_FILE
from spark_statestore.connectors.spark.leader.protocol import batch_to_json as batch_to_json
from spark_statestore.health import Health, HealthState

if TYPE_CHECKING:
    from spark_statestore.connectors.kafka.discovery import ReplicaAnnouncer
    from spark_statestore.connectors.spark.options import SinkOptions
    from spark_statestore.metrics import MetricsServer
    from spark_statestore.query import LagInfo
    from spark_statestore.sink.commit import BatchToCommit

__all__ = ["LeaderServer", "main"]

_log = logging.getLogger(__name__)

EXIT_ABANDONED = 75
"""The exit code of a server that stopped with a commit still running (left to the store's
recovery)."""


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
        from spark_statestore.sink.stats import SinkStats
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
        self.metrics: MetricsServer | None = None
        self.stats = SinkStats()
        """What its commits did (counted by the commit protocol and the publisher)."""
        self._health = Health(HealthState.CREATED)
        self._publisher = changelog_publisher(options, self.stats)
        # The driver's store host, when the commits name one: it publishes the changelog
        # (while the tasks stage), so this server's own producer never starts.
        self._host_publisher: Any = None
        self._host: tuple[Any, str] | None = None
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
                health_provider=self.health,
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
            self.metrics = self._metrics()
            me = ProcessId.of(os.getpid())
            assert me is not None  # this process
            record = ServerRecord(
                me.pid,
                self.location,
                self._secret,
                self.fingerprint,
                me.start,
                None if self.metrics is None else self.metrics.url,
            )
            write_private_json(os.path.join(self.store.path, SERVER_FILE), record.to_dict())
            if self.settings.announce and options.changelog is not None:
                self.announcer = self._announce()
        except BaseException:
            self.close()
            raise
        self._health = Health(HealthState.RUNNING)
        self._last_commit = time.monotonic()  # idle from when it serves, not from its start

    def _metrics(self) -> MetricsServer | None:
        """The sink's metrics endpoint (option ``metricsPort``), or None: its commits, its
        store and its Flight server."""
        if self.options.metrics is None:
            return None
        from spark_statestore.metrics import SinkMetrics
        from spark_statestore.metrics.owner import serve_owner_metrics

        return serve_owner_metrics(
            lambda registry: SinkMetrics(self.stats, str(self.store.path), registry),
            self.server,
            self.options.metrics,
            what=f"the sink's store server of {self.store.path}",
            health=self.health,
        )

    def health(self) -> Health:
        """The health of the sink's store now: RUNNING while it serves and takes commits,
        FAILED (with the batch and the error) after a failed commit until a later one
        succeeds, STOPPED once it stopped."""
        from dataclasses import replace

        counters = self.stats.counters()
        details = {
            "commit_seq": self.store.metadata.commit_seq,
            "batches_committed": sum(counters.batches.values()),
            "commits_failed": sum(counters.failures.values()),
        }
        return replace(self._health, details={**self._health.details, **details})

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
            outcome = commit_batch(
                self.store,
                StagingArea(self.store.path),
                batch,
                self._publisher_for(body.get("host")),
                stats=self.stats,
            )
        except BaseException as exc:
            self._health = _failed(batch, exc)
            self._renew_publisher()
            raise
        else:
            if self._health.state is not HealthState.RUNNING:
                self._health = Health(HealthState.RUNNING)
        finally:
            with self._turn:
                self._committing = False
                self._last_commit = time.monotonic()
                self._turn.notify_all()
        return {"outcome": outcome.value, "position": self.store.metadata.position.to_dict()}

    def _publisher_for(self, host: Any) -> Any:
        """The publisher of a commit: through the store host its body names, else this
        server's own."""
        from spark_statestore.connectors.spark.host.record import commit_ref_from_json

        named = commit_ref_from_json(host)
        if named is None or self._publisher is None:
            return self._publisher
        if self._host != named:
            from spark_statestore.connectors.spark.leader.store import changelog_publisher

            if self._host_publisher is not None:
                self._host_publisher.close()
            self._host_publisher = changelog_publisher(self.options, self.stats, host=named)
            self._host = named
        return self._host_publisher

    def _renew_publisher(self) -> None:
        """After a failed commit, a fresh producer: the old one's transaction state is
        unknown (a fatal error leaves it unusable)."""
        from spark_statestore.connectors.spark.leader.store import changelog_publisher

        if self._publisher is not None:
            self._publisher.close()
            self._publisher = changelog_publisher(self.options, self.stats)

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
        self._health = Health(HealthState.STOPPED, "the sink's store server stopped")
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
        if self.metrics is not None:
            self.metrics.close()
        server = getattr(self, "server", None)
        if server is not None:
            server.close()
        if self._publisher is not None:
            self._publisher.close()
            self._publisher = None
        if self._host_publisher is not None:
            self._host_publisher.close()
            self._host_publisher = None
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


def _failed(batch: BatchToCommit, error: BaseException) -> Health:
    """The health of a server whose commit of ``batch`` raised ``error``."""
    from spark_statestore.errors import StateStoreError

    reason = " ".join(str(error).split()) or type(error).__name__
    if not isinstance(error, StateStoreError):
        reason = f"{type(error).__name__}: {reason}"
    return Health(
        HealthState.FAILED,
        f"batch {batch.batch_id} of query {batch.query_id} failed: {reason}",
        details={"failed_batch_id": batch.batch_id, "failed_query_id": batch.query_id},
    )


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
