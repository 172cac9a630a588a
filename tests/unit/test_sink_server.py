"""The sink's store server without Spark or Kafka: commits through its Flight action, who may
commit or stop it, its lifetime, and starting it as a process from a commit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from spark_statestore.connectors.spark.driver import ProcessId
from spark_statestore.connectors.spark.errors import SinkError
from spark_statestore.connectors.spark.leader.remote import (
    commit_through_server,
    live_server,
    stop_sink_server,
)
from spark_statestore.connectors.spark.leader.server import (
    ACTION_COMMIT,
    ACTION_STOP,
    LOG_FILE,
    LeaderServer,
    ServerRecord,
    batch_to_json,
    read_server_record,
)
from spark_statestore.connectors.spark.options import SinkOptions, parse_sink_options
from spark_statestore.serve.client import connect_to_owner
from spark_statestore.serve.errors import AuthenticationError, BadRequestError
from spark_statestore.sink.commit import BatchToCommit, CommitOutcome
from spark_statestore.sink.staging import StagingArea, staged_schema
from spark_statestore.store import Store
from spark_statestore.store.crash import CRASH_AT, CRASH_FILE, HANG, STOP
from tests.kafka_util import poll_until


def _options(path: Path, **extra: str) -> SinkOptions:
    return parse_sink_options({"path": str(path), "serve": "true", **extra}, streaming=False)


def staged_batch(path: Path, batch_id: int, rows: dict[bytes, bytes | None]) -> BatchToCommit:
    schema = staged_schema()
    columns = {
        "key": list(rows),
        "value": list(rows.values()),
        **{f.name: [None] * len(rows) for f in schema if f.name not in ("key", "value")},
    }
    records = pa.RecordBatch.from_pydict(columns, schema=schema)
    staged = StagingArea(path).stage("tour-app", batch_id, 0, 0, [records])
    return BatchToCommit("tour-app", batch_id, [staged], None, False)


def _content(path: Path) -> dict[bytes, bytes]:
    with Store.open(path) as store, store.snapshot() as snapshot:
        return dict(snapshot.items())


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LeaderServer]:
    made = LeaderServer(_options(tmp_path / "store"))
    yield made
    made.close()


def test_commits_through_the_server_are_exactly_once_and_visible_to_readers(
    server: LeaderServer, tmp_path: Path
) -> None:
    path = tmp_path / "store"
    record = read_server_record(str(path))
    assert record is not None and record.pid == os.getpid()
    assert live_server(str(path)) == record
    client = connect_to_owner(path)
    assert client is not None
    with client:
        batch = staged_batch(path, 0, {b"a": b"1", b"b": b"2"})
        body = {"secret": record.secret, "fingerprint": record.fingerprint, **batch_to_json(batch)}
        assert client.call(ACTION_COMMIT, body)["outcome"] == CommitOutcome.COMMITTED.value
        assert client.call(ACTION_COMMIT, body)["outcome"] == CommitOutcome.SKIPPED.value
        # The read token lets a reader read, not commit or stop: the secret is the sink's.
        refused = [
            (ACTION_COMMIT, {**body, "secret": "x" * 43}),
            (ACTION_COMMIT, {**body, "secret": "é" + record.secret[1:]}),  # not ASCII
            (ACTION_STOP, {}),
        ]
        for name, wrong in refused:
            with pytest.raises(AuthenticationError, match="takes commits only from its sink"):
                client.call(name, wrong)
        assert not server.stopped.is_set()
        with pytest.raises(BadRequestError, match="runs with other options"):
            client.call(ACTION_COMMIT, {**body, "fingerprint": "other"})
        escaping = {**body, "batch_id": 1}
        escaping["staged"] = [{**body["staged"][0], "name": "../../x/part-0.arrow"}]
        with pytest.raises(BadRequestError, match="not a staged file's name"):
            client.call(ACTION_COMMIT, escaping)
    assert server.store.metadata.commit_record.batch_id == 0  # type: ignore[union-attr]
    with server.store.snapshot() as snapshot:
        assert dict(snapshot.items()) == {b"a": b"1", b"b": b"2"}


def test_the_server_stops_on_its_action_or_when_the_watched_process_is_gone(
    server: LeaderServer, tmp_path: Path
) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=-1)
    watched = ProcessId.of(child.pid)
    assert watched is not None and watched.alive()
    done = threading.Event()
    runner = threading.Thread(target=lambda: (server.run(watched), done.set()))
    runner.start()
    assert not done.wait(1.0)  # it serves while the process lives
    assert child.stdin is not None
    child.stdin.close()
    child.wait()
    runner.join(30)
    assert done.is_set() and not watched.alive()
    server.close()
    assert live_server(str(tmp_path / "store")) is None
    assert read_server_record(str(tmp_path / "store")) is None
    assert _content(tmp_path / "store") == {}  # the store is free again


def test_a_server_stops_by_itself_after_its_idle_timeout_without_commits(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store"
    server = LeaderServer(_options(path, serveIdleTimeoutMs="1000"))
    try:
        record = read_server_record(str(path))
        assert record is not None
        client = connect_to_owner(path)
        assert client is not None
        with client:
            batch = staged_batch(path, 0, {b"k": b"v"})
            body = {"secret": record.secret, "fingerprint": record.fingerprint}
            client.call(ACTION_COMMIT, {**body, **batch_to_json(batch)})
        committed = time.monotonic()
        server.run(None)  # returns by itself: no stop, no driver to watch
        idled = time.monotonic() - committed
        # The idle time counts from the last commit.
        assert server.stopped.is_set() and 1.0 <= idled < BOUND_S / 4, idled
    finally:
        server.close()
    assert live_server(str(path)) is None
    assert _content(path) == {b"k": b"v"}  # the store is free


def test_stopping_the_server_returns_once_the_store_is_free(
    server: LeaderServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server removes _sink_server.json, then closes the store (after a commit in
    # progress): a stop that returned in between left a plain open to fail on the lock.
    path = tmp_path / "store"
    stop_returned = threading.Event()
    returned_while_held: list[bool] = []
    close_store = server.store.close

    def close_store_later() -> None:
        returned_while_held.append(stop_returned.wait(1.0))
        close_store()

    monkeypatch.setattr(server.store, "close", close_store_later)
    runner = threading.Thread(target=lambda: (server.run(None), server.close()))
    runner.start()
    try:
        assert stop_sink_server(str(path))
        stop_returned.set()
    finally:
        runner.join(30)
    assert returned_while_held == [False]
    assert _content(path) == {}  # a plain open right after the stop takes the store


def test_a_commit_starts_the_server_process_and_a_plain_commit_takes_over(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store"
    options = _options(path)
    try:
        outcome = commit_through_server(
            options,
            staged_batch(path, 0, {b"k": b"v"}),
            streaming=False,
            raw_options=dict(options.raw),
        )
        assert outcome is CommitOutcome.COMMITTED
        first = live_server(str(path))
        assert first is not None and first.pid != os.getpid()
        outcome = commit_through_server(
            options,
            staged_batch(path, 1, {b"k": None}),
            streaming=False,
            raw_options=dict(options.raw),
        )
        assert outcome is CommitOutcome.COMMITTED and live_server(str(path)) == first
        # Other options: the server is restarted with them.
        other = _options(path, announce="false")
        commit_through_server(
            other, staged_batch(path, 2, {b"j": b"w"}), streaming=False, raw_options=dict(other.raw)
        )
        second = live_server(str(path))
        assert second is not None and second.pid != first.pid
    finally:
        stopped = stop_sink_server(str(path))
    assert stopped and live_server(str(path)) is None
    assert _content(path) == {b"j": b"w"}


def test_a_server_killed_during_a_commit_is_replaced_and_the_batch_lands_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store"
    # A commit over 1 byte is applied in chunks under a redo marker, where the server dies.
    options = _options(path, **{"uncommitted.max.bytes": "1"})
    raw = dict(options.raw)
    try:
        commit_through_server(
            options, staged_batch(path, 0, {b"a": b"1"}), streaming=False, raw_options=raw
        )
        first = live_server(str(path))
        assert first is not None
        stop_sink_server(str(path))
        with monkeypatch.context() as patched:  # only the servers started here inherit it
            patched.setenv(CRASH_AT, "redo.marked")
            outcome = commit_through_server(
                options,
                staged_batch(path, 1, {b"a": b"2", b"b": b"3"}),
                streaming=False,
                raw_options=raw,
            )
        # The first server died at the marker; the second completed its commit on open.
        assert outcome is CommitOutcome.SKIPPED
        second = live_server(str(path))
        assert second is not None and second.pid != first.pid
    finally:
        stop_sink_server(str(path))
    assert _content(path) == {b"a": b"2", b"b": b"3"}
    assert "went away during the commit of batch 1" in caplog.text


def test_a_server_that_cannot_start_says_why_and_where_its_log_is(tmp_path: Path) -> None:
    path = tmp_path / "store"
    options = _options(path, servePort="1")  # a privileged port, taken or refused
    if os.geteuid() == 0:
        blocker = LeaderServer(_options(tmp_path / "other", servePort="0"))
        port = int(blocker.location.rsplit(":", 1)[1])
        options = _options(path, servePort=str(port))
    else:
        blocker = None
    try:
        with pytest.raises(SinkError, match=r"did not start: .*_sink_server\.log"):
            commit_through_server(
                options,
                staged_batch(path, 0, {b"k": b"v"}),
                streaming=False,
                raw_options=dict(options.raw),
            )
    finally:
        if blocker is not None:
            blocker.close()
    assert live_server(str(path)) is None


def test_a_process_is_killed_only_while_its_pid_is_still_that_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=-1)
    try:
        process = ProcessId.of(child.pid)
        assert process is not None
        # The same pid with another start time: a later process that got the pid. Spared.
        assert not ProcessId(child.pid, str(int(process.start) + 1)).kill(5.0)
        assert child.poll() is None
        os.kill(child.pid, signal.SIGSTOP)  # a stopped process dies too
        assert process.kill(30.0)
        assert child.wait(30) == -signal.SIGKILL
        assert not process.alive() and not process.kill(5.0)  # gone: nothing to kill
    finally:
        child.kill()
        child.wait()


# -- a server that hangs ----------------------------------------------------------------------
LIVENESS_MS = 1000
"""The hung-server tests' ``serveLivenessTimeoutMs``: small, so they take seconds."""
BOUND_S = 60.0
"""What the tests wait at most for what should take about the liveness timeout; without the
liveness checks it would take a day, or forever."""


