"""A Spark standalone cluster whose executors run on other hosts of this machine.

Used by the cluster tests (``tests/cluster/``) and the bench: what local mode hides (where
code runs, which disk and which loopback it sees) is real here. The Master and the Workers
run from the installed PySpark's own jars (``$SPARK_HOME/bin/spark-class``, ``SPARK_HOME``
being the ``pyspark`` package). The Master runs in the root namespace, on the address of a
bridge; each Worker runs on a host of its own (:class:`~..local.hosts.LocalHosts`): its own
network namespace (loopback, address), hostname and mount namespace, in which ``/tmp`` is
private and the driver's data directories (``hidden``) are covered by empty tmpfs mounts. The
executors a Worker starts are its children and live in the same world; they run the
driver's interpreter (``PYSPARK_PYTHON``) from the repository, which stays visible.

The driver is this process: :meth:`LocalSparkCluster.session` builds the SparkSession with
``spark.master`` the Master's URL and the driver bound to the bridge address, so executors
reach it and everything else on that address (a :class:`~spark_statestore.connectors.kafka.
local.LocalKafkaCluster` started with ``host=cluster.address``) and nothing the driver binds
on 127.0.0.1.

Every JVM is started with a parent-death signal; :meth:`LocalSparkCluster.close` stops the
session it made, kills what runs on the hosts, the Master, and removes the namespaces,
links and files. A start first removes what a crashed earlier run left.

Faults are real events: :meth:`LocalSparkCluster.kill_executor` SIGKILLs an executor JVM
(``CoarseGrainedExecutorBackend``) found on a Worker's host; the Worker starts another.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import threading
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from spark_statestore.connectors.local.hosts import LocalHosts
from spark_statestore.connectors.local.processes import (
    free_ports,
    owned_tempdir,
    remove_stale_tempdirs,
)
from spark_statestore.connectors.spark.errors import LocalSparkError, SparkClusterStartError
from spark_statestore.connectors.spark.local.daemons import SparkDaemon, spark_home
from spark_statestore.connectors.spark.local.executors import (
    SparkExecutor,
    executors_of,
    kill_executor,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DEFAULT_PREFIX", "LocalSparkCluster"]

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "sss"
"""Names of the cluster's namespaces and links start with it (see :mod:`..local.hosts`)."""

_START_ATTEMPTS = 3
_POLL_S = 0.2


