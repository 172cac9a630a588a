"""The commit process's side of the sink's store server: find it or start it, commit through
it, stop it.

A commit with option ``serve`` sends its batch to the live server of the store
(:func:`commit_through_server`): the one whose pid owns the store and wrote
``_sink_server.json``. When there is none, it starts one (a detached process in a session of
its own, so that it outlives the commit process, watching the Spark driver JVM) and waits for
its handshake: ``{"ready": location}`` once it serves, or ``{"error": ...}``. A server started
with other options is stopped first. A commit without ``serve`` stops a server an earlier
``serve`` run left, then commits itself (:func:`stop_sink_server`).

No wait here is unbounded but a commit's on a server that answers: one that answers nothing
for ``serveLivenessTimeoutMs`` is killed and replaced (:mod:`.liveness`), one that stopped
before the commit began is waited out as long, and one asked to stop that keeps the store
is killed.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from spark_statestore.connectors.spark.detached import start_detached
from spark_statestore.connectors.spark.driver import ProcessId, spark_jvm
from spark_statestore.connectors.spark.errors import SinkError
from spark_statestore.connectors.spark.leader.liveness import (
    KILL_WAIT_S,
    LivenessWatch,
    replace_hung,
)
from spark_statestore.connectors.spark.leader.protocol import (
    ACTION_COMMIT,
    ACTION_STOP,
    LOG_FILE,
    STOPPING,
    ServerRecord,
    batch_to_json,
    fingerprint,
    read_server_record,
)

if TYPE_CHECKING:
    from spark_statestore.connectors.spark.options import SinkOptions
    from spark_statestore.serve.client import StoreClient
    from spark_statestore.sink.commit import BatchToCommit, CommitOutcome

__all__ = ["commit_through_server", "live_server", "stop_sink_server"]

_log = logging.getLogger(__name__)

START_TIMEOUT_S = 300.0
"""How long a new server may take to open the store (it may wait for a reader to finish)."""
COMMIT_TIMEOUT_S = 24 * 3600.0
"""A commit's reply may take as long as the batch's commit, while the server answers its
liveness probes: Spark waits for it anyway."""
STOP_TIMEOUT_S = 60.0
"""How long a stopped server may keep the store before it is killed."""
EXIT_WAIT_S = 5.0
"""After a failed commit call, how long the server's exit is awaited before the failure is
taken as the server's own answer."""
START_LOCK_FILE = "_sink_server.lock"
STOPPING_RETRIES = 2
"""How often a commit goes to a new server because the one it found was stopping (an idle
stop racing the commit), beside the one replacement of a server that died or hung."""


def live_server(path: str) -> ServerRecord | None:
    """The sink's store server of the store at ``path`` when one runs (it owns the store)."""
    from spark_statestore.store.ownership import live_owner

    owner = live_owner(path)
    if owner is None:
        return None
    record = read_server_record(path)
    return record if record is not None and record.pid == owner.pid else None


def _client(path: str, record: ServerRecord, timeout_s: float) -> StoreClient:
    from spark_statestore.serve.client import client_for_store

    return client_for_store(path, record.location, timeout_s=timeout_s)


def _publishing_host(options: SinkOptions) -> dict[str, Any] | None:
    """The driver's store host, for the server to publish through (option
    ``publishWhileStaging``): it publishes a batch while the tasks stage it; None without
    a changelog, a Spark driver or the option."""
    if options.changelog is None or not options.publish_while_staging:
        return None
    from spark_statestore.connectors.spark.host.launch import driver_store_host
    from spark_statestore.connectors.spark.host.record import commit_ref_to_json

    record = driver_store_host()
    return None if record is None else commit_ref_to_json(record)


