"""The snapshot reader's data view on a cluster: its tasks run on executors that cannot see
the store's directory, so they must read through what the driver planned (the owner's
location, or a server the plugin starts on the store's host).

Acceptance tests of DESIGN §11; they fail until readers stop looking for the store's files
on their own disk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spark_statestore.store import Store
from tests.cluster.test_follower import live_follower
from tests.integration.test_spark_enrich import make_prices

pytestmark = [pytest.mark.cluster, pytest.mark.cluster_engine]

FORMAT = "spark_statestore"


def read_data(spark: Any, path: Path, **options: str) -> dict[bytes, bytes]:
    reader = spark.read.format(FORMAT).options(**options)
    rows = reader.load(str(path)).select("key", "value").collect()
    return {bytes(r["key"]): bytes(r["value"]) for r in rows}


def test_a_store_with_no_live_owner_reads_as_its_contents(spark: Any, tmp_path: Path) -> None:
    path = make_prices(tmp_path / "prices")
    with Store.open(path) as store, store.snapshot() as snapshot:
        expected = dict(snapshot.items())
    assert len(expected) == 50
    assert read_data(spark, path) == expected
    # The same through SQL over a temporary view, whole and by key.
    view = f"prices_{tmp_path.name.replace('-', '_')}"
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {view} USING {FORMAT} OPTIONS (path '{path}')")
    rows = spark.sql(f"SELECT key, value FROM {view}").collect()
    assert {bytes(r["key"]): bytes(r["value"]) for r in rows} == expected
    key, value = sorted(expected.items())[7]
    found = spark.sql(f"SELECT value FROM {view} WHERE key = X'{key.hex()}'").collect()
    assert [bytes(r["value"]) for r in found] == [value]


def test_a_live_follower_store_reads_as_the_changelogs_fold(
    spark: Any, make_changelog: Any, tmp_path: Path
) -> None:
    log = make_changelog(4)
    store = tmp_path / "store"
    # processAllAvailable() returns once the feed has delivered what the store had applied
    # when it asked, which may be before the follower has restored everything: the read says
    # which writes it must reflect (read-your-writes), as a user's would.
    bound = {"positionBound": json.dumps(log.position), "positionBoundTimeoutMs": "60000"}
    with live_follower(spark, log, store, tmp_path / "checkpoint"):
        assert read_data(spark, store, **bound) == log.model
