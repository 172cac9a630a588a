"""Registry-framed values (Avro, Protobuf, JSON Schema) as JSON text, each read with its own
writer schema: what ``spark-statestore tail --value-format avro`` (``protobuf``,
``jsonschema``) prints (what was written, without a reader schema's resolution)."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from typing import Any

from spark_statestore.connectors.schema_registry.client import (
    SCHEMA_TYPES,
    RegistrySettings,
    registry_for,
)
from spark_statestore.schemas import AvroValueDecoder, SchemaError, parse_frame

__all__ = ["RegistryJson"]


class RegistryJson:
    """Shows framed values of one registry format as compact JSON (binary as base64, as
    Spark's ``to_json``; timestamps in ISO 8601; decimals as their digits; Protobuf as the
    protobuf library's JSON mapping with the fields' proto names).

    Parameters
    ----------
    settings
        The registry the frames' ids are looked up in (cached per id).
    fmt
        ``avro``, ``protobuf`` or ``jsonschema``.
    """

    def __init__(self, settings: RegistrySettings, fmt: str = "avro") -> None:
        self._registry = registry_for(settings)
        self._format = fmt
        self._decoders: dict[Any, Any] = {}

    def show(self, raw: bytes, *, where: str, column: str = "value") -> str:
        """``raw`` as JSON text.

        Raises
        ------
        SchemaError
            The value is not a registry frame, its id is unknown, or it does not decode;
            the message names ``where`` and the schema id.
        """
        try:
            value = self._read(raw, column)
        except SchemaError as exc:
            raise type(exc)(f"the {column} at {where}: {exc}") from None
        return json.dumps(
            _tagged(value), default=_json_value, ensure_ascii=False, separators=(",", ":")
        )

    def _read(self, raw: bytes, column: str) -> Any:
        """``raw`` decoded with its writer schema, as JSON-ready Python values."""
        schema_id = parse_frame(raw).schema_id
        if self._format == "protobuf":
            return self._read_protobuf(raw, schema_id, column)
        decoder = self._decoders.get(schema_id)
        if decoder is None:
            found = self._registry.by_id(schema_id)
            writer = self._registry.parsed(found, SCHEMA_TYPES[self._format])
            if self._format == "avro":
                decoder = AvroValueDecoder(writer, lambda _id: writer, column=column)
            else:
                from spark_statestore.schemas.jsonschema import JsonSchemaValueDecoder

                decoder = JsonSchemaValueDecoder(writer, lambda _id: writer, column=column)
            self._decoders[schema_id] = decoder
        return decoder.read(raw)

    def _read_protobuf(self, raw: bytes, schema_id: int, column: str) -> Any:
        from google.protobuf import json_format

        from spark_statestore.schemas import parse_message_indexes
        from spark_statestore.schemas.protobuf import ProtobufValueDecoder

        indexes = parse_message_indexes(raw).message_indexes or (0,)
        decoder = self._decoders.get((schema_id, indexes))
        if decoder is None:
            writer = self._registry.parsed(self._registry.by_id(schema_id), "PROTOBUF")
            message = writer.message_for(indexes).full_name
            decoder = ProtobufValueDecoder(
                writer, lambda _id: writer, message=message, column=column
            )
            self._decoders[(schema_id, indexes)] = decoder
        return json_format.MessageToDict(decoder.read(raw), preserving_proto_field_name=True)


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
