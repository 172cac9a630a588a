"""The sink: ``df.writeStream.format("spark_statestore")`` and the idempotent batch writer.

Executors stage their rows (:mod:`spark_statestore.sink.staging`) on the store's host, through
the store host of the driver (:mod:`spark_statestore.connectors.spark.host`: they may run on
other hosts and never touch the store's files), and return the file in their commit message;
the driver-side ``commit`` (a fresh process per micro-batch) applies exactly those files with
:func:`spark_statestore.sink.commit.commit_batch`: one atomic store commit of the data, the
batch id, the source offsets from Spark's offset log and the merged position. A replayed
batch id is skipped. ``abort`` deletes the batch's staged files.

Input rows: ``key`` and ``value`` (binary or string; a null value deletes the key), and
optionally ``topic``, ``partition``, ``offset`` (the input record's metadata, merged into the
store position) and ``timestamp`` (kept in epoch milliseconds, rounded down like Spark's Kafka
sink; a timestamp before 1970 fails the task, as Kafka's producer refuses it).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from spark_statestore.connectors.spark.errors import SinkError
from spark_statestore.connectors.spark.options import SinkOptions
from spark_statestore.connectors.spark.worker_gc import freeze_long_lived

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import DataType, StructType

    from spark_statestore.connectors.spark.checkpoint_fs import QueryCheckpoint
    from spark_statestore.sink.staging import StagedFile

__all__ = [
    "BatchWriter",
    "SinkError",
    "StagedMessage",
    "StreamSink",
    "check_changelog_owner",
    "check_input_schema",
]

_log = logging.getLogger(__name__)

_LAST_COMMITTED_HERE: dict[str, tuple[str, int]] = {}
"""Per store, the (query id, batch id) this process committed last (Spark calls a writer's
commit and abort in the same process, and aborts only the batch whose commit raised)."""

_COLUMNS = {
    "key": "BINARY or STRING (required, never null)",
    "value": "BINARY or STRING (required; null deletes the key)",
    "topic": "STRING (optional: the input record's topic)",
    "partition": "INT (optional: the input record's partition)",
    "offset": "BIGINT or INT (optional: the input record's offset)",
    "timestamp": "TIMESTAMP or BIGINT epoch milliseconds (optional)",
}


@dataclass(frozen=True)
class StagedMessage(WriterCommitMessage):
    """A task's commit message: the file it staged (None when it had no rows)."""

    staged: StagedFile | None


def check_input_schema(schema: StructType, encoded: Mapping[str, Any] | None = None) -> None:
    """Refuse input the sink cannot write, naming the column and the expected types.

    ``encoded``: ``{"key" / "value": RegistrySinkColumn}`` for the columns encoded in a
    registry format, which must have the Spark type of their writer schema.

    Raises
    ------
    SinkError
        On a missing ``key``/``value`` column, an unknown column or a wrong type.
    """
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        TimestampNTZType,
        TimestampType,
    )

    expected: dict[str, tuple[type[DataType], ...]] = {
        "key": (BinaryType, StringType),
        "value": (BinaryType, StringType),
        "topic": (StringType,),
        "partition": (IntegerType,),
        "offset": (LongType, IntegerType),
        "timestamp": (TimestampType, TimestampNTZType, LongType),
    }
    names = [field.name for field in schema.fields]
    expected_text = "; ".join(f"{name}: {kind}" for name, kind in _COLUMNS.items())
    for required in ("key", "value"):
        if required not in names:
            raise SinkError(
                f"the spark_statestore sink needs a {required!r} column; got columns {names}. "
                f"Expected: {expected_text}"
            )
    typed = dict(encoded or {})
    for field in schema.fields:
        if field.name in typed:
            _check_encoded_column(field, typed[field.name])
            continue
        kinds = expected.get(field.name)
        if kinds is None:
            raise SinkError(
                f"column {field.name!r} is not something the spark_statestore sink can write "
                f"(select only the expected columns). Expected: {expected_text}"
            )
        if not isinstance(field.dataType, kinds):
            raise SinkError(
                f"column {field.name!r} has type {field.dataType.simpleString()}, expected "
                f"{_COLUMNS[field.name]}"
            )


