"""The snapshot reader's batch conversion: binary and string keys and values stay in Arrow,
other formats decode as before, and an undecodable value names its store key and the
changelog record that wrote it (FAILFAST) or becomes null (PERMISSIVE)."""

from __future__ import annotations

import struct
from typing import Any

import pyarrow as pa
import pytest

from spark_statestore.connectors.spark.ddl import parse_ddl
from spark_statestore.connectors.spark.formats import DecodeError
from spark_statestore.connectors.spark.options import parse_reader_options
from spark_statestore.connectors.spark.reader.columns import convert_batch
from spark_statestore.connectors.spark.reader.snapshot import reader_ddl
from spark_statestore.store.snapshot import arrow_schema


def stored(keys: list[bytes], values: list[bytes]) -> pa.RecordBatch:
    n = len(keys)
    columns: list[Any] = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.array([3] * n, pa.int32()),
        pa.array(range(40, 40 + n), pa.int64()),
        pa.array([1_700_000_000_000] * n, pa.timestamp("ms", tz="UTC")),
        pa.array([None] * n, arrow_schema().field("headers").type),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema())


def convert(batch: pa.RecordBatch, **raw: str) -> pa.RecordBatch:
    options = parse_reader_options({"path": "/stores/s", **raw})
    return convert_batch(batch, options, parse_ddl(reader_ddl(options)))


def test_binary_and_string_columns_convert_in_arrow() -> None:
    batch = stored([b"k1", b"k\xc3\xa9"], [b"v1", b"\x00\xff"])
    assert convert(batch).column("value").to_pylist() == [b"v1", b"\x00\xff"]
    text = convert(batch, keyFormat="string")
    assert text.column("key").to_pylist() == ["k1", "k\u00e9"]
    assert text.column("offset").to_pylist() == [40, 41]


def test_other_formats_decode_value_by_value() -> None:
    batch = stored([struct.pack(">q", 5)], [struct.pack(">d", 2.5)])
    out = convert(batch, keyFormat="long", valueFormat="double")
    assert out.column("key").to_pylist() == [5] and out.column("value").to_pylist() == [2.5]


def test_an_undecodable_value_names_its_key_and_record_or_becomes_null() -> None:
    batch = stored([b"a", b"bad-one"], [struct.pack(">q", 1), b"\x01\x02"])
    with pytest.raises(DecodeError, match=r"key b'bad-one'.*partition 3 offset 41"):
        convert(batch, valueFormat="long")
    out = convert(batch, valueFormat="long", mode="PERMISSIVE")
    assert out.column("value").to_pylist() == [1, None]
    not_utf8 = stored([b"a", b"\xff"], [b"x", b"y"])
    with pytest.raises(DecodeError, match=r"key b'\\xff'.*offset 41"):
        convert(not_utf8, keyFormat="string")
