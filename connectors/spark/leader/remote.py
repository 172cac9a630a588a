"""The commit process's side of the sink's store server: find it or start it, commit through
it, stop it.

A commit with option ``serve`` sends its batch to the live server of the store
(:func:`commit_through_server`): the one whose pid owns the store and wrote
``_sink_server.json``. When there is none, it starts one (a detached process in a session of
its own, so that it outlives the commit process, watching the Spark driver JVM) and waits for
its handshake: ``{"ready": location}`` once it serves, or ``{"error": ...}``. A server started
with other options is stopped first. A commit without ``serve`` stops a server an earlier
``serve`` run left, then commits itself (:func:`stop_sink_server`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

from spark_statestore.connectors.spark.errors import SinkError
from spark_statestore.connectors.spark.leader.server import (
    ACTION_COMMIT,
    ACTION_STOP,
    LOG_FILE,
    ServerRecord,
    batch_to_json,
    fingerprint,
    read_server_record,
)
from spark_statestore.connectors.spark.processes import ProcessId, spark_jvm

if TYPE_CHECKING:
    from spark_statestore.connectors.spark.options import SinkOptions
    from spark_statestore.serve.client import StoreClient
    from spark_statestore.sink.commit import BatchToCommit, CommitOutcome

__all__ = ["commit_through_server", "live_server", "stop_sink_server"]

_log = logging.getLogger(__name__)

START_TIMEOUT_S = 300.0
"""How long a new server may take to open the store (it may wait for a reader to finish)."""
COMMIT_TIMEOUT_S = 24 * 3600.0
"""A commit's reply may take as long as the batch's commit: Spark waits for it anyway."""
STOP_TIMEOUT_S = 60.0
EXIT_WAIT_S = 5.0
"""After a failed commit call, how long the server's exit is awaited before the failure is
taken as the server's own answer."""


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


def commit_through_server(
    options: SinkOptions, batch: BatchToCommit, *, streaming: bool, raw_options: dict[str, str]
) -> CommitOutcome:
    """Commit ``batch`` through the store's server, starting it when none runs.

    A server that dies during the call (its store lock is free again) is replaced once and
    the batch sent again: the new server's open completes or discards the interrupted store
    commit, and :func:`~spark_statestore.sink.commit.commit_batch` skips a batch the store
    has or rolls it forward from the changelog, so the batch still lands exactly once.

    Raises
    ------
    SinkError
        When the server cannot start, refuses or fails the commit, or dies twice (Spark
        fails the batch; the restarted query commits it again, exactly once).
    """
    from spark_statestore.errors import StateStoreError
    from spark_statestore.sink.commit import CommitOutcome
    from spark_statestore.store.ownership import wait_for_exit

    path = os.path.abspath(options.path)
    wanted = fingerprint(options)
    driver = spark_jvm()
    for attempt in (1, 2):
        if driver is not None and not driver.alive():  # the application died meanwhile
            raise SinkError(
                f"batch {batch.batch_id} of query {batch.query_id}: the Spark driver (pid "
                f"{driver.pid}) is gone; the restarted query commits the batch exactly once"
            )
        record = live_server(path)
        if record is not None and record.fingerprint != wanted:
            _log.info("the sink's store server of %s runs with other options: restarting", path)
            stop_sink_server(path)
            record = None
        if record is None:
            record = _start(options, driver, streaming=streaming, raw_options=raw_options)
        body = {"secret": record.secret, "fingerprint": wanted, **batch_to_json(batch)}
        try:
            with _client(path, record, COMMIT_TIMEOUT_S) as client:
                reply = client.call(ACTION_COMMIT, body)
            return CommitOutcome(reply.get("outcome"))
        except StateStoreError as exc:
            # A server that died answers with whatever error its closed connection gave; one
            # that lives gave a real answer (a refusal, a failed commit): that is final.
            if attempt == 1 and wait_for_exit(record.pid, EXIT_WAIT_S):
                _log.warning(
                    "the sink's store server of %s (pid %d) went away during the commit of "
                    "batch %d (%s): committing it again through a new one",
                    path,
                    record.pid,
                    batch.batch_id,
                    exc,
                )
                continue
            failure: StateStoreError = exc
        raise SinkError(
            f"batch {batch.batch_id} of query {batch.query_id}: the sink's store server of "
            f"{path} (pid {record.pid}) did not commit it: {failure}. Spark fails the batch; "
            f"a restarted query commits it exactly once (see {os.path.join(path, LOG_FILE)})"
        ) from failure
    raise AssertionError("unreachable")