class LocalSparkCluster:
    """A Spark standalone Master and ``workers`` Workers, each Worker on a host of its own.

    Parameters
    ----------
    workers
        Number of Workers (hosts).
    hidden
        Directories of this machine the Workers and their executors must not see (the
        driver's stores and checkpoints); each is covered by an empty tmpfs on every host,
        and created first if missing. ``/tmp`` is private on every host anyway.
    worker_cores, worker_memory
        What each Worker offers (``--cores``, ``--memory``).
    data_dir
        Keep the daemons' files here. Default: a temporary directory removed by
        :meth:`close`.
    start_timeout_s
        How long :meth:`start` waits for every Worker to register with the Master.
    prefix
        Of the hosts' namespace and link names (1 to 5 letters).
    driver_code
        True (default): the hosts see the driver's Python environment and the plugin's
        packages, and executors run the driver's interpreter. False: they see Spark's home
        alone (the driver's environment, the checkout, the build tools and the system's
        LevelDB and snappy are covered), as a cluster's workers would: the application must
        ship its Python environment (``spark.archives``, see :func:`~spark_statestore.
        connectors.spark.shipping.pack_environment`).

    Examples
    --------
    >>> with LocalSparkCluster(workers=2, hidden=[data]) as cluster:     # doctest: +SKIP
    ...     kafka = LocalKafkaCluster(host=cluster.address).start()
    ...     spark = cluster.session("app", kafka_source=True)
    ...     spark.range(4).repartition(2).count()
    """

    def __init__(
        self,
        workers: int = 2,
        *,
        hidden: Sequence[str | Path] = (),
        worker_cores: int = 1,
        worker_memory: str = "1g",
        data_dir: str | Path | None = None,
        start_timeout_s: float = 120.0,
        prefix: str = DEFAULT_PREFIX,
        driver_code: bool = True,
    ) -> None:
        if workers < 1:
            raise LocalSparkError(f"a local Spark cluster needs at least 1 worker, got {workers}")
        self._count = workers
        self._hidden = [Path(h).absolute() for h in hidden]
        self._cores = worker_cores
        self._memory = worker_memory
        self._keep = data_dir is not None
        self._root = Path(data_dir).absolute() if data_dir is not None else None
        self._start_timeout_s = start_timeout_s
        self._prefix = prefix
        self._driver_code = driver_code
        self._hosts = LocalHosts(workers, prefix=prefix)
        self._master: SparkDaemon | None = None
        self._workers: list[SparkDaemon] = []
        self._session: SparkSession | None = None
        self._lock = threading.RLock()
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> LocalSparkCluster:
        """Make the hosts, start the Master and the Workers, wait until all Workers are
        registered with the Master (its own JSON status says so).

        Raises
        ------
        HostsUnavailableError
            Not root, or ``ip``/``unshare`` missing (tests skip with this message).
        SparkClusterStartError
            A daemon exited or did not register in time; the message has its log's end.
        """
        home = spark_home()
        try:
            self._hosts.start()
            remove_stale_tempdirs("spark", self._prefix)
            if self._root is None:
                self._root = owned_tempdir("spark", f"{self._prefix}{os.getpid()}")
            self._root.mkdir(parents=True, exist_ok=True)
            for directory in self._hidden:
                directory.mkdir(parents=True, exist_ok=True)
            for attempt in range(1, _START_ATTEMPTS + 1):
                try:
                    self._start_master(home)
                    break
                except SparkClusterStartError as exc:
                    self._stop_daemon(self._master)
                    if not exc.port_taken or attempt == _START_ATTEMPTS:
                        raise
                    log.info("a port was taken while the Spark Master started; new ports")
            for host in self._hosts.hosts:
                worker = SparkDaemon.worker(self._root, host)
                self._workers.append(worker)
                worker.start_worker(
                    home,
                    self.master_url,
                    cores=self._cores,
                    memory=self._memory,
                    hide=self._hidden,
                    driver_code=self._driver_code,
                )
            self._wait_for_workers()
        except BaseException:
            self.close()
            raise
        log.info("local Spark cluster up: %s, workers %s", self.master_url, self.worker_addresses)
        return self

    def close(self) -> None:
        """Stop the session :meth:`session` made, kill every executor, Worker and the Master,
        remove the hosts and (unless ``data_dir`` was given) the files. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            session, self._session = self._session, None
        if session is not None:
            with contextlib.suppress(Exception):  # a driver already gone stops nothing
                session.stop()
        for worker in self._workers:
            self._stop_daemon(worker)
        self._hosts.close()  # kills whatever else runs on the hosts: executors, workers
        self._stop_daemon(self._master)
        if not self._keep and self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)

    def __enter__(self) -> LocalSparkCluster:
        return self.start() if self._master is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- facts ----------------------------------------------------------------------------
    @property
    def address(self) -> str:
        """The driver's address: the root namespace's address on the bridge. Everything the
        executors must reach (the driver, Kafka, a store's server) listens here."""
        return self._hosts.address

    @property
    def master_url(self) -> str:
        """``spark://<address>:<port>``."""
        if self._master is None:
            raise LocalSparkError("the local Spark cluster is not started")
        return f"spark://{self._master.address}:{self._master.port}"

    @property
    def master(self) -> SparkDaemon:
        """The Master daemon."""
        if self._master is None:
            raise LocalSparkError("the local Spark cluster is not started")
        return self._master

    @property
    def workers(self) -> list[SparkDaemon]:
        """The Worker daemons, in host order."""
        return list(self._workers)

    @property
    def worker_addresses(self) -> list[str]:
        """Each Worker host's address (what its executors' tasks see as their own)."""
        return [w.address for w in self._workers]

    @property
    def hosts(self) -> LocalHosts:
        """The hosts the Workers run on (to cut one off the bridge, for example)."""
        return self._hosts

    @property
    def hidden(self) -> list[Path]:
        """The directories the hosts do not see."""
        return list(self._hidden)

    def master_status(self) -> dict[str, Any]:
        """The Master's JSON status (workers, applications)."""
        master = self.master
        url = f"http://{master.address}:{master.ui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as answer:
            status: dict[str, Any] = json.load(answer)
        return status

    # -- the driver -----------------------------------------------------------------------
    def session_conf(
        self, *, executor_cores: int = 1, executor_memory: str = "1g"
    ) -> dict[str, str]:
        """The driver's settings for this cluster, on top of
        :data:`~spark_statestore.connectors.spark.session.LOCAL_CONF`: the master, the
        driver bound to :attr:`address`, one executor of ``executor_cores`` per Worker, and
        the first job held back until every executor has registered."""
        assert self._root is not None
        cores = min(executor_cores, self._cores)
        return {
            "spark.driver.host": self.address,
            "spark.driver.bindAddress": self.address,
            "spark.executor.cores": str(cores),
            "spark.executor.memory": executor_memory,
            "spark.cores.max": str(cores * self._count),
            # A job planned before every executor registered would run on the first alone.
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": f"{self._start_timeout_s:.0f}s",
            "spark.local.dir": str(self._root / "driver"),
        }

    def session(
        self,
        app_name: str = "spark-statestore-cluster",
        *,
        kafka_source: bool = False,
        conf: Mapping[str, str] | None = None,
    ) -> SparkSession:
        """This process's SparkSession as the driver of this cluster, with one executor per
        Worker registered when it returns (stopped by :meth:`close`).

        ``kafka_source`` and ``conf`` as for
        :func:`~spark_statestore.connectors.spark.session.local_session`; ``conf`` overrides
        :meth:`session_conf`.

        Raises
        ------
        SparkClusterStartError
            Not every Worker got a registered executor in time (the message has the logs).
        LocalSparkError
            This process already has a SparkContext for another master, or had one (its
            driver JVM keeps the settings of the first).
        """
        from pyspark import SparkContext

        from spark_statestore.connectors.spark.session import local_session

        if SparkContext._active_spark_context is None and SparkContext._gateway is not None:
            # The driver JVM outlives a stopped SparkContext, and a new one would run in it
            # with the settings the JVM was started with: among them where the executors
            # run and the address they reach the driver on, which the store host and every
            # plan read (executors on this cluster's hosts would be told to dial loopback).
            raise LocalSparkError(
                "this process started its Spark driver JVM for an earlier session (stopped "
                "since), and a driver JVM keeps the settings it was started with: build the "
                "session of a local Spark cluster in a fresh process"
            )
        settings = {**self.session_conf(), **(conf or {})}
        session = local_session(app_name, self.master_url, kafka_source=kafka_source, conf=settings)
        master = session.sparkContext.master
        if master != self.master_url:
            # getOrCreate() returned a session this process started before, elsewhere.
            raise LocalSparkError(
                f"this process already runs a Spark driver for {master}, and a process has "
                f"one SparkContext: build the session of {self.master_url} in a fresh "
                "process (the cluster tests run in a pytest process of their own for that)"
            )
        with self._lock:
            self._session = session
        self.wait_for_executors()
        return session

    # -- executors ------------------------------------------------------------------------
    def executors(self) -> list[SparkExecutor]:
        """The executor JVMs running on the Workers' hosts now."""
        return executors_of(self._workers)

    def kill_executor(self, executor: SparkExecutor, timeout_s: float = 30.0) -> None:
        """SIGKILL ``executor`` and wait until its process is gone (its Worker then reports
        it lost and starts another; :meth:`wait_for_executors` waits for that one)."""
        kill_executor(executor, timeout_s)

    def wait_for_executors(self, count: int | None = None, timeout_s: float | None = None) -> None:
        """Wait until ``count`` (default: one per Worker) executors are registered with the
        driver of :meth:`session` (after a kill: until the replacement is).

        Raises
        ------
        SparkClusterStartError
            Not in time (the message has the Workers' and executors' logs).
        """
        with self._lock:
            session = self._session
        if session is None:
            raise LocalSparkError("no driver: call session() first")
        want = self._count if count is None else count
        timeout = self._start_timeout_s if timeout_s is None else timeout_s
        context = session.sparkContext._jsc.sc()
        deadline = time.monotonic() + timeout
        while True:
            # The driver's own count; getExecutorIds() leaves the driver out.
            registered = int(context.getExecutorIds().size())
            if registered >= want:
                return
            if time.monotonic() > deadline:
                raise SparkClusterStartError(
                    f"{registered} of {want} executors registered with the driver at "
                    f"{self.address} within {timeout:.0f} s; " + self._diagnosis()
                )
            threading.Event().wait(_POLL_S)

    # -- internals ------------------------------------------------------------------------
    def _start_master(self, home: Path) -> None:
        assert self._root is not None
        port, ui_port = free_ports(self.address, 2)
        master = SparkDaemon.master(self._root, self.address, port, ui_port)
        self._master = master
        master.start_master(home)
        deadline = time.monotonic() + self._start_timeout_s
        while True:
            if not master.is_running():
                raise master.start_error()
            with contextlib.suppress(OSError, ValueError):
                if self.master_status().get("status") == "ALIVE":
                    return
            if time.monotonic() > deadline:
                raise SparkClusterStartError(
                    f"the Spark Master did not report ALIVE within {self._start_timeout_s:.0f} "
                    f"s; {master.log_path} ends with:\n{master.log_tail()}"
                )
            threading.Event().wait(_POLL_S)

    def _wait_for_workers(self) -> None:
        """Until the Master lists every Worker ALIVE at its address."""
        deadline = time.monotonic() + self._start_timeout_s
        want = set(self.worker_addresses)
        alive: set[str] = set()
        while True:
            for daemon in [self.master, *self._workers]:
                if not daemon.is_running():
                    raise daemon.start_error()
            with contextlib.suppress(OSError, ValueError):
                status = self.master_status()
                alive = {
                    str(w.get("host"))
                    for w in status.get("workers", [])
                    if w.get("state") == "ALIVE"
                }
                if want <= alive:
                    return
            if time.monotonic() > deadline:
                missing = sorted(want - alive)
                slow = next(w for w in self._workers if w.address in missing)
                raise SparkClusterStartError(
                    f"Spark workers on {missing} did not register with {self.master_url} within "
                    f"{self._start_timeout_s:.0f} s; {slow.log_path} ends with:\n{slow.log_tail()}"
                )
            threading.Event().wait(_POLL_S)

    def _diagnosis(self) -> str:
        parts = [f"{w.log_path} ends with:\n{w.log_tail(1500)}" for w in self._workers]
        parts += [f"executor {e.executor_id} log:\n{e.log_tail(1500)}" for e in self.executors()]
        return "\n".join(parts)

    def _stop_daemon(self, daemon: SparkDaemon | None) -> None:
        if daemon is not None:
            daemon.kill()