def commit_through_server(
    options: SinkOptions, batch: BatchToCommit, *, streaming: bool, raw_options: dict[str, str]
) -> CommitOutcome:
    """Commit ``batch`` through the store's server, starting it when none runs.

    A server that dies during the call (its store lock is free again), or hangs (answers
    nothing for ``serveLivenessTimeoutMs``: killed), is replaced once and the batch sent
    again: the new server's open completes or discards the interrupted store commit, and
    :func:`~spark_statestore.sink.commit.commit_batch` skips a batch the store has or rolls
    it forward from the changelog, so the batch still lands exactly once. A server that was
    stopping (asked to, or idle) and did not take the batch is waited out the same way.

    Raises
    ------
    SinkError
        When the server cannot start, refuses or fails the commit, or dies twice (Spark
        fails the batch; the restarted query commits it again, exactly once).
    """
    from spark_statestore.errors import StateStoreError
    from spark_statestore.sink.commit import CommitOutcome

    path = os.path.abspath(options.path)
    wanted = fingerprint(options)
    liveness_s = options.serve_liveness_timeout_ms / 1000
    driver = spark_jvm()
    replaced = stopping = 0
    while True:
        if driver is not None and not driver.alive():  # the application died meanwhile
            raise SinkError(
                f"batch {batch.batch_id} of query {batch.query_id}: the Spark driver (pid "
                f"{driver.pid}) is gone; the restarted query commits the batch exactly once"
            )
        record = _live_or_started(options, driver, streaming=streaming, raw_options=raw_options)
        body = {"secret": record.secret, "fingerprint": wanted, **batch_to_json(batch)}
        host = _publishing_host(options)
        if host is not None:
            body["host"] = host
        watch = LivenessWatch(path, record, liveness_s)
        try:
            with _client(path, record, COMMIT_TIMEOUT_S) as client, watch:
                reply = client.call(ACTION_COMMIT, body)
        except StateStoreError as exc:
            # A server that died answers with whatever error its closed connection gave; one
            # that lives gave a real answer (a refusal, a failed commit): that is final.
            if not replaced and _went_away(path, record, exc, watch, liveness_s):
                _log.warning(
                    "the sink's store server of %s (pid %d) went away during the commit of "
                    "batch %d (%s): committing it again through a new one",
                    path,
                    record.pid,
                    batch.batch_id,
                    exc,
                )
                replaced += 1
                continue
            failure: StateStoreError = exc
        else:
            if reply.get(STOPPING) is not True:
                return CommitOutcome(reply.get("outcome"))
            failure = SinkError("it was stopping and did not take the batch")
            if stopping < STOPPING_RETRIES:
                stopping += 1
                _log.info(
                    "the sink's store server of %s (pid %d) is stopping: committing batch %d "
                    "through a new one",
                    path,
                    record.pid,
                    batch.batch_id,
                )
                # Its stop waits for a commit up to liveness_s itself; then it closes.
                _wait_out(path, record, STOP_TIMEOUT_S)
                continue
        raise SinkError(
            f"batch {batch.batch_id} of query {batch.query_id}: the sink's store server of "
            f"{path} (pid {record.pid}) did not commit it: {failure}. Spark fails the batch; "
            f"a restarted query commits it exactly once (see {os.path.join(path, LOG_FILE)})"
        ) from failure


def _went_away(
    path: str, record: ServerRecord, failure: Exception, watch: LivenessWatch, liveness_s: float
) -> bool:
    """Whether the server of a failed commit call is gone (died, or killed as hung), so that
    a new one may take the batch; False when its failure was its own answer."""
    from spark_statestore.serve.errors import ServerUnavailableError
    from spark_statestore.store.ownership import wait_for_exit

    if watch.killed or wait_for_exit(record.pid, EXIT_WAIT_S):
        return True
    if isinstance(failure, ServerUnavailableError):
        # No answer, yet its process lives: stopping, or hung. Either way it goes.
        _wait_out(path, record, liveness_s)
        return True
    return False


def _wait_out(path: str, record: ServerRecord, timeout_s: float) -> None:
    """Wait up to ``timeout_s`` for a server that stops or answers nothing to exit, then
    kill it."""
    from spark_statestore.store.ownership import wait_for_exit

    if not wait_for_exit(record.pid, timeout_s):
        replace_hung(path, record, f"did not go away within {timeout_s:g} s")


