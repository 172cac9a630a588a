"""ChangelogRecord and the located ChangelogFormatError."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from spark_statestore.changelog import (
    ChangelogFormatError,
    ChangelogRecord,
    HeaderStatus,
    MissingPositionHeaderError,
    OnMissingPosition,
    PositionHeaderError,
    TimestampType,
    encode_position,
    position_headers,
)
from spark_statestore.errors import StateStoreError
from spark_statestore.position import Position

P = Position.from_map({"orders": {3: 41}})


def make_record(**overrides: object) -> ChangelogRecord:
    parts: dict[str, object] = {
        "topic": "app-store-changelog",
        "partition": 3,
        "offset": 17,
        "key": b"k",
        "value": b"v",
    }
    parts.update(overrides)
    return ChangelogRecord.from_parts(**parts)  # type: ignore[arg-type]


def test_upsert_and_tombstone() -> None:
    upsert = make_record()
    assert not upsert.is_tombstone
    assert upsert.op == "upsert"
    delete = make_record(value=None)
    assert delete.is_tombstone
    assert delete.op == "delete"
    # An empty value is a value, not a delete.
    assert make_record(value=b"").op == "upsert"


def test_from_parts_defaults() -> None:
    record = make_record()
    assert record.position is None
    assert record.position_status is HeaderStatus.NO_POSITION
    assert record.headers == ()
    assert record.timestamp == -1
    assert record.timestamp_type is TimestampType.NOT_AVAILABLE


def test_from_parts_applies_header_rules() -> None:
    headers = [("trace", b"1"), *position_headers(P)]
    record = make_record(headers=headers, timestamp=1_700_000_000_000, timestamp_type=1)
    assert record.position == P
    assert record.position_status is HeaderStatus.POSITION
    assert record.headers == tuple(headers)
    assert record.timestamp == 1_700_000_000_000
    assert record.timestamp_type is TimestampType.CREATE_TIME


def test_from_parts_padded_kafka_streams_header() -> None:
    headers = [("v", b"\x00"), ("c", encode_position(P, pad_like_kafka_streams=True))]
    assert make_record(headers=headers).position == P


def test_from_parts_header_errors_carry_the_location() -> None:
    with pytest.raises(MissingPositionHeaderError) as info:
        make_record(headers=[("v", b"\x00")])
    err = info.value
    assert (err.topic, err.partition, err.offset) == ("app-store-changelog", 3, 17)
    assert "at topic app-store-changelog partition 3 offset 17" in str(err)

    with pytest.raises(PositionHeaderError) as info2:
        make_record(headers=[("v", b"\x00"), ("c", b"\x09")])
    assert info2.value.offset == 17
    assert "at topic app-store-changelog partition 3 offset 17" in str(info2.value)


def test_from_parts_skip_mode_keeps_the_record_and_says_so() -> None:
    record = make_record(headers=[("v", b"\x00")], on_missing=OnMissingPosition.SKIP)
    assert record.position is None
    assert record.position_status is HeaderStatus.SKIPPED
    assert record.value == b"v"


def test_null_key_is_rejected_with_location() -> None:
    with pytest.raises(ChangelogFormatError) as info:
        make_record(key=None)
    err = info.value
    assert (err.topic, err.partition, err.offset) == ("app-store-changelog", 3, 17)
    assert "null key" in str(err)
    assert str(err).endswith("at topic app-store-changelog partition 3 offset 17")
    with pytest.raises(ChangelogFormatError, match="null key"):
        ChangelogRecord("t", 0, 1, None, b"v")  # type: ignore[arg-type]


def test_unknown_timestamp_type() -> None:
    with pytest.raises(ChangelogFormatError, match="unknown timestamp type 3") as info:
        make_record(timestamp_type=3)
    assert info.value.partition == 3


def test_direct_construction_derives_the_position_status() -> None:
    record = ChangelogRecord("t", 0, 1, b"k", b"v", position=P)
    assert record.position_status is HeaderStatus.POSITION
    with pytest.raises(ChangelogFormatError, match="needs a position"):
        ChangelogRecord("t", 0, 1, b"k", b"v", position_status=HeaderStatus.POSITION)
    with pytest.raises(ChangelogFormatError, match="SKIPPED"):
        ChangelogRecord("t", 0, 1, b"k", b"v", position=P, position_status=HeaderStatus.SKIPPED)


def test_records_are_frozen_values() -> None:
    record = make_record()
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.value = b"x"  # type: ignore[misc]
    assert record == make_record()
    assert hash(record) == hash(make_record())


# -- ChangelogFormatError -----------------------------------------------------------------


def test_error_message_names_only_the_known_location() -> None:
    assert str(ChangelogFormatError("bad")) == "bad"
    assert str(ChangelogFormatError("bad", topic="t")) == "bad at topic t"
    assert str(ChangelogFormatError("bad", partition=0, offset=0)) == "bad at partition 0 offset 0"
    err = ChangelogFormatError("bad", topic="t", partition=3, offset=17)
    assert str(err) == "bad at topic t partition 3 offset 17"
    assert err.reason == "bad"
    assert isinstance(err, ValueError)
    assert isinstance(err, StateStoreError)


def test_at_returns_a_located_copy_of_the_same_type() -> None:
    cause = KeyError("x")
    err = MissingPositionHeaderError("no c", topic="t")
    err.__cause__ = cause
    located = err.at(partition=1, offset=2)
    assert type(located) is MissingPositionHeaderError
    assert (located.topic, located.partition, located.offset) == ("t", 1, 2)
    assert located.__cause__ is cause
    assert err.partition is None  # the original is untouched


def test_errors_pickle_with_their_location() -> None:
    err = PositionHeaderError("bad c", topic="t", partition=3, offset=17)
    clone = pickle.loads(pickle.dumps(err))
    assert type(clone) is PositionHeaderError
    assert str(clone) == str(err)
    assert (clone.reason, clone.topic, clone.partition, clone.offset) == ("bad c", "t", 3, 17)
