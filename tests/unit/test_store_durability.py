"""Power-loss durability of commits, checked on the real system calls (strace).

A power cut keeps only what was synced. LevelDB syncs just the log a synced write goes to,
so a chunked commit whose chunks were written unsynced and followed by one synced write
could keep its metadata while chunks in an earlier log were lost. The store now syncs every
spill write and every chunk, and the redo file's directories before the marker. This test
traces a child that makes a chunked commit large enough to switch LevelDB logs, and checks
on the trace, for the redo file and the store:

* before the redo marker is written, every log of the redo file written so far has been
  synced after its last write, or deleted once LevelDB had made its content durable
  elsewhere, and the redo directory and its parent synced;
* before the write that makes the commit visible (the last write to the store's log), the
  same holds for every log of the store;
* and that last write is itself synced before the commit returns.

A log is durable elsewhere once the MANIFEST edit that replaced it by a table is synced:
LevelDB's background thread writes the table, syncs it, appends the edit to the MANIFEST,
syncs the directory and the MANIFEST, and only then installs the edit and deletes the logs
it replaced (``VersionSet::LogAndApply``, then ``DeleteObsoleteFiles``, in LevelDB 1.22).
So a MANIFEST write may still be unsynced when the commit's next write goes out: that
background thread runs beside the commit, and until its sync returns the previous edit
holds, whose logs are all still there to replay (a torn last MANIFEST record is read as
its end). What the trace must show of a MANIFEST is that order: a log deleted while a
MANIFEST write was unsynced stays at risk.

Skipped where strace cannot trace (not installed, or ptrace forbidden).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

_CHILD = r"""
import os, sys
from spark_statestore.store import Role, Store, StoreOptions, StoreSpec

path = sys.argv[1]
spec = StoreSpec(Role.LEADER, "durable-changelog", 4)
options = StoreOptions(uncommitted_max_bytes=2 << 20, chunk_bytes=1 << 20)
with Store.open(path, spec, options=options) as store:
    os.write(2, b"COMMIT-START\n")
    with store.begin() as txn:
        value = b"v" * 1000
        for i in range(14_000):  # about 14 MB: several LevelDB logs in the redo file and store
            txn.put(b"key-%08d" % i, value)
        assert txn.spilled
    os.write(2, b"COMMIT-END\n")
