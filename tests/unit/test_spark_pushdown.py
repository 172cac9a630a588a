"""Filter pushdown of the snapshot reader: which filters become which store scan."""

from __future__ import annotations

import struct

from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
    StringContains,
    StringStartsWith,
)

from spark_statestore.connectors.spark.formats import ColumnCodec, ValueFormat
from spark_statestore.connectors.spark.reader.pushdown import push_filters

STRING = ColumnCodec.create(ValueFormat.STRING, None, column="key")
LONG = ColumnCodec.create(ValueFormat.LONG, None, column="key")
KEY = ("key",)


def test_key_equality_and_in_become_a_multi_get() -> None:
    pushdown, rest = push_filters([EqualTo(KEY, "b"), In(KEY, ("a", "b", None))], STRING)
    assert rest == []
    spec = pushdown.spec()
    assert spec.keys == (b"b",)  # the intersection of both filters


def test_ranges_are_tightened_and_exclusive_bounds_kept() -> None:
    pushdown, rest = push_filters(
        [
            GreaterThan(KEY, "b"),
            GreaterThanOrEqual(KEY, "a"),
            LessThanOrEqual(KEY, "m"),
            LessThan(KEY, "m"),
        ],
        STRING,
    )
    spec = pushdown.spec()
    assert rest == []
    assert (spec.lower, spec.lower_inclusive) == (b"b", False)
    assert (spec.upper, spec.upper_inclusive) == (b"m", False)


def test_prefix_and_partition() -> None:
    pushdown, rest = push_filters(
        [StringStartsWith(KEY, "ab"), EqualTo(("partition",), 3), StringContains(KEY, "x")],
        STRING,
    )
    spec = pushdown.spec()
    assert spec.prefix == b"ab" and spec.partitions == frozenset({3})
    assert rest == [StringContains(KEY, "x")]  # Spark applies what the store cannot


def test_numeric_keys_push_equality_but_not_ranges() -> None:
    pushdown, rest = push_filters([EqualTo(KEY, 7), GreaterThan(KEY, 1)], LONG)
    assert pushdown.spec().keys == (struct.pack(">q", 7),)
    assert rest == [GreaterThan(KEY, 1)]  # big-endian bytes do not sort like signed numbers


def test_other_columns_and_unencodable_literals_stay_with_spark() -> None:
    filters = [EqualTo(("value",), b"x"), EqualTo(KEY, 2**70)]
    pushdown, rest = push_filters(filters, LONG)
    assert rest == filters
    assert pushdown.spec().keys is None and pushdown.pushed == []
