"""The sink's input normalization (no JVM: Arrow batches as Spark hands them to the writer)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from spark_statestore.connectors.spark.errors import SinkError
from spark_statestore.connectors.spark.sink import _normalize


def batch(stamps: pa.Array) -> pa.RecordBatch:
    count = len(stamps)
    return pa.RecordBatch.from_arrays(
        [pa.array([b"k%d" % i for i in range(count)]), pa.array([b"v"] * count), stamps],
        names=["key", "value", "timestamp"],
    )


def stamps_of(stamps: pa.Array) -> list[int | None]:
    normalized: list[int | None] = _normalize(batch(stamps)).column("timestamp").to_pylist()
    return normalized


@pytest.mark.parametrize("tz", ["UTC", None])  # TIMESTAMP and TIMESTAMP_NTZ
def test_spark_timestamps_with_microseconds_are_rounded_down_to_milliseconds(
    tz: str | None,
) -> None:
    micros = [1_717_156_800_123_456, 1_717_156_800_123_999, 1_717_156_800_123_000, 0, None]
    assert stamps_of(pa.array(micros, pa.timestamp("us", tz=tz))) == [
        1_717_156_800_123,
        1_717_156_800_123,
        1_717_156_800_123,
        0,
        None,
    ]


def test_other_timestamp_units_and_epoch_millis() -> None:
    assert stamps_of(pa.array([1_500_000_001_999_999_999], pa.timestamp("ns"))) == [
        1_500_000_001_999
    ]
    assert stamps_of(pa.array([1_500_000_001], pa.timestamp("s", tz="UTC"))) == [1_500_000_001_000]
    assert stamps_of(pa.array([1_500_000_001_234], pa.timestamp("ms"))) == [1_500_000_001_234]
    assert stamps_of(pa.array([7, None], pa.int64())) == [7, None]


@pytest.mark.parametrize(
    "stamps",
    [
        pa.array([5, -1], pa.int64()),
        pa.array([1_000, -500], pa.timestamp("us", tz="UTC")),  # half a millisecond before 1970
        pa.array([dt.datetime(2024, 1, 1), dt.datetime(1969, 12, 31)], pa.timestamp("us")),
    ],
)
def test_timestamps_before_1970_are_refused_naming_the_row(stamps: pa.Array) -> None:
    with pytest.raises(
        SinkError, match=r"row 1 of this task's input has timestamp -.* before 1970"
    ):
        _normalize(batch(stamps))
