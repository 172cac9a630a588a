"""The sink's crash seam: a no-op unless a crash test asks for a point."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

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
