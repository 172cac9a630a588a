"""The snapshot reader's lookup options and the pushdown gate (no JVM)."""

from __future__ import annotations

import struct

import pytest

from spark_statestore.connectors.spark.options import parse_reader_options
from spark_statestore.connectors.spark.reader.lookup import (
    MAX_LOOKUP_KEYS,
    spark_scopes_pushdown_per_scan,
)
from spark_statestore.errors import OptionError
from spark_statestore.store.scan import ScanSpec


def lookup(**options: str) -> ScanSpec:
    raw = {"path": "/tmp/s", **{k.lower(): v for k, v in options.items()}}
    return parse_reader_options(raw).lookup


def test_no_lookup_option_reads_everything() -> None:
    assert lookup() == ScanSpec.everything()
    assert lookup(keyFormat="long") == ScanSpec.everything()


def test_keys_in_each_format() -> None:
    assert lookup(keyFormat="string", keys='["b", "a", "a"]').keys == (b"a", b"b")
    assert lookup(keyFormat="long", keys="[1, -1]").keys == tuple(
        sorted(struct.pack(">q", v) for v in (1, -1))
    )
    assert lookup(keyFormat="int", keys="[7]").keys == (struct.pack(">i", 7),)
    assert lookup(keyFormat="double", keys="[1.5]").keys == (struct.pack(">d", 1.5),)
    assert lookup(keys='["text", "hex:00ff"]').keys == (b"\x00\xff", b"text")
    assert lookup(keyFormat="string", keys="[]").is_empty()


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"keys": "k1"}, "JSON array of keys"),
        ({"keys": '{"a": 1}'}, "JSON array of keys"),
        ({"keys": "[NaN]", "keyFormat": "double"}, "JSON array of keys"),
        ({"keys": "[" * 100_000 + "]" * 100_000}, "JSON array of keys"),
        ({"keys": '[["a"]]', "keyFormat": "string"}, "not a string key"),
        ({"keys": "[null]", "keyFormat": "string"}, "not a string key"),
        ({"keys": '["1"]', "keyFormat": "long"}, "not a key of keyFormat 'long'"),
        ({"keys": "[9223372036854775808]", "keyFormat": "long"}, "out of range"),
        ({"keys": "[true]", "keyFormat": "int"}, "not a key of keyFormat 'int'"),
        ({"keys": "[0.0]", "keyFormat": "double"}, "not pushable"),
        ({"keys": '["a"]', "keyFormat": "json", "keySchema": "a INT"}, "json keys"),
        ({"keys": '["hex:zz"]'}, "not valid hex"),
        ({"keyPrefix": "k", "keyFormat": "long"}, "'keyPrefix' needs keyFormat 'binary'"),
        ({"keyFrom": "1", "keyFormat": "int"}, "'keyFrom' needs keyFormat"),
        ({"keyFrom": "b", "keyTo": "a"}, "is after 'keyTo'"),
        ({"partitions": "x"}, "partitions"),
        ({"keys": '["a"]', "view": "position"}, "option 'keys' selects rows of the data view"),
    ],
)
def test_bad_lookup_options_are_named(options: dict[str, str], fragment: str) -> None:
    with pytest.raises(OptionError, match=fragment):
        lookup(**options)


def test_too_many_keys_is_a_join() -> None:
    keys = "[" + ",".join(["1"] * (MAX_LOOKUP_KEYS + 1)) + "]"
    with pytest.raises(OptionError, match="join it in Spark"):
        lookup(keyFormat="long", keys=keys)


def test_ranges_prefixes_and_partitions_combine() -> None:
    spec = lookup(
        keyFormat="string", keyPrefix="k1", keyFrom="k10", keyTo="k19", partitions="0,2-3"
    )
    assert spec.prefix == b"k1" and spec.lower == b"k10" and spec.upper == b"k19"
    assert spec.lower_inclusive and spec.upper_inclusive
    assert spec.partitions == frozenset({0, 2, 3})
    assert [k for k in (b"k0", b"k10", b"k15", b"k19", b"k2") if spec.matches_key(k)] == [
        b"k10",
        b"k15",
        b"k19",
    ]
    assert lookup(keyPrefix="hex:ff").prefix == b"\xff"
    assert lookup(keyFormat="string", keys='["a", "b"]', keyFrom="b").matches_key(b"b")
    assert not lookup(keyFormat="string", keys='["a", "b"]', keyFrom="b").matches_key(b"a")


@pytest.mark.parametrize(
    ("version", "scoped"),
    [
        ("4.1.0", False),
        ("4.2.0", False),
        ("4.3.0", False),
        ("4.3.0.dev1", False),
        ("5.0.0", True),
        ("5.0.0.dev0", True),
        ("", False),
        ("unknown", False),
    ],
)
def test_pushdown_gate(version: str, scoped: bool) -> None:
    assert spark_scopes_pushdown_per_scan(version) is scoped
