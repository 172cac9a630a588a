"""Every Kafka client of the plugin on a secured cluster: SASL_SSL (TLS, SASL PLAIN), what a
managed Kafka asks of its clients. The compiled extension's column reader (the follower's
restore in the driver, the change feed in the executors) and its transactional producer (the
sink's changelog) take the same ``kafka.*`` settings as confluent-kafka, on both paths."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_statestore.connectors.kafka.errors import KafkaClientError
from spark_statestore.connectors.kafka.follower.source import KafkaChangelogSource
from spark_statestore.connectors.kafka.local import LocalKafkaCluster
from spark_statestore.connectors.kafka.local.cluster import SaslSslListener
from spark_statestore.connectors.kafka.sink.writer import ChangelogWriter
from spark_statestore.follower import Follower, FollowerState
from spark_statestore.native import ENV
from spark_statestore.store import Role, Store, StoreOptions, StoreSpec
from tests.integration.test_sink import changelog_writer, row, store_content, write_input
from tests.native_util import native_or_skip
from tests.pki import make_pki

pytestmark = pytest.mark.integration

FORMAT = "spark_statestore"
APP = "secured-app"
PARTITIONS = 3


class Secured:
    """A one-node cluster with a SASL_SSL listener and the client settings that reach it."""

    def __init__(self, cluster: LocalKafkaCluster, ca: str) -> None:
        self.cluster = cluster
        self.bootstrap = cluster.secure_bootstrap_servers
        self.settings = {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
            "ssl.ca.location": ca,
        }

    def options(self, **changed: str) -> dict[str, str]:
        """The Spark options: ``kafka.``-prefixed settings and the secured bootstrap."""
        settings = {**self.settings, **changed}
        return {
            "kafka.bootstrap.servers": self.bootstrap,
            **{f"kafka.{name}": value for name, value in settings.items()},
        }


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    pki = make_pki(tmp_path_factory.mktemp("kafka-pki"))
    listener = SaslSslListener(
        Path(pki.file("server")), Path(pki.file("server_key")), {"alice": "alice-secret"}
    )
    with LocalKafkaCluster(brokers=1, sasl_ssl=listener) as cluster:
        yield Secured(cluster, pki.file("ca"))


def sink(spark: Any, secured: Secured, source: Path, checkpoint: Path, changelog: str) -> Any:
    """test_sink's changelog sink, with the secured listener and its settings."""
    writer = changelog_writer(spark, source, checkpoint, secured.bootstrap, changelog, APP)
    for name, value in secured.options().items():
        writer = writer.option(name, value)
    return writer


def follow_here(secured: Secured, changelog: str, path: Path, columnar: bool) -> dict[bytes, bytes]:
    """Restore ``changelog`` over SASL_SSL into a fresh store (through the extension's column
    reader when ``columnar``); its contents."""
    spec = StoreSpec(Role.FOLLOWER, changelog, PARTITIONS)
    with Store.open(path, spec, options=StoreOptions(sync=False)) as store:
        source = KafkaChangelogSource(secured.bootstrap, changelog, config=secured.settings)
        follower = Follower(store, source, chunk_records=40)
        try:
            follower.start_restore()
            while follower.state is not FollowerState.RUNNING:
                follower.step()
            assert source.columnar is columnar
        finally:
            follower.stop()
        with store.snapshot() as snapshot:
            return dict(snapshot.items())


def test_the_sink_publishes_and_a_follower_query_follows_over_sasl_ssl(
    spark: Any, secured: Secured, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    native_or_skip()
    changelog = f"{APP}-orders-{time.monotonic_ns()}-changelog"
    secured.cluster.create_topic(changelog, PARTITIONS)
    secured.cluster.create_topic(f"{changelog}-progress", 1)
    source, leader = tmp_path / "in", tmp_path / "leader"

    # The sink: staged rows, then the changelog in a Kafka transaction (the extension's
    # producer), two micro-batches, one of them deleting and overwriting keys.
    write_input(source, "1.json", [row(f"k{i:03d}", f"v{i}", i) for i in range(150)])
    query = sink(spark, secured, source, tmp_path / "cp", changelog).start(str(leader))
    try:
        query.processAllAvailable()
        write_input(source, "2.json", [row("k001", None, 150), row("k002", "changed", 151)])
        query.processAllAvailable()
    finally:
        query.stop()
    written = store_content(leader)
    assert len(written) == 149 and written[b"k002"] == b"changed" and b"k001" not in written

    # A follower query of that changelog: its store restored in the driver and its change
    # feed read by the executors, both through the extension's column reader.
    rows: list[Any] = []
    reader = spark.readStream.format(FORMAT).option("changelog", changelog)
    for name, value in secured.options().items():
        reader = reader.option(name, value)
    feed = (
        reader.load(str(tmp_path / "replica"))
        .writeStream.trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / "cp-follow"))
        .foreachBatch(lambda df, _: rows.extend(df.collect()))
        .start()
    )
    feed.awaitTermination(180)
    assert not feed.isActive and feed.exception() is None
    assert len(rows) == 152  # every change of both batches, once
    last: dict[bytes, bytes | None] = {}
    for change in sorted(rows, key=lambda r: (r["partition"], r["offset"])):
        last[bytes(change["key"])] = None if change["value"] is None else bytes(change["value"])
    assert {k: v for k, v in last.items() if v is not None} == written
    assert store_content(tmp_path / "replica") == written

    # The engine's follower over SASL_SSL on both paths: equal stores, equal to the leader.
    for mode in ("1", "0"):
        monkeypatch.setenv(ENV, mode)
        restored = follow_here(secured, changelog, tmp_path / f"engine-{mode}", mode == "1")
        assert restored == written


@pytest.mark.parametrize("mode", ["1", "0"], ids=["fast-path", "reference-path"])
def test_a_refused_password_or_certificate_is_named_not_a_transport_failure(
    secured: Secured, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """librdkafka fails the request with "transport failure" and reports the reason apart:
    the error names the reason and the options to check."""
    monkeypatch.setenv(ENV, mode)
    changelog = f"{APP}-refused-{time.monotonic_ns()}-changelog"
    secured.cluster.create_topic(changelog, PARTITIONS)
    wrong_password = {**secured.settings, "sasl.password": "not-alice-secret"}
    no_ca = {k: v for k, v in secured.settings.items() if k != "ssl.ca.location"}
    cases = [
        (wrong_password, "Invalid username or password", "kafka.sasl.password"),
        (no_ca, "certificate verify failed", "kafka.ssl.ca.location"),
    ]
    for settings, reason, option in cases:
        spec = StoreSpec(Role.FOLLOWER, changelog, PARTITIONS)
        with Store.open(tmp_path / f"s-{option}", spec) as store:
            source = KafkaChangelogSource(
                secured.bootstrap, changelog, config=settings, timeout_s=2
            )
            try:
                with pytest.raises(KafkaClientError) as refused:
                    Follower(store, source)  # its first request: the partition count
            finally:
                source.close()
            message = str(refused.value)
            assert reason in message and option in message, message
            assert "librdkafka reported while connecting" in message, message
    # The sink's changelog producer (the extension's on the fast path) says the same.
    writer = ChangelogWriter(
        secured.bootstrap,
        changelog,
        transactional_id=f"{APP}-refused",
        config=wrong_password,
        timeout_s=2,
    )
    try:
        with pytest.raises(KafkaClientError, match="Invalid username or password"):
            writer.init()
    finally:
        writer.close()
