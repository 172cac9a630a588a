"""Other hosts on this machine: network namespaces on a bridge.

:class:`LocalHosts` makes a bridge with an address in the root namespace (where the caller
runs) and ``count`` network namespaces, each linked to the bridge by a veth pair: every host
has its own loopback and its own address on the bridge's /24, and reaches the root
namespace's address and the other hosts. Nothing leaves the machine.

A process started with :meth:`Host.command` runs in the host's network namespace only. One
started with :meth:`Host.isolated_command` is on that host more completely, as a process on
another machine would be: its own hostname (resolvable there, through its own ``/etc/hosts``),
a private ``/tmp``, and directories of this machine hidden under empty tmpfs mounts (a mount
namespace of its own); the rest of the file system (the repository, the interpreter, Java)
stays visible.

Names carry the pid of the process that made them (``<prefix><pid>b`` the bridge,
``<prefix><pid>x<i>`` the namespaces, ``<prefix><pid>v<i>`` / ``p<i>`` the veth ends), so a
start first removes what a crashed run left (its pid is gone) and never touches what a live
run on the same machine uses. Needs root, ``ip`` (iproute2), ``unshare`` and ``mount``.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from spark_statestore.connectors.local.errors import HostsError, HostsUnavailableError
from spark_statestore.connectors.local.processes import (
    owned_tempdir,
    pid_alive,
    remove_stale_tempdirs,
)

__all__ = ["DEFAULT_PREFIX", "Host", "LocalHosts", "check_host_tools", "remove_stale_hosts"]

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "ssh"
"""Names of namespaces and links start with it (and the owner's pid); link names have at most
15 characters, so a prefix has at most 5."""

_SUBNET = "10.77.{}."
_NETS = range(20, 250)
_ROOT_HOST = 1
_FIRST_HOST = 11
_LOCK = "spark-statestore-hosts.lock"
_STASH = "/mnt"
"""An existing directory outside ``/tmp`` where an isolated process's kept directories are
mounted for a moment while ``/tmp`` is replaced (only inside its own mount namespace)."""
_TOOLS = ("ip", "unshare", "mount", "umount")


def check_host_tools() -> None:
    """Raise :class:`HostsUnavailableError` unless this process can make local hosts."""
    if os.geteuid() != 0:
        raise HostsUnavailableError(
            "local hosts need root: network and mount namespaces, veth links and a bridge "
            "can only be made by root"
        )
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if missing:
        raise HostsUnavailableError(
            f"local hosts need {', '.join(missing)} (Debian: apt-get install iproute2 "
            "util-linux mount)"
        )
    if not os.path.isdir(_STASH):
        raise HostsUnavailableError(
            f"isolated processes on local hosts need the directory {_STASH} to exist (a "
            "mount point used inside their own mount namespace)"
        )


def _run(*args: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise HostsError(
            f"`{shlex.join(args)}` failed with exit code {done.returncode}: "
            f"{(done.stderr or done.stdout).strip()}"
        )
    return done.stdout


def _namespace_pids(namespace: str) -> list[int]:
    done = subprocess.run(
        ["ip", "netns", "pids", namespace], capture_output=True, text=True, check=False
    )
    return [int(word) for word in done.stdout.split() if word.isdigit()]


def _kill_namespace(namespace: str, signum: int = signal.SIGKILL) -> None:
    """Signal every process in ``namespace`` (what runs "on" that host)."""
    for pid in _namespace_pids(namespace):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def remove_stale_hosts(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Remove the namespaces, links and temporary directories named ``<prefix><pid>...``
    whose pid is gone (a run that crashed or was killed before its cleanup); returns their
    names.

    Processes still running in such a namespace are killed first.
    """
    pattern = re.compile(rf"^{re.escape(prefix)}(\d+)([bxv])(\d*)$")
    removed = []
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    for line in listed.stdout.splitlines():
        name = line.split(" ", 1)[0]
        match = pattern.match(name)
        if match and match.group(2) == "x" and not pid_alive(int(match.group(1))):
            _kill_namespace(name)
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
            removed.append(name)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True)
    for line in links.stdout.splitlines():
        fields = line.split(":", 2)
        if len(fields) < 2:
            continue
        name = fields[1].strip().split("@", 1)[0]
        match = pattern.match(name)
        if match and match.group(2) in "bv" and not pid_alive(int(match.group(1))):
            subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)
            removed.append(name)
    removed += [str(d) for d in remove_stale_tempdirs("hosts", prefix)]
    if removed:
        log.info("removed what an earlier run left: %s", ", ".join(removed))
    return removed