def stop_sink_server(path: str, *, timeout_s: float = STOP_TIMEOUT_S) -> bool:
    """Stop the sink's store server of the store at ``path`` and wait until it has released
    the store; False when none runs.

    A server that does not answer the request, or still owns the store ``timeout_s`` after
    it, is SIGKILLed (its commit in progress is left to the store's recovery, as after a
    crash).

    Raises
    ------
    SinkError
        If it refuses to stop, or owns the store even after the kill.
    """
    from spark_statestore.errors import StateStoreError
    from spark_statestore.serve.errors import ServerUnavailableError
    from spark_statestore.store.ownership import wait_for_release

    path = os.path.abspath(path)
    record = live_server(path)
    if record is None:
        return False
    try:
        with _client(path, record, timeout_s) as client:
            client.call(ACTION_STOP, {"secret": record.secret})
    except ServerUnavailableError:
        pass  # going away already, or hung: the wait below tells
    except StateStoreError as exc:
        if record.process.alive() and live_server(path) == record:
            raise SinkError(
                f"cannot stop the sink's store server of {path} (pid {record.pid}): {exc}; "
                "stop that process (SIGTERM)"
            ) from exc
        # It is closing already (its credentials are gone) or gone.
    # Not until live_server() says None: the server removes its record before it closes the
    # store, and its close waits for a commit in progress. What the caller needs is the lock.
    if wait_for_release(path, record.pid, timeout_s):
        return True
    replace_hung(path, record, f"still owned the store {timeout_s:g} s after it was asked to stop")
    if not wait_for_release(path, record.pid, KILL_WAIT_S):
        raise SinkError(
            f"the sink's store server of {path} (pid {record.pid}) still owns the store "
            f"after it was asked to stop and killed; see {os.path.join(path, LOG_FILE)}"
        )
    return True


def _live_or_started(
    options: SinkOptions,
    driver: ProcessId | None,
    *,
    streaming: bool,
    raw_options: dict[str, str],
) -> ServerRecord:
    """The store's live server with ``options``, started (again) when none runs.

    Commit processes that find no server at once (a restarted query's beside the one it
    replaces, after their server went away) take turns under ``<store>/_sink_server.lock``:
    the first starts a server, the next finds it. Without the turns the second server would
    wait for the store, owned by the first, for minutes.
    """
    import fcntl

    from spark_statestore.store.files import make_private_dir, open_private

    path = os.path.abspath(options.path)
    make_private_dir(path)
    fd = open_private(os.path.join(path, START_LOCK_FILE), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held at most one bounded start (or stop) long
        record = live_server(path)
        if record is not None and record.fingerprint != fingerprint(options):
            _log.info("the sink's store server of %s runs with other options: restarting", path)
            stop_sink_server(path)
            record = None
        if record is None:
            record = _start(options, driver, streaming=streaming, raw_options=raw_options)
        return record
    finally:
        os.close(fd)  # releases the lock


def _start(
    options: SinkOptions,
    driver: ProcessId | None,
    *,
    streaming: bool,
    raw_options: dict[str, str],
) -> ServerRecord:
    """Start a server for the store, watching ``driver``, and wait for its handshake."""
    path = os.path.abspath(options.path)
    log_path = os.path.join(path, LOG_FILE)
    request = {
        "options": raw_options,
        "streaming": streaming,
        "watch": None if driver is None else [driver.pid, driver.start],
    }
    reply, process = start_detached(
        "spark_statestore.connectors.spark.leader", request, log_path, START_TIMEOUT_S
    )
    record = read_server_record(path) if "ready" in reply else None
    if record is not None and record.pid == process.pid:
        metrics = "" if record.metrics_url is None else f", metrics at {record.metrics_url}"
        _log.info("started the sink's store server of %s (pid %d%s)", path, process.pid, metrics)
        return record
    if "ready" not in reply:  # it failed: maybe another commit's server won the store
        record = live_server(path)
        if record is not None and record.fingerprint == fingerprint(options):
            return record
    raise SinkError(
        f"the sink's store server of {path} did not start: {reply.get('error', reply)} "
        f"(its log: {log_path})"
    )
