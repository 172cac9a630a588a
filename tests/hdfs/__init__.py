"""A real HDFS for tests: Hadoop's MiniDFSCluster in a JVM of its own.

The cluster is Hadoop's own code (``hadoop-client-minicluster``, of the Hadoop version
PySpark's client jars have, resolved by ``spark-statestore jars`` and cached), run through
the Java single-file launcher ``MiniHdfs.java`` beside this file: no build step. It listens
on loopback only, on free ports: ``rpc_port`` for ``hdfs://`` (Spark's bundled Hadoop client)
and ``http_port`` for WebHDFS (the sink's checkpoint reader).
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from spark_statestore.connectors.kafka.local import find_java, hdfs_minicluster_jars, resolve
from spark_statestore.connectors.kafka.local.jars import pyspark_jars_directory

__all__ = ["LocalHdfs"]

_LAUNCHER = Path(__file__).with_name("MiniHdfs.java")
_START_TIMEOUT_S = 120.0
# A short-lived test server: C1 only and the serial collector start it in ~60 % of the time.
_JVM_FLAGS = ("-Xmx512m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


class LocalHdfs:
    """A MiniDFSCluster in a child JVM; a context manager (stopped and removed on exit).

    Attributes
    ----------
    rpc_port, http_port : int
        The NameNode's RPC (``hdfs://127.0.0.1:rpc_port``) and HTTP (WebHDFS) ports.
    started_in_s : float
        How long the start took (JVM, compiling the launcher, format, DataNode registration).
    """

    def __init__(self) -> None:
        self._directory = Path(tempfile.mkdtemp(prefix="spark-statestore-hdfs-"))
        self._process: subprocess.Popen[str] | None = None
        self.rpc_port = 0
        self.http_port = 0
        self.started_in_s = 0.0

    @property
    def uri(self) -> str:
        """``hdfs://127.0.0.1:<rpc port>``: the filesystem's root for Spark."""
        return f"hdfs://127.0.0.1:{self.rpc_port}"

    @property
    def http_address(self) -> str:
        """The NameNode's WebHDFS ``host:port``."""
        return f"127.0.0.1:{self.http_port}"

    def start(self) -> LocalHdfs:
        began = time.monotonic()
        jars = resolve(hdfs_minicluster_jars())  # a no-op when `spark-statestore jars` ran
        classpath = os.pathsep.join([f"{pyspark_jars_directory()}/*", f"{jars}/*"])
        log = open(self._directory / "hdfs.log", "w")  # noqa: SIM115 - the child's stderr
        self._process = subprocess.Popen(
            [find_java(), *_JVM_FLAGS, "-cp", classpath, str(_LAUNCHER), str(self._directory)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        log.close()
        assert self._process.stdout is not None
        ready, _, _ = select.select([self._process.stdout], [], [], _START_TIMEOUT_S)
        # the launcher's READY line; EOF if it died
        line = self._process.stdout.readline() if ready else "(no answer in time)"
        if not line.startswith("READY "):
            self.stop()
            tail = (self._directory / "hdfs.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the test HDFS did not start ({line!r}); its log ends:\n{tail}")
        _, rpc, http = line.split()
        self.rpc_port, self.http_port = int(rpc), int(http)
        self.started_in_s = time.monotonic() - began
        return self

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            assert process.stdin is not None
            process.stdin.close()  # the launcher shuts the cluster down
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
        shutil.rmtree(self._directory, ignore_errors=True)

    def __enter__(self) -> LocalHdfs:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