@pytest.fixture
def crash_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The crash file of the sink store servers started by this test (they inherit it)."""
    armed = tmp_path / "crash"
    monkeypatch.setenv(CRASH_FILE, str(armed))
    monkeypatch.delenv(CRASH_AT, raising=False)
    return armed


def _fired(armed: Path) -> int:
    """The pid of the process that claimed the crash file, once one has: it stopped or
    hangs there."""
    found = poll_until(
        lambda: next(iter(armed.parent.glob(f"{armed.name}.fired.*")), None),
        timeout_s=BOUND_S,
        interval_s=0.01,
        failure=lambda: f"no server reached the point armed in {armed}",
    )
    return int(found.name.rsplit(".", 1)[1])


def _served_once(path: Path) -> tuple[SinkOptions, ServerRecord]:
    """The options of the hung-server tests and the server that committed batch 0 with
    them. Over 1 byte a commit is applied in chunks under a redo marker (where the tests
    stop the server or hang its commit): the next open of the store completes it."""
    options = _options(
        path, **{"uncommitted.max.bytes": "1", "serveLivenessTimeoutMs": str(LIVENESS_MS)}
    )
    batch = staged_batch(path, 0, {b"a": b"1"})
    commit_through_server(options, batch, streaming=False, raw_options=dict(options.raw))
    server = live_server(str(path))
    assert server is not None
    return options, server


def _stop_servers(path: Path, first: ServerRecord | None) -> None:
    """No server of the test outlives it: the one stopped or hung at the crash point (that
    process: its pid and start time; gone already when the test passed), then the live one."""
    if first is not None:
        first.process.kill(BOUND_S)
    stop_sink_server(str(path))


def _commit_in_background(
    options: SinkOptions, batch: BatchToCommit
) -> tuple[threading.Thread, list[CommitOutcome | BaseException]]:
    """Commit ``batch`` through the server in a thread (a commit process of its own)."""
    results: list[CommitOutcome | BaseException] = []

    def commit() -> None:
        try:
            results.append(
                commit_through_server(
                    options, batch, streaming=False, raw_options=dict(options.raw)
                )
            )
        except BaseException as exc:
            results.append(exc)

    committer = threading.Thread(target=commit, name="commit", daemon=True)
    committer.start()
    return committer, results


def test_a_server_stopped_mid_commit_is_killed_and_replaced_and_the_batch_lands_once(
    tmp_path: Path, crash_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store"
    first: ServerRecord | None = None
    try:
        options, first = _served_once(path)
        crash_file.write_text(f"{STOP} redo.marked")
        started = time.monotonic()
        committer, results = _commit_in_background(
            options, staged_batch(path, 1, {b"a": b"2", b"b": b"3"})
        )
        assert _fired(crash_file) == first.pid
        committer.join(BOUND_S)
        took = time.monotonic() - started
        assert not committer.is_alive(), (
            f"the commit still waits on a stopped server after {took:.0f} s"
        )
        # The stopped server was killed; a new one completed its commit when it opened the
        # store, so the re-sent batch was skipped.
        assert results == [CommitOutcome.SKIPPED]
        assert not first.process.alive()
        second = live_server(str(path))
        assert second is not None and second.pid != first.pid
        assert took < BOUND_S / 4, f"the hung server was replaced only after {took:.1f} s"
    finally:
        _stop_servers(path, first)
    assert _content(path) == {b"a": b"2", b"b": b"3"}
    assert f"did not answer for {LIVENESS_MS / 1000:g} s" in caplog.text


def test_stopping_a_server_whose_commit_hangs_returns_and_the_batch_lands_once(
    tmp_path: Path, crash_file: Path
) -> None:
    path = tmp_path / "store"
    first: ServerRecord | None = None
    try:
        options, first = _served_once(path)
        # The commit thread hangs; the server still answers (so no commit process kills it).
        crash_file.write_text(f"{HANG} redo.marked")
        batch = staged_batch(path, 1, {b"a": b"2", b"b": b"3"})
        committer, results = _commit_in_background(options, batch)
        assert _fired(crash_file) == first.pid
        # A restarted query sends the batch again: its commit waits behind the hung one.
        restarted, restarted_results = _commit_in_background(options, batch)
        started = time.monotonic()
        assert stop_sink_server(str(path), timeout_s=BOUND_S)
        took = time.monotonic() - started
        # It waited for the commit as long as a commit process waits for an answer, then
        # exited as if killed, leaving the commit to the store's recovery.
        assert took < BOUND_S / 4, f"the stop took {took:.1f} s"
        assert not first.process.alive()
        log = (path / LOG_FILE).read_text()
        assert "a commit still runs" in log, log[-2000:]
        # Both commit processes saw their server go (or stop before it took their batch) and
        # sent the batch to a new one, whose open completed the interrupted commit.
        committer.join(BOUND_S)
        restarted.join(BOUND_S)
        assert results == restarted_results == [CommitOutcome.SKIPPED]
    finally:
        _stop_servers(path, first)
    assert _content(path) == {b"a": b"2", b"b": b"3"}
