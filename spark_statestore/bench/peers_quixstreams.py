"""The ``peers`` suite's restore measurement: quixstreams' recovery of a store of the same size.

See :mod:`spark_statestore.bench.peers` for what is measured and how. quixstreams runs from
its own virtual environment (it needs an older confluent-kafka than this project's).
"""

from __future__ import annotations

import fcntl
import inspect
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from spark_statestore.bench.errors import BenchError
from spark_statestore.bench.follower import (
    RESTORE_DEADLINE_S,
    TOPIC,
    Changelog,
)
from spark_statestore.bench.measure import child_result, timed

_log = logging.getLogger(__name__)

_SUITE = "peers"  # the suite this is part of (spark_statestore.bench.peers)

__all__ = [
    "PEERS_VENV",
    "QUIXSTREAMS_VERSION",
    "QuixApp",
    "QuixRecovery",
    "quixstreams_python",
]

QUIXSTREAMS_VERSION = "3.28.1"
"""The quixstreams release measured (it pins confluent-kafka < 2.13, older than ours)."""
PEERS_VENV = Path.home() / ".cache" / "spark-statestore" / "peers-venv"
"""The virtual environment the peers run from, created by :func:`quixstreams_python`."""
QUIX_GROUP = "spark-statestore-bench-quixstreams"
"""The quixstreams application's consumer group (its changelog topic is named after it)."""
QUIX_STATE_KEY = b"v"
"""The state key every message's value is stored under (the message key is the prefix)."""
_QUIX_IDLE_TIMEOUT_S = 60.0
"""quixstreams stops when no message came for this long (a guard; runs stop by count)."""
_VENV_MARKER = ".spark-statestore-peers"
_PIP_TIMEOUT_S = 900.0


# -- restore: quixstreams' recovery -------------------------------------------------------
def quixstreams_python(venv: Path = PEERS_VENV) -> Path:
    """The interpreter of the peers' virtual environment, with quixstreams
    :data:`QUIXSTREAMS_VERSION` installed.

    The environment is created on first use (``python -m venv``, then ``pip install`` from
    PyPI), saying so on stderr; a partly created one is replaced. quixstreams pins an older
    confluent-kafka than this project, so it cannot share the project's environment.

    Parameters
    ----------
    venv
        Where the environment lives (:data:`PEERS_VENV`).

    Raises
    ------
    BenchError
        If the environment cannot be created or quixstreams cannot be installed (for
        example, PyPI is not reachable); the message names the command and its output.
    """
    python = venv / "bin" / "python"
    marker = venv / _VENV_MARKER
    wanted = f"quixstreams=={QUIXSTREAMS_VERSION}"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another bench run may be creating it
        if marker.is_file() and marker.read_text().strip() == wanted and python.exists():
            return python
        if venv.exists():
            _say(f"replacing {venv} (it does not have {wanted})")
            shutil.rmtree(venv)
        _say(f"creating {venv} for the peers (once): {sys.executable} -m venv")
        _setup_step([sys.executable, "-m", "venv", str(venv)], "create a virtual environment")
        _say(f"installing {wanted} from PyPI into {venv}")
        _setup_step(
            [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", wanted],
            f"install {wanted}",
        )
        marker.write_text(wanted + "\n")
        _say(f"{venv} is ready")
    return python


def _say(message: str) -> None:
    print(f"bench suite {_SUITE}: {message}", file=sys.stderr, flush=True)


def _setup_step(command: list[str], what: str) -> None:
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BenchError(
            f"bench suite {_SUITE}: cannot {what} ({' '.join(command)}): {exc}"
        ) from exc
    if proc.returncode != 0:
        output = (proc.stderr.strip() or proc.stdout.strip())[-2000:]
        raise BenchError(
            f"bench suite {_SUITE}: cannot {what} for the quixstreams side: `{' '.join(command)}` "
            f"exited {proc.returncode}: {output}"
        )


@dataclass(frozen=True, slots=True)
class _QuixRequest:
    """What the quixstreams process is asked to do (``build`` its store from the input
    topic, or ``recover`` it on an empty state directory)."""

    mode: str
    bootstrap: str
    input_topic: str
    group: str
    state_dir: str
    records: int
    commit_every: int
    state_key: str
    idle_timeout_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class _QuixBuild:
    """What building the store reported: messages processed and how long it took."""

    processed: int
    seconds: float

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> _QuixBuild:
        return cls(processed=int(data["processed"]), seconds=float(data["seconds"]))


@dataclass(frozen=True, slots=True)
class QuixRecovery:
    """What one recovery reported, plus how long its whole process ran."""

    seconds: float
    keys: int
    changelog: str
    end_offsets: int
    key_bytes: int
    value_bytes: int
    process_seconds: float = 0.0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], process_seconds: float) -> QuixRecovery:
        return cls(
            seconds=float(data["seconds"]),
            keys=int(data["keys"]),
            changelog=str(data["changelog"]),
            end_offsets=int(data["end_offsets"]),
            key_bytes=int(data["key_bytes"]),
            value_bytes=int(data["value_bytes"]),
            process_seconds=process_seconds,
        )


