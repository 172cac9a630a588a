"""The sink's crash seam: a no-op unless a crash test asks for a point."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from spark_statestore.store import crash


def test_unset_points_do_nothing(monkeypatch: object) -> None:
    os.environ.pop(crash.CRASH_AT, None)
    for point in crash.SINK_POINTS:
        crash.crash_point(point)  # returns: nothing configured


def test_the_named_point_kills_the_process_group() -> None:
    code = (
        "import os\n"
        "from spark_statestore.store import crash\n"
        "crash.crash_point('sink.before_publish')\n"
        "print('passed the other point', flush=True)\n"
        "crash.crash_point('sink.after_publish')\n"
        "print('not reached', flush=True)\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, **{crash.CRASH_AT: "sink.after_publish"}),
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
    )
    assert child.returncode == -signal.SIGKILL
    assert child.stdout.splitlines() == ["passed the other point"]


def test_the_crash_file_can_stop_the_process_or_hang_the_thread_at_a_point(
    tmp_path: Path,
) -> None:
    armed = tmp_path / "crash"
    code = (
        "import threading\n"
        "from spark_statestore.store import crash\n"
        "crash.crash_point('sink.before_publish')\n"
        "print('passed the other point', flush=True)\n"
        "point = 'sink.after_publish'\n"
        "worker = threading.Thread(target=crash.crash_point, args=(point,), daemon=True)\n"
        "worker.start()\n"
        "worker.join(1.0)\n"
        "print('the worker is', 'blocked' if worker.is_alive() else 'through', flush=True)\n"
    )
    env = dict(os.environ, **{crash.CRASH_FILE: str(armed)})
    env.pop(crash.CRASH_AT, None)

    # stop: the whole process stops at the point (the test sees it stop, then kills it).
    armed.write_text(f"{crash.STOP} sink.after_publish")
    child = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        _, status = os.waitpid(child.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status) and os.WSTOPSIG(status) == signal.SIGSTOP
        assert not armed.exists() and (tmp_path / f"crash.fired.{child.pid}").exists()
    finally:
        child.kill()
        child.wait()

    # hang: only the thread that reached it stops; the process goes on.
    armed.write_text(f"{crash.HANG} sink.after_publish")
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.splitlines() == ["passed the other point", "the worker is blocked"]
    assert not armed.exists()
