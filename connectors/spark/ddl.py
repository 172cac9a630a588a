"""Spark DDL schema strings, parsed and rendered without a JVM.

The ``valueSchema``/``keySchema`` options are Spark DDL strings such as
``"id INT, name STRING NOT NULL, tags ARRAY<STRING>, price DECIMAL(10,2)"``. PySpark's own
parser (``_parse_datatype_string``) needs a SparkContext, which Python data source workers do
not have, so this module parses the subset of the grammar the decoders support:

- the column list form ``name TYPE [NOT NULL] [COMMENT '...'], ...`` and the
  ``STRUCT<name: TYPE, ...>`` form (as Spark's ``DataType.fromDDL`` accepts both);
- ``BOOLEAN``, ``TINYINT``/``BYTE``, ``SMALLINT``/``SHORT``, ``INT``/``INTEGER``,
  ``BIGINT``/``LONG``, ``FLOAT``/``REAL``, ``DOUBLE``, ``DECIMAL``/``DEC``/``NUMERIC``
  ``[(p[, s])]``, ``STRING``, ``VARCHAR(n)``/``CHAR(n)`` (read as ``STRING``), ``BINARY``,
  ``DATE``, ``TIMESTAMP``/``TIMESTAMP_LTZ``, ``TIMESTAMP_NTZ``, ``INTERVAL DAY TO SECOND``
  (day-time intervals: a Protobuf Duration), ``ARRAY<T>``, ``MAP<K, V>``, ``STRUCT<...>``;
- case-insensitive keywords, backquoted names (a doubled backquote escapes one), string
  literals in single or double quotes with Spark's backslash escapes.

:func:`to_ddl` renders a :class:`~pyspark.sql.types.StructType` back to a DDL string Spark
accepts; ``parse_ddl(to_ddl(s)) == s`` for every schema this module can produce.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from spark_statestore.errors import closest_hint

from .errors import DDLError

__all__ = ["MAX_DDL_DEPTH", "parse_ddl", "to_ddl", "type_to_ddl"]

MAX_DDL_DEPTH = 100
"""The deepest nesting of ``ARRAY``, ``MAP`` and ``STRUCT`` types a schema may have.

Parsing, rendering, comparing and decoding a schema all recurse once or twice per level, within
Python's recursion limit; no schema a Kafka Streams app writes comes near this."""

_MAX_PRECISION = 38

# Simple types by lower-case keyword; char/varchar and decimal take parameters.
_SIMPLE_TYPES: dict[str, Callable[[], DataType]] = {
    "boolean": BooleanType,
    "tinyint": ByteType,
    "byte": ByteType,
    "smallint": ShortType,
    "short": ShortType,
    "int": IntegerType,
    "integer": IntegerType,
    "bigint": LongType,
    "long": LongType,
    "float": FloatType,
    "real": FloatType,
    "double": DoubleType,
    "string": StringType,
    "binary": BinaryType,
    "date": DateType,
    "timestamp": TimestampType,
    "timestamp_ltz": TimestampType,
    "timestamp_ntz": TimestampNTZType,
}
_CHAR_TYPES = ("char", "character", "varchar")
_DECIMAL_TYPES = ("decimal", "dec", "numeric")
_COMPLEX_TYPES = ("array", "map", "struct")
_INTERVAL_FIELDS = ("day", "hour", "minute", "second")  # DayTimeIntervalType's, by number
_TYPE_NAMES = (*_SIMPLE_TYPES, *_CHAR_TYPES, *_DECIMAL_TYPES, *_COMPLEX_TYPES, "interval")

_WORD = re.compile(r"\w+")
_SPACE = re.compile(r"\s+")
_PUNCT = "<>(),:"
# Spark's unescapeSQLString, minus the rarely used octal form.
_ESCAPES = {
    "0": "\0",
    "b": "\b",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "Z": "\x1a",
    "%": "\\%",
    "_": "\\_",
}
_NUMBER = re.compile(r"[0-9]+")
_CONTEXT = 60  # characters of the schema shown on each side of an error's position


@dataclass(frozen=True)
class _Token:
    kind: str  # "word", "quoted" (backquoted name), "string", "punct" or "end"
    value: str  # the word, the unquoted name, the unescaped string, the punctuation
    pos: int  # 0-based offset of the token's first character


def parse_ddl(text: str, *, option: str | None = None) -> StructType:
    """Parse a Spark DDL schema string into a ``StructType``.

    Parameters
    ----------
    text
        A column list (``"id INT, name STRING NOT NULL COMMENT 'full name'"``) or a struct
        type (``"STRUCT<id: INT, name: STRING>"``).
    option
        The option the text came from (``valueSchema``), named in error messages.

    Returns
    -------
    StructType
        Columns are nullable unless ``NOT NULL``; a comment is stored as the field's
        ``{"comment": ...}`` metadata, as Spark does. Array elements and map values are
        nullable (DDL cannot say otherwise).

    Raises
    ------
    DDLError
        With the 0-based position of the problem, what was expected there and the text.
    """
    return _Parser(text, option).parse_schema()


