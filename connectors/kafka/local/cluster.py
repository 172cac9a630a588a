"""A real Apache Kafka cluster in KRaft mode, as local JVM processes on loopback.

Used by ``spark-statestore broker``, the demo, the bench and the tests. Each node is one
JVM running ``kafka.Kafka`` from the jars of :func:`~.jars.kafka_jars` (resolved by the
setup, never downloaded here). Up to three nodes are combined broker+controllers and form
the controller quorum (static voters); further nodes are brokers only.

Faults are real events on real processes: :meth:`LocalKafkaCluster.kill` (SIGKILL),
:meth:`~LocalKafkaCluster.stop` (SIGTERM, a controlled shutdown), :meth:`~LocalKafkaCluster.pause`
and :meth:`~LocalKafkaCluster.resume` (SIGSTOP/SIGCONT), :meth:`~LocalKafkaCluster.restart`
(same node id, ports and data).

Every JVM is started with a parent-death signal, so a cluster whose Python process is
killed takes its JVMs with it; :meth:`LocalKafkaCluster.close` stops them in order and
removes temporary data.

Why one module of over 500 lines: a node's lifecycle (format, start, wait for the
cluster's metadata, the faults, stop) and the cluster built from nodes act on the same
process state.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from spark_statestore.connectors.kafka.errors import (
    BrokerStartError,
    JavaNotFoundError,
    LocalKafkaError,
    is_transient,
)
from spark_statestore.connectors.kafka.local.jars import kafka_jars, kafka_major
from spark_statestore.connectors.local.processes import (
    LoggedProcess,
    free_ports,
    launch,
    port_taken,
)
from spark_statestore.integer_spec import ascii_integer

__all__ = [
    "DEFAULT_HEAP",
    "KafkaNode",
    "LocalKafkaCluster",
    "SaslSslListener",
    "create_topics",
    "find_java",
    "parse_topic_spec",
]

log = logging.getLogger(__name__)

DEFAULT_HEAP = "512m"
"""Heap of each node: several nodes and a Spark driver share a 2-core, 24 GiB machine."""

ENV_HEAP = "SPARK_STATESTORE_BROKER_HEAP"
_MAX_VOTERS = 3
_START_ATTEMPTS = 3
_STOP_TIMEOUT_S = 30.0
_CLUSTER_ID_FILE = "cluster.id"

_JVM_FLAGS = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)

# Settings that make a small cluster behave well on one machine. Everything else is
# Kafka's default, so what the tests prove holds for a stock broker.
_BASE_CONFIG: dict[str, str] = {
    "num.network.threads": "2",
    "num.io.threads": "4",
    "background.threads": "4",
    "num.recovery.threads.per.data.dir": "1",
    "num.partitions": "1",
    # Kafka Streams and our sink create their topics; a typo should fail, not create one.
    "auto.create.topics.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "5",
    "transaction.state.log.num.partitions": "5",
    # How often the broker acts on time-based events, so tests see them within a second:
    # retention, compaction, and the coordinator aborting timed-out transactions.
    "log.initial.task.delay.ms": "0",
    "log.retention.check.interval.ms": "1000",
    "log.cleaner.backoff.ms": "500",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}

_LOG4J = """\
status = warn
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRefs = stdout
rootLogger.appenderRef.stdout.ref = STDOUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
logger.log.name = org.apache.kafka.storage.internals.log
logger.log.level = WARN
logger.kafkalog.name = kafka.log
logger.kafkalog.level = WARN
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = INFO
logger.coordinator.name = org.apache.kafka.coordinator
logger.coordinator.level = WARN
logger.txn.name = kafka.coordinator.transaction
logger.txn.level = INFO
"""

# The same for a Kafka 3 broker ($SPARK_STATESTORE_BROKER_VERSION), which logs through reload4j
# (log4j 1's API).
_LOG4J1 = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.log=WARN
log4j.logger.kafka.log.LogCleaner=INFO
log4j.logger.org.apache.kafka.storage.internals.log=WARN
log4j.logger.org.apache.kafka.coordinator=WARN
log4j.logger.kafka.coordinator.transaction=INFO
"""


