"""``spark_statestore.enrich`` on a cluster: the lookups run on executors on other hosts.

By ``changelog=`` the lookups go to replicas announced on Kafka at addresses the executors
reach (a follower query on the driver serving over mutual TLS on the bridge address, the
client certificate in the plan): that already works. By ``path`` the executors would need
the store's directory or its owner's file; acceptance tests of DESIGN §11 (marked
``cluster_engine``) until the plan carries the owner's location."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import spark_statestore
from spark_statestore.connectors.kafka.discovery import ReplicaRegistry
from spark_statestore.serve import TlsHandshakeError
from spark_statestore.store import Role
from tests.cluster.test_follower import live_follower
from tests.integration.test_spark_enrich import make_prices, priced_items
from tests.pki import make_pki

pytestmark = pytest.mark.cluster


@pytest.mark.cluster_engine
def test_enrich_by_path_of_a_store_with_no_live_owner(spark: Any, tmp_path: Path) -> None:
    enriched, expected = priced_items(spark, make_prices(tmp_path / "prices"))
    assert sorted((tuple(row) for row in enriched.collect()), key=repr) == expected


@pytest.mark.cluster_engine
def test_enrich_by_path_through_a_live_follower_query(
    spark: Any, make_changelog: Any, tmp_path: Path
) -> None:
    log = make_changelog(5)
    store = tmp_path / "store"
    keys = [f"k{i:03d}" for i in range(40)]
    df = spark.createDataFrame([(k,) for k in keys], "key STRING").repartition(2)
    with live_follower(spark, log, store, tmp_path / "checkpoint"):
        enriched = spark_statestore.enrich(df, str(store), key_column="key", key_format="string")
        found = {r["key"]: r["value"] for r in enriched.collect()}
    model = log.model
    assert found == {k: model.get(k.encode()) for k in keys}


def test_enrich_by_changelog_through_a_replica_the_executors_reach_in_mutual_tls(
    spark: Any, spark_cluster: Any, make_changelog: Any, tmp_path: Path
) -> None:
    log = make_changelog(6)
    pki = make_pki(tmp_path / "pki", [spark_cluster.address])
    token = tmp_path / "token"
    token.write_text("the-replicas-shared-token\n")
    serving = {
        "serveHost": spark_cluster.address,
        "serveTlsCert": pki.file("server"),
        "serveTlsKey": pki.file("server_key"),
        "serveTlsClientCa": pki.file("ca"),
        "serveTokenFile": str(token),
        "announceIntervalMs": "200",
    }
    keys = [f"k{i:03d}" for i in range(40)]
    df = spark.createDataFrame([(k,) for k in keys], "key STRING").repartition(2)
    with live_follower(spark, log, tmp_path / "store", tmp_path / "checkpoint", **serving):
        with ReplicaRegistry(log.bootstrap, log.topic) as registry:
            found = registry.wait_for(
                lambda view: any(r.role is Role.FOLLOWER for r in view.replicas), timeout_s=60
            )
            assert found is not None, f"the replica was not announced: {registry.view()}"
            (announced,) = found.replicas
            assert announced.location.startswith(f"grpc+tls://{spark_cluster.address}:")
        # The replica refuses a client without a certificate of the CA in the handshake.
        token_text = token.read_text().strip()
        with (
            spark_statestore.connect(
                announced.location, token=token_text, tls_root_certs=pki.ca
            ) as client,
            pytest.raises(TlsHandshakeError, match="presented none"),
        ):
            client.describe()
        # The executors present the certificate the plan carries.
        enriched = spark_statestore.enrich(
            df,
            changelog=log.topic,
            bootstrap_servers=log.bootstrap,
            token_file=str(token),
            tls_root_certs_file=pki.file("ca"),
            tls_client_cert_file=pki.file("client"),
            tls_client_key_file=pki.file("client_key"),
            key_column="key",
            key_format="string",
            max_lag=0,
        )
        found_values = {r["key"]: r["value"] for r in enriched.collect()}
    model = log.model
    assert found_values == {k: model.get(k.encode()) for k in keys}
