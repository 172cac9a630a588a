"""The store server's typed wire forms: descriptions and describe replies, round trips and
refusals (malformed replies are our error, never a KeyError or TypeError)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_statestore.errors import StateStoreError
from spark_statestore.position import Position
from spark_statestore.query import LagInfo
from spark_statestore.serve import BadRequestError, StoreServer
from spark_statestore.serve.protocol import DescribeReply, StoreDescription
from spark_statestore.store import CommitRecord, Role, Store
from spark_statestore.store.ownership import OwnerInfo

MakeStore = Callable[..., Store]

INT64_MAX = 2**63 - 1
partitions = st.integers(0, 2**31 - 1)
texts = st.text(max_size=12)
positions = st.dictionaries(
    st.text(min_size=1, max_size=8),
    st.dictionaries(partitions, st.integers(0, INT64_MAX), min_size=1, max_size=3),
    max_size=3,
).map(Position.from_map)
descriptions = st.builds(
    StoreDescription,
    store=texts,
    store_id=texts,
    path=texts,
    changelog_topic=st.none() | texts,
    partitions=st.integers(1, 10_000),
    held_partitions=st.none() | st.lists(partitions, max_size=4).map(tuple),
    key_prefix=st.none() | st.binary(max_size=8),
    role=st.sampled_from(Role),
    created_at=texts,
    position=positions,
    changelog_offsets=st.dictionaries(partitions, st.integers(0, INT64_MAX), max_size=4),
    commit_seq=st.integers(0, INT64_MAX),
    commit_record=st.none()
    | st.builds(
        CommitRecord,
        query_id=texts,
        batch_id=st.integers(0, 1000),
        source_offsets=st.none() | st.dictionaries(texts, st.integers(), max_size=2),
        changelog_end_offsets=st.dictionaries(st.integers(0, 9), st.integers(0, 99), max_size=2),
    ).map(CommitRecord.to_dict),
    format_version=st.none() | st.integers(1, 2),
    history_retention_ms=st.none() | st.integers(0, INT64_MAX),
)
owners = st.builds(
    OwnerInfo,
    pid=st.integers(-1, 2**22),
    host=texts,
    role=texts,
    purpose=texts,
    started_at=texts,
    flight_location=st.none() | texts,
)
lags = st.dictionaries(
    partitions, st.builds(LagInfo, st.integers(0, INT64_MAX), st.integers(0, INT64_MAX))
)
replies = st.builds(
    DescribeReply,
    description=descriptions,
    lags=st.none() | lags,
    owner=owners,
    pins=st.integers(0, 100),
    location=st.none() | texts,
)


def _over_the_wire(data: dict[str, Any]) -> Any:
    return json.loads(json.dumps(data))


@given(descriptions)
def test_description_round_trip(description: StoreDescription) -> None:
    assert StoreDescription.from_dict(_over_the_wire(description.to_dict())) == description


@given(replies)
def test_describe_reply_round_trip(reply: DescribeReply) -> None:
    assert DescribeReply.from_dict(_over_the_wire(reply.to_dict())) == reply


def test_a_describe_reply_is_a_description_plus_what_the_server_knows() -> None:
    description = StoreDescription(
        "s", "id", "/p", None, 1, None, None, Role.LEADER, "t", Position.empty(), {}, 0, None
    )
    owner = OwnerInfo(1, "h", "leader", "test", "t")
    reply = DescribeReply(description, {0: LagInfo(3, 9)}, owner, 2, "grpc+tcp://h:1")
    data = reply.to_dict()
    assert StoreDescription.from_dict(data) == description
    assert {k: data[k] for k in ("lags", "pins", "location")} == {
        "lags": {"0": {"current": 3, "end": 9, "lag": 6}},
        "pins": 2,
        "location": "grpc+tcp://h:1",
    }
    assert data["owner"]["pid"] == 1


def test_a_description_from_an_older_server_has_no_kind() -> None:
    """Servers before the kind and format version were described omit both: still read."""
    data = valid_description()
    del data["format_version"], data["history_retention_ms"]
    description = StoreDescription.from_dict(data)
    assert description.format_version is None and description.history_retention_ms is None


OWNER_DICT = {
    "pid": 1,
    "host": "h",
    "role": "follower",
    "purpose": "p",
    "started_at": "t",
    "flight_location": None,
}


def valid_description() -> dict[str, Any]:
    """A description as a server sends it (the fuzz tests mutate it too)."""
    return {
        "store": "counts",
        "store_id": "3f2a",
        "path": "/stores/counts",
        "changelog_topic": "counts-changelog",
        "partitions": 4,
        "held_partitions": [0, 2],
        "key_prefix": "7573",
        "role": "follower",
        "created_at": "2024-05-01T12:00:00+00:00",
        "position": {"orders": {"0": 41}},
        "changelog_offsets": {"0": 12},
        "commit_seq": 9,
        "commit_record": None,
        "format_version": 1,
        "history_retention_ms": None,
    }


def test_the_valid_example_decodes() -> None:
    description = StoreDescription.from_dict(valid_description())
    assert description.held_partitions == (0, 2)
    assert description.key_prefix == b"us"
    assert description.role is Role.FOLLOWER
    assert description.position == Position.from_map({"orders": {0: 41}})
    assert description.changelog_offsets == {0: 12}


OPTIONAL_FIELDS = {"format_version", "history_retention_ms"}  # older servers omit them


@pytest.mark.parametrize("field", sorted(set(valid_description()) - OPTIONAL_FIELDS))
def test_a_description_without_a_field_is_refused(field: str) -> None:
    data = valid_description()
    del data[field]
    with pytest.raises(BadRequestError, match=repr(field)):
        StoreDescription.from_dict(data)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("store", None),
        ("store", 1),
        ("store_id", ["a"]),
        ("path", 7),
        ("changelog_topic", 5),
        ("partitions", 0),
        ("partitions", "4"),
        ("partitions", True),
        ("partitions", 4.0),
        ("held_partitions", [0, -1]),
        ("held_partitions", [True]),
        ("held_partitions", ["0"]),
        ("held_partitions", "0,2"),
        ("key_prefix", "zz"),
        ("key_prefix", 7),
        ("role", "owner"),
        ("role", None),
        ("created_at", 0),
        ("position", None),
        ("position", {"orders": {"0": -1}}),
        ("position", {"orders": {"x": 1}}),
        ("position", [["orders", 0, 1]]),
        ("changelog_offsets", None),
        ("changelog_offsets", {"0": 1.5}),
        ("changelog_offsets", {"\u0663": 1}),
        ("changelog_offsets", []),
        ("commit_seq", -1),
        ("commit_seq", 2**63),
        ("commit_seq", None),
        ("commit_record", "q:1"),
        ("commit_record", [1]),
    ],
)
def test_a_malformed_description_field_is_refused(field: str, value: Any) -> None:
    with pytest.raises(BadRequestError):
        StoreDescription.from_dict({**valid_description(), field: value})


@pytest.mark.parametrize("data", [None, [], "description", 42])
def test_a_description_that_is_not_an_object_is_refused(data: Any) -> None:
    with pytest.raises(BadRequestError):
        StoreDescription.from_dict(data)


@pytest.mark.parametrize(
    "extra",
    [
        {},  # no owner, pins, lags or location at all
        {"owner": None, "pins": 0, "lags": None, "location": None},
        {"owner": {"pid": 1}, "pins": 0, "lags": None, "location": None},
        {"owner": {**OWNER_DICT, "pid": "1"}, "pins": 0, "lags": None, "location": None},
        {"owner": {**OWNER_DICT, "host": None}, "pins": 0, "lags": None, "location": None},
        {"owner": {**OWNER_DICT, "flight_location": 3}, "pins": 0, "lags": None, "location": None},
        {"owner": OWNER_DICT, "pins": -1, "lags": None, "location": None},
        {"owner": OWNER_DICT, "pins": 0, "lags": [], "location": None},
        {"owner": OWNER_DICT, "pins": 0, "lags": {"0": {"current": 1}}, "location": None},
        {
            "owner": OWNER_DICT,
            "pins": 0,
            "lags": {"0": {"current": -1, "end": 0}},
            "location": None,
        },
        {"owner": OWNER_DICT, "pins": 0, "lags": None, "location": 5},
    ],
)
def test_a_malformed_describe_reply_is_refused(extra: dict[str, Any]) -> None:
    with pytest.raises(StateStoreError):
        DescribeReply.from_dict({**valid_description(), **extra})


def test_a_servers_description_holds_its_commit_record(make_store: MakeStore) -> None:
    store = make_store(partitions=2)
    record = CommitRecord("query-1", 7, {"src": {"0": 5}}, {0: 3, 1: 4})
    with store.begin() as txn:
        txn.put(b"k", b"v", partition=0, offset=2)
        txn.record_source("input", 0, 2)
        txn.set_changelog_offset(0, 3)
        txn.set_commit_record(record)
    with StoreServer(store) as server, server.client(timeout_s=10) as client:
        pinned = client.pin()
        client.release(pinned.snapshot_id)
        described = client.describe().description
    assert pinned.metadata == described
    assert described == StoreDescription.of_state(store.path, store.manifest, store.metadata)
    assert described.commit_record == record.to_dict()
    assert described.commit_record == json.loads(record.to_json())
    assert described.position == Position.from_map({"input": {0: 2}})


def test_a_valid_describe_reply_decodes() -> None:
    reply = DescribeReply.from_dict(
        {
            **valid_description(),
            "owner": OWNER_DICT,
            "pins": 3,
            "lags": {"0": {"current": 1, "end": 4, "lag": 3}},
            "location": "grpc+tcp://h:1",
        }
    )
    assert reply.owner == OwnerInfo(1, "h", "follower", "p", "t", None)
    assert reply.lags == {0: LagInfo(1, 4)}
    assert (reply.pins, reply.location) == (3, "grpc+tcp://h:1")
