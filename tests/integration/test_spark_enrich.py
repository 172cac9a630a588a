"""``spark_statestore.enrich``: a DataFrame's rows get the store's value of their key, looked
up on the executors in batches, through the store's live owner or from the store itself."""

from __future__ import annotations

import contextlib
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import spark_statestore
from spark_statestore.changelog import partition_for_key
from spark_statestore.connectors.kafka.discovery import ReplicaAnnouncer
from spark_statestore.discovery import ReplicaAnnouncement
from spark_statestore.errors import OptionError
from spark_statestore.position import Position
from spark_statestore.serve import StoreServer, connect_to_owner
from spark_statestore.store import Role, Store, StoreSpec
from tests.misbehaving import UnboundedStore

pytestmark = pytest.mark.integration

PARTITIONS = 3


def make_prices(
    path: Path,
    changelog: str | None = None,
    *,
    role: Role = Role.LEADER,
    items: int = 50,
    price: int = 10,
) -> Path:
    """A store of item-00..item-<items - 1>, priced ``price`` * i, at position orders
    0:<items - 1> (a leader store by default)."""
    spec = StoreSpec(role, changelog, PARTITIONS)
    with Store.open(path, spec) as store, store.begin() as txn:
        for i in range(items):
            key = f"item-{i:02d}".encode()
            txn.put(
                key,
                struct.pack(">q", i * price),
                partition=partition_for_key(key, PARTITIONS),
                source=("orders", 0, i),
            )
    return path


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return make_prices(tmp_path / "prices")


def _partition(item: str) -> int:
    return partition_for_key(item.encode(), PARTITIONS)


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted((tuple(row) for row in df.collect()), key=repr)


def priced_items(spark: Any, path: Path) -> tuple[Any, list[tuple[Any, ...]]]:
    """``enrich`` of items (some absent from :func:`make_prices`'s store, one null) with
    their price from the store at ``path``, and the rows it must give (sorted by repr)."""
    items = [f"item-{i:02d}" for i in range(0, 60, 3)] + [None]
    df = spark.createDataFrame([(k, n) for n, k in enumerate(items)], "item STRING, n INT")
    expected = sorted(
        (
            (k, n, None if k is None or int(k[5:]) >= 50 else int(k[5:]) * 10)
            for n, k in enumerate(items)
        ),
        key=repr,
    )
    enriched = spark_statestore.enrich(
        df.repartition(3),
        str(path),
        key_column="item",
        value_column="price",
        key_format="string",
        value_format="long",
    )
    return enriched, expected


def test_rows_get_their_keys_values_through_the_owner_and_without_one(
    spark: Any, store_path: Path
) -> None:
    enriched, expected = priced_items(spark, store_path)
    assert enriched.columns == ["item", "n", "price"]
    assert _rows(enriched) == expected  # no owner: a private checkpoint per task
    with Store.open(store_path, purpose="enrich test") as store, StoreServer(store):
        assert _rows(enriched) == expected  # through the owner
        client = connect_to_owner(store_path)
        assert client is not None
        with client:
            served = client.stats()
        assert served["requests"] >= 1
        assert served["rows_examined"] <= 20  # point lookups, not scans of the store


def test_bounded_lookups_report_and_honour_the_snapshot_position(
    spark: Any, store_path: Path
) -> None:
    df = spark.createDataFrame(
        [("item-01", '{"orders": {"0": 40}}'), ("item-02", None)], "item STRING, pos STRING"
    )
    enriched = spark_statestore.enrich(
        df,
        str(store_path),
        key_column="item",
        key_format="string",
        value_format="long",
        position_column="pos",
        lookup_position_column="seen",
    )
    rows = enriched.collect()
    assert [(r["item"], r["value"]) for r in rows] == [("item-01", 10), ("item-02", 20)]
    assert {Position.from_json(r["seen"]) for r in rows} == {Position.from_map({"orders": {0: 49}})}
    unreached = spark.createDataFrame(
        [("item-01", '{"orders": {"0": 50}}')], "item STRING, pos STRING"
    )
    with pytest.raises(Exception, match="NOT_UP_TO_BOUND"):
        spark_statestore.enrich(
            unreached,
            str(store_path),
            key_column="item",
            key_format="string",
            position_column="pos",
        ).collect()


