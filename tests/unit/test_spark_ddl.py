"""Spark DDL schema strings: parsing without a JVM, rendering back, error positions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
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
    NullType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    VarcharType,
)

from spark_statestore.connectors.spark.ddl import parse_ddl, to_ddl, type_to_ddl
from spark_statestore.connectors.spark.errors import DDLError, SparkSourceError
from spark_statestore.errors import OptionError, StateStoreError


def _one_type(ddl_type: str) -> DataType:
    return parse_ddl(f"x {ddl_type}").fields[0].dataType


# -- parsing --------------------------------------------------------------------------------
def test_parses_the_documented_example() -> None:
    schema = parse_ddl(
        "id INT, name STRING, tags ARRAY<STRING>, price DECIMAL(10,2), "
        "m MAP<STRING,BIGINT>, s STRUCT<a: INT, b: STRING>"
    )
    assert schema == StructType(
        [
            StructField("id", IntegerType()),
            StructField("name", StringType()),
            StructField("tags", ArrayType(StringType(), True)),
            StructField("price", DecimalType(10, 2)),
            StructField("m", MapType(StringType(), LongType(), True)),
            StructField(
                "s", StructType([StructField("a", IntegerType()), StructField("b", StringType())])
            ),
        ]
    )


@pytest.mark.parametrize(
    ("ddl_type", "expected"),
    [
        ("boolean", BooleanType()),
        ("tinyint", ByteType()),
        ("byte", ByteType()),
        ("smallint", ShortType()),
        ("short", ShortType()),
        ("int", IntegerType()),
        ("integer", IntegerType()),
        ("bigint", LongType()),
        ("long", LongType()),
        ("float", FloatType()),
        ("real", FloatType()),
        ("double", DoubleType()),
        ("string", StringType()),
        ("varchar(20)", StringType()),
        ("char(3)", StringType()),
        ("binary", BinaryType()),
        ("date", DateType()),
        ("timestamp", TimestampType()),
        ("timestamp_ltz", TimestampType()),
        ("timestamp_ntz", TimestampNTZType()),
        ("decimal", DecimalType(10, 0)),
        ("decimal(5)", DecimalType(5, 0)),
        ("dec(38, 38)", DecimalType(38, 38)),
        ("numeric(12,4)", DecimalType(12, 4)),
        ("array<array<int>>", ArrayType(ArrayType(IntegerType()))),
        ("map<string, array<double>>", MapType(StringType(), ArrayType(DoubleType()))),
        ("struct<>", StructType([])),
    ],
)
def test_type_names_and_aliases(ddl_type: str, expected: DataType) -> None:
    assert _one_type(ddl_type) == expected
    assert _one_type(ddl_type.upper()) == expected


def test_keywords_are_case_insensitive_and_names_keep_their_case() -> None:
    schema = parse_ddl("Id Int NoT nUlL CoMmEnT 'c', Tags Array<String>")
    assert schema.names == ["Id", "Tags"]
    assert schema.fields[0].nullable is False


def test_struct_form_and_struct_fields_with_or_without_colon() -> None:
    expected = StructType([StructField("a", IntegerType()), StructField("b", StringType())])
    assert parse_ddl("STRUCT<a: INT, b STRING>") == expected
    assert parse_ddl("struct<a:int,b:string>") == expected
    assert _one_type("STRUCT<a INT, b: STRING>") == expected


def test_keywords_can_be_column_names() -> None:
    schema = parse_ddl("struct INT, date DATE, comment STRING, not BOOLEAN, map MAP<STRING, INT>")
    assert schema.names == ["struct", "date", "comment", "not", "map"]
    assert schema.fields[0].dataType == IntegerType()


def test_not_null_and_comment() -> None:
    schema = parse_ddl("id BIGINT NOT NULL COMMENT 'the id', s STRUCT<a: INT NOT NULL>")
    assert schema.fields[0] == StructField("id", LongType(), False, {"comment": "the id"})
    nested = schema.fields[1].dataType
    assert isinstance(nested, StructType)
    assert nested.fields[0].nullable is False
    # Either order is accepted.
    assert parse_ddl("id INT COMMENT 'c' NOT NULL") == parse_ddl("id INT NOT NULL COMMENT 'c'")


def test_comment_escapes_and_adjacent_literals() -> None:
    schema = parse_ddl(r"""a INT COMMENT 'it\'s a "b"\n\\ \u00e9' "!" """)
    assert schema.fields[0].metadata == {"comment": 'it\'s a "b"\n\\ \u00e9!'}


def test_backquoted_names() -> None:
    schema = parse_ddl("`weird name` INT, `back``quote` STRING, `123` DATE, `a,b<c>` BINARY")
    assert schema.names == ["weird name", "back`quote", "123", "a,b<c>"]


# -- errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "position", "fragment"),
    [
        ("", 0, "expected a column name"),
        ("id INTT", 3, "did you mean 'INT'?"),
        ("id INT,", 7, "expected a column name"),
        ("id INT name STRING", 7, "expected ',' and another column, or end of schema"),
        ("id ARRAY<INT", 12, "expected '>' closing ARRAY"),
        ("m MAP<INT>", 9, "expected ',' between the key and value types"),
        ("s STRUCT<a INT b INT>", 15, "'>' closing STRUCT"),
        ("x INT NOT", 9, "expected NULL after NOT"),
        ("x INT COMMENT 5", 14, "a quoted comment after COMMENT"),
        ("x INT(3)", 2, "INT takes no parameters"),
        ("x DECIMAL(40,2)", 2, "precision must be 1 to 38"),
        ("x DECIMAL(5,6)", 2, "scale 0 to the precision"),
        ("x DECIMAL(a)", 10, "a non-negative integer type parameter"),
        ("x VARCHAR", 2, "needs a length"),
        ("`x INT", 0, "unterminated backquoted name"),
        ("x INT COMMENT 'abc", 14, "unterminated string literal"),
        ("x INT; y INT", 5, "unexpected character ';'"),
        ("123 INT", 0, "expected a column name"),
        ("a INT, b STRING, A DATE", 17, "duplicate column name 'A'"),
        ("s STRUCT<a: INT, a: INT>", 17, "duplicate column name"),
        ("STRUCT<a: INT> x", 15, "end of schema after STRUCT"),
        ("x <", 2, "expected a type name"),
    ],
)
def test_errors_name_the_position_and_what_was_expected(
    text: str, position: int, fragment: str
) -> None:
    with pytest.raises(DDLError) as caught:
        parse_ddl(text, option="valueSchema")
    assert caught.value.position == position
    message = str(caught.value)
    assert fragment in message
    assert f"at position {position}" in message
    assert message.startswith("option valueSchema: ")


def test_error_shows_the_line_with_a_caret() -> None:
    with pytest.raises(DDLError) as caught:
        parse_ddl("id INT,\n  name STRNG")
    lines = str(caught.value).splitlines()
    assert lines[1] == "    name STRNG"
    assert lines[2] == "  " + " " * 7 + "^"
    assert "did you mean 'STRING'?" in lines[0]


def test_ddl_error_is_an_option_error_of_the_connector() -> None:
    with pytest.raises(DDLError) as caught:
        parse_ddl("x")
    for base in (OptionError, ValueError, StateStoreError, SparkSourceError):
        assert isinstance(caught.value, base)


# -- rendering ------------------------------------------------------------------------------
def test_to_ddl_backquotes_names_and_renders_modifiers() -> None:
    schema = parse_ddl(
        "id INT NOT NULL, `a``b` DECIMAL(10,2) COMMENT 'it''s', m MAP<STRING, ARRAY<BIGINT>>, "
        "s STRUCT<t: TIMESTAMP_NTZ NOT NULL COMMENT 'x\\\\y'>"
    )
    assert to_ddl(schema) == (
        "`id` INT NOT NULL, `a``b` DECIMAL(10,2) COMMENT 'its', "
        "`m` MAP<STRING, ARRAY<BIGINT>>, "
        "`s` STRUCT<`t`: TIMESTAMP_NTZ NOT NULL COMMENT 'x\\\\y'>"
    )
    assert parse_ddl(to_ddl(schema)) == schema


def test_type_to_ddl_and_empty_schema() -> None:
    assert type_to_ddl(LongType()) == "BIGINT"
    assert type_to_ddl(StructType([StructField("a", IntegerType())])) == "STRUCT<`a`: INT>"
    assert to_ddl(StructType([])) == "STRUCT<>"
    assert parse_ddl(to_ddl(StructType([]))) == StructType([])


@pytest.mark.parametrize("data_type", [NullType(), VarcharType(3), StringType("UTF8_LCASE")])
def test_to_ddl_refuses_types_it_cannot_render(data_type: DataType) -> None:
    with pytest.raises(DDLError, match="cannot render"):
        to_ddl(StructType([StructField("x", data_type)]))


_ATOMIC = st.one_of(
    st.sampled_from(
        [
            BooleanType(),
            ByteType(),
            ShortType(),
            IntegerType(),
            LongType(),
            FloatType(),
            DoubleType(),
            StringType(),
            BinaryType(),
            DateType(),
            TimestampType(),
            TimestampNTZType(),
            DayTimeIntervalType(),  # DAY TO SECOND: a Protobuf Duration
            DayTimeIntervalType(1, 2),
            DayTimeIntervalType(3, 3),
        ]
    ),
    st.integers(1, 38).flatmap(lambda p: st.integers(0, p).map(lambda s: DecimalType(p, s))),
)
_NAMES = st.text(min_size=1, max_size=8)
_COMMENTS = st.none() | st.text(max_size=10)


def _structs(children: st.SearchStrategy[DataType]) -> st.SearchStrategy[StructType]:
    fields = st.lists(
        st.tuples(_NAMES, children, st.booleans(), _COMMENTS),
        max_size=4,
        unique_by=lambda field: field[0].lower(),
    )
    return fields.map(
        lambda items: StructType(
            [
                StructField(name, data_type, nullable, {} if c is None else {"comment": c})
                for name, data_type, nullable, c in items
            ]
        )
    )


_TYPES = st.recursive(
    _ATOMIC,
    lambda children: st.one_of(
        children.map(ArrayType),
        st.tuples(children, children).map(lambda kv: MapType(kv[0], kv[1])),
        _structs(children),
    ),
    max_leaves=8,
)


@given(_structs(_TYPES))
def test_to_ddl_then_parse_is_the_identity(schema: StructType) -> None:
    assert parse_ddl(to_ddl(schema)) == schema
    assert parse_ddl(type_to_ddl(schema)) == schema


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("d INTERVAL", "DAY, HOUR, MINUTE or SECOND"),
        ("d INTERVAL SECOND TO DAY", "an end field after the start field"),
        ("d INTERVAL DAY TO", "the end field after TO"),
    ],
)
def test_malformed_intervals_are_refused(text: str, match: str) -> None:
    with pytest.raises(DDLError, match=match):
        parse_ddl(text)
