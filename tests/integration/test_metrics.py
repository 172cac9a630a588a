"""Metrics of a Spark follower query, scraped from the query's driver-side process while it
runs, against ground truth on a real broker (issue 38's first slice; the CLI's follower is in
test_follow_cli.py)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spark_statestore.connectors.local.processes import free_ports
from spark_statestore.health import NOT_OPEN
from tests.integration.test_follow_cli import scrape
from tests.integration.test_follower import ChangelogWriter, random_changes
from tests.integration.test_spark_follower import FeedCollector, follow, wait_for_owner_exit
from tests.kafka_util import poll_until, wait_until_settled

pytestmark = [pytest.mark.integration]  # in the main run (CI balances its two runs)

PARTITIONS = 2


def _start_query(
    spark: Any, bootstrap: str, topic: str, path: Path, collector: FeedCollector
) -> tuple[Any, int]:
    """A follower query of ``topic`` into ``path`` with a metrics endpoint; and its port."""
    port = free_ports("127.0.0.1", 1)[0]
    query = (
        follow(spark, bootstrap, topic, path, metricsPort=str(port))
        .writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(path.parent / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    return query, port


def test_a_follower_query_serves_its_metrics_while_it_runs(
    spark: Any, kafka_broker: Any, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = make_topic(partitions=PARTITIONS, suffix="-changelog")
    writer = ChangelogWriter(bootstrap, topic, PARTITIONS)
    rng = random.Random(3)
    for _ in range(3):
        writer.transaction(random_changes(rng, 20))
    path = tmp_path / "store"
    collector = FeedCollector(spark, path)
    query, port = _start_query(spark, bootstrap, topic, path, collector)
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
        commits = samples["spark_statestore_follower_commit_seconds_count"][labels]
        assert samples["spark_statestore_follower_commit_records_count"][labels] == commits
        assert samples["spark_statestore_follower_commit_records_sum"][labels] == 60
        assert samples["spark_statestore_follower_last_commit_timestamp_seconds"][labels] > 0
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
        calls = served["spark_statestore_server_calls_total"]
        assert calls[(("kind", "scan"), ("status", "ok"), *store)] >= 1
        assert calls[(("kind", "pin"), ("status", "ok"), *store)] >= 1
        assert calls[(("kind", "scan"), ("status", "error"), *store)] == 0
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


def _health(url: str) -> tuple[int, dict[str, Any]]:
    """``(HTTP status, JSON body)`` of a ``/health`` endpoint."""
    import urllib.error
    import urllib.request

    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with direct.open(url, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _offsets(raw: Any) -> Any:
    return json.loads(raw) if isinstance(raw, str) else raw


def test_health_status_and_progress_of_a_follower_query(
    spark: Any,
    kafka_broker: Any,
    make_topic: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The query's ``/health``, the ``health`` view, ``spark-statestore status`` and the
    query's progress all tell the same story as Kafka: RUNNING with no lag, then STOPPED and
    no announcement once the query stops."""
    from spark_statestore.cli.main import main

    bootstrap = kafka_broker.bootstrap_servers
    topic = make_topic(partitions=PARTITIONS, suffix="-changelog")
    writer = ChangelogWriter(bootstrap, topic, PARTITIONS)
    rng = random.Random(5)
    for _ in range(2):
        writer.transaction(random_changes(rng, 25))
    ends = {str(p): end for p, end in wait_until_settled(bootstrap, topic).items()}
    path = tmp_path / "store"
    collector = FeedCollector(spark, path)
    query, port = _start_query(spark, bootstrap, topic, path, collector)
    health_url = f"http://127.0.0.1:{port}/health"
    try:
        collector.wait_for(50)

        def running() -> dict[str, Any] | None:
            try:
                code, report = _health(health_url)
            except OSError:
                return None  # the endpoint starts with the query's first batch
            return report if code == 200 else None

        report = poll_until(running, timeout_s=60, interval_s=0.2, failure=lambda: "not RUNNING")
        assert report["status"] == "UP" and report["stores"][str(path)]["state"] == "RUNNING"

        def caught_up() -> Any:
            for progress in reversed(query.recentProgress):
                source = progress["sources"][0]
                latest, end = _offsets(source["latestOffset"]), _offsets(source["endOffset"])
                if latest == {topic: ends} and end == latest:
                    return source
            return None

        # The progress shows the changelog's end offsets as latestOffset (Kafka's source's
        # convention): the follower's lag is latestOffset - endOffset, 0 here.
        poll_until(caught_up, timeout_s=60, interval_s=0.2, failure=lambda: "no such progress")

        view = spark.read.format("spark_statestore").option("view", "health").load(str(path))
        (row,) = view.collect()
        assert (row["state"], row["reason"], row["lag"], row["role"]) == (
            "RUNNING", None, 0, "follower"
        )  # fmt: skip
        assert row["path"] == str(path) and row["flight_location"].startswith("grpc")
        assert row["since"] is not None and row["commit_seq"] >= 1

        assert main(["status", str(path), "--bootstrap-servers", bootstrap]) == 0
        out = capsys.readouterr().out
        assert "RUNNING since" in out and "made " in out and "live: pid" in out
        table = [line.split() for line in out.splitlines() if line.split()[:1] in (["0"], ["1"])]
        assert {(row[0], row[2], row[3]) for row in table[:PARTITIONS]} == {
            (p, str(end), "0") for p, end in ends.items()
        }
        assert "announcements on" in out and " live " in out
    finally:
        query.stop()
        writer.producer.flush(10)
    wait_for_owner_exit(path)
    view = spark.read.format("spark_statestore").option("view", "health").load(str(path))
    (row,) = view.collect()
    assert (row["state"], row["reason"], row["owner_pid"]) == ("STOPPED", NOT_OPEN, None)
    assert main(["status", str(path)]) == 3
    assert "STOPPED" in capsys.readouterr().out
    code = main(["status", "--changelog", topic, "--bootstrap-servers", bootstrap])
    out, err = capsys.readouterr()
    # Spark stops the query's reader process with SIGTERM: it withdraws the announcement
    # (before, it died with it and readers kept routing to it until its TTL ran out).
    assert code == 3 and "no live replica" in err and topic not in out.splitlines()[-1]


