"""The snapshot reader never returns wrong rows when Spark replays a relation's plan.

PySpark 4.1-4.3.0 keep the read planned for a Python source (partitions, and the pushed
filters' plan) on the relation and replay it for later queries of the same DataFrame or temp
view. These tests run the sequences a new user runs, on stores with and without a live owner,
and the explicit lookup options that replace pushdown there.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from spark_statestore.connectors.spark.reader.lookup import spark_scopes_pushdown_per_scan
from spark_statestore.serve import StoreClient
from spark_statestore.serve.server import StoreServer
from spark_statestore.store import Store

pytestmark = pytest.mark.integration

FORMAT = "spark_statestore"
ROWS = 1000


@pytest.fixture(scope="module")
def store_path(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store of ROWS string keys k0..k999 with values v0..v999 (written by the sink)."""
    path = str(tmp_path_factory.mktemp("replay") / "store")
    rows = [(f"k{i}", f"v{i}") for i in range(ROWS)]
    spark.createDataFrame(rows, "key STRING, value STRING").write.format(FORMAT).mode(
        "append"
    ).save(path)
    return path


@contextmanager
def live_owner(path: str) -> Iterator[StoreClient]:
    """This process owns the store and serves it, as a running follower query would."""
    with (
        Store.open(path, purpose="test owner") as store,
        StoreServer(store) as server,
        server.client() as client,
    ):
        yield client


def string_reader(spark: Any, path: str, **options: str) -> Any:
    reader = spark.read.format(FORMAT).option("keyFormat", "string").option("valueFormat", "string")
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load(path)


def view_sequence(spark: Any, path: str, name: str) -> None:
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW {name} USING {FORMAT} "
        f"OPTIONS (path '{path}', keyFormat 'string', valueFormat 'string')"
    )
    assert spark.sql(f"SELECT count(*) AS n FROM {name}").collect()[0]["n"] == ROWS
    rows = spark.sql(f"SELECT key, value FROM {name} WHERE key = 'k5'").collect()
    assert [(r["key"], r["value"]) for r in rows] == [("k5", "v5")]
    assert spark.sql(f"SELECT count(*) AS n FROM {name}").collect()[0]["n"] == ROWS
    rows = spark.sql(f"SELECT key FROM {name} WHERE key IN ('k7', 'k70', 'nope')").collect()
    assert sorted(r["key"] for r in rows) == ["k7", "k70"]
    assert spark.sql(f"SELECT count(*) AS n FROM {name} WHERE key > 'k9'").collect()[0]["n"] == (
        sum(1 for i in range(ROWS) if f"k{i}" > "k9")
    )
    assert spark.sql(f"SELECT count(*) AS n FROM {name}").collect()[0]["n"] == ROWS


def dataframe_sequence(spark: Any, path: str) -> None:
    d = string_reader(spark, path)
    assert d.where("key = 'k9'").count() == 1
    assert d.count() == ROWS
    assert d.where("startswith(key, 'k99')").count() == 11
    assert d.where("key = 'k9'").collect()[0]["value"] == "v9"
    assert d.count() == ROWS


def test_view_without_owner(spark: Any, store_path: str) -> None:
    view_sequence(spark, store_path, "replay_local")


def test_dataframe_without_owner(spark: Any, store_path: str) -> None:
    dataframe_sequence(spark, store_path)


def test_view_with_live_owner(spark: Any, store_path: str) -> None:
    with live_owner(store_path):
        view_sequence(spark, store_path, "replay_owner")


def test_dataframe_with_live_owner(spark: Any, store_path: str) -> None:
    with live_owner(store_path):
        dataframe_sequence(spark, store_path)


def test_plan_replayed_after_its_owner_left_or_arrived(spark: Any, store_path: str) -> None:
    """A view planned through an owner is queried after the owner stopped, and a view
    planned without one is queried while an owner serves the store: both route again."""
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW replay_moves USING {FORMAT} "
        f"OPTIONS (path '{store_path}', keyFormat 'string')"
    )
    count = "SELECT count(*) AS n FROM replay_moves"
    with live_owner(store_path):
        assert spark.sql(count).collect()[0]["n"] == ROWS
    assert spark.sql(count).collect()[0]["n"] == ROWS  # the planning owner is gone
    with live_owner(store_path) as client:
        before = client.stats()["requests"]
        assert spark.sql(count).collect()[0]["n"] == ROWS
        assert client.stats()["requests"] > before  # read through the new owner
    d = string_reader(spark, store_path)
    assert d.count() == ROWS  # planned locally
    with live_owner(store_path) as client:
        before = client.stats()["requests"]
        assert d.count() == ROWS
        assert client.stats()["requests"] > before


def test_lookup_options_read_only_the_rows_asked_for(spark: Any, store_path: str) -> None:
    with live_owner(store_path) as client:

        def examined(**options: str) -> tuple[list[str], int]:
            before = client.stats()["rows_examined"]
            rows = string_reader(spark, store_path, **options).collect()
            return sorted(r["key"] for r in rows), client.stats()["rows_examined"] - before

        keys, n = examined(keys='["k5", "k500", "nope"]')
        assert keys == ["k5", "k500"] and n <= 3
        keys, n = examined(keyPrefix="k99")
        assert keys == ["k99"] + [f"k99{i}" for i in range(10)] and n <= 11
        keys, n = examined(keyFrom="k100", keyTo="k103")
        assert keys == ["k100", "k101", "k102", "k103"] and n <= 4
        keys, n = examined(keys='["k5", "k6"]', keyFrom="k6")
        assert keys == ["k6"]
    # Through SQL, replayed, and with filters on top.
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW replay_lookup USING {FORMAT} "
        f"OPTIONS (path '{store_path}', keyFormat 'string', keys '[\"k1\", \"k2\", \"k3\"]')"
    )
    assert spark.sql("SELECT count(*) AS n FROM replay_lookup").collect()[0]["n"] == 3
    assert spark.sql("SELECT key FROM replay_lookup WHERE key = 'k2'").collect()[0]["key"] == "k2"
    assert spark.sql("SELECT count(*) AS n FROM replay_lookup").collect()[0]["n"] == 3


def test_filters_are_pushed_only_where_spark_scopes_them() -> None:
    """This Spark replays pushed plans, so the reader pushes nothing here (a later Spark
    that scopes read info per scan gets exact pushdown back)."""
    import pyspark

    assert spark_scopes_pushdown_per_scan(pyspark.__version__) is False
    assert spark_scopes_pushdown_per_scan("5.0.0") is True
