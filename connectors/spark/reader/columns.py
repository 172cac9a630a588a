"""The snapshot reader's data view: its schema, and store batches turned into its rows.

Columns (docs/spark.md, "Snapshot reader"): ``key``, ``value`` (decoded by ``keyFormat`` /
``valueFormat``), ``partition``, ``offset``, ``timestamp`` of each key's latest write; then
the window columns of ``storeType`` ``window`` (``window_start``, ``window_end``) or
``session`` (``session_start``, ``session_end``), whose ``key`` is the user key split from
the stored one (:mod:`~spark_statestore.connectors.spark.windows`); then ``headers`` with
``includeHeaders`` (the headers kept with the key's latest record, null when it had none).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spark_statestore.connectors.spark.format_options import codecs_for
from spark_statestore.connectors.spark.options import (
    DecodeMode,
    ReaderOptions,
)
from spark_statestore.connectors.spark.windows import (
    WINDOWED,
    SplitKeys,
    split_keys,
    window_columns,
    window_ddl,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["HEADERS_DDL", "convert_batch", "data_ddl"]

HEADERS_DDL = "headers ARRAY<STRUCT<key: STRING, value: BINARY>>"


def data_ddl(options: ReaderOptions) -> str:
    """The data view's schema as DDL, for the reader's store type and formats."""
    key_codec, value_codec = codecs_for(options.formats)
    columns = [
        f"key {key_codec.ddl_type()}",
        f"value {value_codec.ddl_type()}",
        "partition INT",
        "offset BIGINT",
        "timestamp TIMESTAMP",
        *window_ddl(options.store_type, options.window_size_ms),
    ]
    if options.include_headers:
        columns.append(HEADERS_DDL)
    return ", ".join(columns)


def convert_batch(
    batch: pa.RecordBatch, options: ReaderOptions, schema: StructType
) -> pa.RecordBatch:
    """A batch of the store's scan schema (:func:`~spark_statestore.store.arrow_schema`) as
    a batch of the data view.

    Raises
    ------
    DecodeError
        In FAILFAST mode, for a key or value the formats cannot decode, or a window or
        session key that does not split; the message names the store, the key, and the
        changelog partition and offset of its write.
    """
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    key_codec, value_codec = codecs_for(options.formats)
    permissive = options.formats.mode is DecodeMode.PERMISSIVE

    def locate(i: int) -> str:
        # ``batch`` as it is when a row fails (a windowed store's key filter narrows it).
        return (
            f"store {options.path} key {batch.column('key')[i].as_py()!r} (written from "
            f"changelog partition {batch.column('partition')[i]} offset "
            f"{batch.column('offset')[i]})"
        )

    windows: dict[str, pa.Array] = {}
    if options.store_type in WINDOWED:
        split = split_keys(
            batch.column("key").to_pylist(),
            options.store_type,
            options.window_size_ms,
            locate=locate,
            permissive=permissive,
        )
        if options.key_filter is not None:
            batch, split = _select(batch, split, options.key_filter)
        windows = window_columns(split, options.store_type, options.window_size_ms)
        key_array, _ = key_codec.decode(split.keys, locate=locate, permissive=permissive)
    else:
        # Binary and string keys and values stay in Arrow: no Python object per row.
        key_array, _ = key_codec.decode_array(
            batch.column("key"), locate=locate, permissive=permissive
        )
    value_array, _ = value_codec.decode_array(
        batch.column("value"), locate=locate, permissive=permissive
    )
    columns: dict[str, Any] = {
        "key": key_array,
        "value": value_array,
        "partition": batch.column("partition"),
        "offset": batch.column("offset"),
        "timestamp": batch.column("timestamp"),
        **windows,
    }
    if options.include_headers:
        columns["headers"] = batch.column("headers")
    arrow = to_arrow_schema(schema, timezone="UTC")
    arrays = [columns[f.name].cast(f.type) for f in arrow]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow)


def _select(
    batch: pa.RecordBatch, split: SplitKeys, key_filter: Any
) -> tuple[pa.RecordBatch, SplitKeys]:
    """The rows whose user key the lookup options select (the scan read a superset)."""
    import pyarrow as pa

    keep = [
        i for i, key in enumerate(split.keys) if key is not None and key_filter.matches_key(key)
    ]
    if len(keep) == len(split.keys):
        return batch, split
    return batch.take(pa.array(keep, pa.int64())), SplitKeys(
        [split.keys[i] for i in keep],
        [split.starts[i] for i in keep],
        [split.ends[i] for i in keep],
        split.undecodable,
    )