def test_a_follower_querys_endpoint_beyond_loopback_takes_tls_and_a_token(
    spark: Any, kafka_broker: Any, make_topic: Callable[..., str], tmp_path: Path, pki: Any
) -> None:
    """metricsHost 0.0.0.0 with metricsTlsCert/metricsTlsKey/metricsTokenFile: HTTPS, and a
    scrape without the token is refused (401)."""
    import ssl
    import urllib.error
    import urllib.request

    bootstrap = kafka_broker.bootstrap_servers
    topic = make_topic(partitions=PARTITIONS, suffix="-changelog")
    writer = ChangelogWriter(bootstrap, topic, PARTITIONS)
    writer.transaction(random_changes(random.Random(7), 10))
    token = "metrics-scrape-token-0123456789"
    (tmp_path / "token").write_text(token + "\n")
    port = free_ports("127.0.0.1", 1)[0]
    path = tmp_path / "store"
    collector = FeedCollector(spark, path)
    options = {
        "metricsPort": str(port),
        "metricsHost": "0.0.0.0",
        "metricsTlsCert": pki.file("server"),
        "metricsTlsKey": pki.file("server_key"),
        "metricsTokenFile": str(tmp_path / "token"),
    }
    query = (
        follow(spark, bootstrap, topic, path, **options)
        .writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    url = f"https://127.0.0.1:{port}/metrics"
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}),
        urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=pki.file("ca"))),
    )

    def scrape_with(bearer: str | None) -> tuple[int, str]:
        request = urllib.request.Request(url)
        if bearer is not None:
            request.add_header("Authorization", f"Bearer {bearer}")
        try:
            with opener.open(request, timeout=30) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, ""

    try:
        collector.wait_for(10)

        def applied() -> str | None:
            try:
                code, text = scrape_with(token)
            except urllib.error.URLError:
                return None  # the endpoint starts with the query's first batch
            return text if code == 200 and "records_applied_total" in text else None

        text = poll_until(applied, timeout_s=60, interval_s=0.2, failure=lambda: "no scrape")
        assert f'store="{path}"' in text
        assert scrape_with(None)[0] == 401
        assert scrape_with("another-token-0123456789")[0] == 401
    finally:
        query.stop()
        writer.producer.flush(10)
