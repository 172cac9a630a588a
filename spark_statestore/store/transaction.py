"""Transactions: uncommitted writes a writer can read back, committed atomically.

The ideas of KIP-844 / KIP-892 for one LevelDB: writes collect in memory (spilling to a redo
file past ``uncommitted_max_bytes``); reads inside the transaction see them over the committed
store; ``commit()`` writes data, position, changelog offsets and the commit record in one
atomic ``WriteBatch`` (or a chunked commit under a redo marker); ``rollback()`` forgets them.

Why one module of over 500 lines: the write buffer, its spill to the redo file, the
read-your-writes merge and the commit are one state machine with shared invariants (what
is buffered, spilled or already committed); split apart, each part would reach into the
others' state.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from enum import Enum
from itertools import islice
from types import TracebackType
from typing import TYPE_CHECKING

from spark_statestore.changelog.partitioner import partition_for_key
from spark_statestore.position import Position
from spark_statestore.store._merge import Entry, merge_layers, slice_sorted
from spark_statestore.store.errors import TransactionError
from spark_statestore.store.layout import (
    DATA_PREFIX,
    META_COMMIT,
    META_OFFSETS,
    META_POSITION,
    META_SEQ,
    META_STORE_WIDE,
    META_STREAM_TIME,
    NO_VALUE,
    Headers,
    StoredRecord,
    checked_value,
    data_bounds,
    decode_record,
    envelope_value,
    iterate,
    pack_header,
    pack_headers_envelope,
)
from spark_statestore.store.manifest import CommitRecord, StoreMetadata, encode_offsets
from spark_statestore.store.redo import SpillArea
from spark_statestore.store.versions import (
    VersionedWriter,
    decode_stream_times,
    encode_stream_times,
    gated_reads,
)

if TYPE_CHECKING:
    import plyvel

    from spark_statestore.changelog.columns import RecordColumns
    from spark_statestore.store.protocols import TransactionOwner

__all__ = ["Transaction", "TransactionState"]

_ENTRY_OVERHEAD = 96  # dict slot + two bytes object headers, roughly
_CHECK_EVERY = 1024  # single writes between budget checks
_CHUNK = 4096  # records per step of the bulk paths (and between their budget checks)
_INT64_MAX = 2**63 - 1


class TransactionState(str, Enum):
    """Lifecycle of a :class:`Transaction`; every call checks it."""

    OPEN = "open"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"


class Transaction:
    """A unit of atomic change to a store; get one from :meth:`Store.begin`.

    Use it as a context manager: it commits when the block ends normally and rolls back
    when it raises. Only one transaction per store is open at a time.
    """

    def __init__(
        self, store: TransactionOwner[Transaction], base: plyvel.Snapshot, meta: StoreMetadata
    ) -> None:
        self._store = store
        self._base = base
        self._meta = meta
        self._partitions = store.manifest.partitions
        self._budget = store.options.uncommitted_max_bytes
        self._writes: dict[bytes, bytes | None] = {}  # read index: data key -> envelope
        # Bulk writes not yet in the read index: built only if the transaction reads (a
        # column write's entries are made from its columns then).
        self._pending: list[_Pending] = []
        self._pending_count = 0
        self._batch = store.new_batch()  # the same writes, ready to commit
        # The budget is checked every _CHECK_EVERY writes, or sooner when large values add
        # up to a sixteenth of it.
        self._count = 0
        self._next_check = _CHECK_EVERY
        self._unchecked_bytes = 0
        self._check_bytes = max(1, self._budget // 16)
        self._sorted: list[bytes] | None = None
        self._spill: SpillArea | None = None
        self._sources: dict[tuple[str, int], int] = {}
        self._position = meta.position
        self._offsets = dict(meta.changelog_offsets)
        self._store_wide = False
        self._offsets_changed = False
        self._commit_record: CommitRecord | None = None
        self._retention = store.manifest.history_retention_ms
        self._versions: VersionedWriter | None = None
        self.id = uuid.uuid4().hex
        self.state = TransactionState.OPEN

    # -- writes ---------------------------------------------------------------------------
    def put(
        self,
        key: bytes,
        value: bytes,
        *,
        partition: int | None = None,
        offset: int | None = None,
        timestamp: int | None = None,
        source: tuple[str, int, int] | None = None,
        headers: Headers = (),
    ) -> None:
        """Write ``value`` under ``key``.

        Parameters
        ----------
        key, value
            Bytes.
        partition
            The changelog partition of the write; defaults to Kafka's partition of ``key``
            (murmur2) for the store's partition count.
        offset, timestamp
            The changelog offset of the write and the record timestamp (epoch ms), if known.
        source
            The input record behind the write, ``(topic, partition, offset)`` (KIP-791 record
            metadata): merged into the store's position on commit.
        headers
            The write's record headers to keep with it, ``(key, value or None)`` pairs.
        """
        if self.state is not TransactionState.OPEN or self._retention is not None:
            self._check_key_value_write("put")
        if type(key) is not bytes:
            key = _as_bytes(key, "key")
        if type(value) is not bytes:
            value = _as_bytes(value, "value")
        partitions = self._partitions
        if partition is None:
            partition = 0 if partitions == 1 else partition_for_key(key, partitions)
        elif type(partition) is not int or not 0 <= partition < partitions:
            raise self._bad_field("partition", partition, f"an int in [0, {partitions})")
        if offset is None:
            offset = NO_VALUE
        elif type(offset) is not int or not 0 <= offset <= _INT64_MAX:
            raise self._bad_field("offset", offset, "an int64 >= 0 or None")
        if timestamp is None:
            timestamp = NO_VALUE
        elif type(timestamp) is not int or not 0 <= timestamp <= _INT64_MAX:
            raise self._bad_field("timestamp", timestamp, "epoch millis >= 0 or None")
        if source is not None:
            self.record_source(*source)
        dkey = DATA_PREFIX + key
        if headers:
            try:
                envelope = pack_headers_envelope(partition, offset, timestamp, headers) + value
            except (TypeError, ValueError, AttributeError, struct.error):
                raise self._bad_field("headers", headers, "(str, bytes or None) pairs") from None
        else:
            envelope = pack_header(partition, offset, timestamp) + value
        if self._pending:
            self._index()
        self._writes[dkey] = envelope
        self._batch.put(dkey, envelope)
        self._sorted = None
        self._count += 1
        self._unchecked_bytes += len(envelope)
        if self._count >= self._next_check or self._unchecked_bytes > self._check_bytes:
            self._check_budget()

    def delete(
        self,
        key: bytes,
        *,
        source: tuple[str, int, int] | None = None,
    ) -> None:
        """Delete ``key`` (nothing is kept locally). ``source`` is as for :meth:`put`."""
        if self.state is not TransactionState.OPEN or self._retention is not None:
            self._check_key_value_write("delete")
        if type(key) is not bytes:
            key = _as_bytes(key, "key")
        if source is not None:
            self.record_source(*source)
        dkey = DATA_PREFIX + key
        if self._pending:
            self._index()
        self._writes[dkey] = None
        self._batch.delete(dkey)
        self._sorted = None
        self._count += 1
        if self._count >= self._next_check:
            self._check_budget()

    def put_all(
        self,
        records: Iterable[tuple[bytes, bytes | None, int, int, int]],
        headers: Mapping[int, Headers] | None = None,
    ) -> int:
        """Write many records: ``(key, value, partition, offset, timestamp)`` tuples.

        A None value deletes the key; a negative partition, offset or timestamp means
        unknown (a record without a partition is placed by its key's hash in queries).
        ``headers`` maps a record's index to the headers to keep with it (records not in it
        keep none). This is the bulk path of followers and sinks. A malformed record raises
        :class:`TransactionError` naming its index; roll the transaction back then (the
        ``with`` block does). Returns the number of records.
        """
        self._check_key_value_write("put_all")
        records = iter(records)
        count = 0
        while chunk := list(islice(records, _CHUNK)):
            try:
                columns = tuple(zip(*chunk, strict=True))
            except (TypeError, ValueError):
                columns = ()
            if len(columns) != 5:
                raise self._malformed(count + _first_bad(chunk, self._partitions), "not a 5-tuple")
            self._put_chunk(count, *columns, headers=headers)
            count += len(chunk)
        return count

    def put_columns(
        self,
        keys: Sequence[bytes],
        values: Sequence[bytes | None],
        partitions: Sequence[int],
        offsets: Sequence[int],
        timestamps: Sequence[int],
    ) -> int:
        """Like :meth:`put_all`, with one sequence per field (all of the same length)."""
        self._check_key_value_write("put_columns")
        count = len(keys)
        if not len(values) == len(partitions) == len(offsets) == len(timestamps) == count:
            raise TransactionError(
                f"store {self._store.path}: put_columns needs columns of one length, got "
                f"{[len(c) for c in (keys, values, partitions, offsets, timestamps)]}",
                self._store.path,
            )
        for start in range(0, count, _CHUNK):
            stop = start + _CHUNK
            self._put_chunk(
                start,
                keys[start:stop],
                values[start:stop],
                partitions[start:stop],
                offsets[start:stop],
                timestamps[start:stop],
            )
        return count

    def put_records(
        self, records: RecordColumns, headers: Mapping[int, Headers] | None = None
    ) -> int:
        """Write changelog records given in columns (the fast path of followers): as
        :meth:`put_all` with ``records.to_rows()``, the same bytes in the store.

        With the compiled extension the whole batch of envelopes is built and put in one
        call, and the read index is built from the columns only if the transaction reads;
        otherwise (the reference path) the records go through :meth:`put_all`.
        """
        self._check_key_value_write("put_records")
        count = len(records)
        put_records = getattr(self._batch, "put_records", None)
        if put_records is None:
            return self.put_all(records.to_rows(), headers)
        if not count:
            return 0
        heads = _header_heads(headers, 0, count, _column_row(records), self._malformed)
        try:
            put_records(
                records.keys,
                records.values,
                records.partitions,
                records.offsets,
                records.timestamps,
                prefix=DATA_PREFIX,
                max_partition=self._partitions,
                heads=heads or None,
            )
        except ValueError as exc:
            if len(exc.args) == 2 and isinstance(exc.args[0], int):
                raise self._malformed(exc.args[0], str(exc.args[1])) from exc
            raise TransactionError(
                f"store {self._store.path}: put_records: {exc}", self._store.path
            ) from exc
        except TypeError as exc:
            raise TransactionError(
                f"store {self._store.path}: put_records takes binary keys and values and "
                f"int32/int64 partitions, offsets and timestamps: {exc}",
                self._store.path,
            ) from exc
        self._pended(count, lambda: _row_envelopes(records.to_lists(), heads))
        return count

    def _put_rows(
        self,
        put_rows: Callable[..., bool],
        first: int,
        keys: Sequence[bytes],
        values: Sequence[bytes | None],
        partitions: Sequence[int],
        offsets: Sequence[int],
        timestamps: Sequence[int],
        headers: Mapping[int, Headers] | None,
    ) -> bool:
        """Put records ``first``... of the caller's write in one call of the extension's
        ``put_rows``; False (nothing put) when a field is not of the reference path's
        plain types (bytes, None, int) or out of range."""
        written = (keys, values, partitions, offsets, timestamps)

        def row(at: int) -> tuple[bytes | None, int, int, int]:
            return values[at], partitions[at], offsets[at], timestamps[at]

        def refused(number: int, reason: str) -> TransactionError:
            raise _NotPlain  # the reference path names the record

        try:
            heads = _header_heads(headers, first, len(keys), row, refused)
        except _NotPlain:
            return False
        done = put_rows(
            *written,
            prefix=DATA_PREFIX,
            max_partition=self._partitions,
            heads=heads or None,
        )
        if not done:
            return False
        self._pended(len(keys), lambda: _row_envelopes(written, heads))
        return True

    def _pended(self, count: int, pending: _Pending) -> None:
        """Account for ``count`` writes just put into the batch, ``pending`` giving their
        read-index entries (built only if the transaction reads or spills)."""
        self._pending.append(pending)
        self._pending_count += count
        self._sorted = None
        self._count += count
        self._check_budget()

    def _put_chunk(
        self,
        first: int,
        keys: Sequence[bytes],
        values: Sequence[bytes | None],
        partitions: Sequence[int],
        offsets: Sequence[int],
        timestamps: Sequence[int],
        headers: Mapping[int, Headers] | None = None,
    ) -> None:
        # C-level map/zip instead of a Python loop per record: this is the hot write path.
        if not keys:
            return
        put_rows = getattr(self._batch, "put_rows", None)
        if put_rows is not None and self._put_rows(
            put_rows, first, keys, values, partitions, offsets, timestamps, headers
        ):
            return
        # The reference path (or a record the one-call path does not take: named below).
        try:
            if max(partitions) >= self._partitions:
                raise ValueError("partition out of range")
            dkeys, envelopes = _envelopes(
                first, keys, values, partitions, offsets, timestamps, headers
            )
        except (TypeError, ValueError, AttributeError, struct.error) as exc:
            bad = _first_bad(
                list(zip(keys, values, partitions, offsets, timestamps, strict=True)),
                self._partitions,
            )
            raise self._malformed(first + bad, str(exc)) from exc
        put, delete = self._batch.put, self._batch.delete
        for dkey, envelope in zip(dkeys, envelopes, strict=True):
            if envelope is None:
                delete(dkey)
            else:
                put(dkey, envelope)
        self._pended(len(dkeys), (dkeys, envelopes))

    def put_versions(self, records: Iterable[tuple[bytes, bytes | None, int, int, int]]) -> int:
        """Apply changelog records to a versioned store: ``(key, value, partition, offset,
        timestamp)`` tuples in changelog order, as for :meth:`put_all`, a None value being a
        tombstone ("deleted as of" the timestamp). Each becomes the key's version at its
        timestamp, as in Kafka Streams' versioned store (:mod:`~spark_statestore.store.versions`);
        a record older than its partition's stream time minus the history retention is
        dropped, as Kafka Streams drops it. Returns the number of records kept.

        Raises
        ------
        TransactionError
            On a key-value store, or for a malformed record (naming its index) or one
            without a timestamp.
        """
        self._check_open()
        if self._retention is None:
            raise TransactionError(
                f"store {self._store.path} is a key-value store: write it with put_all; "
                "put_versions is for versioned stores",
                self._store.path,
            )
        writer = self._versions
        if writer is None:
            base, gate = self._base, self._store.gate
            get, scan = gated_reads(base, gate)
            with gate:
                times = decode_stream_times(base.get(META_STREAM_TIME), self._store.path)
            writer = self._versions = VersionedWriter(
                get, scan, self._retention, times, self._store.path
            )
        kept = 0
        for index, record in enumerate(records):
            try:
                key, value, partition, offset, timestamp = record
                if not isinstance(key, bytes) or not (value is None or isinstance(value, bytes)):
                    raise TypeError("key and value must be bytes (value None: a tombstone)")
                for name, number in (("partition", partition), ("offset", offset)):
                    if type(number) is not int:
                        raise TypeError(f"{name} must be an int")
                if not 0 <= partition < self._partitions:
                    raise ValueError(f"partition {partition} is not in [0, {self._partitions})")
                if type(timestamp) is not int or not 0 <= timestamp <= _INT64_MAX:
                    raise ValueError(
                        f"timestamp {timestamp!r} is not epoch millis >= 0: a versioned store's "
                        "records are versions at their timestamps"
                    )
            except (TypeError, ValueError) as exc:
                raise self._malformed(index, str(exc)) from None
            kept += writer.apply(key, value, partition, offset, timestamp)
        return kept

    def _flush_versions(self) -> None:
        """Move the versioned writer's pending changes into the transaction's writes."""
        writer = self._versions
        if writer is None or not writer.pending:
            return
        if self._pending:
            self._index()
        for raw_key, raw in writer.writes():
            self._writes[raw_key] = raw
            if raw is None:
                self._batch.delete(raw_key)
            else:
                self._batch.put(raw_key, raw)
            self._count += 1
        self._sorted = None
        self._check_budget()

    def _check_key_value_write(self, method: str) -> None:
        self._check_open()
        if self._retention is not None:
            raise TransactionError(
                f"store {self._store.path} is a versioned store: {method} would bypass its "
                "versions; apply changelog records with put_versions",
                self._store.path,
            )

    def _index(self) -> dict[bytes, bytes | None]:
        """The read index of unspilled writes, with the pending bulk writes folded in."""
        writes = self._writes
        for pending in self._pending:
            dkeys, envelopes = pending() if callable(pending) else pending
            writes.update(zip(dkeys, envelopes, strict=True))
        self._pending.clear()
        self._pending_count = 0
        return writes

    def _malformed(self, index: int, reason: str) -> TransactionError:
        return TransactionError(
            f"store {self._store.path}: record {index} of the bulk write is malformed "
            f"({reason}); records are (key bytes, value bytes or None, partition < "
            f"{self._partitions}, offset, timestamp)",
            self._store.path,
        )

    def record_source(self, topic: str, partition: int, offset: int) -> None:
        """Merge input record ``topic``/``partition``/``offset`` into the store position."""
        self._check_open()
        slot = (topic, partition)
        previous = self._sources.get(slot)
        if previous is None or offset > previous:
            self._sources[slot] = offset

    def merge_position(self, position: Position) -> None:
        """Merge a whole :class:`Position` (e.g. a changelog ``c`` header) into the store's."""
        self._check_open()
        if not isinstance(position, Position):
            raise TransactionError(
                f"merge_position takes a Position, got {type(position).__name__}",
                self._store.path,
            )
        self._position = self._position.merge(position)

    def set_changelog_offset(self, partition: int, next_offset: int) -> None:
        """Record that changelog ``partition`` is applied (or published) up to
        ``next_offset`` (exclusive: the next offset to read, as a consumer commits it)."""
        self._check_open()
        if not 0 <= partition < self._partitions:
            raise TransactionError(
                f"store {self._store.path}: changelog partition {partition} is out of range "
                f"for a store of {self._partitions} partitions",
                self._store.path,
            )
        if isinstance(next_offset, bool) or not isinstance(next_offset, int) or next_offset < 0:
            raise TransactionError(
                f"changelog offset must be an int >= 0, got {next_offset!r}", self._store.path
            )
        self._offsets[partition] = next_offset
        self._offsets_changed = True

    def mark_store_wide(self) -> None:
        """Record that the store's position holds for every partition (see
        :attr:`~spark_statestore.store.manifest.StoreMetadata.store_wide`); permanent."""
        self._check_open()
        self._store_wide = True

    def set_commit_record(self, record: CommitRecord) -> None:
        """Store ``record`` (the sink's query id, batch id, offsets) with this commit."""
        self._check_open()
        if not isinstance(record, CommitRecord):
            raise TransactionError(
                f"set_commit_record takes a CommitRecord, got {type(record).__name__}",
                self._store.path,
            )
        self._commit_record = record

    # -- reads (read-your-own-writes) -----------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        """The value of ``key`` as this transaction sees it (its own writes first)."""
        envelope = self._lookup(DATA_PREFIX + key)
        return None if envelope is None else checked_value(key, envelope, self._store.path)

    def get_record(self, key: bytes) -> StoredRecord | None:
        """Like :meth:`get`, with the record's partition, offset and timestamp."""
        envelope = self._lookup(DATA_PREFIX + key)
        return None if envelope is None else decode_record(key, envelope, self._store.path)

    def _lookup(self, dkey: bytes) -> bytes | None:
        self._check_open()
        self._flush_versions()
        writes = self._index() if self._pending else self._writes
        if dkey in writes:
            return writes[dkey]
        if self._spill is not None:
            found, envelope = self._spill.get(dkey)
            if found:
                return envelope
        with self._store.gate:
            result: bytes | None = self._base.get(dkey)
        return result

    def items(
        self,
        lower: bytes | None = None,
        upper: bytes | None = None,
        *,
        reverse: bool = False,
        prefix: bytes | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` in key order over ``[lower, upper]`` (inclusive) or ``prefix``,
        as this transaction sees them."""
        self._check_open()
        self._flush_versions()
        start, stop, include_stop = data_bounds(lower, upper, prefix)
        if self._pending:
            self._index()
        if self._sorted is None:
            self._sorted = sorted(self._writes)
        layers: list[Iterable[Entry]] = [
            slice_sorted(self._sorted, self._writes, start, stop, include_stop, reverse)
        ]
        if self._spill is not None:
            layers.append(self._spill.entries(start, stop, include_stop, reverse))
        layers.append(iterate(self._base, start, stop, include_stop, reverse, self._store.gate))
        for dkey, envelope in merge_layers(layers, reverse):
            yield dkey[1:], envelope_value(envelope)

    # -- end ------------------------------------------------------------------------------
    @property
    def uncommitted_bytes(self) -> int:
        """Estimated memory held by unspilled writes (the budget's measure)."""
        # Each write is held twice (the read index and the pending WriteBatch).
        pending: int = self._batch.approximate_size()
        entries = len(self._writes) + self._pending_count
        return 2 * pending + entries * _ENTRY_OVERHEAD

    def _check_budget(self) -> None:
        self._next_check = self._count + _CHECK_EVERY
        self._unchecked_bytes = 0
        if self.uncommitted_bytes > self._budget:
            self._spill_writes()

    @property
    def spilled(self) -> bool:
        """True once the transaction has spilled to a redo file."""
        return self._spill is not None

    def commit(self) -> StoreMetadata:
        """Commit atomically; returns the store's new metadata.

        Raises
        ------
        TransactionError
            If the transaction is not open.
        """
        self._check_open()
        self._flush_versions()
        position = self._position
        if self._sources:
            position = position.merge(Position.from_map(_group(self._sources)))
        seq = self._meta.commit_seq + 1
        metadata: dict[bytes, bytes] = {META_SEQ: str(seq).encode()}
        if position != self._meta.position:
            metadata[META_POSITION] = position.to_json().encode()
        if self._offsets_changed:
            metadata[META_OFFSETS] = encode_offsets(self._offsets)
        commit_record = self._meta.commit_record
        if self._commit_record is not None:
            commit_record = self._commit_record
            metadata[META_COMMIT] = commit_record.to_json()
        if self._versions is not None:
            metadata[META_STREAM_TIME] = encode_stream_times(self._versions.stream_times)
        store_wide = self._meta.store_wide
        if self._store_wide and not store_wide:
            metadata[META_STORE_WIDE] = b"1"
            store_wide = True
        new_meta = StoreMetadata(position, dict(self._offsets), commit_record, seq, store_wide)
        try:
            if self._spill is None:
                self._store.commit_batch(self._batch, metadata, new_meta)
            else:
                self._spill.write(self._index())
                self._writes = {}
                self._store.commit_chunked(self._spill, metadata, new_meta)
        except BaseException:
            self.state = TransactionState.FAILED
            self._finish()
            raise
        self.state = TransactionState.COMMITTED
        self._finish()
        return new_meta

    def rollback(self) -> None:
        """Forget every write of the transaction (idempotent once it is closed)."""
        if self.state is not TransactionState.OPEN:
            return
        self.state = TransactionState.ROLLED_BACK
        self._finish()

    def abandon(self) -> None:
        """The store is closing under this transaction (from any thread): roll it back
        without touching its write batch, which the transaction's own thread may be using."""
        if self.state is TransactionState.OPEN:
            self.state = TransactionState.ROLLED_BACK
        self._writes = {}
        self._sorted = None
        if self._spill is not None:
            self._spill.discard()
            self._spill = None

    def _finish(self) -> None:
        self._writes = {}
        self._pending.clear()
        if not self._store.closed:  # a closed store's batches are gone with its database
            self._batch.clear()
        self._sorted = None
        if self._spill is not None:
            self._spill.discard()
            self._spill = None
        self._store.end_transaction(self, self._base)

    def _spill_writes(self) -> None:
        if self._spill is None:
            store = self._store
            self._spill = SpillArea(store.path, self.id, store.gate, store.options.sync)
        self._spill.write(self._index())
        self._writes = {}
        self._batch.clear()
        self._sorted = None

    def _bad_field(self, name: str, value: object, expected: str) -> TransactionError:
        return TransactionError(
            f"store {self._store.path}: record {name} must be {expected}, got {value!r}",
            self._store.path,
        )

    def _check_open(self) -> None:
        if self.state is not TransactionState.OPEN:
            raise TransactionError(
                f"transaction {self.id} on store {self._store.path} is {self.state.value}; "
                "begin a new one with store.begin()",
                self._store.path,
            )

    def __enter__(self) -> Transaction:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.state is not TransactionState.OPEN:
            return
        if exc_type is None:
            self.commit()
        else:
            self.rollback()


_Written = tuple[list[bytes], list[bytes | None]]
_Pending = _Written | Callable[[], _Written]


def _envelopes(
    first: int,
    keys: Sequence[bytes],
    values: Sequence[bytes | None],
    partitions: Sequence[int],
    offsets: Sequence[int],
    timestamps: Sequence[int],
    headers: Mapping[int, Headers] | None,
) -> _Written:
    """The data keys and envelopes (None: a delete) of records ``first``... given by column;
    ``headers`` maps a record's index (counted from 0, ``first`` being this chunk's start)
    to the headers kept in its envelope."""
    fixed = map(pack_header, partitions, offsets, timestamps)
    if None in values:
        envelopes: list[bytes | None] = [
            None if value is None else header + value
            for header, value in zip(fixed, values, strict=True)
        ]
    else:
        envelopes = list(map(bytes.__add__, fixed, values))  # type: ignore[arg-type]
    if headers:
        # Few records carry headers: rebuild just their envelopes (version 1).
        for index, kept in headers.items():
            at = index - first
            value = values[at] if 0 <= at < len(keys) else None
            if kept and value is not None:
                envelopes[at] = (
                    pack_headers_envelope(partitions[at], offsets[at], timestamps[at], kept) + value
                )
    return list(map(DATA_PREFIX.__add__, keys)), envelopes


class _NotPlain(Exception):
    """A header row the one-call path does not take (the reference path names it)."""


def _header_heads(
    headers: Mapping[int, Headers] | None,
    first: int,
    count: int,
    row: Callable[[int], tuple[bytes | None, int, int, int]],
    malformed: Callable[[int, str], TransactionError],
) -> list[tuple[int, bytes]]:
    """``(row, envelope start)`` of the records whose envelope keeps headers (version 1),
    in row order: what :func:`_envelopes` writes for them. ``headers`` counts records from
    the caller's first; the ``count`` records here are ``first``..., ``row(i)`` giving the
    value, partition, offset and timestamp of the ``i``-th. A header that does not pack
    raises ``malformed(number, reason)``."""
    heads: list[tuple[int, bytes]] = []
    for number in sorted(headers or ()):
        kept = (headers or {})[number]
        index = number - first
        if not kept or not 0 <= index < count:
            continue
        value, partition, offset, timestamp = row(index)
        if value is None:
            continue
        try:
            heads.append((index, pack_headers_envelope(partition, offset, timestamp, kept)))
        except (TypeError, ValueError, AttributeError, struct.error) as exc:
            raise malformed(number, str(exc)) from exc
    return heads


def _column_row(records: RecordColumns) -> Callable[[int], tuple[bytes | None, int, int, int]]:
    """``row(i)`` of :func:`_header_heads` for columns (Python values of one record)."""

    def row(at: int) -> tuple[bytes | None, int, int, int]:
        return (
            records.values[at].as_py(),
            records.partitions[at].as_py(),
            records.offsets[at].as_py(),
            records.timestamps[at].as_py(),
        )

    return row


def _row_envelopes(
    written: tuple[
        Sequence[bytes], Sequence[bytes | None], Sequence[int], Sequence[int], Sequence[int]
    ],
    heads: Sequence[tuple[int, bytes]],
) -> _Written:
    """:func:`_envelopes` of a one-call write, given by column (for the read index)."""
    keys, values, partitions, offsets, timestamps = written
    dkeys, envelopes = _envelopes(0, keys, values, partitions, offsets, timestamps, None)
    for index, head in heads:
        value = values[index]
        assert value is not None
        envelopes[index] = head + value
    return dkeys, envelopes


def _first_bad(chunk: Sequence[object], partitions: int) -> int:
    """Index of the first malformed record of a bulk chunk (the slow path, on error only)."""
    for index, record in enumerate(chunk):
        if not isinstance(record, tuple) or len(record) != 5:
            return index
        key, value, partition, offset, timestamp = record
        if not isinstance(key, bytes) or not (value is None or isinstance(value, bytes)):
            return index
        try:
            pack_header(partition, offset, timestamp)
        except (TypeError, struct.error):
            return index
        if partition >= partitions:
            return index
    return 0


def _as_bytes(value: object, what: str) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    hint = " (encode it first)" if isinstance(value, str) else ""
    raise TransactionError(f"{what} must be bytes, got {type(value).__name__}{hint}")


def _group(sources: dict[tuple[str, int], int]) -> dict[str, dict[int, int]]:
    grouped: dict[str, dict[int, int]] = {}
    for (topic, partition), offset in sources.items():
        grouped.setdefault(topic, {})[partition] = offset
    return grouped
