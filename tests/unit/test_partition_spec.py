"""Partition lists ("0,2,5-7"): parsing, errors that name the option, formatting back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_statestore.errors import OptionError
from spark_statestore.partition_spec import (
    MAX_LISTED_PARTITIONS,
    MAX_PARTITION,
    format_partitions,
    parse_partitions,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", (0,)),
        ("0,2,5-7", (0, 2, 5, 6, 7)),
        ("5-7,0,2", (0, 2, 5, 6, 7)),
        (" 3 , 1 ,2 ", (1, 2, 3)),
        ("4-4", (4,)),
        ("1-3,2-5,3", (1, 2, 3, 4, 5)),
        ("0 - 2", (0, 1, 2)),
        ("007", (7,)),
        (f"{MAX_PARTITION}", (MAX_PARTITION,)),
    ],
)
def test_lists_and_ranges_become_sorted_unique_partitions(
    text: str, expected: tuple[int, ...]
) -> None:
    assert parse_partitions(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "is empty"),
        ("   ", "is empty"),
        ("1,,2", "empty item"),
        ("1,", "empty item"),
        ("x", "'x' in 'x' is not a partition number"),
        ("1,two", "'two' in '1,two'"),
        ("-1", "'-1'"),
        ("1.5", "'1.5'"),
        ("+3", "'+3'"),
        ("1-2-3", "'1-2-3'"),
        ("3-", "'3-'"),
        ("٣", "'٣'"),  # a non-ASCII digit int() would accept
        ("7-5", "range '7-5' in '7-5' ends before it starts; write it as 5-7"),
        (f"{MAX_PARTITION + 1}", "above the largest Kafka partition number"),
        (f"0-{MAX_LISTED_PARTITIONS}", "names more than"),
    ],
)
def test_bad_text_is_refused_naming_the_option_and_the_item(text: str, fragment: str) -> None:
    with pytest.raises(OptionError) as err:
        parse_partitions(text, option="--partitions")
    message = str(err.value)
    assert message.startswith("option --partitions")
    assert fragment in message


def test_the_default_option_name_is_the_spark_option() -> None:
    with pytest.raises(OptionError, match=r"^option partitions: 'a'"):
        parse_partitions("a")


def test_a_non_string_is_refused() -> None:
    with pytest.raises(OptionError, match="must be a string"):
        parse_partitions(3)  # type: ignore[arg-type]


def test_option_error_is_also_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_partitions("nope")


@pytest.mark.parametrize(
    ("partitions", "text"),
    [
        ([0], "0"),
        ([7, 0, 5, 2, 6], "0,2,5-7"),
        ([1, 2], "1-2"),
        ([3, 3, 1], "1,3"),
        ([], ""),
    ],
)
def test_format_partitions_writes_the_shortest_list(partitions: list[int], text: str) -> None:
    assert format_partitions(partitions) == text


@given(st.sets(st.integers(min_value=0, max_value=300), min_size=1))
def test_format_then_parse_round_trips(partitions: set[int]) -> None:
    assert parse_partitions(format_partitions(partitions)) == tuple(sorted(partitions))