def find_java() -> Path:
    """The ``java`` of ``JAVA_HOME`` or PATH, checked to be version 17 or newer.

    Raises
    ------
    JavaNotFoundError
        No java, or one older than 17; the message says what to install.
    """
    home = os.environ.get("JAVA_HOME")
    candidate = Path(home) / "bin" / "java" if home else None
    if candidate is None or not candidate.is_file():
        found = shutil.which("java")
        candidate = Path(found) if found else None
    install = (
        "install Java 17 (Debian: apt-get install openjdk-17-jre-headless; `make setup` "
        "does it when run as root) or set JAVA_HOME to a Java 17+ installation"
    )
    if candidate is None:
        raise JavaNotFoundError(f"Kafka needs Java 17 or newer and none was found: {install}")
    try:
        done = subprocess.run(
            [str(candidate), "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JavaNotFoundError(f"{candidate} -version failed ({exc}): {install}") from exc
    match = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    major = 0
    if match:
        major = int(match.group(2)) if match.group(1) == "1" else int(match.group(1))
    if major < 17:
        raise JavaNotFoundError(
            f"Kafka needs Java 17 or newer; {candidate} is version {major or 'unknown'}: {install}"
        )
    return candidate


@dataclass(frozen=True)
class SaslSslListener:
    """A SASL_SSL client listener each node opens beside its PLAINTEXT one (the brokers still
    talk to each other in PLAINTEXT): TLS with a PEM certificate, SASL ``PLAIN`` with
    ``users``. What a secured production cluster (Confluent Cloud's kind) asks of clients.

    Attributes
    ----------
    certificate
        PEM file of the brokers' certificate (and its chain), valid for the cluster's host.
    key
        PEM file of its private key, PKCS#8, not encrypted.
    users
        ``{username: password}`` the brokers accept.
    """

    certificate: Path
    key: Path
    users: Mapping[str, str]

    def settings(self, keystore: Path) -> dict[str, str]:
        """The listener's ``server.properties`` settings; ``keystore`` is where the PEM
        keystore (key, then certificate chain) is written."""
        for name, password in self.users.items():
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or '"' in password or "\n" in password:
                raise LocalKafkaError(
                    f"SASL user {name!r}: a user name of letters, digits, '_', '.', '-' and a "
                    "password without quotes or newlines, please (they go into a JAAS line)"
                )
        keystore.write_bytes(Path(self.key).read_bytes() + Path(self.certificate).read_bytes())
        users = " ".join(f'user_{name}="{password}"' for name, password in self.users.items())
        return {
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
            ),
            "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
            "listener.name.sasl_ssl.ssl.keystore.location": str(keystore),
        }


@dataclass
class KafkaNode(LoggedProcess):
    """One JVM of the cluster.

    Attributes
    ----------
    node_id
        Kafka's ``node.id`` (1-based).
    port
        The broker's client port (PLAINTEXT).
    secure_port
        Its SASL_SSL client port when the cluster has a :class:`SaslSslListener`, else None.
    controller_port
        The controller port when the node is a voter, else None.
    directory
        The node's folder: ``server.properties``, ``server.log``, ``data/``.
    """

    node_id: int
    port: int
    controller_port: int | None
    directory: Path
    secure_port: int | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    paused: bool = False

    @property
    def log_path(self) -> Path:
        """Where the JVM's output goes."""
        return self.directory / "server.log"

    @property
    def config_path(self) -> Path:
        """The node's ``server.properties``."""
        return self.directory / "server.properties"


class LocalKafkaCluster:
    """A KRaft cluster of ``brokers`` local JVM nodes on ``host``.

    Parameters
    ----------
    brokers
        Number of nodes; the first three are combined broker+controllers (the quorum).
    host
        Address the nodes listen on and advertise (loopback by default).
    data_dir
        Keep the cluster's files here (formatted once, reused by later runs). Default: a
        temporary directory removed by :meth:`close`.
    heap
        JVM heap of each node (``-Xmx``), default ``$SPARK_STATESTORE_BROKER_HEAP`` or 512m.
    config
        Extra ``server.properties`` settings for every node.
    sasl_ssl
        Open a SASL_SSL client listener on every node too (:attr:`secure_bootstrap_servers`).
    start_timeout_s
        How long :meth:`start` waits for the cluster to answer metadata.

    Examples
    --------
    >>> with LocalKafkaCluster(brokers=3) as kafka:                 # doctest: +SKIP
    ...     kafka.create_topic("app-store-changelog", partitions=8)
    ...     producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    """

    def __init__(
        self,
        brokers: int = 1,
        *,
        host: str = "127.0.0.1",
        data_dir: str | Path | None = None,
        heap: str | None = None,
        config: Mapping[str, str] | None = None,
        sasl_ssl: SaslSslListener | None = None,
        start_timeout_s: float = 120.0,
    ) -> None:
        if brokers < 1:
            raise LocalKafkaError(f"--brokers must be at least 1, got {brokers}")
        self._count = brokers
        self._host = host
        self._heap = heap or os.environ.get(ENV_HEAP) or DEFAULT_HEAP
        self._extra = dict(config or {})
        self._sasl_ssl = sasl_ssl
        self._start_timeout_s = start_timeout_s
        self._keep = data_dir is not None
        self._root = Path(data_dir) if data_dir is not None else None
        self._nodes: list[KafkaNode] = []
        self._lock = threading.RLock()
        self._admin: Any = None
        self._java: Path | None = None
        self._classpath = ""
        self._version = ""
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> LocalKafkaCluster:
        """Format storage, start every node and wait until all brokers answer metadata.

        Raises
        ------
        JavaNotFoundError, JarsMissingError
            What the message says to install or run.
        BrokerStartError
            A node exited or did not come up in time; the message has its log's end.
        """
        self._java = find_java()
        jar_set = kafka_jars()
        self._classpath = jar_set.classpath()
        self._version = jar_set.version
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="spark-statestore-kafka-"))
        self._root.mkdir(parents=True, exist_ok=True)
        cluster_id = self._cluster_id()
        for attempt in range(1, _START_ATTEMPTS + 1):
            self._nodes = self._layout()
            try:
                for node in self._nodes:
                    self._write_config(node)
                self._format(cluster_id)
                for node in self._nodes:
                    self._launch(node)
                self.wait_until_ready(self._start_timeout_s)
                break
            except BrokerStartError as exc:
                self._kill_all()
                with self._lock:
                    self._admin = None  # it knows the old ports
                if not exc.port_taken or attempt == _START_ATTEMPTS:
                    self.close()
                    raise
                log.info("a port was taken while Kafka started; retrying with new ports")
            except BaseException:
                self.close()
                raise
        log.info("local Kafka %s up: %s", self._version, self.bootstrap_servers)
        return self

    def close(self) -> None:
        """Stop every node and remove temporary data. Idempotent.

        With a kept ``data_dir`` the nodes get a controlled shutdown (SIGTERM) one by one,
        SIGKILL after 15 s each; temporary clusters are killed at once, their data removed.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            admin, self._admin = self._admin, None
        del admin
        for node in self._nodes:
            if node.paused and node.is_running():
                node.signal(signal.SIGCONT)
        if self._keep:
            # Kept data: one node after the other, so each controlled shutdown still finds
            # a controller; the last voter may wait for a quorum that is gone: cut it short.
            for node in sorted(self._nodes, key=lambda n: -n.node_id):
                if node.is_running():
                    node.signal(signal.SIGTERM)
                    self._reap(node, time.monotonic() + _STOP_TIMEOUT_S / 2)
        else:
            # Temporary data is deleted next: nothing is worth a controlled shutdown.
            self._kill_all()
        if not self._keep and self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)

    def __enter__(self) -> LocalKafkaCluster:
        return self.start() if not self._nodes else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- facts ----------------------------------------------------------------------------
    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of every broker, comma-separated."""
        return ",".join(f"{self._host}:{n.port}" for n in self._nodes)

    @property
    def secure_bootstrap_servers(self) -> str:
        """``host:port`` of every broker's SASL_SSL listener, comma-separated.

        Raises
        ------
        LocalKafkaError
            If the cluster was made without ``sasl_ssl``.
        """
        if self._sasl_ssl is None:
            raise LocalKafkaError("this local Kafka has no SASL_SSL listener (give sasl_ssl=)")
        return ",".join(f"{self._host}:{n.secure_port}" for n in self._nodes)

    @property
    def nodes(self) -> list[KafkaNode]:
        """The cluster's nodes (node ids 1..N)."""
        return list(self._nodes)

    @property
    def data_dir(self) -> Path | None:
        """The folder holding every node's files."""
        return self._root

    def node(self, node_id: int) -> KafkaNode:
        """The node with ``node.id`` ``node_id``."""
        for node in self._nodes:
            if node.node_id == node_id:
                return node
        raise LocalKafkaError(
            f"no Kafka node {node_id}: the cluster has nodes 1..{len(self._nodes)}"
        )

    def admin(self) -> Any:
        """A shared confluent-kafka ``AdminClient`` for this cluster."""
        with self._lock:
            if self._admin is None:
                from confluent_kafka.admin import AdminClient

                self._admin = AdminClient(
                    {
                        "bootstrap.servers": self.bootstrap_servers,
                        # Refused connections while nodes start or after a kill are
                        # expected here; the calls' own results report what matters.
                        "log_level": 0,
                        "reconnect.backoff.max.ms": 200,
                    }
                )
            return self._admin

    def leader(self, topic: str, partition: int) -> int:
        """The node id currently leading ``topic``/``partition`` (-1: none)."""
        metadata = self.admin().list_topics(topic=topic, timeout=10)
        info = metadata.topics.get(topic)
        if info is None or info.error is not None or partition not in info.partitions:
            raise LocalKafkaError(f"topic {topic!r} partition {partition} is not in the cluster")
        return int(info.partitions[partition].leader)

    # -- topics ---------------------------------------------------------------------------
    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        replication_factor: int | None = None,
        config: Mapping[str, str] | None = None,
        compacted: bool | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        """Create a topic through the AdminClient and wait until every partition has a leader.

        ``compacted`` defaults to whether the name ends in ``-changelog`` (Kafka Streams
        creates its changelog topics with ``cleanup.policy=compact``).
        """
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.cimpl import NewTopic

        if not name:
            raise LocalKafkaError("topic name must not be empty")
        if partitions < 1:
            raise LocalKafkaError(f"topic {name!r}: partitions must be >= 1, got {partitions}")
        settings = dict(config or {})
        if compacted is None:
            compacted = name.endswith("-changelog")
        if compacted:
            settings.setdefault("cleanup.policy", "compact")
        replication = replication_factor or min(_MAX_VOTERS, self._count)
        deadline = time.monotonic() + timeout_s
        retried = False
        while True:
            futures = self.admin().create_topics(
                [NewTopic(name, partitions, replication, config=settings)],
                operation_timeout=timeout_s,
                request_timeout=timeout_s,
            )
            try:
                futures[name].result()
                break
            except KafkaException as exc:
                error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                if (
                    retried
                    and error is not None
                    and error.code() == KafkaError.TOPIC_ALREADY_EXISTS
                ):
                    break  # the attempt that failed on our side created it
                # A fresh cluster's client drops the handle of the bootstrap broker once it
                # knows the brokers' ids, failing a request in flight (_DESTROY_BROKER): ask
                # again, as for a broker that moved or came back.
                if error is None or not is_transient(error) or time.monotonic() > deadline:
                    raise LocalKafkaError(
                        f"could not create topic {name!r}: {exc.args[0]}"
                    ) from exc
                retried = True
                threading.Event().wait(0.05)  # as _wait_for_leaders: not a tight loop
        self._wait_for_leaders(name, partitions, max(0.1, deadline - time.monotonic()))

    def _wait_for_leaders(self, name: str, partitions: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            metadata = self.admin().list_topics(topic=name, timeout=max(0.1, timeout_s))
            info = metadata.topics.get(name)
            ready = (
                info is not None
                and info.error is None
                and len(info.partitions) == partitions
                and all(p.leader >= 0 for p in info.partitions.values())
            )
            if ready:
                return
            if time.monotonic() > deadline:
                raise LocalKafkaError(f"topic {name!r} has no leader for every partition yet")
            # Metadata is eventually consistent across brokers: ask again after a beat.
            threading.Event().wait(0.05)

    # -- faults ---------------------------------------------------------------------------
    def kill(self, node_id: int) -> None:
        """SIGKILL a node's JVM (a crash: no controlled shutdown, no flush)."""
        node = self.node(node_id)
        node.kill()
        node.paused = False

    def stop(self, node_id: int, timeout_s: float = _STOP_TIMEOUT_S) -> None:
        """SIGTERM a node: Kafka's controlled shutdown moves its leaderships away first."""
        node = self.node(node_id)
        if node.is_running():
            if node.paused:
                self.resume(node_id)
            node.signal(signal.SIGTERM)
            self._reap(node, time.monotonic() + timeout_s)

    def pause(self, node_id: int) -> None:
        """SIGSTOP a node: it keeps its sockets but answers nothing until :meth:`resume`."""
        node = self.node(node_id)
        if not node.is_running():
            raise LocalKafkaError(f"Kafka node {node_id} is not running; cannot pause it")
        node.signal(signal.SIGSTOP)
        node.paused = True

    def resume(self, node_id: int) -> None:
        """SIGCONT a paused node."""
        node = self.node(node_id)
        if node.is_running():
            node.signal(signal.SIGCONT)
        node.paused = False

    def restart(self, node_id: int, *, timeout_s: float | None = None) -> None:
        """Start a stopped or killed node again (same id, ports and data) and wait until
        the cluster has all its brokers again."""
        node = self.node(node_id)
        if node.is_running():
            raise LocalKafkaError(f"Kafka node {node_id} is still running (pid {node.pid})")
        self._launch(node)
        self.wait_until_ready(timeout_s or self._start_timeout_s)

    def wait_until_ready(self, timeout_s: float) -> None:
        """Wait until every running node is a broker in the cluster's metadata.

        Each probe is a metadata request that itself waits for connections, so the loop
        does not spin; a node that exits ends the wait at once with its log.
        """
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + timeout_s
        want = {n.node_id for n in self._nodes if n.is_running()}
        seen: set[int] = set()
        while True:
            for node in self._nodes:
                if node.process is not None and node.process.poll() is not None:
                    raise self._start_error(node)
            try:
                metadata = self.admin().list_topics(timeout=1.0)
                seen = {int(b) for b in metadata.brokers}
                if want <= seen and metadata.controller_id is not None:
                    return
            except KafkaException:
                pass
            if time.monotonic() > deadline:
                slow = sorted(want - seen)
                node = self.node(slow[0]) if slow else self._nodes[0]
                raise BrokerStartError(
                    f"Kafka node(s) {slow} did not join the cluster within {timeout_s:.0f} s; "
                    f"{node.log_path} ends with:\n{node.log_tail()}"
                )

    # -- internals ------------------------------------------------------------------------
    def _cluster_id(self) -> str:
        assert self._root is not None
        path = self._root / _CLUSTER_ID_FILE
        if path.is_file():
            return path.read_text().strip()
        cluster_id = "-"
        while cluster_id.startswith("-"):  # like Kafka's Uuid.randomUuid: no leading dash
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        path.write_text(cluster_id + "\n")
        return cluster_id

    def _layout(self) -> list[KafkaNode]:
        assert self._root is not None
        secure = self._sasl_ssl is not None
        ports = free_ports(self._host, (3 if secure else 2) * self._count)
        nodes = []
        for index in range(self._count):
            voter = index < _MAX_VOTERS
            node_id = index + 1
            directory = self._root / f"node-{node_id}"
            directory.mkdir(parents=True, exist_ok=True)
            nodes.append(
                KafkaNode(
                    node_id=node_id,
                    port=ports[index],
                    controller_port=ports[self._count + index] if voter else None,
                    directory=directory,
                    secure_port=ports[2 * self._count + index] if secure else None,
                )
            )
        return nodes

    def _write_config(self, node: KafkaNode) -> None:
        voters = [n for n in self._nodes if n.controller_port is not None]
        quorum = ",".join(f"{n.node_id}@{self._host}:{n.controller_port}" for n in voters)
        replication = str(min(_MAX_VOTERS, self._count))
        listeners = f"PLAINTEXT://{self._host}:{node.port}"
        advertised = listeners
        protocols = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
        secure: dict[str, str] = {}
        if self._sasl_ssl is not None:
            listeners += f",SASL_SSL://{self._host}:{node.secure_port}"
            advertised = listeners
            protocols += ",SASL_SSL:SASL_SSL"
            secure = self._sasl_ssl.settings(node.directory / "keystore.pem")
        if node.controller_port:
            listeners += f",CONTROLLER://{self._host}:{node.controller_port}"
        config = {
            "process.roles": "broker,controller" if node.controller_port else "broker",
            "node.id": str(node.node_id),
            "controller.quorum.voters": quorum,
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": protocols,
            "inter.broker.listener.name": "PLAINTEXT",
            "listeners": listeners,
            "advertised.listeners": advertised,
            "log.dirs": str(node.directory / "data"),
            "default.replication.factor": replication,
            "offsets.topic.replication.factor": replication,
            "transaction.state.log.replication.factor": replication,
            "transaction.state.log.min.isr": str(min(2, self._count)),
            "share.coordinator.state.topic.replication.factor": replication,
            "share.coordinator.state.topic.min.isr": str(min(2, self._count)),
            **_BASE_CONFIG,
            **secure,
            **self._extra,
        }
        node.config_path.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
        (node.directory / "log4j2.properties").write_text(_LOG4J)
        if self._log4j1:
            (node.directory / "log4j.properties").write_text(_LOG4J1)

    @property
    def _log4j1(self) -> bool:
        """Whether the broker is a Kafka 3, which logs through reload4j (log4j 1)."""
        return kafka_major(self._version) < 4

    def _java_command(self, node: KafkaNode, main: str, *args: str) -> list[str]:
        assert self._java is not None
        return [
            str(self._java),
            f"-Xmx{self._heap}",
            "-Xms64m",
            *_JVM_FLAGS,
            f"-Dlog4j2.configurationFile={node.directory / 'log4j2.properties'}",
            *(
                [f"-Dlog4j.configuration=file:{node.directory / 'log4j.properties'}"]
                if self._log4j1
                else []
            ),
            "-cp",
            self._classpath,
            main,
            *args,
        ]

    def _format(self, cluster_id: str) -> None:
        """Format every node's storage (all in parallel; a formatted one is left as is)."""
        running = []
        for node in self._nodes:
            command = self._java_command(
                node,
                "kafka.tools.StorageTool",
                "format",
                f"--cluster-id={cluster_id}",
                f"--config={node.config_path}",
                "--ignore-formatted",
            )
            command[1] = "-Xmx256m"
            out = (node.directory / "format.log").open("wb")
            running.append((node, out, subprocess.Popen(command, stdout=out, stderr=out)))
        failures = []
        for node, out, proc in running:
            code = proc.wait()
            out.close()
            if code != 0:
                text = (node.directory / "format.log").read_text(errors="replace")[-2000:]
                failures.append(f"node {node.node_id} (exit {code}): {text.strip()}")
        if failures:
            raise BrokerStartError(
                "formatting Kafka's storage failed (a --data-dir formatted by another "
                "cluster must be emptied first): " + "; ".join(failures)
            )

    def _launch(self, node: KafkaNode) -> None:
        command = self._java_command(node, "kafka.Kafka", str(node.config_path))
        try:
            node.process = launch(command, node.log_path)
        except OSError as exc:
            raise BrokerStartError(f"could not start Kafka node {node.node_id}: {exc}") from exc
        node.paused = False

    def _start_error(self, node: KafkaNode) -> BrokerStartError:
        tail = node.log_tail()
        code = node.process.returncode if node.process is not None else None
        if port_taken(tail):
            return BrokerStartError(
                f"Kafka node {node.node_id} could not listen on {self._host}:{node.port} or its "
                "controller port: the port is taken by another process (the cluster "
                "picks free ports; stop whatever took it, or try again)",
                port_taken=True,
            )
        if "ClassNotFoundException" in tail or "NoClassDefFoundError" in tail:
            return BrokerStartError(
                f"Kafka node {node.node_id} is missing classes (the jar cache is incomplete): "
                "run `spark-statestore jars --force`"
            )
        return BrokerStartError(
            f"Kafka node {node.node_id} exited with code {code} while starting; "
            f"{node.log_path} ends with:\n{tail}"
        )

    def _reap(self, node: KafkaNode, deadline: float) -> None:
        if node.process is None:
            return
        try:
            node.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("Kafka node %d did not stop in time; killing it", node.node_id)
            node.signal(signal.SIGKILL)
            node.process.wait()

    def _kill_all(self) -> None:
        for node in self._nodes:
            node.kill()


def parse_topic_spec(spec: str) -> tuple[str, int]:
    """Parse ``NAME:PARTITIONS`` (``NAME`` alone means 1 partition) from the CLI."""
    name, sep, count_text = spec.rpartition(":")
    if not sep:
        return spec, 1
    count = ascii_integer(count_text)
    if not name or count is None or count < 1:
        raise LocalKafkaError(
            f"bad topic spec {spec!r}: expected NAME:PARTITIONS with PARTITIONS in ASCII digits "
            ">= 1, e.g. orders:8"
        )
    return name, count


def create_topics(cluster: LocalKafkaCluster, specs: Iterable[str]) -> list[tuple[str, int]]:
    """Create every ``NAME:PARTITIONS`` topic of ``specs``; returns what was created."""
    parsed = [parse_topic_spec(spec) for spec in specs]
    for name, partitions in parsed:
        cluster.create_topic(name, partitions)
    return parsed
