"""A local Spark Connect server, for Connect clients (notebooks, IDEs) in tests and by hand.

The server is the installed PySpark's own: ``spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer`` from the ``pyspark`` package
directory (PySpark ships ``spark-connect`` among its jars), with Spark's Kafka connector on
its classpath, the settings of :data:`~spark_statestore.connectors.spark.session.LOCAL_CONF`,
a local master, and Python workers that run this interpreter. Nothing is downloaded.

It listens on loopback only, on a port the kernel picks (port 0, so no other process can
take it between a check and the bind), and demands a token it was given in its environment
(not on its command line): a Connect client runs Python code on the server as the server's
user. :attr:`LocalConnectServer.url` carries both, for
``SparkSession.builder.remote(url).getOrCreate()``. The client reaches ``localhost``, which
PySpark's client needs to send a token without TLS (it uses gRPC's local credentials there).

Readiness is the server's own word: it logs ``Spark Connect server started at:
<host>:<port>`` once its gRPC server listens (with the port it got), and the harness waits for
that line. :meth:`LocalConnectServer.stop` stops the JVM (SIGTERM: Spark's shutdown stops its
Python workers, SIGKILL after a timeout), then every process it had started that is still
there; the JVM also dies with the process that started it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

from spark_statestore.connectors.spark.errors import ConnectServerError

__all__ = ["CONNECT_SERVER_CLASS", "LocalConnectServer", "connect_jar"]

log = logging.getLogger(__name__)

CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
"""The Connect server's main class, in PySpark's ``spark-connect`` jar."""

_TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
"""Where the server reads its token when ``spark.connect.authenticate.token`` is unset."""

# Variables that make a PySpark process (spark-submit too) act as a Connect client.
_CLIENT_ENV = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE", "SPARK_API_MODE")

_STARTED = re.compile(rb"Spark Connect server started at: (\S+):(\d+)")
_STOP_TIMEOUT_S = 60.0
_ORPHAN_TIMEOUT_S = 10.0

# Spark's default log configuration logs INFO to stderr; a user's SPARK_CONF_DIR may say
# WARN. Ours keeps warnings, and the one INFO line that says the server listens.
_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.connect.name = org.apache.spark.sql.connect.service.SparkConnectServer
logger.connect.level = info
"""


def connect_jar(home: Path) -> Path:
    """PySpark's ``spark-connect`` jar in ``home`` (its ``jars/``).

    Raises
    ------
    ConnectServerError
        There is none: a Connect server needs PySpark 4.0 or later installed from PyPI.
    """
    jars = sorted((home / "jars").glob("spark-connect_*.jar"))
    if not jars:
        raise ConnectServerError(
            f"the installed PySpark ({home}) has no spark-connect jar in jars/: a Connect "
            "server needs PySpark 4.0 or later installed from PyPI"
        )
    return jars[0]


