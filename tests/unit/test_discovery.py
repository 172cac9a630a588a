"""Replica announcements (the replicas topic's record codec) and the KIP-535 metadata computed
from a set of them, without Kafka."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_statestore.changelog import partition_for_key
from spark_statestore.discovery import (
    MAX_ANNOUNCEMENT_BYTES,
    AnnouncementError,
    DiscoveryError,
    ReplicaAnnouncement,
    ReplicaSet,
    host_info_of,
)
from spark_statestore.position import Position
from spark_statestore.query import HostInfo, KeyQueryMetadata, LagInfo
from spark_statestore.store.manifest import Role

CHANGELOG = "app-store-changelog"


def make_announcement(**changes: Any) -> ReplicaAnnouncement:
    """A live follower of every one of 4 partitions, serving on port 5001, unless changed."""
    fields: dict[str, Any] = {
        "replica_id": "r1",
        "changelog": CHANGELOG,
        "role": Role.FOLLOWER,
        "host": "host-a",
        "location": "grpc://127.0.0.1:5001",
        "partitions": 4,
        "held_partitions": (0, 1, 2, 3),
        "heartbeat_ms": 1_000_000,
        "ttl_ms": 3_000,
        "started_ms": 999_000,
        "pid": 42,
    }
    fields.update(changes)
    return ReplicaAnnouncement(**fields)


# -- the codec ------------------------------------------------------------------------------
@st.composite
def announcements(draw: st.DrawFn) -> ReplicaAnnouncement:
    partitions = draw(st.integers(1, 64))
    held = draw(st.sets(st.integers(0, partitions - 1), min_size=1))
    lags = {
        p: LagInfo(draw(st.integers(0, 2**40)), draw(st.integers(0, 2**40)))
        for p in draw(st.sets(st.sampled_from(sorted(held))))
    }
    position = Position.from_map(
        draw(
            st.dictionaries(
                st.text(min_size=1, max_size=20),
                st.dictionaries(st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1)),
                max_size=3,
            )
        )
    )
    port = draw(st.integers(1, 65535))
    host = draw(st.sampled_from(["127.0.0.1", "replica-3.example", "[::1]"]))
    return ReplicaAnnouncement(
        replica_id=draw(st.text(min_size=1, max_size=40)),
        changelog=draw(st.text(min_size=1, max_size=40)),
        role=draw(st.sampled_from(list(Role))),
        host=draw(st.text(min_size=1, max_size=20)),
        location=draw(
            st.none() | st.sampled_from([f"grpc://{host}:{port}", f"grpc+tls://{host}:{port}"])
        ),
        partitions=partitions,
        held_partitions=tuple(sorted(held)),
        key_prefix=draw(st.none() | st.binary(min_size=1, max_size=16)),
        position=position,
        lags=lags,
        heartbeat_ms=draw(st.integers(0, 2**62)),
        ttl_ms=draw(st.integers(1, 2**40)),
        started_ms=draw(st.integers(0, 2**62)),
        pid=draw(st.integers(0, 2**31 - 1)),
    )


@settings(max_examples=200, deadline=None)
@given(announcements())
def test_an_announcement_round_trips_through_its_record_value(
    announcement: ReplicaAnnouncement,
) -> None:
    assert ReplicaAnnouncement.from_bytes(announcement.to_bytes()) == announcement


def test_the_record_value_is_versioned_json_with_every_field() -> None:
    announcement = make_announcement(
        key_prefix=b"eu-",
        position=Position.from_map({"orders": {0: 41}}),
        lags={0: LagInfo(10, 12)},
    )
    body = json.loads(announcement.to_bytes())
    assert body == {
        "version": 2,
        "replica_id": "r1",
        "changelog": CHANGELOG,
        "role": "follower",
        "host": "host-a",
        "location": "grpc://127.0.0.1:5001",
        "partitions": 4,
        "held_partitions": [0, 1, 2, 3],
        "key_prefix": "ZXUt",
        "position": {"orders": {"0": 41}},
        "lags": {"0": {"current": 10, "end": 12, "lag": 2}},
        "heartbeat_ms": 1_000_000,
        "ttl_ms": 3_000,
        "started_ms": 999_000,
        "pid": 42,
    }


def _valid() -> dict[str, Any]:
    return make_announcement().to_dict()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"version": 3}, "format version 3"),
        ({"version": True}, "version must be an int"),
        ({"role": "owner"}, "role must be"),
        ({"replica_id": ""}, "replica_id"),
        ({"replica_id": 7}, "replica_id"),
        ({"partitions": 0}, "partitions"),
        ({"partitions": 4.0}, "partitions"),
        ({"held_partitions": [4]}, "held partition"),
        ({"held_partitions": [0, 0]}, "distinct"),
        ({"held_partitions": []}, "not empty"),
        ({"held_partitions": "0"}, "must be a list"),
        ({"held_partitions": [True]}, "held partition"),
        ({"key_prefix": "not base64!"}, "not base64"),
        ({"key_prefix": ""}, "key_prefix"),
        ({"location": "http://h:1"}, "grpc://HOST:PORT"),
        ({"location": "grpc://h:99999"}, "location"),
        ({"location": "grpc://h"}, "grpc://HOST:PORT"),
        ({"position": {"orders": {"x": 1}}}, "replica announcement"),
        ({"lags": {"0": {"current": -1, "end": 2}}}, "replica announcement"),
        ({"lags": {"0": 3}}, "replica announcement"),
        ({"lags": []}, "lags must be an object"),
        ({"heartbeat_ms": -1}, "heartbeat_ms"),
        ({"ttl_ms": 0}, "ttl_ms"),
        ({"pid": "1"}, "pid"),
    ],
)
def test_a_malformed_announcement_is_refused(change: dict[str, Any], message: str) -> None:
    raw = json.dumps({**_valid(), **change}).encode()
    with pytest.raises(AnnouncementError, match=message):
        ReplicaAnnouncement.from_bytes(raw)


def test_lags_of_a_partition_not_held_are_refused() -> None:
    body = {**_valid(), "held_partitions": [1], "lags": {"0": {"current": 1, "end": 2}}}
    with pytest.raises(AnnouncementError, match=r"partitions \[0\] the replica does not hold"):
        ReplicaAnnouncement.from_bytes(json.dumps(body).encode())


@pytest.mark.parametrize("field", ["replica_id", "location", "held_partitions", "ttl_ms"])
def test_a_missing_field_is_named(field: str) -> None:
    body = _valid()
    del body[field]
    with pytest.raises(AnnouncementError, match=f"misses field.*{field}"):
        ReplicaAnnouncement.from_bytes(json.dumps(body).encode())


@pytest.mark.parametrize(
    "raw", [b"", b"[]", b"null", b"\xff\xfe", b'{"version": 1', b"[" * 100_000, b"1e999"]
)
def test_values_that_are_not_an_announcement_object_are_refused(raw: bytes) -> None:
    with pytest.raises(AnnouncementError):
        ReplicaAnnouncement.from_bytes(raw)


def test_unknown_fields_are_ignored() -> None:
    body = {**_valid(), "zone": "eu-west-1"}
    assert ReplicaAnnouncement.from_bytes(json.dumps(body).encode()) == make_announcement()


def test_an_oversized_value_is_refused_before_parsing() -> None:
    raw = json.dumps({**_valid(), "padding": "x" * MAX_ANNOUNCEMENT_BYTES}).encode()
    with pytest.raises(AnnouncementError, match="over the"):
        ReplicaAnnouncement.from_bytes(raw)


def test_an_announcement_too_large_to_publish_is_refused() -> None:
    position = Position.from_map({"t" * 200: {p: p for p in range(100_000)}})
    with pytest.raises(AnnouncementError, match=r"over the .*-byte limit"):
        make_announcement(position=position).to_bytes()


@pytest.mark.parametrize(
    ("location", "host"),
    [
        ("grpc://127.0.0.1:5001", HostInfo("127.0.0.1", 5001)),
        ("grpc+tls://replica.example:8815", HostInfo("replica.example", 8815)),
        ("grpc+tcp://[::1]:7", HostInfo("::1", 7)),
    ],
)
def test_host_info_of_a_flight_location(location: str, host: HostInfo) -> None:
    assert host_info_of(location) == host


# -- liveness -------------------------------------------------------------------------------
def test_an_announcement_is_live_until_its_ttl_after_its_heartbeat() -> None:
    announcement = make_announcement(heartbeat_ms=1_000, ttl_ms=500)
    assert announcement.is_live(1_499)
    assert not announcement.is_live(1_500)
    assert announcement.is_live(1_900, ttl_ms=1_000)  # a reader's own TTL wins
    assert ReplicaSet.of(CHANGELOG, [announcement], now_ms=1_499).replicas == (announcement,)
    assert ReplicaSet.of(CHANGELOG, [announcement], now_ms=1_500).replicas == ()


def test_announcements_of_another_changelog_or_partition_count_are_left_out() -> None:
    ours = make_announcement(replica_id="a", heartbeat_ms=1_000_100)
    other = make_announcement(replica_id="b", changelog="other-changelog")
    before_recreation = make_announcement(replica_id="c", partitions=2, held_partitions=(0, 1))
    found = ReplicaSet.of(
        CHANGELOG, [ours, other, before_recreation], now_ms=1_000_200, partitions=4
    )
    assert [r.replica_id for r in found.replicas] == ["a"]


def test_the_partition_count_is_kafkas_not_the_newest_heartbeats() -> None:
    """Finding 2: one record with a heartbeat far in the future and another partition count
    left only itself live (the newest heartbeat decided the count)."""
    real = [make_announcement(replica_id=r, heartbeat_ms=1_000_100) for r in ("a", "b")]
    forged = make_announcement(
        replica_id="z", partitions=2, held_partitions=(0, 1), heartbeat_ms=9_000_000_000
    )
    found = ReplicaSet.of(CHANGELOG, [*real, forged], now_ms=1_000_200, partitions=4)
    assert [r.replica_id for r in found.replicas] == ["a", "b"]
    with pytest.raises(DiscoveryError, match="different partition counts"):
        ReplicaSet.of(CHANGELOG, [*real, forged], now_ms=1_000_200)


def test_a_withdrawn_replica_is_not_live_and_liveness_runs_from_seen_ms() -> None:
    gone = make_announcement(replica_id="a", withdrawn=True)
    assert ReplicaSet.of(CHANGELOG, [gone], now_ms=1_000_200).replicas == ()
    # A heartbeat far in the future counts from when the broker appended it.
    future = make_announcement(replica_id="b", heartbeat_ms=9_000_000_000, seen_ms=1_000_000)
    assert future.is_live(1_000_000 + future.ttl_ms - 1)
    assert not future.is_live(1_000_000 + future.ttl_ms)


def test_a_replica_given_twice_is_an_error() -> None:
    with pytest.raises(DiscoveryError, match="given twice"):
        ReplicaSet.of(CHANGELOG, [make_announcement(), make_announcement()], now_ms=0)


# -- KIP-535 metadata ----------------------------------------------------------------------
LEADER = make_announcement(
    replica_id="leader", role=Role.LEADER, location="grpc://10.0.0.1:7000", host="lead"
)
EVEN = make_announcement(
    replica_id="even",
    location="grpc://10.0.0.2:7000",
    held_partitions=(0, 2),
    lags={0: LagInfo(5, 9), 2: LagInfo(4, 4)},
)
ODD = make_announcement(
    replica_id="odd",
    location="grpc://10.0.0.3:7000",
    held_partitions=(1, 3),
    lags={1: LagInfo(0, 7), 3: LagInfo(3, 3)},
)
EU = make_announcement(replica_id="eu", location="grpc://10.0.0.4:7000", key_prefix=b"eu-")
SILENT = make_announcement(replica_id="silent", location=None)  # holds all, does not serve
NOW = 1_000_001


def _key_in(partition: int, prefix: bytes = b"") -> bytes:
    return next(
        key
        for key in (prefix + str(n).encode() for n in range(1000))
        if partition_for_key(key, 4) == partition
    )


@pytest.mark.parametrize("partition", [0, 1, 2, 3])
def test_metadata_for_key_names_the_leader_and_the_followers_holding_it(partition: int) -> None:
    replicas = ReplicaSet.of(CHANGELOG, [LEADER, EVEN, ODD, EU, SILENT], now_ms=NOW)
    key = _key_in(partition)
    metadata = replicas.metadata_for_key(key)
    holder = EVEN if partition % 2 == 0 else ODD
    assert metadata == KeyQueryMetadata(
        HostInfo("10.0.0.1", 7000), frozenset({holder.host_info}), partition
    )
    assert metadata.partition == partition_for_key(key, 4)
    eu_key = _key_in(partition, b"eu-")
    assert replicas.metadata_for_key(eu_key).standbys == {holder.host_info, EU.host_info}


def test_without_a_live_leader_the_active_is_none_and_the_followers_answer() -> None:
    replicas = ReplicaSet.of(
        CHANGELOG, [LEADER.with_heartbeat(0, position=Position.empty(), lags={}), EVEN], now_ms=NOW
    )
    metadata = replicas.metadata_for_key(_key_in(2))
    assert metadata.active is None
    assert metadata.standbys == {HostInfo("10.0.0.2", 7000)}
    assert metadata.is_available
    assert not replicas.metadata_for_key(_key_in(1)).is_available  # nobody holds 1


def test_no_live_replica_means_not_available() -> None:
    assert ReplicaSet.of(CHANGELOG, [], now_ms=NOW).metadata_for_key(b"k") == (
        KeyQueryMetadata.not_available()
    )


def test_the_most_recently_started_leader_is_the_active() -> None:
    old = make_announcement(
        replica_id="old", role=Role.LEADER, location="grpc://10.0.0.8:1", started_ms=1
    )
    replicas = ReplicaSet.of(CHANGELOG, [old, LEADER], now_ms=NOW)
    assert replicas.metadata_for_key(b"k").active == HostInfo("10.0.0.1", 7000)


def test_all_metadata_and_lags_per_replica_and_partition() -> None:
    replicas = ReplicaSet.of(CHANGELOG, [ODD, LEADER, EVEN], now_ms=NOW)
    assert replicas.all_metadata() == (EVEN, LEADER, ODD)  # by replica id
    assert replicas.lags() == {
        "even": {0: LagInfo(5, 9), 2: LagInfo(4, 4)},
        "leader": {},
        "odd": {1: LagInfo(0, 7), 3: LagInfo(3, 3)},
    }
    assert replicas.partition_lags() == {
        0: {"even": LagInfo(5, 9)},
        1: {"odd": LagInfo(0, 7)},
        2: {"even": LagInfo(4, 4)},
        3: {"odd": LagInfo(3, 3)},
    }
    assert replicas.next_expiry_ms() == 1_003_000
