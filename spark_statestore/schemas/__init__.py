"""Values as applications write them through a schema registry: the Confluent wire frame,
and Avro, Protobuf and JSON Schema values decoded to one reader schema.

The engine side of DESIGN §12: no registry client and no Spark here. A registry is reached
through a writer lookup, one a format (:data:`~spark_statestore.schemas.avro.WriterLookup`,
:data:`~spark_statestore.schemas.protobuf.ProtobufWriterLookup`,
:data:`~spark_statestore.schemas.jsonschema.JsonSchemaWriterLookup`; the connectors implement
them with a maintained registry client); the Spark binding maps the Arrow types to Spark's.
"""

from spark_statestore.schemas.avro import AvroSchema, AvroValueDecoder, WriterLookup
from spark_statestore.schemas.avro_encode import AvroValueEncoder
from spark_statestore.schemas.avro_types import arrow_type_of
from spark_statestore.schemas.decoding import ValueDecoder
from spark_statestore.schemas.errors import (
    AvroEncodeError,
    FrameError,
    RegistryError,
    SchemaDecodeError,
    SchemaError,
    SchemaNotFoundError,
    SchemaResolutionError,
    ValueEncodeError,
)
from spark_statestore.schemas.frame import (
    Frame,
    encode_frame,
    parse_frame,
    parse_message_indexes,
)
from spark_statestore.schemas.jsonschema import (
    JsonSchema,
    JsonSchemaValueDecoder,
    JsonSchemaWriterLookup,
)
from spark_statestore.schemas.jsonschema_encode import JsonSchemaValueEncoder
from spark_statestore.schemas.protobuf import (
    ProtobufSchema,
    ProtobufValueDecoder,
    ProtobufWriterLookup,
)
from spark_statestore.schemas.protobuf_encode import ProtobufValueEncoder

__all__ = [
    "AvroEncodeError",
    "AvroSchema",
    "AvroValueDecoder",
    "AvroValueEncoder",
    "Frame",
    "FrameError",
    "JsonSchema",
    "JsonSchemaValueDecoder",
    "JsonSchemaValueEncoder",
    "JsonSchemaWriterLookup",
    "ProtobufSchema",
    "ProtobufValueDecoder",
    "ProtobufValueEncoder",
    "ProtobufWriterLookup",
    "RegistryError",
    "SchemaDecodeError",
    "SchemaError",
    "SchemaNotFoundError",
    "SchemaResolutionError",
    "ValueDecoder",
    "ValueEncodeError",
    "WriterLookup",
    "arrow_type_of",
    "encode_frame",
    "parse_frame",
    "parse_message_indexes",
]
