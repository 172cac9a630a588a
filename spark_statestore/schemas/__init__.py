"""Values as applications write them through a schema registry: the Confluent wire frame,
Avro (and, next, Protobuf and JSON Schema) decoded to one reader schema.

The engine side of DESIGN §12: no registry client and no Spark here. A registry is reached
through a :data:`~spark_statestore.schemas.avro.WriterLookup` (the connectors implement it
with a maintained registry client); the Spark binding maps the Arrow types to Spark's.
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
)
from spark_statestore.schemas.frame import (
    Frame,
    encode_frame,
    parse_frame,
    parse_message_indexes,
)

__all__ = [
    "AvroEncodeError",
    "AvroSchema",
    "AvroValueDecoder",
    "AvroValueEncoder",
    "Frame",
    "FrameError",
    "RegistryError",
    "SchemaDecodeError",
    "SchemaError",
    "SchemaNotFoundError",
    "SchemaResolutionError",
    "ValueDecoder",
    "WriterLookup",
    "arrow_type_of",
    "encode_frame",
    "parse_frame",
    "parse_message_indexes",
]
