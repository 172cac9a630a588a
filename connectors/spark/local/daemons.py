"""The Master and Worker JVMs of a local Spark standalone cluster: where they run, how they
are started (``$SPARK_HOME/bin/spark-class`` of the installed PySpark) and with what
environment."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from spark_statestore.connectors.local.bare import builder_paths
from spark_statestore.connectors.local.hosts import Host
from spark_statestore.connectors.local.processes import LoggedProcess, launch, port_taken
from spark_statestore.connectors.spark.errors import LocalSparkError, SparkClusterStartError

__all__ = ["DAEMON_HEAP", "SparkDaemon", "spark_home"]

DAEMON_HEAP = "256m"
"""Heap of the Master and of each Worker: they only schedule; executors do the work."""

_MASTER = "org.apache.spark.deploy.master.Master"
_WORKER = "org.apache.spark.deploy.worker.Worker"
# Each Worker has a network namespace of its own: fixed ports cannot collide there.
_WORKER_PORT = 7078
_WORKER_UI_PORT = 8081
# The daemons only schedule: a quick start matters more than peak speed (C1 alone starts
# them about three times faster on a loaded 2-core machine; executors keep Spark's defaults).
_DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

_LOG4J = """\
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n%ex
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
logger.netty.name = io.netty
logger.netty.level = warn
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = warn
"""


def spark_home() -> Path:
    """The installed PySpark's directory: its ``bin/spark-class`` and ``jars/``."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise LocalSparkError("PySpark is not installed in this interpreter (pip install pyspark)")
    home = Path(spec.origin).parent
    if not (home / "bin" / "spark-class").is_file() or not (home / "jars").is_dir():
        raise LocalSparkError(
            f"{home} has no bin/spark-class or jars/: a local Spark cluster needs PySpark's "
            "full pip package"
        )
    return home


