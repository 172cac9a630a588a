"""Transactions: uncommitted writes a writer can read back, committed atomically.

The ideas of KIP-844 / KIP-892 for one LevelDB: writes collect in memory (spilling to a redo
file past ``uncommitted_max_bytes``); reads inside the transaction see them over the committed
store; ``commit()`` writes data, position, changelog offsets and the commit record in one
atomic ``WriteBatch`` (or a chunked commit under a redo marker); ``rollback()`` forgets them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from enum import Enum
from types import TracebackType
from typing import TYPE_CHECKING

from spark_statestore.changelog.partitioner import partition_for_key
from spark_statestore.position import Position
from spark_statestore.store._merge import Entry, merge_layers, slice_sorted
from spark_statestore.store.errors import TransactionError
from spark_statestore.store.layout import (
    DATA_PREFIX,
    HEADER_SIZE,
    META_COMMIT,
    META_OFFSETS,
    META_POSITION,
    META_SEQ,
    NO_VALUE,
    StoredRecord,
    check_envelope_fields,
    data_bounds,
    decode_record,
    pack_header,
)
from spark_statestore.store.manifest import CommitRecord, StoreMetadata, encode_offsets
from spark_statestore.store.redo import SpillArea

if TYPE_CHECKING:
    import plyvel

    from spark_statestore.store.store import Store

__all__ = ["Transaction", "TransactionState"]

_ENTRY_OVERHEAD = 96  # dict slot + two bytes object headers, roughly
_CHECK_EVERY = 1024  # records between budget checks in put_all


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

    def __init__(self, store: Store, base: plyvel.Snapshot, meta: StoreMetadata) -> None:
        self._store = store
        self._base = base
        self._meta = meta
        self._partitions = store.manifest.partitions
        self._budget = store.options.uncommitted_max_bytes
        self._writes: dict[bytes, bytes | None] = {}
        self._bytes = 0
        self._sorted: list[bytes] | None = None
        self._spill: SpillArea | None = None
        self._sources: dict[tuple[str, int], int] = {}
        self._position = meta.position
        self._offsets = dict(meta.changelog_offsets)
        self._offsets_changed = False
        self._commit_record: CommitRecord | None = None
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
        """
        self._check_open()
        _check_bytes(key, "key")
        _check_bytes(value, "value")
        self._write(key, bytes(value), partition, offset, timestamp, source)

    def delete(
        self,
        key: bytes,
        *,
        source: tuple[str, int, int] | None = None,
    ) -> None:
        """Delete ``key`` (nothing is kept locally). ``source`` is as for :meth:`put`."""
        self._check_open()
        _check_bytes(key, "key")
        self._write(key, None, None, None, None, source)

    def _write(
        self,
        key: bytes,
        value: bytes | None,
        partition: int | None,
        offset: int | None,
        timestamp: int | None,
        source: tuple[str, int, int] | None,
    ) -> None:
        dkey = DATA_PREFIX + bytes(key)
        if value is None:
            envelope = None
            size = len(dkey) + _ENTRY_OVERHEAD
        else:
            if partition is None:
                partition = 0 if self._partitions == 1 else partition_for_key(key, self._partitions)
            fields = (
                partition,
                NO_VALUE if offset is None else offset,
                NO_VALUE if timestamp is None else timestamp,
            )
            try:
                check_envelope_fields(*fields)
            except ValueError as exc:
                path = self._store.path
                raise TransactionError(f"store {path}: {exc}", path) from None
            if fields[0] >= self._partitions:
                raise TransactionError(
                    f"store {self._store.path}: partition {fields[0]} is out of range for a "
                    f"store of {self._partitions} partitions",
                    self._store.path,
                )
            envelope = pack_header(*fields) + value
            size = len(dkey) + len(envelope) + _ENTRY_OVERHEAD
        if source is not None:
            self.record_source(*source)
        self._writes[dkey] = envelope
        self._sorted = None
        self._bytes += size
        if self._bytes > self._budget:
            self._spill_writes()

    def put_all(self, records: Iterable[tuple[bytes, bytes | None, int, int, int]]) -> int:
        """Write many records: ``(key, value, partition, offset, timestamp)`` tuples.

        A None value deletes the key; -1 means unknown partition / offset / no timestamp.
        This is the bulk path of followers and sinks; a malformed record raises
        :class:`TransactionError` naming its index, and the records before it stay in the
        transaction (roll it back, or let the ``with`` block do it). Returns the number of
        records.
        """
        self._check_open()
        writes = self._writes
        pack = pack_header
        prefix = DATA_PREFIX
        partitions = self._partitions
        count = size = 0
        try:
            for key, value, partition, offset, timestamp in records:
                dkey = prefix + key
                if value is None:
                    writes[dkey] = None
                    size += len(dkey) + _ENTRY_OVERHEAD
                else:
                    if partition >= partitions:
                        raise ValueError(
                            f"partition {partition} is out of range for a store of "
                            f"{partitions} partitions"
                        )
                    envelope = pack(partition, offset, timestamp) + value
                    writes[dkey] = envelope
                    size += len(dkey) + len(envelope) + _ENTRY_OVERHEAD
                count += 1
                if not count % _CHECK_EVERY:
                    self._bytes += size
                    size = 0
                    if self._bytes > self._budget:
                        self._spill_writes()
        except Exception as exc:
            # What was written so far stays in the transaction; the caller decides whether
            # to roll back. A bad record never reaches the store on its own.
            raise TransactionError(
                f"store {self._store.path}: record {count} of put_all is malformed ({exc}); "
                "records are (key bytes, value bytes or None, partition, offset, timestamp)",
                self._store.path,
            ) from exc
        finally:
            self._sorted = None
            self._bytes += size
        if self._bytes > self._budget:
            self._spill_writes()
        return count

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
        return None if envelope is None else envelope[HEADER_SIZE:]

    def get_record(self, key: bytes) -> StoredRecord | None:
        """Like :meth:`get`, with the record's partition, offset and timestamp."""
        envelope = self._lookup(DATA_PREFIX + key)
        return None if envelope is None else decode_record(key, envelope, self._store.path)

    def _lookup(self, dkey: bytes) -> bytes | None:
        self._check_open()
        writes = self._writes
        if dkey in writes:
            return writes[dkey]
        if self._spill is not None:
            found, envelope = self._spill.get(dkey)
            if found:
                return envelope
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
        start, stop, include_stop = data_bounds(lower, upper, prefix)
        if self._sorted is None:
            self._sorted = sorted(self._writes)
        layers: list[Iterable[Entry]] = [
            slice_sorted(self._sorted, self._writes, start, stop, include_stop, reverse)
        ]
        if self._spill is not None:
            layers.append(self._spill.entries(start, stop, include_stop, reverse))
        layers.append(_base_entries(self._base, start, stop, include_stop, reverse))
        for dkey, envelope in merge_layers(layers, reverse):
            yield dkey[1:], envelope[HEADER_SIZE:]

    # -- end ------------------------------------------------------------------------------
    @property
    def uncommitted_bytes(self) -> int:
        """Bytes of writes held in memory (spilled writes excluded)."""
        return self._bytes

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
        new_meta = StoreMetadata(position, dict(self._offsets), commit_record, seq)
        try:
            if self._spill is None:
                self._store._commit_batch(self._writes, metadata, new_meta)
            else:
                self._spill.write(self._writes)
                self._writes = {}
                self._store._commit_chunked(self._spill, metadata, new_meta)
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

    def _finish(self) -> None:
        self._writes = {}
        self._sorted = None
        if self._spill is not None:
            self._spill.discard()
            self._spill = None
        self._store._end_transaction(self, self._base)

    def _spill_writes(self) -> None:
        if self._spill is None:
            self._spill = SpillArea(self._store.path, self.id)
        self._spill.write(self._writes)
        self._writes = {}
        self._sorted = None
        self._bytes = 0

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


def _check_bytes(value: object, what: str) -> None:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        hint = " (encode it first)" if isinstance(value, str) else ""
        raise TransactionError(f"{what} must be bytes, got {type(value).__name__}{hint}")


def _group(sources: dict[tuple[str, int], int]) -> dict[str, dict[int, int]]:
    grouped: dict[str, dict[int, int]] = {}
    for (topic, partition), offset in sources.items():
        grouped.setdefault(topic, {})[partition] = offset
    return grouped


def _base_entries(
    snapshot: plyvel.Snapshot, start: bytes, stop: bytes, include_stop: bool, reverse: bool
) -> Iterator[Entry]:
    with snapshot.iterator(
        start=start, stop=stop, include_stop=include_stop, reverse=reverse
    ) as it:
        yield from it
