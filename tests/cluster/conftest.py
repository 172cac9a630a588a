"""Fixtures of the cluster tests: one Spark standalone cluster (a Master and two Workers,
each Worker on a host of its own), one Kafka broker on the cluster's bridge, and this
process's SparkSession as the cluster's driver, all for the whole pytest process.

The Workers and their executors do not see this run's temporary directories (pytest's base
temp, where every ``tmp_path`` is: the tests' stores and checkpoints are the driver's), nor
anything else under ``/tmp``; the repository and its interpreter stay visible. The fixtures
override the root conftest's ``kafka_broker`` and ``spark``, so ``make_topic`` and the
helpers of the integration tests work unchanged here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pytest

from spark_statestore.store.crash import CRASH_FILE
from tests.conftest import REPO_ROOT, crash_file_path

if TYPE_CHECKING:
    from spark_statestore.connectors.kafka.local import LocalKafkaCluster
    from spark_statestore.connectors.spark.local import LocalSparkCluster


@pytest.fixture(scope="session")
def spark_cluster(
    host_tools: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalSparkCluster]:
    """Master + 2 Workers (1 core, 1 GiB each), the driver's temporary data hidden from them.

    Skipped, saying why, where this process cannot make hosts (not root, no ``ip``).
    """
    from spark_statestore.connectors.spark.local import LocalSparkCluster

    with LocalSparkCluster(workers=2, hidden=[tmp_path_factory.getbasetemp()]) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kafka_starting(spark_cluster: LocalSparkCluster) -> Iterator[Future[LocalKafkaCluster]]:
    """One Kafka node listening on the bridge address, which the driver and every executor
    reach (records of any age are kept, as in the root conftest), started on a thread while
    the driver starts: two JVMs start faster side by side on two cores.

    The thread is a pool's, alive until the node is closed: a JVM gets SIGKILL when the
    thread that started it ends (its parent-death signal follows the thread).
    """
    from spark_statestore.connectors.kafka.local import LocalKafkaCluster

    kafka = LocalKafkaCluster(
        brokers=1, host=spark_cluster.address, config={"log.retention.ms": "-1"}
    )
    with ThreadPoolExecutor(1, thread_name_prefix="kafka-start") as pool:
        starting = pool.submit(kafka.start)
        try:
            yield starting
        finally:
            with contextlib.suppress(Exception):  # reported by kafka_broker, if used
                starting.result()
            kafka.close()


@pytest.fixture(scope="session")
def kafka_broker(kafka_starting: Future[LocalKafkaCluster]) -> LocalKafkaCluster:
    """The cluster's Kafka node, once it has started."""
    return kafka_starting.result()


@pytest.fixture(scope="session")
def spark(spark_cluster: LocalSparkCluster, kafka_starting: Future[LocalKafkaCluster]) -> Any:
    """This process's SparkSession, the cluster's driver (Spark's Kafka connector on its
    classpath), with an executor on each Worker registered."""
    import spark_statestore

    # The crash seam of the driver's processes (the sink's commit and store server): they
    # inherit the driver JVM's environment, fixed when it starts, here.
    os.environ[CRASH_FILE] = str(crash_file_path())
    # Functions a test module defines are pickled by reference to it (tests.cluster....):
    # executors import them from the repository, as local mode's do from its cwd.
    session = spark_cluster.session(
        "spark-statestore-cluster-tests",
        kafka_source=True,
        conf={"spark.executorEnv.PYTHONPATH": str(REPO_ROOT)},
    )
    spark_statestore.register(session)
    session.sparkContext.setLogLevel("ERROR")
    return session  # the cluster stops it


@pytest.fixture
def make_changelog(kafka_broker: LocalKafkaCluster, make_topic: Any) -> Any:
    """Factory: ``make_changelog(seed, count=60, partitions=3)`` is a
    :class:`~tests.cluster.changelog.ChangelogLog` of a fresh changelog topic on the
    cluster's Kafka, with ``count`` random changes of ``seed`` produced to it."""
    from tests.cluster.changelog import ChangelogLog, random_changes

    def factory(seed: int, count: int = 60, partitions: int = 3) -> ChangelogLog:
        topic = make_topic(partitions, suffix="-changelog")
        log = ChangelogLog(kafka_broker.bootstrap_servers, topic, partitions)
        log.produce(random_changes(seed, count))
        return log

    return factory


@pytest.fixture
def make_input(kafka_broker: LocalKafkaCluster, make_topic: Any) -> Any:
    """Factory: ``make_input(partitions=2)`` is a :class:`~tests.cluster.sink_input.SinkInput`
    of a fresh input topic on the cluster's Kafka."""
    from tests.cluster.sink_input import SinkInput

    def factory(partitions: int = 2) -> SinkInput:
        return SinkInput(kafka_broker.bootstrap_servers, make_topic(partitions, suffix="-input"))

    return factory


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The isolation proofs run first: if the hosts are not isolated, no other cluster test
    proves anything."""
    items.sort(key=lambda item: item.path.name != "test_isolation.py")
