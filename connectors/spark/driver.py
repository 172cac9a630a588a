"""The Spark driver our driver-side code runs under, and where its executors run.

Spark runs a Python data source's planning and its streaming sink's ``commit`` in Python
worker processes the driver JVM starts, so the nearest JVM among a process's ancestors is
the driver (:func:`spark_jvm`). Those processes see neither the SparkContext nor its conf,
but the driver JVM's command line holds what ``spark-submit`` (and PySpark's session
builder, which launches the JVM through it) was given: the master and ``--conf`` settings.
With the defaults file, that tells whether executors run on this host (a ``local`` master)
and which address of this host they reach it by (``spark.driver.host``)
(:func:`driver_deployment`).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "Deployment",
    "ProcessId",
    "driver_deployment",
    "parse_submit_arguments",
    "proc_stat",
    "routable_address",
    "spark_jvm",
]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProcessId:
    """A process that can be told apart from a later one with the same pid."""

    pid: int
    start: str
    """Its start time in clock ticks since boot (``/proc/<pid>/stat`` field 22)."""

    @classmethod
    def of(cls, pid: int) -> ProcessId | None:
        """The process ``pid`` now, or None when there is none."""
        stat = proc_stat(pid)
        return None if stat is None else cls(pid, stat[19])

    def alive(self) -> bool:
        """True while this process (not a later one with its pid) runs."""
        stat = proc_stat(self.pid)
        return stat is not None and stat[19] == self.start and stat[0] != "Z"

    def kill(self, timeout_s: float) -> bool:
        """SIGKILL this process, never a later one with its pid, and wait up to
        ``timeout_s`` for it to exit; False when it had exited already.

        A pidfd names the process for good once opened: the start time read after opening
        it tells that it is this process, and the signal goes through it, so no pid reused
        in between can be hit. A stopped (SIGSTOP) process dies too.
        """
        import select
        import signal

        try:
            fd = os.pidfd_open(self.pid)
        except ProcessLookupError:
            return False
        try:
            if not self.alive():  # exited (a zombie), or the pid is another process's now
                return False
            try:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            except ProcessLookupError:  # it exited meanwhile
                return False
            select.select([fd], [], [], timeout_s)  # readable once it has exited
        finally:
            os.close(fd)
        return True


def proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def spark_jvm() -> ProcessId | None:
    """The nearest ancestor of this process that is a JVM (the Spark driver), or None."""
    pid = os.getppid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as handle:
                command = handle.read().strip()
        except OSError:
            return None
        if command == "java":
            return ProcessId.of(pid)
        stat = proc_stat(pid)
        if stat is None:
            return None
        pid = int(stat[1])
    return None


@dataclass(frozen=True, slots=True)
class Deployment:
    """Where a Spark application's executors run, as seen from its driver's host.

    Parameters
    ----------
    executors_local
        True when every executor runs on the driver's host (a ``local`` master): they can
        reach a server on loopback.
    host
        The address of the driver's host that executors reach: loopback for local
        executors, else ``spark.driver.host`` or this host's routable address.
    master
        The master URL, for messages (None: unknown).
    """

    executors_local: bool
    host: str
    master: str | None = None

    @classmethod
    def local(cls) -> Deployment:
        """Executors on this host (no Spark, or a local master)."""
        return cls(True, "127.0.0.1", "local")


def parse_submit_arguments(arguments: Sequence[str]) -> dict[str, str]:
    """The Spark settings in a ``SparkSubmit`` command line: ``--conf k=v``, ``--master`` and
    ``--properties-file`` (as ``spark.master`` and the file's path under its flag)."""
    settings: dict[str, str] = {}
    flags = {"--master": "spark.master", "--properties-file": "--properties-file"}
    index = 0
    while index < len(arguments):
        argument = arguments[index]
        value: str | None = None
        name: str | None = None
        if argument in ("--conf", "-c") and index + 1 < len(arguments):
            name, _, value = arguments[index + 1].partition("=")
            index += 1
        elif argument.startswith("--conf="):
            name, _, value = argument[len("--conf=") :].partition("=")
        elif argument in flags and index + 1 < len(arguments):
            name, value = flags[argument], arguments[index + 1]
            index += 1
        if name and value is not None:
            settings.setdefault(name.strip(), value.strip())
        index += 1
    return settings


def _properties(path: str) -> dict[str, str]:
    """A Spark properties file (``spark-defaults.conf``): ``key value`` or ``key=value``."""
    settings: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return settings
    for line in lines:
        text = line.strip()
        if not text or text.startswith(("#", "!")):
            continue
        parts = text.replace("=", " ", 1).split(None, 1)
        if len(parts) == 2:
            settings[parts[0]] = parts[1].strip()
    return settings


def _command_line(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def driver_settings(jvm: ProcessId, environment: Mapping[str, str]) -> dict[str, str] | None:
    """The Spark settings the driver JVM was started with (command line first, then its
    properties file or ``$SPARK_CONF_DIR/spark-defaults.conf``); None when the JVM is not a
    ``SparkSubmit`` (e.g. a cluster-mode driver wrapper: nothing to tell from it)."""
    arguments = _command_line(jvm.pid)
    if arguments is None or "org.apache.spark.deploy.SparkSubmit" not in arguments:
        return None
    start = arguments.index("org.apache.spark.deploy.SparkSubmit") + 1
    settings = parse_submit_arguments(arguments[start:])
    defaults = settings.pop("--properties-file", None)
    if defaults is None:
        conf_dir = environment.get("SPARK_CONF_DIR") or (
            os.path.join(environment["SPARK_HOME"], "conf") if "SPARK_HOME" in environment else None
        )
        defaults = None if conf_dir is None else os.path.join(conf_dir, "spark-defaults.conf")
    if defaults is not None:
        for key, value in _properties(defaults).items():
            settings.setdefault(key, value)
    return settings


def executors_are_local(master: str | None) -> bool:
    """Whether a master URL runs every executor on the driver's host."""
    return master is not None and (master == "local" or master.startswith("local["))


def driver_deployment(environment: Mapping[str, str] | None = None) -> Deployment:
    """Where the executors of the Spark driver this process runs under are.

    No Spark driver among this process's ancestors (a direct call, the CLI): executors, if
    any, are this host's. A driver whose master is unknown is taken as a cluster's: serving
    on a routable address with TLS works for local executors too, the reverse does not.
    ``SPARK_STATESTORE_EXECUTORS`` set to ``local`` or ``remote`` overrides the detection.
    """
    env = os.environ if environment is None else environment
    jvm = spark_jvm()
    override = env.get("SPARK_STATESTORE_EXECUTORS", "").strip().lower()
    settings = {} if jvm is None else (driver_settings(jvm, env) or {})
    master = settings.get("spark.master") or env.get("MASTER")
    if override == "local" or (
        override != "remote" and (jvm is None or executors_are_local(master))
    ):
        return Deployment(True, "127.0.0.1", master or "local")
    host = settings.get("spark.driver.host") or env.get("SPARK_LOCAL_IP") or routable_address()
    return Deployment(False, host, master)


def routable_address() -> str:
    """An address of this host that other hosts can reach: the one its default route leaves
    from (no packet is sent), else its name's, else loopback (a lone host)."""
    for family, probe in ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1")):
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                sock.connect((probe, 9))
                address = str(sock.getsockname()[0])
        except OSError:
            continue
        if not address.startswith("127.") and address != "::1":
            return address
    try:
        address = socket.gethostbyname(socket.gethostname())
    except OSError:
        address = "127.0.0.1"
    return address
