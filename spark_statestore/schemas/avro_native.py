"""The compiled Avro path: a batch of Avro values decoded in Rust straight into one Arrow
array (Apache Arrow's ``arrow-avro`` in the ``spark_statestore_native`` extension), with no
Python object per value.

The reference path (:class:`~spark_statestore.schemas.avro.AvroValueDecoder` with fastavro)
defines every answer; this path gives only answers equal to its. So it is handed a writer
schema only when its resolution to the reader schema is one both libraries make the same
way (:func:`pair_schemas`), and it refuses a batch (the caller then decodes the whole batch
on the reference path, which names the bad value and its reason) for anything else: a value
without a frame, bytes left after a value, a value that does not decode or resolve, a value
the reference path cannot turn into a Python object (a date outside years 1-9999), one the
column cannot hold, a map that repeats a key.

Which writer schemas are handed over: :mod:`~spark_statestore.schemas.avro_pairing`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from spark_statestore import native
from spark_statestore.schemas.avro_pairing import BranchIndex, NativeUnsupported, pair_schemas
from spark_statestore.schemas.errors import SchemaError

__all__ = ["BranchIndex", "NativeAvroColumn", "NativeUnsupported", "pair_schemas"]

_log = logging.getLogger(__name__)


class NativeAvroColumn:
    """One column's compiled Avro decoder: the writer schemas it was handed, by schema id.

    Parameters
    ----------
    reader
        The reader schema, as :func:`fastavro.parse_schema` returns it.
    framed
        The values carry a registry frame; else they are bare, written with ``reader``.
    branch_index
        The reference path's choice of a general union's member.
    """

    def __init__(self, reader: Any, *, framed: bool, branch_index: BranchIndex) -> None:
        self._reader = reader
        self._framed = framed
        self._branch_index = branch_index
        self._pairs: dict[int | None, tuple[str, str] | None] = {}
        self._decoders: dict[pa.DataType, tuple[Any, set[int | None]]] = {}

    @staticmethod
    def available() -> bool:
        """True when the extension is on and has the compiled Avro path."""
        extension = native.module()
        return extension is not None and hasattr(extension, "AvroColumnDecoder")

    def decode(
        self,
        values: pa.Array,
        target: pa.DataType,
        writer_of: Callable[[int], Any] | None,
    ) -> pa.Array | None:
        """``values`` (Arrow binary; nulls stay null) as an array of ``target``, or None
        when the compiled path does not answer for this batch.

        ``writer_of`` gives a schema id's writer schema (parsed) for framed values; an id it
        cannot give (it raises a SchemaError) is left to the reference path.
        """
        entry = self._decoder(target)
        if entry is None:
            return None
        decoder, added = entry
        refused = _refusal()
        try:
            ids: list[int | None] = list(decoder.schema_ids(values)) if self._framed else [None]
        except refused:
            return None
        for schema_id in ids:
            if schema_id in added:
                continue
            pair = self._pair(schema_id, writer_of)
            if pair is None:
                return None
            try:
                decoder.add_writer(schema_id, *pair)
            except refused as exc:
                self._pairs[schema_id] = None
                self._unsupported(schema_id, f"arrow-avro refuses it ({exc})")
                return None
            added.add(schema_id)
        try:
            return pa.array(decoder.decode(values))
        except refused as exc:
            _log.debug("Avro batch left to the reference path: %s", exc)
            return None

    def _decoder(self, target: pa.DataType) -> tuple[Any, set[int | None]] | None:
        entry = self._decoders.get(target)
        if entry is None:
            extension = native.module()
            if extension is None or not hasattr(extension, "AvroColumnDecoder"):
                return None
            entry = self._decoders[target] = (
                extension.AvroColumnDecoder(self._framed, target),
                set(),
            )
        return entry

    def _pair(
        self, schema_id: int | None, writer_of: Callable[[int], Any] | None
    ) -> tuple[str, str] | None:
        if schema_id in self._pairs:
            return self._pairs[schema_id]
        if schema_id is None or writer_of is None:
            writer = self._reader
        else:
            try:
                writer = writer_of(schema_id)
            except SchemaError:
                return None  # not remembered: the reference path asks (and names it) again
        try:
            pair: tuple[str, str] | None = pair_schemas(writer, self._reader, self._branch_index)
        except NativeUnsupported as exc:
            pair = None
            self._unsupported(schema_id, str(exc))
        self._pairs[schema_id] = pair
        return pair

    @staticmethod
    def _unsupported(schema_id: int | None, reason: str) -> None:
        which = "bare values" if schema_id is None else f"values of writer schema id {schema_id}"
        _log.info("Avro %s decode on the reference path: %s", which, reason)


def _refusal() -> type[Exception]:
    extension = native.module()
    found = getattr(extension, "AvroFastPathRefused", None)
    return found if isinstance(found, type) and issubclass(found, Exception) else _Never


class _Never(Exception):
    """Stands for the extension's refusal when there is no extension (never raised)."""