def to_ddl(schema: StructType) -> str:
    """Render a ``StructType`` as a DDL column list Spark accepts (``"`id` INT, ..."``).

    Names are always backquoted; an empty schema is ``"STRUCT<>"``. Element nullability of
    arrays and maps is not expressible in DDL and is not rendered (Spark reads them back as
    nullable).

    Raises
    ------
    DDLError
        For a type this module cannot render (intervals, variants, collated strings, ...).
    """
    if not schema.fields:
        return "STRUCT<>"  # an empty column list would not parse back
    return ", ".join(_field_ddl(field, separator=" ") for field in schema.fields)


def type_to_ddl(data_type: DataType) -> str:
    """Render one data type as DDL text (``"BIGINT"``, ``"STRUCT<`a`: INT>"``).

    Raises
    ------
    DDLError
        For a type this module cannot render.
    """
    if isinstance(data_type, StructType):
        fields = ", ".join(_field_ddl(field, separator=": ") for field in data_type.fields)
        return f"STRUCT<{fields}>"
    if isinstance(data_type, ArrayType):
        return f"ARRAY<{type_to_ddl(data_type.elementType)}>"
    if isinstance(data_type, MapType):
        return f"MAP<{type_to_ddl(data_type.keyType)}, {type_to_ddl(data_type.valueType)}>"
    if isinstance(data_type, DecimalType):
        return f"DECIMAL({data_type.precision},{data_type.scale})"
    if isinstance(data_type, DayTimeIntervalType):
        start = _INTERVAL_FIELDS[data_type.startField].upper()
        end = _INTERVAL_FIELDS[data_type.endField].upper()
        return f"INTERVAL {start}" if start == end else f"INTERVAL {start} TO {end}"
    if isinstance(data_type, StringType) and data_type.collation != "UTF8_BINARY":
        raise DDLError(
            f"cannot render {data_type.simpleString()} as DDL: collated strings are not "
            "supported; use a plain STRING"
        )
    for name, factory in _SIMPLE_TYPES.items():
        if type(data_type) is factory:
            return name.upper()
    raise DDLError(
        f"cannot render {data_type.simpleString()} as DDL: supported types are "
        f"{', '.join(sorted({n.upper() for n in _TYPE_NAMES}))}"
    )


def _field_ddl(field: StructField, *, separator: str) -> str:
    name = "`" + field.name.replace("`", "``") + "`"
    text = f"{name}{separator}{type_to_ddl(field.dataType)}"
    if not field.nullable:
        text += " NOT NULL"
    comment = (field.metadata or {}).get("comment")
    if comment is not None:
        escaped = str(comment).replace("\\", "\\\\").replace("'", "\\'")
        text += f" COMMENT '{escaped}'"
    return text