@dataclass
class SparkDaemon(LoggedProcess):
    """The Master or a Worker: one JVM.

    Attributes
    ----------
    name
        ``master`` or ``worker-<i>``.
    address, port, ui_port
        Where it listens (the RPC port and the web UI's).
    directory
        Its folder: ``daemon.log``, ``conf/``, and for a Worker ``work/`` (the executors'
        directories and logs) and ``local/`` (their scratch space).
    host
        The host a Worker runs on (None for the Master, in the root namespace).
    """

    name: str
    address: str
    port: int
    ui_port: int
    directory: Path
    host: Host | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @classmethod
    def master(cls, root: Path, address: str, port: int, ui_port: int) -> SparkDaemon:
        """The Master on ``address`` (the root namespace), its files under ``root``."""
        return cls("master", address, port, ui_port, root / "master")

    @classmethod
    def worker(cls, root: Path, host: Host) -> SparkDaemon:
        """The Worker of ``host``, its files under ``root``."""
        name = f"worker-{host.index}"
        return cls(name, host.address, _WORKER_PORT, _WORKER_UI_PORT, root / name, host=host)

    @property
    def log_path(self) -> Path:
        """Where the JVM's output goes."""
        return self.directory / "daemon.log"

    @property
    def work_dir(self) -> Path:
        """A Worker's ``--work-dir``: one folder per application and executor."""
        return self.directory / "work"

    def start_master(self, home: Path) -> None:
        """Start this daemon as the Master."""
        spark_class = [
            str(home / "bin" / "spark-class"), _MASTER,
            "--host", self.address, "--port", str(self.port),
            "--webui-port", str(self.ui_port),
        ]  # fmt: skip
        self._launch(spark_class, self._env(home))

    def start_worker(
        self,
        home: Path,
        master_url: str,
        *,
        cores: int,
        memory: str,
        hide: list[Path],
        driver_code: bool = True,
    ) -> None:
        """Start this daemon as a Worker on its host, as an isolated process there: its own
        directory stays visible to it, ``hide`` and the rest of ``/tmp`` do not.

        With ``driver_code`` the host also sees the driver's Python environment and the
        plugin's packages (:func:`code_directories`); without, it sees Spark's home alone:
        the driver's environment and the checkout are covered, and so are the build tools
        and native libraries a cluster's worker lacks (:func:`..local.bare.builder_paths`),
        as on a cluster whose executors get the plugin shipped with the application."""
        assert self.host is not None
        local = self.directory / "local"
        for folder in (self.work_dir, local):
            folder.mkdir(parents=True, exist_ok=True)
        env = self._env(home)
        env.update(SPARK_WORKER_DIR=str(self.work_dir), SPARK_LOCAL_DIRS=str(local))
        spark_class = [
            str(home / "bin" / "spark-class"), _WORKER,
            "--host", self.address, "--port", str(self.port),
            "--webui-port", str(self.ui_port),
            "--cores", str(cores), "--memory", memory,
            "--work-dir", str(self.work_dir),
            master_url,
        ]  # fmt: skip
        if driver_code:
            keep = [self.directory, *code_directories(home)]
            command = self.host.isolated_command(spark_class, keep=keep, hide=hide)
        else:
            tools, libraries = builder_paths()
            covered = [*hide, *driver_directories(), *tools]
            command = self.host.isolated_command(
                spark_class, keep=[self.directory, home], hide=covered, hide_files=libraries
            )
        self._launch(command, env)

    def start_error(self) -> SparkClusterStartError:
        """What went wrong, from the log of a daemon that exited while starting."""
        tail = self.log_tail()
        code = self.process.returncode if self.process is not None else None
        if port_taken(tail):
            return SparkClusterStartError(
                f"the Spark {self.name} could not listen on {self.address}:{self.port} or "
                f"{self.ui_port}: the port is taken by another process (try again)",
                port_taken=True,
            )
        return SparkClusterStartError(
            f"the Spark {self.name} exited with code {code} while starting; "
            f"{self.log_path} ends with:\n{tail}"
        )

    def _env(self, home: Path) -> dict[str, str]:
        conf_dir = self.directory / "conf"
        conf_dir.mkdir(parents=True, exist_ok=True)
        (conf_dir / "log4j2.properties").write_text(_LOG4J)
        env = dict(os.environ)
        for inherited in ("SPARK_CONF_DIR", "SPARK_MASTER_OPTS", "SPARK_WORKER_OPTS"):
            env.pop(inherited, None)
        env.update(
            SPARK_HOME=str(home),
            SPARK_CONF_DIR=str(conf_dir),
            SPARK_DAEMON_MEMORY=DAEMON_HEAP,
            SPARK_DAEMON_JAVA_OPTS=_DAEMON_JAVA_OPTS,
            # Spark names itself by these, not by a hostname lookup: executors and the
            # Master then agree on addresses without any DNS.
            SPARK_LOCAL_IP=self.address,
            SPARK_LOCAL_HOSTNAME=self.address,
            SPARK_PUBLIC_DNS=self.address,
        )
        return env

    def _launch(self, command: list[str], env: dict[str, str]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            self.process = launch(command, self.log_path, env=env, cwd=self.directory)
        except OSError as exc:
            raise SparkClusterStartError(f"could not start the Spark {self.name}: {exc}") from exc


def _driver_code() -> list[Path]:
    """The driver's Python environment and the directories the plugin's packages are imported
    from (a checkout, for an editable install), resolved."""
    import sys

    import spark_statestore
    import spark_statestore.connectors

    found = [Path(sys.prefix).resolve()]
    for package in (spark_statestore, spark_statestore.connectors):
        if package.__file__ is not None:
            found.append(Path(package.__file__).resolve().parent.parent)
    return found


def driver_directories() -> list[Path]:
    """:func:`_driver_code` outside ``/tmp`` (private on every host anyway), outermost only:
    what a host without the driver's code must not see."""
    tmp = Path("/tmp")
    outer = [c for c in _driver_code() if tmp not in c.parents and c != tmp]
    return sorted({c for c in outer if not any(o in c.parents for o in outer)})


def code_directories(home: Path) -> list[Path]:
    """What a Worker and its executors run that lives under ``/tmp`` (private on their
    hosts): the Python environment (``PYSPARK_PYTHON`` is this interpreter), Spark's home and
    the directories the plugin's packages are imported from (a checkout, for an editable
    install), e.g. a fresh clone under ``/tmp``. Elsewhere they are visible already."""
    candidates = [*_driver_code(), home]
    tmp = Path("/tmp")
    found: list[Path] = []
    for candidate in candidates:
        resolved = candidate.resolve()
        if tmp in resolved.parents and not any(
            k == resolved or k in resolved.parents for k in found
        ):
            found = [k for k in found if resolved not in k.parents] + [resolved]
    return found