@dataclass(frozen=True)
class Host:
    """One host: a network namespace with its own loopback and an address on the bridge.

    Attributes
    ----------
    index
        0-based position among the hosts.
    namespace
        The network namespace's name (``ip netns``), also the host's hostname for isolated
        processes.
    address
        The host's address on the bridge.
    link
        The root-side end of its veth pair (down: the host is cut off).
    hosts_file
        The ``/etc/hosts`` isolated processes see: every host's name and the root
        namespace's hostname at the bridge address.
    """

    index: int
    namespace: str
    address: str
    link: str
    hosts_file: str

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run in the host's network namespace (nothing else of it is private)."""
        return ["ip", "netns", "exec", self.namespace, *argv]

    def isolated_command(
        self,
        argv: Sequence[str],
        *,
        keep: Sequence[str | Path] = (),
        hide: Sequence[str | Path] = (),
        hide_files: Sequence[str | Path] = (),
    ) -> list[str]:
        """``argv`` run on the host as on another machine.

        It gets the host's network namespace, and a mount and UTS namespace of its own: the
        hostname :attr:`namespace`, ``/etc/hosts`` from :attr:`hosts_file`, an empty private
        ``/tmp``, an empty tmpfs over every directory of ``hide`` (which must exist) and
        ``/dev/null`` over every file of ``hide_files`` (a program or library the host must
        not have: it can neither run nor load). The directories of ``keep`` (the process's
        own, possibly under ``/tmp`` or under a hidden directory) stay visible and writable
        at their paths; what the process writes elsewhere under ``/tmp`` or in a hidden
        directory never reaches this machine's disk. Processes it starts inherit all of
        that. The command execs ``argv`` in the same process.
        """
        kept = [os.path.abspath(k) for k in keep]
        steps = [
            "set -e",
            f"echo {shlex.quote(self.namespace)} > /proc/sys/kernel/hostname",
            f"mount --bind {shlex.quote(self.hosts_file)} /etc/hosts",
        ]
        if kept:
            steps.append(f"mount -t tmpfs -o mode=0700 statestore-stash {_STASH}")
        for i, directory in enumerate(kept):
            steps += [f"mkdir {_STASH}/{i}", f"mount --bind {shlex.quote(directory)} {_STASH}/{i}"]
        for hidden in hide:
            steps.append(
                f"mount -t tmpfs -o mode=0755 statestore-hidden {shlex.quote(str(hidden))}"
            )
        for hidden_file in hide_files:
            steps.append(f"mount --bind /dev/null {shlex.quote(str(hidden_file))}")
        steps.append("mount -t tmpfs -o mode=1777 statestore-tmp /tmp")
        for i, directory in enumerate(kept):
            quoted = shlex.quote(directory)
            steps += [f"mkdir -p {quoted}", f"mount --bind {_STASH}/{i} {quoted}"]
        if kept:
            steps.append(f"umount -l {_STASH}")
        steps.append('exec "$@"')
        script = "; ".join(steps)
        return self.command(
            ["unshare", "--mount", "--uts", "--propagation", "private", "--",
             "sh", "-c", script, "sh", *argv]
        )  # fmt: skip

    def pids(self) -> list[int]:
        """Every process running on the host (in its network namespace)."""
        return _namespace_pids(self.namespace)


