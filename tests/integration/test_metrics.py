"""Metrics of a Spark follower query, scraped from the query's driver-side process while it
runs, against ground truth on a real broker (issue 38's first slice; the CLI's follower is in
test_follow_cli.py)."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spark_statestore.connectors.local.processes import free_ports
from tests.integration.test_follow_cli import scrape
from tests.integration.test_follower import ChangelogWriter, random_changes
from tests.integration.test_spark_follower import FeedCollector, follow, wait_for_owner_exit
from tests.kafka_util import poll_until

pytestmark = pytest.mark.integration

PARTITIONS = 2


def test_a_follower_query_serves_its_metrics_while_it_runs(
    spark: Any, kafka_broker: Any, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = make_topic(partitions=PARTITIONS, suffix="-changelog")
    writer = ChangelogWriter(bootstrap, topic, PARTITIONS)
    rng = random.Random(3)
    for _ in range(3):
        writer.transaction(random_changes(rng, 20))
    port = free_ports("127.0.0.1", 1)[0]
    path = tmp_path / "store"
    collector = FeedCollector(spark, path)
    query = (
        follow(spark, bootstrap, topic, path, metricsPort=str(port))
        .writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    url = f"http://127.0.0.1:{port}/metrics"
    labels = (("store", str(path)), ("topic", topic))
    try:
        collector.wait_for(60)

        def applied(count: int) -> Callable[[], Any]:
            def reached() -> Any:
                try:
                    samples = scrape(url)
                except OSError:
                    return None  # the endpoint starts with the query's first batch
                total = samples["spark_statestore_follower_records_applied_total"][labels]
                lags = samples["spark_statestore_follower_records_lag"]
                return samples if total == count and not any(lags.values()) else None

            return reached

        samples = poll_until(
            applied(60), timeout_s=60, interval_s=0.2, failure=lambda: "60 records not applied"
        )
        state = samples["spark_statestore_follower_state"]
        assert state[(("state", "running"), *labels)] == 1.0
        assert len(samples["spark_statestore_follower_records_lag"]) == PARTITIONS
        # A snapshot read of the live store goes through the follower's Flight server.
        store = (("store", str(path)),)
        before = scrape(url)["spark_statestore_server_rows_returned_total"][store]
        rows = spark.read.format("spark_statestore").load(str(path)).count()
        assert rows == len(writer.model) > 0
        served = scrape(url)
        assert served["spark_statestore_server_rows_returned_total"][store] == before + rows
        assert served["spark_statestore_server_requests_total"][store] >= 1  # the scan
        assert served["spark_statestore_server_pins"][store] == 0  # released after the read
        writer.transaction(random_changes(rng, 15))
        poll_until(applied(75), timeout_s=60, interval_s=0.2, failure=lambda: "75 not applied")
    finally:
        query.stop()
        writer.producer.flush(10)
    wait_for_owner_exit(path)
    with pytest.raises(OSError):
        scrape(url)  # gone with the query


def test_a_metrics_host_beyond_loopback_is_refused_when_the_query_is_defined(
    spark: Any, kafka_broker: Any, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic(partitions=1, suffix="-changelog")
    with pytest.raises(Exception, match=r"option 'metricsHost' '0\.0\.0\.0' is beyond loopback"):
        follow(
            spark, kafka_broker.bootstrap_servers, topic, tmp_path / "store",
            metricsPort="0", metricsHost="0.0.0.0",
        ).printSchema()  # fmt: skip