def stop_sink_server(path: str, *, timeout_s: float = STOP_TIMEOUT_S) -> bool:
    """Stop the sink's store server of the store at ``path`` and wait until it has released
    the store; False when none runs.

    Raises
    ------
    SinkError
        If it still owns the store after ``timeout_s``.
    """
    from spark_statestore.errors import StateStoreError
    from spark_statestore.serve.errors import ServerUnavailableError
    from spark_statestore.store.ownership import wait_for_release

    path = os.path.abspath(path)
    record = live_server(path)
    if record is None:
        return False
    try:
        with _client(path, record, STOP_TIMEOUT_S) as client:
            client.call(ACTION_STOP, {"secret": record.secret})
    except ServerUnavailableError:
        pass  # it is going away already
    except StateStoreError as exc:
        raise SinkError(
            f"cannot stop the sink's store server of {path} (pid {record.pid}): {exc}; stop "
            "that process (SIGTERM)"
        ) from exc
    # Not until live_server() says None: the server removes its record before it closes the
    # store, and its close waits for a commit in progress. What the caller needs is the lock.
    if not wait_for_release(path, record.pid, timeout_s):
        raise SinkError(
            f"the sink's store server of {path} (pid {record.pid}) still owns the store "
            f"{timeout_s:.0f} s after it was asked to stop; stop that process (SIGTERM)"
        )
    return True


def _start(
    options: SinkOptions,
    driver: ProcessId | None,
    *,
    streaming: bool,
    raw_options: dict[str, str],
) -> ServerRecord:
    """Start a server for the store, watching ``driver``, and wait for its handshake."""
    from spark_statestore.store.files import make_private_dir, open_private

    path = os.path.abspath(options.path)
    make_private_dir(path)
    log_path = os.path.join(path, LOG_FILE)
    log = open_private(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    request = {
        "options": raw_options,
        "streaming": streaming,
        "watch": None if driver is None else [driver.pid, driver.start],
    }
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "spark_statestore.connectors.spark.leader"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,  # outlives this commit process and its process group
            close_fds=True,
        )
    finally:
        os.close(log)
    assert process.stdin is not None and process.stdout is not None
    with contextlib.suppress(BrokenPipeError):
        process.stdin.write(json.dumps(request).encode() + b"\n")
        process.stdin.close()
    reply = _handshake(process, START_TIMEOUT_S)
    process.stdout.close()
    record = read_server_record(path) if "ready" in reply else None
    if record is not None and record.pid == process.pid:
        _log.info("started the sink's store server of %s (pid %d)", path, process.pid)
        return record
    if "ready" not in reply:  # it failed: maybe another commit's server won the store
        record = live_server(path)
        if record is not None and record.fingerprint == fingerprint(options):
            return record
    raise SinkError(
        f"the sink's store server of {path} did not start: {reply.get('error', reply)} "
        f"(its log: {log_path})"
    )


def _handshake(process: subprocess.Popen[bytes], timeout_s: float) -> dict[str, Any]:
    """The server's first line on stdout, decoded; its exit or a timeout as an error."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            process.kill()
            return {"error": f"no answer within {timeout_s:.0f} s (killed it)"}
        ready, _, _ = select.select([process.stdout], [], [], left)
        if not ready:
            continue
        chunk = os.read(process.stdout.fileno(), 4096)
        if not chunk:
            code = process.wait()
            return {"error": f"it exited with code {code} before it served"}
        line += chunk
    try:
        reply = json.loads(line)
    except ValueError:
        reply = None
    return reply if isinstance(reply, dict) else {"error": f"bad handshake {line[:200]!r}"}