class LocalHosts:
    """``count`` hosts on a bridge, with an address for the root namespace on it.

    Parameters
    ----------
    count
        How many hosts (network namespaces).
    prefix
        How their namespaces and links are named (see the module's docstring): one
        ``LocalHosts`` per process and prefix at a time.

    Raises
    ------
    HostsUnavailableError
        From :meth:`start`: not root, or a tool is missing.
    HostsError
        From :meth:`start`: a command failed (its output is in the message).

    Examples
    --------
    >>> with LocalHosts(2) as hosts:                                     # doctest: +SKIP
    ...     kafka = LocalKafkaCluster(host=hosts.address)
    ...     subprocess.Popen(hosts.hosts[0].command(["python", "replica.py"]))
    """

    def __init__(self, count: int, *, prefix: str = DEFAULT_PREFIX) -> None:
        if count < 1:
            raise HostsError(f"local hosts: count must be at least 1, got {count}")
        if not re.fullmatch(r"[a-z]{1,5}", prefix):
            raise HostsError(f"local hosts: prefix must be 1 to 5 letters a-z, got {prefix!r}")
        self._count = count
        self._prefix = prefix
        self._tag = f"{prefix}{os.getpid()}"
        self._bridge = f"{self._tag}b"
        self._address: str | None = None
        self._hosts: list[Host] = []
        self._made: list[str] = []
        self._directory: str | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> LocalHosts:
        """Remove stale hosts of earlier runs, then make the bridge and the hosts."""
        check_host_tools()
        remove_stale_hosts(self._prefix)
        self._directory = str(owned_tempdir("hosts", self._tag))
        try:
            with self._subnet_lock():
                net = self._free_net()
                self._address = _SUBNET.format(net) + str(_ROOT_HOST)
                _run("ip", "link", "add", self._bridge, "type", "bridge")
                self._made.append(self._bridge)
                _run("ip", "addr", "add", f"{self._address}/24", "dev", self._bridge)
            _run("ip", "link", "set", self._bridge, "up")
            hosts_file = os.path.join(self._directory, "hosts")
            addresses = [_SUBNET.format(net) + str(_FIRST_HOST + i) for i in range(self._count)]
            names = [f"{self._tag}x{i}" for i in range(self._count)]
            self._write_hosts_file(hosts_file, list(zip(names, addresses, strict=True)))
            for i, (namespace, address) in enumerate(zip(names, addresses, strict=True)):
                outer, inner = f"{self._tag}v{i}", f"{self._tag}p{i}"
                _run("ip", "netns", "add", namespace)
                self._made.append(namespace)
                _run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
                _run("ip", "link", "set", inner, "netns", namespace)
                _run("ip", "link", "set", outer, "master", self._bridge)
                _run("ip", "link", "set", outer, "up")
                inside = ["ip", "netns", "exec", namespace, "ip"]
                _run(*inside, "addr", "add", f"{address}/24", "dev", inner)
                _run(*inside, "link", "set", inner, "up")
                _run(*inside, "link", "set", "lo", "up")
                self._hosts.append(Host(i, namespace, address, outer, hosts_file))
        except BaseException:
            self.close()
            raise
        log.info("local hosts up: %s on %s", [h.address for h in self._hosts], self._bridge)
        return self

    def close(self) -> None:
        """Kill every process on the hosts, remove the namespaces and the bridge. Idempotent."""
        for name in reversed(self._made):
            if name == self._bridge:
                subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)
            else:
                _kill_namespace(name)
                subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
        self._made.clear()
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None

    def __enter__(self) -> LocalHosts:
        return self.start() if not self._made else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- facts and faults -----------------------------------------------------------------
    @property
    def address(self) -> str:
        """The root namespace's address on the bridge (reachable from every host)."""
        if self._address is None:
            raise HostsError("local hosts are not started")
        return self._address

    @property
    def hosts(self) -> list[Host]:
        """The hosts, in order."""
        return list(self._hosts)

    def disconnect(self, host: Host) -> None:
        """Cut ``host`` off the bridge (its processes keep running, unreachable)."""
        _run("ip", "link", "set", host.link, "down")

    def reconnect(self, host: Host) -> None:
        """Link ``host`` to the bridge again."""
        _run("ip", "link", "set", host.link, "up")

    # -- internals ------------------------------------------------------------------------
    @contextlib.contextmanager
    def _subnet_lock(self) -> Iterator[None]:
        """Runs on one machine choose their subnets one at a time."""
        path = os.path.join(tempfile.gettempdir(), _LOCK)
        with open(path, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _free_net(self) -> int:
        shown = _run("ip", "-o", "-4", "addr", "show")
        used = {int(m) for m in re.findall(r"inet 10\.77\.(\d+)\.", shown)}
        for net in _NETS:
            if net not in used:
                return net
        raise HostsError(
            f"every subnet 10.77.{_NETS.start}-{_NETS.stop - 1}.0/24 is in use on this machine: "
            "remove bridges that earlier runs left (`ip -o -4 addr show`)"
        )

    def _write_hosts_file(self, path: str, hosts: list[tuple[str, str]]) -> None:
        lines = ["127.0.0.1 localhost", f"{self.address} {socket.gethostname()}"]
        lines += [f"{address} {name}" for name, address in hosts]
        Path(path).write_text("\n".join(lines) + "\n")
