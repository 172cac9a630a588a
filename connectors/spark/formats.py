"""Typed key and value columns: the ``keyFormat``/``valueFormat`` decoders.

Stored keys and values are bytes. The Spark follower source and snapshot reader can expose
them as typed columns instead, decoding the bytes the way Kafka's serializers wrote them:

============  ==================================  ==================  ===================
format        bytes                               Spark type          Arrow type
============  ==================================  ==================  ===================
``binary``    as stored (the default)             ``BINARY``          ``binary``
``string``    UTF-8 (StringSerializer)            ``STRING``          ``string``
``long``      8-byte big-endian (LongSerializer)  ``BIGINT``          ``int64``
``int``       4-byte big-endian (IntegerSer.)     ``INT``             ``int32``
``double``    8-byte big-endian IEEE 754          ``DOUBLE``          ``float64``
``json``      UTF-8 JSON object text              the schema struct   the matching struct
``avro``      Avro (a registry's frame, or bare)  the reader schema   its Arrow type
============  ==================================  ==================  ===================

The registry formats (``avro``; :mod:`~spark_statestore.connectors.spark.registry_column`)
decode to the reader schema fixed when the query was planned; Avro's types follow Spark's
``from_avro`` (:mod:`spark_statestore.schemas.avro_types`).

JSON follows Spark's ``from_json``: a field of the wrong JSON type is an error for that record
(never a batch failure), a ``STRING`` field takes any JSON value as its text, decimals are
built from the number's text and rounded half up to the scale, dates and timestamps come from
ISO-8601 strings (timestamps also from epoch seconds; text without a zone is read in the codec's
``time_zone``, ``UTC`` by default). Missing fields are null; unknown fields are ignored.

Undecodable values fail the read (FAILFAST) or become nulls that are counted (PERMISSIVE).
"""

from __future__ import annotations

import datetime as dt
import struct
import zoneinfo
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DayTimeIntervalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructType,
)

from spark_statestore.errors import OptionError
from spark_statestore.schemas import AvroValueDecoder

from .ddl import parse_ddl, type_to_ddl
from .errors import DDLError, DecodeError, EncodeError
from .json_values import JsonMismatch, json_row, struct_converter
from .option_table import REGISTRY_FORMATS, ValueFormat
from .registry_column import RegistryColumn

__all__ = ["ColumnCodec", "ValueFormat"]


_FIXED_WIDTH = {ValueFormat.LONG: (8, "q"), ValueFormat.INT: (4, "i"), ValueFormat.DOUBLE: (8, "d")}
_SPARK_TYPES: dict[ValueFormat, DataType] = {
    ValueFormat.BINARY: BinaryType(),
    ValueFormat.STRING: StringType(),
    ValueFormat.LONG: LongType(),
    ValueFormat.INT: IntegerType(),
    ValueFormat.DOUBLE: DoubleType(),
}
# Python data source batches are checked against to_arrow_schema(schema, timezone="UTC").
_ARROW_TIME_ZONE = "UTC"
_PREVIEW_BYTES = 16


