"""The sink's store server's metrics and health without Spark or Kafka: what its commits did,
read from its endpoint (``metricsPort``) after commits that committed, were replayed and
failed, and its health through them; and the option rules of ``metricsPort`` on a sink.
The same against a real broker and real Spark is tests/integration/test_sink_metrics.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spark_statestore.connectors.spark.leader.server import (
    ACTION_COMMIT,
    LeaderServer,
    batch_to_json,
    fingerprint,
    read_server_record,
)
from spark_statestore.connectors.spark.options import parse_sink_options
from spark_statestore.errors import OptionError, StateStoreError
from spark_statestore.health import HealthState
from spark_statestore.serve.client import connect_to_owner
from spark_statestore.sink.staging import STAGING_DIR
from tests.integration.test_follow_cli import scrape
from tests.unit.test_sink_server import staged_batch


def test_the_server_reports_its_commits_and_its_health_through_them(tmp_path: Path) -> None:
    path = tmp_path / "store"
    options = parse_sink_options(
        {"path": str(path), "serve": "true", "metricsPort": "0"}, streaming=False
    )
    server = LeaderServer(options)
    try:
        record = read_server_record(str(path))
        assert record is not None and server.metrics is not None
        url = record.metrics_url
        assert url == server.metrics.url and url.startswith("http://127.0.0.1:")
        assert server.health().state is HealthState.RUNNING
        store = (("store", str(path)),)

        def outcome(name: str) -> tuple[tuple[str, str], ...]:
            return (("outcome", name), *store)

        client = connect_to_owner(path)
        assert client is not None
        with client:

            def commit(batch_id: int, rows: dict[bytes, bytes | None]) -> dict[str, object]:
                batch = staged_batch(path, batch_id, rows)
                body = {"secret": record.secret, "fingerprint": record.fingerprint}
                return client.call(ACTION_COMMIT, {**body, **batch_to_json(batch)})

            first = staged_batch(path, 0, {b"a": b"1", b"b": b"2", b"c": None})
            body = {"secret": record.secret, "fingerprint": record.fingerprint}
            client.call(ACTION_COMMIT, {**body, **batch_to_json(first)})
            client.call(ACTION_COMMIT, {**body, **batch_to_json(first)})  # a replay
            samples = scrape(url)
            batches = samples["spark_statestore_sink_batches_committed_total"]
            assert batches[outcome("committed")] == 1
            assert batches[outcome("skipped")] == 1
            assert batches[outcome("rolled_forward")] == 0
            assert samples["spark_statestore_sink_commit_seconds_count"][store] == 2
            assert samples["spark_statestore_sink_staged_rows_total"][store] == 3
            staged_size = first.staged[0].size
            assert samples["spark_statestore_sink_staged_bytes_total"][store] == staged_size
            assert samples["spark_statestore_sink_records_published_total"][store] == 0
            assert samples["spark_statestore_sink_changelog_produce_seconds_count"][store] == 0
            assert samples["spark_statestore_store_commit_seq"][store] == (
                server.store.metadata.commit_seq
            )
            assert samples["spark_statestore_store_size_bytes"][store] > 0
            assert samples["spark_statestore_server_pins"][store] == 0

            # A commit whose staged file is gone fails, and says so until one succeeds.
            lost = staged_batch(path, 1, {b"d": b"4"})
            os.unlink(path / STAGING_DIR / lost.staged[0].name)
            with pytest.raises(StateStoreError, match="cannot be read"):
                client.call(ACTION_COMMIT, {**body, **batch_to_json(lost)})
            health = server.health()
            assert health.state is HealthState.FAILED
            assert health.reason is not None and "batch 1 of query tour-app" in health.reason
            assert health.details["commits_failed"] == 1
            failed = scrape(url)["spark_statestore_sink_commits_failed_total"]
            assert failed == {(("reason", "StagingError"), *store): 1}

            assert commit(1, {b"d": b"4"})["outcome"] == "committed"
            assert server.health().state is HealthState.RUNNING
            samples = scrape(url)
            assert (
                samples["spark_statestore_sink_batches_committed_total"][outcome("committed")] == 2
            )
            assert samples["spark_statestore_sink_commit_seconds_count"][store] == 3
            assert samples["spark_statestore_sink_staged_rows_total"][store] == 4
    finally:
        server.close()
    assert server.health().state is HealthState.STOPPED
    with pytest.raises(OSError):
        scrape(url)  # gone with the server


def test_metrics_options_need_serve_and_restart_a_server_with_other_ones(tmp_path: Path) -> None:
    base = {"path": str(tmp_path / "store")}
    for name, value in (("metricsPort", "0"), ("metricsHost", "127.0.0.1")):
        with pytest.raises(
            OptionError,
            match=rf"option '{name}' configures the sink's store server: set option 'serve' "
            r"to 'true' too, or drop it: without 'serve' no process outlives a micro-batch's "
            r"commit .* or report its metrics",
        ):
            parse_sink_options({**base, name: value}, streaming=False)
    served = {**base, "serve": "true"}
    plain = parse_sink_options(served, streaming=False)
    assert plain.metrics is None
    with_metrics = parse_sink_options({**served, "metricsPort": "9464"}, streaming=False)
    assert with_metrics.metrics is not None
    assert (with_metrics.metrics.port, with_metrics.metrics.host) == (9464, "127.0.0.1")
    assert fingerprint(with_metrics) != fingerprint(plain)
    with pytest.raises(OptionError, match=r"'metricsHost' '0\.0\.0\.0' is beyond loopback"):
        parse_sink_options(
            {**served, "metricsPort": "0", "metricsHost": "0.0.0.0"}, streaming=False
        )
    # Beyond loopback with TLS and a token; TLS files in pairs; no endpoint option alone.
    tls = {"metricsTlsCert": "c.pem", "metricsTlsKey": "k.pem", "metricsTokenFile": "t"}
    wide = parse_sink_options(
        {**served, "metricsPort": "0", "metricsHost": "0.0.0.0", **tls}, streaming=False
    )
    assert wide.metrics is not None
    assert wide.metrics.tls_cert_file and wide.metrics.tls_key_file and wide.metrics.token_file
    assert fingerprint(wide) != fingerprint(with_metrics)
    with pytest.raises(OptionError, match="'metricsTlsCert' and 'metricsTlsKey' go together"):
        parse_sink_options(
            {**served, "metricsPort": "0", "metricsTlsCert": "c.pem"}, streaming=False
        )
    with pytest.raises(OptionError, match="option 'metricsTokenFile' configures the metrics"):
        parse_sink_options({**served, "metricsTokenFile": "t"}, streaming=False)
