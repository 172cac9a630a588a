"""Local hosts (network namespaces on a bridge): what an isolated process on one sees, and
what a crashed run leaves behind being removed by the next start. Needs root; skipped,
saying so, elsewhere."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from spark_statestore.connectors.local import LocalHosts, remove_stale_hosts
from tests.conftest import REPO_ROOT
from tests.kafka_util import poll_until

pytestmark = pytest.mark.integration

PREFIX = "sst"  # not the prefix of any other test's hosts


def _namespaces() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split(" ", 1)[0] for line in listed.stdout.splitlines()}


def _links() -> set[str]:
    shown = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True)
    return {line.split(":", 2)[1].strip().split("@", 1)[0] for line in shown.stdout.splitlines()}


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state == "Z"  # killed, waiting to be reaped


def test_an_isolated_process_sees_its_own_host(host_tools: None, tmp_path: Path) -> None:
    own, hidden = tmp_path / "own", Path("/root/.cache")
    own.mkdir()
    (own / "mine").write_text("kept\n")
    (tmp_path / "driver").write_text("the driver's")
    with LocalHosts(2, prefix=PREFIX) as made:
        host, other = made.hosts
        script = (
            'hostname; cat /etc/hosts; ls -A /tmp | tr "\\n" " "; echo; cat "$1/mine"; '
            'test -e "$2" && echo sees-driver || echo no-driver; ls -A "$3" | wc -l; '
            'echo written > "$1/new"; echo scratch > "$4"; ip -4 -o addr'
        )
        scratch = Path(f"/tmp/{tmp_path.name}-scratch")
        done = subprocess.run(
            host.isolated_command(
                [
                    "sh",
                    "-c",
                    script,
                    "sh",
                    str(own),
                    str(tmp_path / "driver"),
                    str(hidden),
                    str(scratch),
                ],
                keep=[own],
                hide=[hidden],
            ),
            capture_output=True,
            text=True,
            check=True,
        )
        lines = done.stdout.splitlines()
        assert lines[0] == host.namespace  # its own hostname, resolvable there:
        assert f"{host.address} {host.namespace}" in lines
        assert f"{other.address} {other.namespace}" in lines
        assert f"{made.address} " in done.stdout  # this machine's name, at the bridge address
        assert "kept" in lines and "no-driver" in lines and "0" in lines, done.stdout
        assert (own / "new").read_text() == "written\n"  # its own directory is this one
        assert not scratch.exists()  # its /tmp is its own
        assert f"inet {host.address}/24" in done.stdout and "inet 127.0.0.1/8" in done.stdout
        # A plain command shares this machine's disk; only the network is the host's.
        plain = subprocess.run(
            host.command(["cat", str(tmp_path / "driver")]), capture_output=True, text=True
        )
        assert plain.stdout == "the driver's"


CRASHING_RUN = textwrap.dedent(
    """
    import subprocess, sys, time
    from spark_statestore.connectors.local import LocalHosts
    hosts = LocalHosts(1, prefix=sys.argv[1]).start()
    (host,) = hosts.hosts
    sleeper = subprocess.Popen(host.command(["sleep", "600"]))
    print(host.namespace, sleeper.pid, flush=True)
    time.sleep(600)
    """
)


def test_a_start_removes_what_a_killed_run_left(host_tools: None) -> None:
    crashing = subprocess.Popen(
        [sys.executable, "-c", CRASHING_RUN, PREFIX],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
    )
    assert crashing.stdout is not None
    namespace, sleeper = crashing.stdout.readline().split()
    tag = namespace.rsplit("x", 1)[0]
    assert namespace in _namespaces() and f"{tag}b" in _links()
    (files,) = Path(tempfile.gettempdir()).glob(f"spark-statestore-hosts-{tag}-*")
    crashing.send_signal(signal.SIGKILL)  # no cleanup runs
    crashing.wait(30)
    assert namespace in _namespaces(), "a killed run's namespace is left behind"

    removed = remove_stale_hosts(PREFIX)  # what every start does first
    assert namespace in removed and f"{tag}b" in removed and str(files) in removed
    assert not files.exists()
    assert namespace not in _namespaces() and f"{tag}b" not in _links()
    poll_until(
        lambda: True if _gone(int(sleeper)) else None,
        timeout_s=10,
        interval_s=0.05,
        failure=lambda: f"process {sleeper} on the stale host still runs",
    )
    with LocalHosts(1, prefix=PREFIX) as live:
        assert remove_stale_hosts(PREFIX) == []  # a live run's hosts are never stale
        assert live.hosts[0].namespace in _namespaces()