class LocalConnectServer:
    """A Spark Connect server as a local JVM process, on loopback.

    Parameters
    ----------
    master
        Spark's master for the server's applications (``local[2]``).
    conf
        Settings on top of ``LOCAL_CONF`` (``spark.*``, passed with ``--conf``).
    kafka_source
        Put Spark's Kafka connector (``format("kafka")``) on the server's classpath, from the
        jars ``spark-statestore jars`` resolved for the installed PySpark.
    python_path
        Directories put first on the ``PYTHONPATH`` of the server's Python workers (for
        example a directory with a plain, non-editable install of a plugin).
    log_dir
        The server's working directory: its ``server.log`` and log configuration, and where
        relative paths resolve (default: a temporary directory, kept after :meth:`stop` so
        its log can be read).
    token
        The token clients must send (default: a new random one).
    start_timeout_s
        How long :meth:`start` waits for the server to listen.

    Examples
    --------
    >>> with LocalConnectServer() as server:                          # doctest: +SKIP
    ...     spark = SparkSession.builder.remote(server.url).getOrCreate()
    ...     spark_statestore.register(spark)
    """

    def __init__(
        self,
        master: str = "local[2]",
        *,
        conf: Mapping[str, str] | None = None,
        kafka_source: bool = True,
        python_path: Sequence[str | os.PathLike[str]] = (),
        log_dir: str | os.PathLike[str] | None = None,
        token: str | None = None,
        start_timeout_s: float = 180.0,
    ) -> None:
        self._master = master
        self._conf = dict(conf or {})
        self._kafka_source = kafka_source
        self._python_path = [str(p) for p in python_path]
        self._log_dir = Path(log_dir) if log_dir is not None else None
        self._token = token or secrets.token_urlsafe(24)
        self._start_timeout_s = start_timeout_s
        self._process: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        self._started = threading.Event()
        self._pump: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> LocalConnectServer:
        """Start the server and wait until it listens.

        Raises
        ------
        JavaNotFoundError, JarsMissingError, LocalSparkError
            What the message says to install or run.
        ConnectServerError
            It was started already, exited while starting, or did not listen in time; the
            message has its log's end.
        """
        from spark_statestore.connectors.kafka.local.cluster import find_java
        from spark_statestore.connectors.local.processes import linked_to_parent
        from spark_statestore.connectors.spark.local.daemons import spark_home

        if self._process is not None:
            raise ConnectServerError(f"this Connect server was started already ({self})")
        java = find_java()
        home = spark_home()
        connect_jar(home)
        if self._log_dir is None:
            self._log_dir = Path(tempfile.mkdtemp(prefix="spark-statestore-connect-"))
        self._log_dir.mkdir(parents=True, exist_ok=True)
        log4j = self._log_dir / "log4j2.properties"
        log4j.write_text(_LOG4J2)
        command = [str(home / "bin" / "spark-submit"), "--class", CONNECT_SERVER_CLASS]
        command += ["--master", self._master, "--name", "spark-statestore Connect server"]
        command += ["--driver-java-options", f"-Dlog4j.configurationFile={log4j.as_uri()}"]
        for key, value in self._settings().items():
            command += ["--conf", f"{key}={value}"]
        if self._kafka_source:
            from spark_statestore.connectors.kafka.local.jars import spark_kafka_jars

            command += ["--jars", ",".join(str(p) for p in spark_kafka_jars().jars())]
        env = {k: v for k, v in os.environ.items() if k not in _CLIENT_ENV}
        env.update(
            SPARK_HOME=str(home),
            JAVA_HOME=str(java.resolve().parent.parent),
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
            SPARK_LOCAL_IP="127.0.0.1",
        )
        env[_TOKEN_ENV] = self._token
        if self._python_path:
            env["PYTHONPATH"] = os.pathsep.join(
                [*self._python_path, *filter(None, [os.environ.get("PYTHONPATH")])]
            )
        log_file = self.log_path.open("wb")
        try:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self._log_dir,
                preexec_fn=linked_to_parent(),
            )
        except OSError as exc:
            log_file.close()
            raise ConnectServerError(f"could not run {command[0]}: {exc}") from exc
        assert self._process.stdout is not None
        self._pump = threading.Thread(
            target=self._copy_log,
            args=(self._process.stdout, log_file),
            name="connect-server-log",
            daemon=True,
        )
        self._pump.start()
        try:
            self._wait_until_listening()
        except BaseException:
            self.stop()
            raise
        log.info("local Spark Connect server up: %s (pid %d)", self.address, self.pid)
        return self

    def stop(self, timeout_s: float = _STOP_TIMEOUT_S) -> None:
        """Stop the server and every process it started. Idempotent.

        The JVM gets SIGTERM (Spark's shutdown stops its streaming queries and Python
        workers), SIGKILL after ``timeout_s``; processes it had started that outlive it
        get ``_ORPHAN_TIMEOUT_S`` to exit after it, then SIGKILL.
        """
        process = self._process
        if process is None or process.returncode is not None:
            self._join_pump()
            return
        started = _pidfds(self.processes()[1:])
        try:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log.warning(
                    "the Connect server (pid %d) did not stop in time: killing it", self.pid
                )
                process.kill()
                process.wait()
            for pid, fd in started.items():
                if not _exits(fd, _ORPHAN_TIMEOUT_S):
                    log.warning("process %d of the Connect server outlived it: killing it", pid)
                    with contextlib.suppress(ProcessLookupError):
                        signal.pidfd_send_signal(fd, signal.SIGKILL)
        finally:
            for fd in started.values():
                os.close(fd)
            self._join_pump()

    def __enter__(self) -> LocalConnectServer:
        return self.start() if self._process is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- facts ----------------------------------------------------------------------------
    @property
    def port(self) -> int:
        """The port the server listens on (on 127.0.0.1)."""
        if self._port is None:
            raise ConnectServerError("the Connect server has not started")
        return self._port

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``."""
        return f"127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        """The token clients send."""
        return self._token

    @property
    def url(self) -> str:
        """The client's connection string: ``sc://localhost:<port>/;token=<token>``."""
        return f"sc://localhost:{self.port}/;token={self._token}"

    @property
    def pid(self) -> int:
        """The server JVM's process id."""
        if self._process is None:
            raise ConnectServerError("the Connect server has not started")
        return self._process.pid

    @property
    def working_directory(self) -> Path:
        """The server's working directory (``log_dir``): Spark, and the plugin, resolve
        relative paths against it."""
        if self._log_dir is None:
            raise ConnectServerError("the Connect server has not started")
        return self._log_dir

    @property
    def log_path(self) -> Path:
        """The server's output (``server.log`` in ``log_dir``)."""
        return self.working_directory / "server.log"

    def is_running(self) -> bool:
        """True while the server JVM exists."""
        return self._process is not None and self._process.poll() is None

    def processes(self) -> list[int]:
        """The server JVM and every process it started that runs now (its Python workers,
        the driver-side processes of Python data sources), JVM first."""
        if not self.is_running():
            return []
        from spark_statestore.connectors.local.processes import descendants

        return [self.pid, *descendants(self.pid)]

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the server's log, for error messages."""
        from spark_statestore.connectors.local.processes import log_tail

        return "" if self._log_dir is None else log_tail(self.log_path, chars)

    def __repr__(self) -> str:
        where = self.address if self._port is not None else "not listening"
        return f"LocalConnectServer({self._master}, {where})"

    # -- internals ------------------------------------------------------------------------
    def _settings(self) -> dict[str, str]:
        from spark_statestore.connectors.spark.session import LOCAL_CONF

        return {
            **LOCAL_CONF,
            # Loopback only: the gRPC service, and the driver's own RPC and block manager.
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": "0",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            **self._conf,
        }

    def _copy_log(self, source: IO[bytes], target: IO[bytes]) -> None:
        """Copy the server's output into its log for as long as it runs, and mark it started
        at the line that says where it listens (or at its end: it exited)."""
        with source, target:
            for line in source:
                target.write(line)
                target.flush()
                if not self._started.is_set():
                    match = _STARTED.search(line)
                    if match:
                        self._port = int(match.group(2))
                        self._started.set()
        self._started.set()

    def _wait_until_listening(self) -> None:
        process = self._process
        assert process is not None
        if not self._started.wait(self._start_timeout_s):
            raise ConnectServerError(
                f"the Spark Connect server (pid {process.pid}) did not listen within "
                f"{self._start_timeout_s:.0f} s; {self.log_path} ends with:\n{self.log_tail()}"
            )
        if self._port is None:
            self._join_pump()
            raise ConnectServerError(
                f"the Spark Connect server exited with code {process.wait()} while starting; "
                f"{self.log_path} ends with:\n{self.log_tail()}"
            )

    def _join_pump(self) -> None:
        if self._pump is not None:
            self._pump.join(timeout=10)


def _pidfds(pids: Sequence[int]) -> dict[int, int]:
    """A pidfd per process still there: it names that process even after its pid is reused."""
    fds: dict[int, int] = {}
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            fds[pid] = os.pidfd_open(pid)
    return fds


def _exits(fd: int, timeout_s: float) -> bool:
    """Whether the process of pidfd ``fd`` has exited, or does within ``timeout_s``."""
    import select

    ready, _, _ = select.select([fd], [], [], timeout_s)
    return bool(ready)