class _Parser:
    """Recursive descent over the tokens of one DDL string."""

    def __init__(self, text: str, option: str | None) -> None:
        self._text = text
        self._option = option
        self._tokens = self._tokenize()
        self._index = 0
        self._depth = 0  # ARRAY, MAP and STRUCT types open around the current token

    # -- tokens ---------------------------------------------------------------------------
    def _tokenize(self) -> list[_Token]:
        text, pos, tokens = self._text, 0, []
        while pos < len(text):
            char = text[pos]
            if space := _SPACE.match(text, pos):
                pos = space.end()
            elif word := _WORD.match(text, pos):
                tokens.append(_Token("word", word.group(), pos))
                pos = word.end()
            elif char in _PUNCT:
                tokens.append(_Token("punct", char, pos))
                pos += 1
            elif char == "`":
                token, pos = self._quoted_name(pos)
                tokens.append(token)
            elif char in "'\"":
                token, pos = self._string(pos)
                tokens.append(token)
            else:
                raise self._error(pos, f"unexpected character {char!r}")
        tokens.append(_Token("end", "", len(text)))
        return tokens

    def _quoted_name(self, start: int) -> tuple[_Token, int]:
        text, pos, parts = self._text, start + 1, []
        while True:
            end = text.find("`", pos)
            if end < 0:
                raise self._error(start, "unterminated backquoted name: add the closing `")
            parts.append(text[pos:end])
            if text.startswith("``", end):
                parts.append("`")
                pos = end + 2
            else:
                return _Token("quoted", "".join(parts), start), end + 1

    def _string(self, start: int) -> tuple[_Token, int]:
        text, quote, pos = self._text, self._text[start], start + 1
        chars: list[str] = []
        while pos < len(text):
            char = text[pos]
            if char == quote:
                return _Token("string", "".join(chars), start), pos + 1
            if char == "\\" and pos + 1 < len(text):
                escaped = text[pos + 1]
                hex_digits = text[pos + 2 : pos + 6]
                if escaped == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", hex_digits):
                    chars.append(chr(int(hex_digits, 16)))
                    pos += 6
                    continue
                chars.append(_ESCAPES.get(escaped, escaped))
                pos += 2
                continue
            chars.append(char)
            pos += 1
        raise self._error(start, f"unterminated string literal: add the closing {quote}")

    def _peek(self, offset: int = 0) -> _Token:
        return self._tokens[min(self._index + offset, len(self._tokens) - 1)]

    def _next(self) -> _Token:
        token = self._peek()
        self._index = min(self._index + 1, len(self._tokens) - 1)
        return token

    def _at_keyword(self, keyword: str) -> bool:
        token = self._peek()
        return token.kind == "word" and token.value.lower() == keyword

    def _at_punct(self, punct: str) -> bool:
        token = self._peek()
        return token.kind == "punct" and token.value == punct

    def _expect_punct(self, punct: str, what: str) -> None:
        if not self._at_punct(punct):
            raise self._unexpected(what)
        self._next()

    # -- grammar --------------------------------------------------------------------------
    def parse_schema(self) -> StructType:
        first, second = self._peek(), self._peek(1)
        if (
            first.kind == "word"
            and first.value.lower() == "struct"
            and second.kind == "punct"
            and second.value == "<"
        ):
            self._depth = -1  # the STRUCT<...> form of a schema is its column list, not a level
            schema = self._data_type()
            if self._peek().kind != "end":
                raise self._unexpected("end of schema after STRUCT<...>")
            assert isinstance(schema, StructType)
            return schema
        fields = [self._field(separator=None)]
        while self._at_punct(","):
            self._next()
            fields.append(self._field(separator=None))
        if self._peek().kind != "end":
            raise self._unexpected("',' and another column, or end of schema")
        return self._struct(fields)

    def _field(self, *, separator: str | None) -> tuple[StructField, int]:
        token = self._peek()
        numeric = token.kind == "word" and _NUMBER.fullmatch(token.value)
        if token.kind not in ("word", "quoted") or numeric:
            raise self._unexpected("a column name (use `backquotes` for unusual names)")
        self._next()
        if token.value == "":
            raise self._error(token.pos, "column names must not be empty")
        if separator is not None and self._at_punct(separator):
            self._next()
        data_type = self._data_type()
        nullable, comment = True, None
        while True:
            if self._at_keyword("not") and nullable:
                self._next()
                if not self._at_keyword("null"):
                    raise self._unexpected("NULL after NOT")
                self._next()
                nullable = False
            elif self._at_keyword("comment") and comment is None:
                self._next()
                comment = self._string_literal()
            else:
                break
        metadata = {"comment": comment} if comment is not None else {}
        return StructField(token.value, data_type, nullable, metadata), token.pos

    def _string_literal(self) -> str:
        if self._peek().kind != "string":
            raise self._unexpected("a quoted comment after COMMENT, like COMMENT 'text'")
        parts = []
        while self._peek().kind == "string":  # Spark joins adjacent literals
            parts.append(self._next().value)
        return "".join(parts)

    def _struct(self, fields: list[tuple[StructField, int]]) -> StructType:
        seen: dict[str, str] = {}
        for index, (field, pos) in enumerate(fields):
            other = seen.setdefault(field.name.lower(), field.name)
            if len(seen) <= index:  # the name was already there
                raise self._error(
                    pos,
                    f"duplicate column name {field.name!r} (names are case-insensitive, "
                    f"it repeats {other!r}); rename one of them",
                )
        return StructType([field for field, _ in fields])

    def _data_type(self) -> DataType:
        token = self._peek()
        if token.kind != "word":
            raise self._unexpected("a type name (INT, STRING, ARRAY<...>, ...)")
        name = token.value.lower()
        self._next()
        if name in _COMPLEX_TYPES:
            if self._depth == MAX_DDL_DEPTH:
                raise self._error(
                    token.pos,
                    f"types nested deeper than {MAX_DDL_DEPTH} levels of ARRAY, MAP and "
                    "STRUCT; flatten the schema",
                )
            self._depth += 1
            try:
                return self._complex_type(name)
            finally:
                self._depth -= 1
        if name in _SIMPLE_TYPES or name in _CHAR_TYPES or name in _DECIMAL_TYPES:
            return self._simple_type(token)
        if name == "interval":
            return self._interval_type()
        raise self._error(token.pos, f"unknown type {token.value!r}{self._suggest(name)}")

    def _interval_type(self) -> DataType:
        """``INTERVAL start [TO end]`` of DAY, HOUR, MINUTE, SECOND (a day-time interval)."""
        fields = [self._interval_field("DAY, HOUR, MINUTE or SECOND, like INTERVAL DAY")]
        after = self._peek()
        if after.kind == "word" and after.value.lower() == "to":
            self._next()
            fields.append(self._interval_field("the end field after TO"))
        start, end = fields[0], fields[-1]
        if end < start:
            raise self._unexpected("an end field after the start field")
        return DayTimeIntervalType(start, end)

    def _interval_field(self, expected: str) -> int:
        token = self._peek()
        if token.kind != "word" or token.value.lower() not in _INTERVAL_FIELDS:
            raise self._unexpected(expected)
        return _INTERVAL_FIELDS.index(self._next().value.lower())

    def _complex_type(self, name: str) -> DataType:
        if name == "array":
            self._expect_punct("<", "'<' after ARRAY, like ARRAY<STRING>")
            element = self._data_type()
            self._expect_punct(">", "'>' closing ARRAY<...>")
            return ArrayType(element, containsNull=True)
        if name == "map":
            self._expect_punct("<", "'<' after MAP, like MAP<STRING, INT>")
            key = self._data_type()
            self._expect_punct(",", "',' between the key and value types of MAP<K, V>")
            value = self._data_type()
            self._expect_punct(">", "'>' closing MAP<K, V>")
            return MapType(key, value, valueContainsNull=True)
        self._expect_punct("<", "'<' after STRUCT, like STRUCT<a: INT>")
        fields = []
        if not self._at_punct(">"):
            fields.append(self._field(separator=":"))
            while self._at_punct(","):
                self._next()
                fields.append(self._field(separator=":"))
        self._expect_punct(">", "',' and another field, or '>' closing STRUCT<...>")
        return self._struct(fields)

    def _simple_type(self, token: _Token) -> DataType:
        name = token.value.lower()
        params = self._params()
        if name in _DECIMAL_TYPES:
            if len(params) > 2:
                raise self._error(token.pos, f"{token.value} takes at most (precision, scale)")
            precision = params[0] if params else 10
            scale = params[1] if len(params) > 1 else 0
            if not 1 <= precision <= _MAX_PRECISION or scale > precision:
                raise self._error(
                    token.pos,
                    f"invalid {token.value}({precision},{scale}): precision must be 1 to "
                    f"{_MAX_PRECISION} and scale 0 to the precision",
                )
            return DecimalType(precision, scale)
        if name in _CHAR_TYPES:
            if len(params) != 1:
                raise self._error(token.pos, f"{token.value} needs a length, like {name}(20)")
            return StringType()
        if params:
            raise self._error(token.pos, f"type {token.value} takes no parameters")
        return _SIMPLE_TYPES[name]()

    def _params(self) -> list[int]:
        if not self._at_punct("("):
            return []
        self._next()
        params = []
        while True:
            token = self._peek()
            if token.kind != "word" or not _NUMBER.fullmatch(token.value):
                raise self._unexpected("a non-negative integer type parameter")
            params.append(int(self._next().value))
            if self._at_punct(")"):
                self._next()
                return params
            self._expect_punct(",", "',' or ')' in the type parameters")

    # -- errors ---------------------------------------------------------------------------
    def _suggest(self, name: str) -> str:
        return closest_hint(name, [n.upper() for n in _TYPE_NAMES], noun="types")

    def _unexpected(self, expected: str) -> DDLError:
        token = self._peek()
        if token.kind == "end":
            found = "end of schema"
        elif token.kind == "string":
            found = "a string literal"
        elif token.kind == "quoted":
            found = f"`{token.value}`"
        else:
            found = repr(token.value)
        return self._error(token.pos, f"expected {expected}, found {found}")

    def _error(self, pos: int, what: str) -> DDLError:
        line_start = self._text.rfind("\n", 0, pos) + 1
        line_end = self._text.find("\n", pos)
        if line_end < 0:
            line_end = len(self._text)
        # Long lines are cut to the part around the problem.
        if pos - line_start > _CONTEXT:
            line_start = pos - _CONTEXT
        line = self._text[line_start : min(line_end, pos + _CONTEXT)]
        prefix = f"option {self._option}: " if self._option else ""
        return DDLError(
            f"{prefix}invalid DDL schema at position {pos}: {what}\n"
            f"  {line}\n  {' ' * (pos - line_start)}^\n"
            'Write the schema as "name TYPE, ...", e.g. "id INT, name STRING, '
            'tags ARRAY<STRING>".',
            position=pos,
        )