"""

_CALL = re.compile(r"^(\d+)\s+(\w+)\((\d+)<([^>]*)>")
_RESUMED = re.compile(r"^(\d+)\s+<\.\.\. (\w+) resumed>")
_UNLINK = re.compile(r'^(\d+)\s+unlink(?:at)?\((?:[^,]+, )?"([^"]+)"')


@dataclass
class _Trace:
    """Per file: the index of its last write and of its last completed sync, deletions."""

    events: list[tuple[str, str]] = field(default_factory=list)  # (kind, path) in order
    start: int = -1
    end: int = -1


def _parse(text: str) -> _Trace:
    trace = _Trace()
    pending: dict[str, tuple[str, str]] = {}  # pid -> (syscall, path) awaiting "resumed"
    for line in text.splitlines():
        if '"COMMIT-START\\n"' in line:
            trace.start = len(trace.events)
            continue
        if '"COMMIT-END\\n"' in line:
            trace.end = len(trace.events)
            continue
        unlink = _UNLINK.match(line)
        if unlink:
            trace.events.append(("unlink", unlink.group(2)))
            continue
        resumed = _RESUMED.match(line)
        if resumed:
            call = pending.pop(resumed.group(1), None)
            if call is not None and call[0] in ("fsync", "fdatasync"):
                trace.events.append(("sync", call[1]))  # a sync counts once it has returned
            continue
        match = _CALL.match(line)
        if not match:
            continue
        pid, name, path = match.group(1), match.group(2), match.group(4)
        if name in ("write", "pwrite64", "writev"):
            trace.events.append(("write", path))
        elif name in ("fsync", "fdatasync"):
            if "<unfinished ...>" in line:
                pending[pid] = (name, path)
            else:
                trace.events.append(("sync", path))
    return trace


def _logs_at_risk(events: list[tuple[str, str]], prefix: str, upto: int) -> list[str]:
    """Logs under ``prefix`` that a power cut at event ``upto`` could lose: written before
    it, not synced since their last write, and not deleted after a synced MANIFEST edit
    (see the module docstring)."""
    at_risk: dict[str, bool] = {}
    manifests_unsynced: set[str] = set()
    for kind, path in events[:upto]:
        if not path.startswith(prefix):
            continue
        name = os.path.basename(path)
        if name.startswith("MANIFEST-"):
            if kind == "write":
                manifests_unsynced.add(path)
            else:
                manifests_unsynced.discard(path)
        elif name.endswith(".log"):
            if kind == "write":
                at_risk[path] = True
            elif path in at_risk and (
                kind == "sync" or (kind == "unlink" and not manifests_unsynced)
            ):
                at_risk[path] = False
    return sorted(path for path, risky in at_risk.items() if risky)


def _strace() -> str:
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed")
    probe = subprocess.run([strace, "-o", "/dev/null", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"strace cannot trace here: {probe.stderr.decode()[-200:]}")
    return strace


def test_a_chunked_commit_is_synced_in_order(tmp_path: Path) -> None:
    strace = _strace()
    store = tmp_path / "store"
    out = tmp_path / "trace.txt"
    result = subprocess.run(
        [
            strace, "-f", "-y", "-s", "16", "-o", str(out),
            "-e", "trace=write,pwrite64,writev,fsync,fdatasync,unlink,unlinkat",
            sys.executable, "-c", _CHILD, str(store),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    trace = _parse(out.read_text())
    assert 0 <= trace.start < trace.end, "the child's commit markers are not in the trace"
    events = trace.events[trace.start : trace.end]
    root = os.path.realpath(store)  # strace prints resolved paths
    db = f"{root}/db/"
    redo = f"{root}/_redo/"

    store_logs = [i for i, (kind, path) in enumerate(events) if kind == "write" and
                  path.startswith(db) and path.endswith(".log")]  # fmt: skip
    assert store_logs, "the commit never wrote the store's log"
    marker, final = store_logs[0], store_logs[-1]
    redo_logs = {p for k, p in events[:marker] if k == "write" and p.startswith(redo)}
    assert len({p for p in redo_logs if p.endswith(".log")}) > 1, (
        "the redo file never switched logs"
    )
    assert (
        len({p for k, p in events if k == "write" and p.startswith(db) and p.endswith(".log")}) > 1
    )

    # The redo file is durable, names included, before the marker promises it.
    assert _logs_at_risk(events, redo, marker) == []
    synced_dirs = {p for k, p in events[:marker] if k == "sync"}
    redo_dir = os.path.dirname(next(iter(redo_logs)))
    assert {redo_dir, f"{root}/_redo", root} <= synced_dirs

    # Every chunk is durable before the write that makes the commit visible.
    assert _logs_at_risk(events, db, final) == []
    # And that write is synced before the commit returns.
    assert ("sync", events[final][1]) in events[final + 1 :]


# The shape of a trace from a loaded machine (pids: 11 the commit, 12 LevelDB's background
# thread), cut down: while the commit writes its marker, the background thread is syncing the
# MANIFEST edit of a memtable it flushed.
_RACE = """\
11 write(2<pipe:[1]>, "COMMIT-START\\n", 13) = 13
11 write(5</s/db/000003.log>, "chunk"..., 32768) = 32768
11 fdatasync(5</s/db/000003.log>) = 0
11 write(6</s/db/000004.log>, "chunk"..., 32768) = 32768
12 fdatasync(8</s/db/000005.ldb>) = 0
12 write(7</s/db/MANIFEST-000002>, "edit"..., 66) = 66
12 fdatasync(9</s/db>) = 0
12 fdatasync(7</s/db/MANIFEST-000002> <unfinished ...>
11 fdatasync(6</s/db/000004.log>) = 0
11 write(6</s/db/000004.log>, "marker"..., 36) = 36
12 <... fdatasync resumed>)          = 0
12 unlink("/s/db/000003.log") = 0
11 fdatasync(6</s/db/000004.log>) = 0
11 write(2<pipe:[1]>, "COMMIT-END\\n", 11) = 11
"""


def test_the_check_allows_a_manifest_edit_in_flight_but_not_a_log_deleted_before_it() -> None:
    trace = _parse(_RACE)
    events = trace.events[trace.start : trace.end]
    marker = events.index(("write", "/s/db/000004.log"), 3)
    # Both logs are synced; the MANIFEST edit still being synced endangers neither.
    assert _logs_at_risk(events, "/s/db/", marker) == []
    # A log written and not synced yet is at risk.
    assert _logs_at_risk(events, "/s/db/", 3) == ["/s/db/000004.log"]
    # A log LevelDB deleted before the edit that replaced it was synced is at risk.
    unsynced_log = [("write", "/s/db/000003.log")]
    early_unlink = [("write", "/s/db/MANIFEST-000002"), ("unlink", "/s/db/000003.log")]
    assert _logs_at_risk(unsynced_log + early_unlink, "/s/db/", 3) == ["/s/db/000003.log"]
    in_order = [*early_unlink[:1], ("sync", "/s/db/MANIFEST-000002"), early_unlink[1]]
    assert _logs_at_risk(unsynced_log + in_order, "/s/db/", 4) == []
