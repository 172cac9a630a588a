"""enrich's per-batch work in columns: keys encoded (binary and string in Arrow, the other
formats key by key), deduplicated, matched with what the lookup found, values decoded;
null, absent and repeated keys; a key of the wrong type names its row."""

from __future__ import annotations

import struct
from typing import Any

import pyarrow as pa
import pytest

from spark_statestore.connectors.spark import enrich_tasks as enrich
from spark_statestore.connectors.spark.errors import SparkSourceError
from spark_statestore.connectors.spark.formats import ColumnCodec
from spark_statestore.position import Position, PositionBound


def plan(key_format: str, value_format: str = "binary") -> Any:
    return enrich.Plan(
        path="/s",
        host=None,
        route=None,
        key_index=0,
        key_codec=ColumnCodec.create(key_format, None, column="key"),
        value_codec=ColumnCodec.create(value_format, None, column="value"),
        position_index=None,
        wait_s=0.0,
        names=("k", "value"),
    )


def run(the_plan: Any, column: pa.Array, store: dict[bytes, bytes]) -> tuple[list[Any], list[Any]]:
    asked: list[list[bytes]] = []

    def lookup(_: Any, keys: pa.Array, bound: PositionBound, ids: Any) -> Any:
        assert ids is None  # keys of the plain formats are not framed
        wanted = keys.to_pylist()
        asked.append(wanted)
        present = [k for k in wanted if k in store]
        return enrich.found_arrays(present, [store[k] for k in present], Position.empty())

    batch = pa.RecordBatch.from_arrays([column], names=["k"])
    out = list(enrich.enrich_with(iter([batch]), the_plan, lookup))
    assert len(asked) == 1 and len(asked[0]) == len(set(asked[0]))  # each key asked once
    return out[0].column(1).to_pylist(), asked[0]


@pytest.mark.parametrize("kind", [pa.binary(), pa.large_binary()])
def test_binary_keys(kind: pa.DataType) -> None:
    values, asked = run(
        plan("binary"), pa.array([b"a", None, b"b", b"a", b"zz"], kind), {b"a": b"1", b"b": b"2"}
    )
    assert values == [b"1", None, b"2", b"1", None]
    assert sorted(asked) == [b"a", b"b", b"zz"]


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_string_keys_are_their_utf8_bytes(kind: pa.DataType) -> None:
    values, asked = run(
        plan("string", "string"),
        pa.array(["\u00e9t\u00e9", "x", None], kind),
        {"\u00e9t\u00e9".encode(): b"summer"},
    )
    assert values == ["summer", None, None]
    assert sorted(asked) == [b"x", "\u00e9t\u00e9".encode()]


def test_long_keys_and_values_are_encoded_key_by_key() -> None:
    store = {
        struct.pack(">q", 7): struct.pack(">q", 70),
        struct.pack(">q", -1): struct.pack(">q", 1),
    }
    values, _ = run(plan("long", "long"), pa.array([7, -1, 8, None, 7], pa.int64()), store)
    assert values == [70, 1, None, None, 70]


def test_a_batch_of_null_keys_asks_for_nothing() -> None:
    values, asked = run(plan("binary"), pa.array([None, None], pa.binary()), {})
    assert values == [None, None] and asked == []


def test_a_key_of_another_type_than_the_format_names_its_row() -> None:
    with pytest.raises(SparkSourceError, match="row 1 of a batch has key 'b'"):
        run(plan("binary"), pa.array([None, "b"], pa.string()), {})
    with pytest.raises(SparkSourceError, match="row 0"):
        run(plan("long"), pa.array(["7"], pa.string()), {})
