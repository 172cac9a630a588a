"""The embedded Kafka broker: librdkafka's mock cluster behind a transaction-aware proxy.

No Apache Kafka distribution can be installed on our build machines, so tests and the demo
run against the Kafka-protocol mock cluster that ships inside the confluent-kafka wheel,
started through ``ctypes``. Clients in any process connect to it over TCP on loopback.

Production users point ``kafka.bootstrap.servers`` at a real cluster; nothing in the plugin
depends on this module.

Limits of the mock (see DESIGN.md §8): in memory only; each partition keeps roughly its newest
5 MB of message sets (older offsets answer OFFSET_OUT_OF_RANGE); the admin CreateTopics call is
unsupported (use :meth:`EmbeddedBroker.create_topic`); auto-created topics get 4 partitions.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Iterable, Sequence
from types import TracebackType

from spark_statestore.connectors.kafka._librdkafka import err_name, librdkafka
from spark_statestore.connectors.kafka.embedded.proxy import (
    FETCH_VERSIONS,
    LIST_OFFSETS_VERSIONS,
    TxnProxy,
)
from spark_statestore.connectors.kafka.embedded.wire import ApiKey
from spark_statestore.connectors.kafka.errors import EmbeddedBrokerError

__all__ = ["ApiKey", "EmbeddedBroker"]

log = logging.getLogger(__name__)

_RD_KAFKA_PRODUCER = 0
_ERRSTR_SIZE = 512


class EmbeddedBroker:
    """An in-process Kafka cluster for tests, demos and local experiments.

    Parameters
    ----------
    brokers
        Number of brokers (ids 1..brokers).
    host
        Interface the brokers are reachable on (loopback by default).

    Examples
    --------
    >>> with EmbeddedBroker(brokers=3) as kafka:        # doctest: +SKIP
    ...     kafka.create_topic("app-store-changelog", partitions=8)
    ...     producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    """

    def __init__(self, brokers: int = 1, host: str = "127.0.0.1") -> None:
        if brokers < 1:
            raise EmbeddedBrokerError(f"brokers must be >= 1, got {brokers}")
        self._lib = librdkafka()
        self._broker_count = brokers
        self._host = host
        self._lock = threading.Lock()
        self._rk: int | None = None
        self._cluster: int | None = None
        self._proxy: TxnProxy | None = None
        self._bootstrap = ""
        self._topics: dict[str, int] = {}
        self._start()

    # -- lifecycle ------------------------------------------------------------------------
    def _start(self) -> None:
        lib = self._lib
        errstr = ctypes.create_string_buffer(_ERRSTR_SIZE)
        conf = lib.rd_kafka_conf_new()
        # The handle only does book keeping for the mock; keep it quiet.
        lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, _ERRSTR_SIZE)
        rk = lib.rd_kafka_new(_RD_KAFKA_PRODUCER, conf, errstr, _ERRSTR_SIZE)
        if not rk:
            lib.rd_kafka_conf_destroy(conf)
            raise EmbeddedBrokerError(f"rd_kafka_new failed: {errstr.value.decode()}")
        cluster = lib.rd_kafka_mock_cluster_new(rk, self._broker_count)
        if not cluster:
            lib.rd_kafka_destroy(rk)
            raise EmbeddedBrokerError("rd_kafka_mock_cluster_new failed")
        self._rk, self._cluster = rk, cluster
        try:
            real = self._real_listeners()
            # Only the non-flexible encodings the proxy parses may be negotiated.
            self._check(
                lib.rd_kafka_mock_set_apiversion(cluster, ApiKey.FETCH, *FETCH_VERSIONS),
                "cap Fetch versions",
            )
            self._check(
                lib.rd_kafka_mock_set_apiversion(
                    cluster, ApiKey.LIST_OFFSETS, *LIST_OFFSETS_VERSIONS
                ),
                "cap ListOffsets versions",
            )
            self._proxy = TxnProxy(real, host=self._host)
            ports = self._proxy.start()
            for broker_id, port in ports.items():
                lib.rd_kafka_mock_broker_set_host_port(
                    cluster, broker_id, self._host.encode(), port
                )
            self._bootstrap = ",".join(f"{self._host}:{ports[b]}" for b in sorted(ports))
        except BaseException:
            self.close()
            raise
        log.info("embedded Kafka broker up: %s", self._bootstrap)

    def _real_listeners(self) -> dict[int, tuple[str, int]]:
        """broker id -> (host, port) of each mock listener, read from cluster metadata."""
        from confluent_kafka.admin import AdminClient

        raw = self._lib.rd_kafka_mock_cluster_bootstraps(self._cluster).decode()
        admin = AdminClient({"bootstrap.servers": raw, "log_level": 3})
        metadata = admin.list_topics(timeout=10)
        listeners = {b.id: (str(b.host), int(b.port)) for b in metadata.brokers.values()}
        if len(listeners) != self._broker_count:
            raise EmbeddedBrokerError(
                f"mock cluster reported {len(listeners)} brokers, expected {self._broker_count}"
            )
        return listeners

    def close(self) -> None:
        """Stop the proxy and destroy the mock cluster. Idempotent."""
        with self._lock:
            proxy, cluster, rk = self._proxy, self._cluster, self._rk
            self._proxy = self._cluster = self._rk = None
        if proxy is not None:
            proxy.stop()
        if cluster:
            self._lib.rd_kafka_mock_cluster_destroy(cluster)
        if rk:
            self._lib.rd_kafka_destroy(rk)

    def __enter__(self) -> EmbeddedBroker:
        return self

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
        """The ``bootstrap.servers`` string clients use (``host:port,host:port``)."""
        return self._bootstrap

    @property
    def broker_ids(self) -> list[int]:
        """Ids of the brokers (1..N)."""
        return list(range(1, self._broker_count + 1))

    @property
    def topics(self) -> dict[str, int]:
        """Topics created through :meth:`create_topic`, with their partition counts."""
        return dict(self._topics)

    def _handle(self) -> int:
        if not self._cluster:
            raise EmbeddedBrokerError("the embedded broker is closed")
        return self._cluster

    def _check(self, code: int, what: str) -> None:
        if code:
            raise EmbeddedBrokerError(f"embedded broker: {what} failed: {err_name(code)}", code)

    # -- topics ---------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1) -> None:
        """Create a topic (the mock does not support the admin CreateTopics call)."""
        if not name:
            raise EmbeddedBrokerError("topic name must not be empty")
        if partitions < 1:
            raise EmbeddedBrokerError(f"topic {name!r}: partitions must be >= 1, got {partitions}")
        replication = min(replication_factor, self._broker_count)
        self._check(
            self._lib.rd_kafka_mock_topic_create(
                self._handle(), name.encode(), partitions, replication
            ),
            f"create topic {name!r} with {partitions} partitions",
        )
        self._topics[name] = partitions

    # -- fault injection ------------------------------------------------------------------
    def broker_down(self, broker_id: int = -1) -> None:
        """Disconnect a broker (-1: all) and refuse new connections. Leaders do not move."""
        self._check(
            self._lib.rd_kafka_mock_broker_set_down(self._handle(), broker_id),
            f"take broker {broker_id} down",
        )

    def broker_up(self, broker_id: int = -1) -> None:
        """Let a broker (-1: all) accept connections again."""
        self._check(
            self._lib.rd_kafka_mock_broker_set_up(self._handle(), broker_id),
            f"bring broker {broker_id} up",
        )

    def set_rtt(self, broker_id: int, rtt_ms: int) -> None:
        """Delay every response of a broker (-1: all) by ``rtt_ms`` milliseconds."""
        self._check(
            self._lib.rd_kafka_mock_broker_set_rtt(self._handle(), broker_id, rtt_ms),
            f"set rtt of broker {broker_id}",
        )

    def set_partition_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Move a partition's leadership (-1 makes it leaderless)."""
        self._check(
            self._lib.rd_kafka_mock_partition_set_leader(
                self._handle(), topic.encode(), partition, broker_id
            ),
            f"move leader of {topic}-{partition} to broker {broker_id}",
        )

    def push_request_errors(self, api_key: int, errors: Sequence[int]) -> None:
        """Fail the next ``len(errors)`` requests of ``api_key`` with these codes, in order."""
        array = (ctypes.c_int * len(errors))(*errors)
        self._lib.rd_kafka_mock_push_request_errors_array(
            self._handle(), api_key, len(errors), array
        )

    def clear_request_errors(self, api_key: int) -> None:
        """Forget injected errors for ``api_key``."""
        self._lib.rd_kafka_mock_clear_request_errors(self._handle(), api_key)

    def set_topic_error(self, topic: str, error: int) -> None:
        """Make Metadata (and AddPartitionsToTxn) report ``error`` for a topic (0 clears)."""
        self._lib.rd_kafka_mock_topic_set_error(self._handle(), topic.encode(), error)

    def last_stable_offset(self, topic: str, partition: int) -> int | None:
        """The LSO the transaction proxy last computed for a partition, None if never asked."""
        return None if self._proxy is None else self._proxy.last_stable_offset(topic, partition)


def parse_topic_spec(spec: str) -> tuple[str, int]:
    """Parse ``NAME:PARTITIONS`` (``NAME`` alone means 1 partition) from the CLI."""
    name, sep, count = spec.rpartition(":")
    if not sep:
        return spec, 1
    if not name or not count.isdigit() or int(count) < 1:
        raise EmbeddedBrokerError(
            f"bad topic spec {spec!r}: expected NAME:PARTITIONS, e.g. orders:8"
        )
    return name, int(count)


def create_topics(broker: EmbeddedBroker, specs: Iterable[str]) -> list[tuple[str, int]]:
    """Create every ``NAME:PARTITIONS`` topic of ``specs``; returns what was created."""
    created = []
    for spec in specs:
        name, partitions = parse_topic_spec(spec)
        broker.create_topic(name, partitions)
        created.append((name, partitions))
    return created
