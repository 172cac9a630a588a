"""Registry-framed Avro values as JSON text, each read with its own writer schema: what
``spark-statestore tail --value-format avro`` prints (what was written, without a reader
schema's resolution)."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from typing import Any

from spark_statestore.connectors.schema_registry.client import RegistrySettings, registry_for
from spark_statestore.schemas import AvroValueDecoder, SchemaError, parse_frame

__all__ = ["AvroJson"]


class AvroJson:
    """Shows framed Avro values as compact JSON (binary as base64, as Spark's ``to_json``;
    timestamps in ISO 8601; decimals as their digits).

    Parameters
    ----------
    settings
        The registry the frames' ids are looked up in (cached per id).
    """

    def __init__(self, settings: RegistrySettings) -> None:
        self._registry = registry_for(settings)
        self._decoders: dict[int, AvroValueDecoder] = {}

    def show(self, raw: bytes, *, where: str, column: str = "value") -> str:
        """``raw`` as JSON text.

        Raises
        ------
        SchemaError
            The value is not a registry frame, its id is unknown, or it does not decode;
            the message names ``where`` and the schema id.
        """
        try:
            schema_id = parse_frame(raw).schema_id
            decoder = self._decoders.get(schema_id)
            if decoder is None:
                writer = self._registry.avro(self._registry.by_id(schema_id))
                decoder = AvroValueDecoder(writer, lambda _id: writer, column=column)
                self._decoders[schema_id] = decoder
            value = decoder.read(raw)
        except SchemaError as exc:
            raise type(exc)(f"the {column} at {where}: {exc}") from None
        return json.dumps(
            _tagged(value), default=_json_value, ensure_ascii=False, separators=(",", ":")
        )


def _tagged(value: Any) -> Any:
    """Avro's JSON encoding of a named union branch: ``{"name": value}``."""
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return {value[0]: _tagged(value[1])}
    if isinstance(value, dict):
        return {key: _tagged(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_tagged(item) for item in value]
    return value


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"cannot show {type(value).__name__} as JSON")