class QuixApp:
    """The quixstreams application over the changelog topic, run as a process of the
    peers' interpreter."""

    def __init__(self, python: Path, root: str, changelog: Changelog, commit_every: int) -> None:
        self._python = python
        self._root = root
        self._changelog = changelog
        self._commit_every = commit_every
        self._script = os.path.join(root, "quixstreams_side.py")
        Path(self._script).write_text(_quixstreams_script())

    def build_store(self) -> _QuixBuild:
        """Run the application over the whole topic once, filling its changelog."""
        state_dir = tempfile.mkdtemp(prefix="quixstreams-build-", dir=self._root)
        try:
            result, _seconds = self._run("build", state_dir)
        finally:
            shutil.rmtree(state_dir, ignore_errors=True)
        build = _QuixBuild.from_dict(result)
        if build.processed != self._changelog.records:
            raise BenchError(
                f"bench suite {_SUITE}: quixstreams processed {build.processed:,} messages of "
                f"{TOPIC}, which holds {self._changelog.records:,}; its store would be smaller"
            )
        return build

    def recovery_rate(self, recoveries: list[QuixRecovery]) -> float:
        """Records/s of one recovery on an empty state directory (appended to
        ``recoveries``)."""
        state_dir = tempfile.mkdtemp(prefix="quixstreams-recover-", dir=self._root)
        try:
            result, process_seconds = self._run("recover", state_dir)
        finally:
            shutil.rmtree(state_dir, ignore_errors=True)
        recovery = QuixRecovery.from_dict(result, process_seconds)
        if recovery.keys != self._changelog.records:
            raise BenchError(
                f"bench suite {_SUITE}: quixstreams recovered {recovery.keys:,} keys from "
                f"{recovery.changelog}, expected {self._changelog.records:,}; its rate would "
                "be meaningless"
            )
        recoveries.append(recovery)
        return self._changelog.records / recovery.seconds

    def _run(self, mode: str, state_dir: str) -> tuple[dict[str, Any], float]:
        request = _QuixRequest(
            mode=mode,
            bootstrap=self._changelog.bootstrap,
            input_topic=TOPIC,
            group=QUIX_GROUP,
            state_dir=state_dir,
            records=self._changelog.records,
            commit_every=self._commit_every,
            state_key=QUIX_STATE_KEY.decode(),
            idle_timeout_s=_QUIX_IDLE_TIMEOUT_S,
        )
        command = [str(self._python), self._script, json.dumps(request.to_dict())]
        log_path = Path(self._root) / f"quixstreams-{mode}.log"
        return child_result(_SUITE, command, f"quixstreams ({mode})", log_path, RESTORE_DEADLINE_S)


def _quixstreams_script() -> str:
    """The program the peers' interpreter runs: :func:`_quixstreams_side` and the suite's
    own :func:`~spark_statestore.bench.measure.timed`, from their source in this package, so
    both sides are timed by the same code and the program is linted and type-checked here."""
    return "\n\n".join(
        [
            "from __future__ import annotations\n\nimport gc\nimport json\nimport sys\nimport time",
            inspect.getsource(timed),
            inspect.getsource(_quixstreams_side),
            "_quixstreams_side(json.loads(sys.argv[1]))\n",
        ]
    )


def _quixstreams_side(request: dict[str, Any]) -> None:  # runs in the peers' interpreter
    """Build the quixstreams store (``mode="build"``) or recover it on an empty state
    directory and time the recovery (``mode="recover"``); print the result as one JSON line.

    Uses only the standard library, quixstreams and :func:`timed` (see
    :func:`_quixstreams_script`).
    """
    from quixstreams import Application  # type: ignore[import-not-found,unused-ignore]

    state_key = request["state_key"].encode()
    processed = 0

    def remember(value: bytes, state: Any) -> bytes:
        nonlocal processed
        state.set_bytes(state_key, value)
        processed += 1
        return value

    app = Application(
        broker_address=request["bootstrap"],
        consumer_group=request["group"],
        state_dir=request["state_dir"],
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        commit_every=request["commit_every"],
        loglevel="WARNING",
    )
    topic = app.topic(request["input_topic"], key_deserializer="bytes", value_deserializer="bytes")
    app.dataframe(topic).apply(remember, stateful=True)

    if request["mode"] == "build":
        start = time.perf_counter()
        app.run(count=request["records"], timeout=request["idle_timeout_s"])
        print(json.dumps({"processed": processed, "seconds": time.perf_counter() - start}))
        return

    # quixstreams has no hook for "recovery finished": the application's run loop calls
    # StateStoreManager.do_recovery() once partitions needing recovery are assigned, and it
    # returns when RecoveryManager has consumed every changelog partition to the end offset
    # it read at assignment. Time that call (on this application's own instance only).
    manager = app._state_manager
    recover = manager.do_recovery
    result: dict[str, Any] = {}

    def timed_recovery() -> None:
        recovering = [
            rp
            for by_name in manager._recovery_manager.partitions.values()
            for rp in by_name.values()
        ]
        seconds = timed(recover)
        keys = key_bytes = value_bytes = 0
        for stores in manager.stores.values():
            for store in stores.values():
                for partition in store.partitions.values():
                    for key, value in partition.iter_items(lower_bound=b""):
                        keys += 1
                        key_bytes, value_bytes = len(key), len(value)
        result.update(
            seconds=seconds,
            keys=keys,
            changelog=",".join(sorted({rp.changelog_name for rp in recovering})),
            end_offsets=sum(rp.changelog_highwater for rp in recovering),
            key_bytes=key_bytes,
            value_bytes=value_bytes,
        )
        app.stop()

    manager.do_recovery = timed_recovery
    app.run(timeout=request["idle_timeout_s"])
    if not result:
        result["error"] = (
            f"the application on the empty state dir {request['state_dir']} never recovered: "
            f"no changelog partition of consumer group {request['group']} needed recovery"
        )
    print(json.dumps(result))
