"""What every registry format's decoder shares: a batch of stored bytes in, one Arrow array
out, the first bad value named (or, permissive, nulled and counted).

A format implements :meth:`ValueDecoder.decode_one` (one value, as :func:`pyarrow.array`
takes it) and sets :attr:`~ValueDecoder.arrow_type` (its reader schema's); the batch loop,
the error messages and the permissive mode are here, the same for Avro, Protobuf and JSON
Schema. So are a decoder's writer schemas (:class:`WriterCache`) and how messages name the
schema a value was read with (:func:`writer_named`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import pyarrow as pa

from spark_statestore.schemas.errors import (
    FrameError,
    RegistryError,
    SchemaDecodeError,
    SchemaResolutionError,
)
from spark_statestore.schemas.schema_text import SchemaText

__all__ = ["ValueDecoder", "WriterCache", "writer_named"]

SchemaT = TypeVar("SchemaT", bound=SchemaText[Any])

_ARROW_REFUSALS = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError)


class ValueDecoder(ABC):
    """Decodes batches of one column's stored bytes to its reader schema's Arrow type."""

    column: str
    """``"key"`` or ``"value"``, named in messages."""
    arrow_type: pa.DataType
    """The Arrow type of the reader schema's values."""

    @abstractmethod
    def decode_one(self, raw: bytes) -> Any:
        """One value, as :func:`pyarrow.array` takes it.

        Raises
        ------
        FrameError, SchemaDecodeError, SchemaResolutionError
            The value is bad (counted as null when permissive).
        RegistryError
            Its writer schema cannot be had: never the value's fault.
        """

    def decode(
        self,
        values: Sequence[bytes | None],
        *,
        locate: Callable[[int], str],
        permissive: bool,
        arrow_type: pa.DataType | None = None,
    ) -> tuple[pa.Array, int]:
        """Decode ``values`` (None stays null) into an array of ``arrow_type`` (default:
        the reader schema's); with ``permissive``, an undecodable value becomes null and is
        counted instead of raising.

        Raises
        ------
        SchemaError
            (Not permissive) the first value that cannot be decoded, naming it by
            ``locate(index)``, with its schema id, the subject and the reason. A registry
            that cannot be reached raises even when permissive: the value is not bad.
        """
        rows: list[Any] = []
        bad = 0
        for index, raw in enumerate(values):
            if raw is None:
                rows.append(None)
                continue
            try:
                rows.append(self.decode_one(raw))
            except (FrameError, SchemaDecodeError, SchemaResolutionError) as exc:
                if not permissive:
                    raise type(exc)(f"the {self.column} at {locate(index)}: {exc}") from None
                bad += 1
                rows.append(None)
            except RegistryError as exc:  # not the value's fault: never a counted null
                raise type(exc)(f"the {self.column} at {locate(index)}: {exc}") from None
        target = arrow_type or self.arrow_type
        try:
            return pa.array(rows, type=target), bad
        except _ARROW_REFUSALS:
            pass  # a value the format allows but the column cannot hold: find it (or them)
        for index, row in enumerate(rows):
            try:
                pa.array([row], type=target)
            except _ARROW_REFUSALS as exc:
                if not permissive:
                    raise SchemaDecodeError(
                        f"the {self.column} at {locate(index)} decodes to a value its column "
                        f"({target}) cannot hold: {exc}"
                    ) from None
                bad += 1
                rows[index] = None
        return pa.array(rows, type=target), bad


class WriterCache(Generic[SchemaT]):
    """The writer schemas of a decoder's values: a registry lookup asked once per schema id
    (a failure is not remembered, so the id is asked again for the next value)."""

    def __init__(self, lookup: Callable[[int], SchemaT]) -> None:
        self._lookup = lookup
        self._found: dict[int, SchemaT] = {}

    def __call__(self, schema_id: int) -> SchemaT:
        """The writer schema registered under ``schema_id``.

        Raises
        ------
        RegistryError
            The lookup's: the registry cannot be reached, or has no such id.
        """
        found = self._found.get(schema_id)
        if found is None:
            found = self._found[schema_id] = self._lookup(schema_id)
        return found


def writer_named(schema_id: int | None, reader: SchemaText[Any], subject: str | None) -> str:
    """The schema a value was read with, as messages name it: ``writer schema id 7 (subject
    orders-value), reader schema id 9``; for a bare value (``schema_id`` None), ``the schema
    of`` the reader's ``what``."""
    if schema_id is None:
        return f"the schema of {reader.what}"
    named_subject = f" (subject {subject})" if subject else ""
    reader_id = reader.schema_id
    named_reader = f", reader schema id {reader_id}" if reader_id is not None else ""
    return f"writer schema id {schema_id}{named_subject}{named_reader}"