def test_rows_get_their_values_from_a_changelogs_replicas_through_the_router(
    spark: Any, tmp_path: Path, kafka_broker: Any, make_topic: Callable[..., str]
) -> None:
    """enrich(changelog=...): lookups on the executors go to the replica announced on
    ``<changelog>-replicas``, with the token the replicas share; bounded by the rows'
    positions on each key's partition; a wrong token is refused, saying so."""
    bootstrap = kafka_broker.bootstrap_servers
    changelog = make_topic(PARTITIONS, suffix="-changelog")
    path = make_prices(tmp_path / "prices", changelog)
    (tmp_path / "token").write_text("the-replicas-shared-token\n")
    (tmp_path / "wrong").write_text("not-the-replicas-token\n")
    in_zero = next(f"item-{i:02d}" for i in range(50) if _partition(f"item-{i:02d}") == 0)
    items = [f"item-{i:02d}" for i in range(0, 60, 3)] + [None]  # some absent, one null
    rows = [(k, '{"orders": {"0": 45}}' if k == in_zero else None) for k in [*items, in_zero]]
    df = spark.createDataFrame(rows, "item STRING, pos STRING")
    expected = sorted(
        ((k, pos, None if k is None or int(k[5:]) >= 50 else int(k[5:]) * 10) for k, pos in rows),
        key=repr,
    )

    def routed(frame: Any, token: str, **options: Any) -> Any:
        return spark_statestore.enrich(
            frame,
            changelog=changelog,
            bootstrap_servers=bootstrap,
            token_file=str(tmp_path / token),
            key_column="item",
            value_column="price",
            key_format="string",
            value_format="long",
            **options,
        )

    with (
        Store.open(path, purpose="enrich test") as store,
        StoreServer(store, token="the-replicas-shared-token") as server,
    ):
        announcement = ReplicaAnnouncement.of_store(store, location=server.location, ttl_ms=60_000)
        announcer = ReplicaAnnouncer(bootstrap, announcement, lambda: (store.metadata.position, {}))
        announcer.start()
        try:
            enriched = routed(df.repartition(2), "token", position_column="pos")
            assert _rows(enriched.select("item", "pos", "price")) == expected
            with_seen = routed(df, "token", position_column="pos", lookup_position_column="seen")
            seen = {Position.from_json(row["seen"]) for row in with_seen.collect()}
            assert seen == {Position.from_map({"orders": {0: 49}})}
            ahead = spark.createDataFrame(
                [(in_zero, '{"orders": {"0": 50}}')], "item STRING, pos STRING"
            )
            with pytest.raises(Exception, match=f"NOT_UP_TO_BOUND: the replicas of {changelog}"):
                routed(ahead, "token", position_column="pos", position_timeout_ms=200).collect()
            with pytest.raises(Exception, match="refused this client's credentials"):
                routed(df, "wrong").collect()
        finally:
            announcer.close()


def test_a_replica_that_answers_a_bound_it_has_not_reached_is_never_used(
    spark: Any, tmp_path: Path, kafka_broker: Any, make_topic: Callable[..., str]
) -> None:
    """enrich(changelog=...) with two replicas announced: a leader (asked first) whose store
    says success under the rows' bound, which it has not reached, with prices of its own,
    and an honest follower that has reached it. Every row gets the follower's price; with
    the follower gone, the lookups fail NOT_UP_TO_BOUND naming the leader."""
    bootstrap = kafka_broker.bootstrap_servers
    changelog = make_topic(PARTITIONS, suffix="-changelog")
    make_prices(tmp_path / "liar", changelog, items=41, price=1)  # orders 0:40, wrong prices
    make_prices(tmp_path / "follower", changelog, role=Role.FOLLOWER)  # orders 0:49
    (tmp_path / "token").write_text("the-replicas-shared-token\n")
    items = [f"item-{i:02d}" for i in range(0, 40, 3)]
    df = spark.createDataFrame(
        [(k, '{"orders": {"0": 45}}') for k in items], "item STRING, pos STRING"
    )

    def routed() -> list[tuple[Any, ...]]:
        enriched = spark_statestore.enrich(
            df,
            changelog=changelog,
            bootstrap_servers=bootstrap,
            token_file=str(tmp_path / "token"),
            key_column="item",
            value_column="price",
            key_format="string",
            value_format="long",
            position_column="pos",
        )
        return _rows(enriched.select("item", "price"))

    with contextlib.ExitStack() as stack:
        announcers = {}
        for name, store_class in (("liar", UnboundedStore), ("follower", Store)):
            store = stack.enter_context(store_class.open(tmp_path / name, purpose="enrich test"))
            server = stack.enter_context(StoreServer(store, token="the-replicas-shared-token"))
            announcement = ReplicaAnnouncement.of_store(
                store, location=server.location, ttl_ms=60_000
            )
            announcer = ReplicaAnnouncer(
                bootstrap, announcement, lambda store=store: (store.metadata.position, {})
            )
            announcer.start()
            stack.callback(announcer.close)
            announcers[name] = (announcer, store.manifest.store_id)
        assert routed() == [(k, int(k[5:]) * 10) for k in items]  # the follower's prices
        follower, _ = announcers["follower"]
        follower.close()  # a tombstone: the follower is gone
        _, liar = announcers["liar"]
        with pytest.raises(Exception, match=f"NOT_UP_TO_BOUND: the replicas of .*{liar}"):
            routed()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"key_column": "nope"}, "key_column 'nope' is not a column"),
        ({"key_column": "item", "value_column": "n"}, "column 'n' exists already"),
        ({"key_column": "item", "key_format": "json"}, "key_format json is not supported"),
        ({"key_column": "item", "position_timeout_ms": -1}, "position_timeout_ms must be"),
        ({"key_column": "item", "value_format": "text"}, "unknown value 'text'"),
        ({"key_column": "item", "changelog": "c"}, "exactly one of path"),
        ({"key_column": "item", "token_file": "/t"}, "token_file goes with changelog"),
    ],
)
def test_bad_options_fail_on_the_driver(
    spark: Any, store_path: Path, options: dict[str, Any], message: str
) -> None:
    df = spark.createDataFrame([("item-01", 1)], "item STRING, n INT")
    with pytest.raises(OptionError, match=message):
        spark_statestore.enrich(df, str(store_path), **options)


def test_a_key_of_the_wrong_type_names_the_row(spark: Any, store_path: Path) -> None:
    df = spark.createDataFrame([(json.dumps({"a": 1}),)], "item STRING")
    with pytest.raises(Exception, match="not a long key"):
        spark_statestore.enrich(df, str(store_path), key_column="item", key_format="long").collect()
