"""Point reads: one key's value or record, as :meth:`Snapshot.get
<spark_statestore.store.Snapshot.get>`, :meth:`Snapshot.get_record
<spark_statestore.store.Snapshot.get_record>` and :meth:`Store.get
<spark_statestore.store.Store.get>` read it.

On the fast path one call of the compiled binding (``get_value``/``get_record``, the
extension's ``point.rs``) joins the key namespace and the key, reads LevelDB and decodes the
envelope; around it a snapshot's read runs one Python method and takes no lock. The store's
:class:`~spark_statestore.store.gate.Gate` is not needed there: the extension's database
counts its own calls in flight (every call holds its lock for reading, ``close()`` for
writing, so a close waits for a get and every get after it fails), and a get holds its
snapshot while it reads, so a release waits for it too. On the reference path (plyvel, which
does not) every read runs inside the gate, as every other LevelDB call of the store does.

Both paths answer the same: a value of a well-formed envelope, None for an absent key, and a
:class:`~spark_statestore.store.errors.StoreCorruptedError` naming the key for an envelope
that :func:`~spark_statestore.store.layout.decode_record` refuses (the extension hands such an
envelope back and that decoder names what is wrong). :func:`raise_read_error` turns what a
read raised into the store's error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from spark_statestore.store.errors import StoreClosedError, StoreCorruptedError
from spark_statestore.store.gate import translate
from spark_statestore.store.layout import StoredRecord, checked_value, decode_record
from spark_statestore.store.leveldb import refused_envelope

if TYPE_CHECKING:
    from spark_statestore.store.gate import Gate

__all__ = ["RecordRead", "ValueRead", "point_reads", "raise_read_error"]

ValueRead = Callable[[bytes, bytes], "bytes | None"]
"""``(key, namespace prefix)`` → the value stored at ``prefix + key``, or None."""
RecordRead = Callable[[bytes, bytes], "StoredRecord | None"]
"""``(key, namespace prefix)`` → the record stored at ``prefix + key``, or None."""


def point_reads(source: Any, gate: Gate, path: str) -> tuple[ValueRead, RecordRead]:
    """``(value, record)`` readers of ``source``, a LevelDB database or snapshot of either
    binding, for the store at ``path`` whose ``gate`` its LevelDB calls go through."""
    if hasattr(source, "get_value"):
        return source.get_value, _native_record(source.get_record, path)
    get = source.get

    def value(key: bytes, prefix: bytes) -> bytes | None:
        with gate:
            raw: bytes | None = get(prefix + key)
        return None if raw is None else checked_value(key, raw, path)

    def record(key: bytes, prefix: bytes) -> StoredRecord | None:
        with gate:
            raw: bytes | None = get(prefix + key)
        return None if raw is None else decode_record(key, raw, path)

    return value, record


def _native_record(get_record: Callable[[bytes, bytes], Any], path: str) -> RecordRead:
    def record(key: bytes, prefix: bytes) -> StoredRecord | None:
        found = get_record(key, prefix)
        if found is None:
            return None
        if type(found) is tuple:
            return StoredRecord(key, *found)
        return decode_record(key, found, path)  # an envelope with headers, or a bad one

    return record


def raise_read_error(
    key: bytes, exc: Exception, path: str, closed: StoreClosedError | None = None
) -> NoReturn:
    """Raise the store's error for ``exc``, raised by a point read of ``key`` in the store at
    ``path``: ``closed`` when the store or the snapshot read was closed meanwhile (given by
    the caller, who knows which), a :class:`StoreCorruptedError` for an envelope the binding
    refused, LevelDB's errors translated as :func:`~spark_statestore.store.gate.translate`
    does, anything else (the store's own errors, a key that is not bytes) as it is."""
    if closed is not None:
        raise closed from exc
    envelope = refused_envelope(exc)
    if envelope is not None:
        try:
            decode_record(key, envelope, path)
        except StoreCorruptedError as error:
            raise error from None
    translated = translate(exc, path)
    if translated is None:
        raise exc
    raise translated from exc