def _check_encoded_column(field: Any, typed: Any) -> None:
    wanted = typed.spark_type()
    if _without_nullability(field.dataType) != _without_nullability(wanted):
        raise SinkError(
            f"column {field.name!r} has type {field.dataType.simpleString()}, but its writer "
            f"schema ({typed.writer.what}) writes {wanted.simpleString()}: select or cast the "
            f"column to that type (the {typed.format.value} type mapping, see docs/schemas.md)"
        )


def _without_nullability(data_type: DataType) -> Any:
    """A type's shape with every field, element and value nullable (a non-null input fits
    a nullable schema)."""
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    if isinstance(data_type, StructType):
        return StructType(
            [StructField(f.name, _without_nullability(f.dataType), True) for f in data_type.fields]
        )
    if isinstance(data_type, ArrayType):
        return ArrayType(_without_nullability(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(data_type.keyType, _without_nullability(data_type.valueType), True)
    return data_type


def check_changelog_owner(options: SinkOptions) -> None:
    """KIP-813's rule: a sink publishes only to a changelog its ``application.id`` owns.

    Raises
    ------
    SinkError
        If ``changelog`` does not start with ``<application.id>-`` and
        ``allowForeignChangelog`` is not set.
    """
    changelog, owner = options.changelog, options.application_id
    if changelog is None or owner is None or options.allow_foreign_changelog:
        return
    if not changelog.startswith(f"{owner}-"):
        raise SinkError(
            f"changelog {changelog!r} does not belong to application.id {owner!r} (its "
            f"changelogs are named '{owner}-<store>-changelog'): publishing into another "
            "application's changelog would corrupt its stores. Use your own changelog, or "
            "set allowForeignChangelog=true if this topic really is yours"
        )


def _normalize(
    batch: pa.RecordBatch, typed: Mapping[str, Any] | None = None, first_row: int = 0
) -> pa.RecordBatch:
    """One input batch in the staged schema (binary key/value, ms timestamps); the columns
    in ``typed`` encoded with their writer schema (``first_row``: this batch's first row's
    number in the task, for messages)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from spark_statestore.sink.staging import staged_schema

    schema = staged_schema()
    count = batch.num_rows
    names = batch.schema.names
    encoded = dict(typed or {})

    def column(name: str, kind: pa.DataType) -> pa.Array:
        if name not in names:
            return pa.nulls(count, kind)
        values = batch.column(name)
        if name in encoded:
            encoder = encoded[name].encoder()
            rows = encoder.encode(
                values.to_pylist(), locate=lambda i: f"row {first_row + i} of this task's input"
            )
            return pa.array(rows, pa.binary())
        if name == "timestamp" and pa.types.is_timestamp(values.type):
            return _epoch_millis(values)
        return values.cast(kind)

    keys = column("key", pa.binary())
    if keys.null_count:
        first = pc.index(pc.is_null(keys), True).as_py()
        raise SinkError(
            f"row {first} of this task's input has a null key: a store key is never null "
            "(filter those rows out, or give them a key)"
        )
    stamps = column("timestamp", pa.int64())
    negative = pc.fill_null(pc.less(stamps, 0), False)
    if pc.any(negative).as_py():
        first = pc.index(negative, True).as_py()
        raise SinkError(
            f"row {first} of this task's input has timestamp {stamps[first].as_py()} ms, before "
            "1970-01-01T00:00:00Z: a Kafka record timestamp is never negative (Kafka's producer "
            "refuses it too); give such rows a later timestamp, or null for none"
        )
    arrays = [
        keys,
        column("value", pa.binary()),
        column("topic", pa.string()),
        column("partition", pa.int32()),
        column("offset", pa.int64()),
        stamps,
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


_UNITS_PER_MS = {"ms": 1, "us": 1_000, "ns": 1_000_000}


def _epoch_millis(values: pa.Array) -> pa.Array:
    """Epoch milliseconds (int64) of a timestamp column, rounded down as Spark's Kafka sink
    rounds them (``DateTimeUtils.toMillis``): Spark's timestamps have microseconds, Kafka's
    record timestamps milliseconds."""
    import pyarrow as pa
    import pyarrow.compute as pc

    units = values.cast(pa.int64())  # units since the epoch, whatever the time zone
    unit = values.type.unit
    if unit == "s":
        return pc.multiply_checked(units, 1_000)
    per_ms = _UNITS_PER_MS[unit]
    if per_ms == 1:
        return units
    truncated = pc.divide(units, per_ms)  # integer division rounds toward zero
    # Toward minus infinity instead for instants before 1970, where that differs.
    below = pc.greater(pc.multiply(truncated, per_ms), units)
    return pc.subtract(truncated, below.cast(pa.int64()))


def _task_ids() -> tuple[int, int]:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:  # not in a Spark task (a direct call): any unique attempt
        return 0, uuid.uuid4().int % 1_000_000
    return context.partitionId(), context.attemptNumber()


def read_query_id(checkpoint: QueryCheckpoint) -> str:
    """The streaming query's id from ``<checkpointLocation>/metadata``, through the
    checkpoint's filesystem (:mod:`~spark_statestore.connectors.spark.checkpoint_fs`)."""
    return checkpoint.query_id()


def read_source_offsets(checkpoint: QueryCheckpoint, batch_id: int) -> list[Any]:
    """The batch's source offsets from Spark's offset log, one entry per source."""
    return checkpoint.source_offsets(batch_id)


class _Writer:
    """What the streaming sink and the batch writer share: staging and committing."""

    _streaming = True

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        from spark_statestore.connectors.spark.host import ensure_store_host

        pairs = (("key", options.key_registry_column), ("value", options.value_registry_column))
        self._encoded = {name: column for name, column in pairs if column is not None}
        check_input_schema(schema, self._encoded)
        check_changelog_owner(options)
        self._options = options
        self._store = os.path.abspath(options.path)
        # Executors may run on other hosts: they send their rows to the store host on this
        # (the driver's) host, which stages them next to the store. None: no Spark driver
        # (a direct call), so the caller is on the store's host and stages itself.
        self._host = ensure_store_host()

    def _stage(
        self, query_id: str, batch_id: int, batches: Iterator[pa.RecordBatch]
    ) -> StagedMessage:
        from spark_statestore.sink.staging import StagingArea

        freeze_long_lived()  # a task in a reused Python worker
        partition_id, attempt = _task_ids()
        rows = self._normalized(batches)
        if self._host is None:
            staged = StagingArea(self._store).stage(query_id, batch_id, partition_id, attempt, rows)
        else:
            from spark_statestore.connectors.spark.host.client import shared_client

            # Spark reuses its Python workers: their tasks share one connection to the host.
            host = shared_client(self._host)
            staged = host.stage(self._store, query_id, batch_id, partition_id, attempt, rows)
        return StagedMessage(staged if staged.rows else None)

    def _normalized(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        first = 0
        for batch in batches:
            yield _normalize(batch, self._encoded, first)
            first += batch.num_rows

    def _commit(
        self,
        query_id: str,
        batch_id: int,
        messages: Sequence[WriterCommitMessage | None],
        source_offsets: Any,
        complete: bool,
    ) -> None:
        from spark_statestore.connectors.spark.leader.remote import (
            commit_through_server,
            stop_sink_server,
        )
        from spark_statestore.connectors.spark.leader.store import commit_here
        from spark_statestore.sink.commit import BatchToCommit

        freeze_long_lived()  # Spark reuses the commit process for the next micro-batch
        staged = [m.staged for m in messages if isinstance(m, StagedMessage) and m.staged]
        batch = BatchToCommit(query_id, batch_id, staged, source_offsets, complete)
        options = self._options
        if options.serve is not None:
            commit_through_server(
                options, batch, streaming=self._streaming, raw_options=dict(options.raw)
            )
        else:
            stop_sink_server(options.path)  # one an earlier run with serve=true left
            commit_here(options, batch)
            _LAST_COMMITTED_HERE[options.path] = (query_id, batch_id)
        if self._host is not None:
            # The next micro-batch's tasks dial the store host this plan named: one that died
            # (its record says where it listened) is started again there before they run.
            from spark_statestore.connectors.spark.host import ensure_store_host

            ensure_store_host()

    def _abort(self, query_id: str, batch_id: int) -> None:
        from spark_statestore.sink.staging import StagingArea

        if _LAST_COMMITTED_HERE.get(self._options.path) == (query_id, batch_id):
            # Spark aborts a batch whose commit raised after the store committed it (a store
            # host that could not be started again, say): its staged files may be the
            # store's still (a deferred commit being applied); the next commit removes them.
            _log.warning(
                "batch %d of query %s was committed to store %s before Spark aborted it: its "
                "staged files stay for the store",
                batch_id,
                query_id,
                self._options.path,
            )
            return
        if not _promises_kept(self._options.path):
            return  # its files stay; a later commit's cleanup removes them
        StagingArea(self._options.path).remove_batch(query_id, batch_id)
        if self._options.changelog is not None and self._host is not None:
            _abort_streamed(self._store, query_id, batch_id)


class StreamSink(_Writer, DataSourceStreamArrowWriter):
    """``df.writeStream.format("spark_statestore")``: one exactly-once commit per micro-batch."""

    def __init__(self, options: SinkOptions, schema: StructType, complete: bool) -> None:
        super().__init__(options, schema)
        assert options.checkpoint is not None
        self._complete = complete
        self._query_id = read_query_id(options.checkpoint)
        self._batch_id: int | None = None

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        batch_id = _batch_id_of(context)
        return self._stage(self._query_id, batch_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        assert self._options.checkpoint is not None
        offsets = read_source_offsets(self._options.checkpoint, batchId)
        self._commit(self._query_id, batchId, messages, offsets, self._complete)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._abort(self._query_id, batchId)


class BatchWriter(_Writer, DataSourceArrowWriter):
    """``df.write.format("spark_statestore")`` inside ``foreachBatch``: at most once per
    (``txnAppId``, ``txnVersion``), the pattern Delta Lake uses for idempotent writes."""

    _streaming = False

    def __init__(self, options: SinkOptions, schema: StructType, complete: bool) -> None:
        super().__init__(options, schema)
        self._complete = complete  # mode("overwrite"): the written rows replace the content
        self._app_id = options.txn_app_id or f"batch-{uuid.uuid4().hex}"
        self._version = options.txn_version if options.txn_version is not None else 0

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedMessage:
        return self._stage(self._app_id, self._version, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self._commit(self._app_id, self._version, messages, None, self._complete)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._abort(self._app_id, self._version)


def _promises_kept(path: str) -> bool:
    """Open the store once, read-only, so that a commit it was promised (a deferred commit of
    staged files, which a commit process killed before applying it left) is applied before
    Spark's abort removes staged files; True when that is done or there is no store yet.

    Spark also aborts a batch whose commit process died after the store's commit but before
    Spark heard of it: the batch's staged files are then the store's until it is applied.
    """
    from spark_statestore.store import Store, StoreNotFoundError

    try:
        Store.open(path).close()
    except StoreNotFoundError:
        return True
    except Exception as exc:
        _log.warning(
            "store %s could not be opened to apply what it was promised (%s): the aborted "
            "batch's staged files stay",
            path,
            exc,
        )
        return False
    return True


def _abort_streamed(store: str, query_id: str, batch_id: int) -> None:
    """Have the driver's store host abort what it published of an aborted batch (best
    effort: a transaction it leaves open is aborted when the next batch begins, when it
    idles, or by Kafka at its timeout; none of it ever commits)."""
    from spark_statestore.connectors.spark.host.launch import driver_store_host
    from spark_statestore.connectors.spark.host.publishing import abort_streamed

    try:
        record = driver_store_host()
        if record is not None and record.commit_token is not None:
            abort_streamed(record.ref, record.commit_token, store, query_id, batch_id)
    except Exception as exc:
        _log.warning("the store host could not abort batch %d of %s: %s", batch_id, store, exc)


def _batch_id_of(context: Any) -> int:
    """The micro-batch id of a streaming write task (Spark sets it as a local property)."""
    value = None if context is None else context.getLocalProperty("streaming.sql.batchId")
    if value is None:
        raise SinkError("the streaming sink's task does not know its micro-batch id")
    return int(value)