@dataclass(frozen=True)
class ColumnCodec:
    """Decodes one binary column (``key`` or ``value``) into its configured type.

    Build it with :meth:`create`. It is picklable (it holds only the format, the schema and
    names), so Spark readers can ship it to executors.

    Attributes
    ----------
    format : ValueFormat
    schema : StructType or None
        The JSON schema; None for the other formats.
    column : str
        ``"key"`` or ``"value"``; options are named ``{column}Format``/``{column}Schema``.
    time_zone : str
        Zone of JSON timestamp text that has none (Spark uses its session time zone).
    """

    format: ValueFormat
    schema: StructType | None
    column: str
    time_zone: str = "UTC"
    registry_column: RegistryColumn | None = None
    """A registry format's reader schema and writer schemas."""

    @classmethod
    def create(
        cls,
        fmt: ValueFormat | str,
        schema: StructType | None,
        *,
        column: str,
        time_zone: str = "UTC",
        registry_column: RegistryColumn | None = None,
    ) -> ColumnCodec:
        """Check the format, schema and time zone together and build the codec.

        Parameters
        ----------
        fmt
            The format, or the raw option text (parsed as option ``{column}Format``).
        schema
            Required for ``json`` (from the ``{column}Schema`` option), refused otherwise.
        column
            ``"key"`` or ``"value"``, used to name options in error messages.
        time_zone
            An IANA zone or ``UTC`` for JSON timestamps written without a zone.

        Raises
        ------
        OptionError
            For a missing or unexpected schema, a schema JSON cannot decode into (a map with
            non-string keys), or an unknown time zone.
        """
        if not isinstance(fmt, ValueFormat):
            fmt = ValueFormat.parse(f"{column}Format", fmt)
        typed = registry_column
        if (fmt in REGISTRY_FORMATS) != (typed is not None) or (
            typed is not None and typed.format is not fmt
        ):
            raise OptionError(
                f"{column}Format {fmt.value} needs its schema options ({column}Schema, or "
                f"schemaRegistryUrl and {column}Subject), and only it takes them"
                if typed is None
                else f"a {typed.format.value} column is given for {column}Format {fmt.value}"
            )
        if typed is not None:
            try:
                type_to_ddl(typed.spark_type())
            except DDLError as exc:
                raise OptionError(f"{typed.reader.what}: {exc}") from None
            return cls(fmt, None, column, time_zone, typed)
        option = f"{column}Schema"
        if fmt is ValueFormat.JSON and schema is None:
            raise OptionError(
                f"option {option} is required with {column}Format json: give the JSON "
                f'fields as a DDL string, e.g. .option("{option}", "id INT, name STRING")'
            )
        if fmt is not ValueFormat.JSON and schema is not None:
            raise OptionError(
                f"option {option} is only used with {column}Format json, but {column}Format is "
                f"{fmt.value}: remove {option} or set {column}Format json"
            )
        if schema is not None:
            _check_json_schema(schema, option)
        _zone(time_zone)
        return cls(fmt, schema, column, time_zone)

    @property
    def spark_type(self) -> DataType:
        """The Spark type of the decoded column."""
        if self.registry_column is not None:
            return self.registry_column.spark_type()
        return self.schema if self.schema is not None else _SPARK_TYPES[self.format]

    def ddl_type(self) -> str:
        """DDL text of :attr:`spark_type`, for the data source's schema string."""
        return type_to_ddl(self.spark_type)

    @property
    def arrow_type(self) -> pa.DataType:
        """The Arrow type Spark expects in record batches for :attr:`spark_type`."""
        return to_arrow_type(self.spark_type, timezone=_ARROW_TIME_ZONE)

    @property
    def order_preserving(self) -> bool:
        """True when byte order equals Spark's order of the decoded values.

        Only then may range filters on the column be pushed down as key ranges.
        """
        return self.format in (ValueFormat.BINARY, ValueFormat.STRING)

    # -- decoding -------------------------------------------------------------------------
    def decode(
        self,
        values: Sequence[bytes | None],
        *,
        locate: Callable[[int], str],
        permissive: bool,
    ) -> tuple[pa.Array, int]:
        """Decode a batch of stored bytes.

        Parameters
        ----------
        values
            The stored bytes; None (a delete's value) stays null.
        locate
            Gives the location of ``values[i]`` for error messages, e.g.
            ``"topic orders-changelog partition 3 offset 1234"``.
        permissive
            True: an undecodable value becomes null and is counted. False: raise.

        Returns
        -------
        tuple of (pyarrow.Array, int)
            The decoded array (:attr:`arrow_type`, ``len(values)`` long) and the number of
            undecodable values.

        Raises
        ------
        DecodeError
            When not permissive, for the first undecodable value.
        """
        if self.format is ValueFormat.BINARY:
            return pa.array(values, pa.binary()), 0
        if self.format is ValueFormat.STRING:
            return self._decode_string(values, locate, permissive)
        if self.format is ValueFormat.JSON:
            return self._decode_json(values, locate, permissive)
        if self.registry_column is not None:
            return self.registry_column.decoder().decode(
                values, locate=locate, permissive=permissive, arrow_type=self.arrow_type
            )
        return self._decode_fixed(values, locate, permissive)

    def decode_array(
        self, values: pa.Array, *, locate: Callable[[int], str], permissive: bool
    ) -> tuple[pa.Array, int]:
        """:meth:`decode` of an Arrow binary array: binary and string values stay in Arrow
        (no Python object per value), Avro values decode in bulk when the compiled path
        answers; the other formats decode as :meth:`decode` does."""
        if self.format is ValueFormat.BINARY:
            return values.cast(pa.binary()), 0
        if self.format is ValueFormat.STRING:
            try:
                return values.cast(pa.string()), 0
            except pa.ArrowInvalid:
                pass  # some value is not UTF-8: decode() names it (or nulls it)
        if self.registry_column is not None:
            decoder = self.registry_column.decoder()
            if isinstance(decoder, AvroValueDecoder):  # decodes an Arrow array in bulk
                return decoder.decode_array(
                    values, locate=locate, permissive=permissive, arrow_type=self.arrow_type
                )
        return self.decode(values.to_pylist(), locate=locate, permissive=permissive)

    def _decode_string(
        self, values: Sequence[bytes | None], locate: Callable[[int], str], permissive: bool
    ) -> tuple[pa.Array, int]:
        binary = pa.array(values, pa.binary())
        try:
            return binary.cast(pa.string()), 0
        except pa.ArrowInvalid:
            pass  # some value is not UTF-8: find it (or them) one by one
        texts: list[str | None] = []
        bad = 0
        for index, raw in enumerate(values):
            if raw is None:
                texts.append(None)
                continue
            try:
                texts.append(str(raw, "utf-8"))
            except UnicodeDecodeError as exc:
                if not permissive:
                    reason = f"invalid UTF-8 byte 0x{raw[exc.start]:02x} at byte {exc.start}"
                    raise self._failure(index, raw, locate, reason) from None
                bad += 1
                texts.append(None)
        return pa.array(texts, pa.string()), bad

    def _decode_fixed(
        self, values: Sequence[bytes | None], locate: Callable[[int], str], permissive: bool
    ) -> tuple[pa.Array, int]:
        width, code = _FIXED_WIDTH[self.format]
        binary = pa.array(values, pa.binary())
        wrong = pc.fill_null(pc.not_equal(pc.binary_length(binary), width), False)
        bad_indices = pc.indices_nonzero(wrong).to_pylist()
        if bad_indices and not permissive:
            index = bad_indices[0]
            raw = values[index]
            assert raw is not None
            reason = f"expected {width} bytes, got {len(raw)}"
            raise self._failure(index, raw, locate, reason)
        if bad_indices:
            binary = pc.if_else(wrong, pa.scalar(None, pa.binary()), binary)
            skip = set(bad_indices)
            data = b"".join(v for i, v in enumerate(values) if v is not None and i not in skip)
        else:
            data = b"".join(v for v in values if v is not None)
        count = len(data) // width
        dense = pa.array(struct.unpack(f">{count}{code}", data), self.arrow_type)
        if count == len(values):
            return dense, 0
        # Scatter the decoded values between the nulls (deletes and undecodable values).
        nulls = pa.nulls(len(values), self.arrow_type)
        return pc.replace_with_mask(nulls, pc.is_valid(binary), dense), len(bad_indices)

    def _decode_json(
        self, values: Sequence[bytes | None], locate: Callable[[int], str], permissive: bool
    ) -> tuple[pa.Array, int]:
        assert self.schema is not None
        convert = struct_converter(self.schema, _zone(self.time_zone))
        rows: list[dict[str, Any] | None] = []
        bad = 0
        for index, raw in enumerate(values):
            if raw is None:
                rows.append(None)
                continue
            try:
                rows.append(json_row(raw, convert))
            except JsonMismatch as exc:
                if not permissive:
                    raise self._failure(index, raw, locate, exc.describe()) from None
                bad += 1
                rows.append(None)
        try:
            return pa.array(rows, type=self.arrow_type), bad
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            pass  # a row the converters accepted but Arrow did not: find it (or them)
        for index, row in enumerate(rows):
            try:
                pa.array([row], type=self.arrow_type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
                raw = values[index]
                assert raw is not None
                if not permissive:
                    raise self._failure(index, raw, locate, f"not convertible: {exc}") from None
                bad += 1
                rows[index] = None
        return pa.array(rows, type=self.arrow_type), bad

    def _failure(
        self, index: int, raw: bytes, locate: Callable[[int], str], reason: str
    ) -> DecodeError:
        preview = bytes(raw[:_PREVIEW_BYTES]).hex()
        more = "..." if len(raw) > _PREVIEW_BYTES else ""
        return DecodeError(
            f"cannot decode the {self.column} at {locate(index)} as {self.format.value}: "
            f"{reason} ({len(raw)} bytes: {preview or 'empty'}{more}). Fix the data, read it "
            f"with {self.column}Format binary, or set mode PERMISSIVE to turn undecodable "
            "values into nulls.",
            index=index,
        )

    # -- encoding -------------------------------------------------------------------------
    def encode(self, value: object) -> bytes:
        """Encode a filter literal to the stored bytes, for pushdown.

        Raises
        ------
        EncodeError
            When the literal has the wrong Python type or range for the format, for ``json``
            (never pushable), and for double zeros and NaNs (several byte forms compare
            equal in Spark). The filter then stays with Spark.
        """
        fmt = self.format
        if fmt is ValueFormat.BINARY and isinstance(value, (bytes, bytearray)):
            return bytes(value)
        if fmt is ValueFormat.STRING and isinstance(value, str):
            try:
                return value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise EncodeError(f"cannot encode {value!r} as UTF-8: {exc}") from None
        if fmt in (ValueFormat.LONG, ValueFormat.INT) and _is_int(value):
            assert isinstance(value, int)
            width, code = _FIXED_WIDTH[fmt]
            limit = 1 << (width * 8 - 1)
            if not -limit <= value < limit:
                raise EncodeError(f"{value} is out of range for {self.column}Format {fmt.value}")
            return struct.pack(f">{code}", value)
        if fmt is ValueFormat.DOUBLE and (_is_int(value) or isinstance(value, float)):
            assert isinstance(value, (int, float))
            try:
                number = float(value)
            except OverflowError:
                raise EncodeError(f"{value} is out of range for a double") from None
            if number == 0.0 or number != number:
                raise EncodeError(
                    f"{number} is not pushable for {self.column}Format double: Spark treats "
                    "0.0 and -0.0 (and all NaNs) as equal, but their bytes differ"
                )
            return struct.pack(">d", number)
        if fmt is ValueFormat.JSON:
            raise EncodeError(f"filters on a json {self.column} column are not pushable")
        if fmt in REGISTRY_FORMATS:
            raise EncodeError(
                f"filters on a {fmt.value} {self.column} column are not pushable (Spark "
                "applies them)"
            )
        raise EncodeError(
            f"cannot encode {type(value).__name__} {value!r} for {self.column}Format {fmt.value}"
        )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _zone(name: str) -> dt.tzinfo:
    if name.upper() in ("UTC", "Z", "GMT"):
        return dt.timezone.utc
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise OptionError(
            f"unknown time zone {name!r} for JSON timestamps: use an IANA zone such as "
            "'Europe/Paris', or 'UTC'"
        ) from None


def _check_json_schema(schema: StructType, option: str) -> None:
    try:
        # Spark re-parses the schema string we give it: what it sees must be this schema.
        same = parse_ddl(type_to_ddl(schema)) == schema
    except DDLError as exc:
        raise OptionError(f"option {option}: {exc}") from None
    if not same:
        raise OptionError(
            f"option {option}: the schema cannot be written as DDL (non-nullable array "
            "elements or map values, or field metadata other than comments): build it with "
            "parse_ddl"
        )
    for inner in _walk(schema):
        if isinstance(inner, DayTimeIntervalType):
            raise OptionError(
                f"option {option}: {type_to_ddl(inner)} is not read from JSON values; read the "
                "field as STRING or BIGINT (e.g. microseconds) and convert it in Spark"
            )
        if isinstance(inner, MapType) and not isinstance(inner.keyType, StringType):
            raise OptionError(
                f"option {option}: {type_to_ddl(inner)} cannot be read from JSON, whose "
                "object keys are strings: use MAP<STRING, ...>"
            )


def _walk(data_type: DataType) -> list[DataType]:
    found = [data_type]
    if isinstance(data_type, StructType):
        for field in data_type.fields:
            found.extend(_walk(field.dataType))
    elif isinstance(data_type, ArrayType):
        found.extend(_walk(data_type.elementType))
    elif isinstance(data_type, MapType):
        found.extend(_walk(data_type.keyType) + _walk(data_type.valueType))
    return found
