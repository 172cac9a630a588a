"""Stream enrichment against a live store another application keeps updating: a streaming
feed of orders is enriched with the real Kafka Streams app's per-customer totals (followed
by a Spark follower query), each lookup bounded by the order's own offset. Every enriched
row's total must include its own order and equal the sum of the customer's orders up to the
position of the snapshot it was looked up in."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

import spark_statestore
from spark_statestore.connectors.kafka.local import LocalKafkaCluster
from spark_statestore.position import Position
from spark_statestore.store import live_owner
from tests.interop.test_kafka_streams import CUSTOMERS, _apps, produce_order, start_app
from tests.kafka_util import poll_until

pytestmark = pytest.mark.integration

ROUNDS = 4
ORDERS_PER_ROUND = 25


def test_orders_are_enriched_with_totals_that_include_them(
    spark: Any, kafka_broker: LocalKafkaCluster, make_topic: Any, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    from tests.integration.test_spark_follower import FORMAT, wait_for_owner_exit

    bootstrap = kafka_broker.bootstrap_servers
    orders = make_topic(partitions=4, suffix="-orders")
    # Committing every 2 s, the app's totals reach the changelog (and so our store) well
    # after a micro-batch of the feed looks them up: only the bound makes the lookup wait.
    app = start_app(
        bootstrap,
        orders,
        tmp_path / "state",
        f"interop-{next(_apps)}",
        True,
        **{"commit-interval-ms": 2000},
    )
    store = tmp_path / "totals"
    feed_dir = tmp_path / "feed"
    feed_dir.mkdir()
    queries = []
    try:
        queries.append(
            spark.readStream.format(FORMAT)
            .option("kafka.bootstrap.servers", bootstrap)
            .option("changelog", app.changelog("totals"))
            .load(str(store))
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "follower-checkpoint"))
            .start()
        )
        poll_until(
            lambda: True if (o := live_owner(str(store))) and o.flight_location else None,
            timeout_s=120,
            interval_s=0.1,
            failure=lambda: f"the follower query never served {store}",
        )
        feed = spark.readStream.schema(
            "customer STRING, topic STRING, partition INT, offset BIGINT, amount BIGINT"
        ).json(str(feed_dir))
        feed = feed.withColumn(
            "pos", F.create_map(F.col("topic"), F.create_map(F.col("partition"), F.col("offset")))
        )
        enriched = spark_statestore.enrich(
            feed,
            str(store),
            key_column="customer",
            value_column="total",
            key_format="string",
            value_format="long",
            position_column="pos",
            position_timeout_ms=60_000,
            lookup_position_column="seen",
        )
        sink = (
            enriched.writeStream.format("memory")
            .queryName("enriched_orders")
            .option("checkpointLocation", str(tmp_path / "enrich-checkpoint"))
            .start()
        )
        queries.append(sink)
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        rng = random.Random(61)
        history: list[tuple[str, int, int, int]] = []  # customer, partition, offset, amount
        for round_ in range(ROUNDS):
            lines = []
            for _ in range(ORDERS_PER_ROUND):
                customer = f"c{rng.randrange(CUSTOMERS):03d}"
                amount = rng.randrange(1, 1000)
                message = produce_order(producer, orders, customer, amount)
                history.append((customer, message.partition(), message.offset(), amount))
                lines.append(
                    json.dumps(
                        {
                            "customer": customer,
                            "topic": orders,
                            "partition": message.partition(),
                            "offset": message.offset(),
                            "amount": amount,
                        }
                    )
                )
            staged = tmp_path / f"round-{round_}.json"
            staged.write_text("\n".join(lines) + "\n")
            os.replace(staged, feed_dir / staged.name)  # the file source sees whole files
            sink.processAllAvailable()
        rows = spark.sql("SELECT * FROM enriched_orders").collect()
        assert len(rows) == ROUNDS * ORDERS_PER_ROUND
        for row in rows:
            seen = Position.from_json(row["seen"]).to_map()[orders]
            reached = seen[row["partition"]]
            assert reached >= row["offset"], row  # the lookup saw the order itself
            expected = sum(
                amount
                for customer, partition, offset, amount in history
                if customer == row["customer"]
                and partition == row["partition"]
                and offset <= reached
            )
            assert row["total"] == expected, row
        assert all(q.exception() is None for q in queries)
    finally:
        for query in queries:
            query.stop()
        app.stop()
    wait_for_owner_exit(store)
