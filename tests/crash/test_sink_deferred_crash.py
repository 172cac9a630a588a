"""The sink without a changelog under SIGKILL: its commits are promises the store keeps
(spark_statestore/store/deferred.py), applied on the commit process's closing thread while
Spark goes on.

A Spark application (:mod:`tests.crash.sink_child` without a changelog: driver, JVM, Python
workers) over three input files, one micro-batch each, is

* killed whole at ``store.deferred`` in its first batch: the promise is written, Spark's commit
  log is not; the next open of the store (here the test's own read) applies the promise, and
  the restarted query's commit skips the batch Spark replays;
* or left running while its commit process alone is killed on its closing thread at
  ``store.deferred_apply`` (a crash file it claims): the query goes on (or fails and is run
  again), and the next commit's open applies the promise.

Then the query is run until it has committed every file, and the store must be exactly the
fold of the input: every key's last value, one store commit per Spark batch (a promise applied
twice or lost would show), the last batch's commit record, no promise left. Real kills of the
real processes; the same steps without Spark, at every point, are in
tests/unit/test_store_deferred.py (CI); these run in ``make soak``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from spark_statestore.store import Store
from spark_statestore.store.crash import CRASH_AT, CRASH_FILE, CRASH_PGID
from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.beside, pytest.mark.soak]

FILES = 3
ROWS = 400
KEYS = 37
RUN_TIMEOUT_S = 300.0


def _write_input(directory: Path) -> dict[bytes, bytes]:
    """Three JSON files of upserts, one per micro-batch (maxFilesPerTrigger=1, in the order of
    their modification times); the fold they make."""
    directory.mkdir()
    fold: dict[bytes, bytes] = {}
    for number in range(FILES):
        lines = []
        for row in range(ROWS):
            key, value = f"k{(row * 7 + number) % KEYS}", f"{number}-{row}"
            offset = number * ROWS + row
            lines.append(
                json.dumps(
                    {"key": key, "value": value, "topic": "in", "partition": 0, "offset": offset}
                )
            )
            fold[key.encode()] = value.encode()
        path = directory / f"{number}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (1_700_000_000 + number, 1_700_000_000 + number))
    return fold


def _run(root: Path, *, crash_at: str | None = None, crash_file: Path | None = None) -> int:
    """One run of the query (until every file is committed, or its death); its exit code."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYSPARK_PYTHON=sys.executable)
    for name in (CRASH_AT, CRASH_PGID, CRASH_FILE):
        env.pop(name, None)
    if crash_at is not None:
        env[CRASH_AT] = crash_at
    if crash_file is not None:
        env[CRASH_FILE] = str(crash_file)
    command = [
        *(sys.executable, "-m", "tests.crash.sink_child"),
        *(str(root / "in"), str(root / "store"), str(root / "cp"), "-", "-", "-"),
    ]
    with open(root / f"run-{len(list(root.glob('run-*')))}.log", "w") as log:
        done = subprocess.run(
            command,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
            env=env,
            timeout=RUN_TIMEOUT_S,
        )
    return done.returncode


def _run_to_the_end(root: Path) -> None:
    for _ in range(3):  # a query that failed on its dead commit process is run again
        if _run(root) == 0:
            return
    pytest.fail(f"the query never finished; see {root}/run-*.log")


def _check_fold(root: Path, fold: dict[bytes, bytes]) -> None:
    commits = sorted(int(n) for n in os.listdir(root / "cp" / "commits") if n.isdigit())
    assert commits == list(range(FILES)), commits
    with Store.open(root / "store") as store:
        assert store.pending_commit is None
        with store.snapshot() as snapshot:
            assert dict(snapshot.items()) == fold
        meta = store.metadata
        assert meta.commit_record is not None and meta.commit_record.batch_id == FILES - 1
        assert meta.commit_seq == FILES  # each batch applied once
        assert meta.position.to_dict() == {"in": {"0": FILES * ROWS - 1}}


def test_the_application_killed_after_a_promise(tmp_path: Path) -> None:
    fold = _write_input(tmp_path / "in")
    assert _run(tmp_path, crash_at="store.deferred") == -signal.SIGKILL
    with Store.open(tmp_path / "store") as store:  # the promise, applied by this open
        assert store.metadata.commit_record is not None
        assert store.metadata.commit_record.batch_id == 0
    assert not (tmp_path / "cp" / "commits" / "0").exists()  # Spark never knew
    _run_to_the_end(tmp_path)
    _check_fold(tmp_path, fold)


def test_the_commit_process_killed_while_it_applies(tmp_path: Path) -> None:
    fold = _write_input(tmp_path / "in")
    crash_file = tmp_path / "crash"
    crash_file.write_text("store.deferred_apply")
    if _run(tmp_path, crash_file=crash_file) != 0:
        _run_to_the_end(tmp_path)
    fired = list(tmp_path.glob("crash.fired.*"))
    assert fired, "no process reached store.deferred_apply"
    _check_fold(tmp_path, fold)
