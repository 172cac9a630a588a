"""The compatibility table of ``make compat``: junit XML read into cells, and the README's
table rewritten with only the cells a run produced."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compat.run import cells
from tests.compat.table import (
    BEGIN,
    END,
    NOT_RUN,
    Case,
    Outcome,
    Row,
    TableError,
    assign,
    read_junit,
    read_table,
    write_table,
)
from tests.conftest import REPO_ROOT

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="2" tests="5">
<testcase classname="tests.interop.test_kafka_streams"
  name="test_key_value_and_timestamped_stores_equal_kafka_streams_answers[position-headers]"
  time="31.5" />
<testcase classname="tests.interop.test_kafka_streams"
  name="test_key_value_and_timestamped_stores_equal_kafka_streams_answers[no-headers]"
  time="20.0"><failure message="AssertionError: c001 differs&#10;more">trace</failure></testcase>
<testcase classname="tests.interop.test_kafka_streams"
  name="test_window_and_session_stores_equal_kafka_streams_answers" time="12.0" />
<testcase classname="tests.interop.test_kafka_streams_spark"
  name="test_spark_reads_the_headers_of_a_header_aware_store_as_kafka_streams_does[none]"
  time="0.0"><skipped type="pytest.skip" message="predates 4.3's header-aware stores" />
</testcase>
<testcase classname="tests.interop.test_shapes_read_your_writes"
  name="test_bounded_reads_hold_the_write_they_are_bounded_by[regroup-ci]" time="0.1">
  <skipped type="pytest.skip" message="soak variant: run it with `make soak`" /></testcase>
</testsuite></testsuites>
"""

INTEROP = "tests/interop/test_kafka_streams.py"
KV = f"{INTEROP}::test_key_value_and_timestamped_stores_equal_kafka_streams_answers"
WINDOWS = f"{INTEROP}::test_window_and_session_stores_equal_kafka_streams_answers"
HEADERS = "tests/interop/test_kafka_streams_spark.py"
SHAPES = "tests/interop/test_shapes_read_your_writes.py"


@pytest.fixture
def cases(tmp_path: Path) -> list[Case]:
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    return read_junit(path)


def test_junit_cases_become_cells(cases: list[Case]) -> None:
    day = "2026-11-28"
    assert Outcome(assign(cases, [WINDOWS])).text(day) == "pass (1/1, 2026-11-28)"
    assert Outcome(assign(cases, [KV])).text(day) == (
        "fail (1/2: test_key_value_and_timestamped_stores_equal_kafka_streams_answers"
        "[no-headers]; 2026-11-28)"
    )
    assert Outcome(assign(cases, [KV, WINDOWS])).text(day).startswith("fail (2/3: ")
    assert Outcome(assign(cases, [HEADERS])).text(day) == (
        "n/a (predates 4.3's header-aware stores; 2026-11-28)"
    )
    # A skipped soak variant is not part of a cell; a cell with no case is an error.
    assert Outcome(assign(cases, [SHAPES])).text(day) == "error (no test collected; 2026-11-28)"
    assert Outcome(problem="does not build: [ERROR] x").text(day) == (
        "does not build: [ERROR] x (2026-11-28)"
    )


def test_a_selector_names_its_test_and_its_parameters_only(cases: list[Case]) -> None:
    assert len(assign(cases, [KV])) == 2
    assert len(assign(cases, ["tests/interop/test_kafka_streams.py"])) == 3
    assert assign(cases, [KV.removesuffix("_answers")]) == ()


README = f"""# x

text before

{BEGIN}
| cell | peer | version | what the tests check | result |
|---|---|---|---|---|
| `a:one` | A | 1 | first | pass (2/2, 2026-01-01) |
| `a:two` | A | 1 | second | fail (0/1: test_y; 2026-01-01) |
| `gone:cell` | G | 0 | removed | pass (1/1, 2025-01-01) |
{END}

text after
"""

ROWS = [
    Row("a:one", "A", "1", "first"),
    Row("a:two", "A", "1", "second"),
    Row("b:new", "B", "2", "new"),
]


def test_only_the_cells_run_are_rewritten_and_the_markers_stay() -> None:
    text = write_table(README, ROWS, {"a:two": "pass (1/1, 2026-11-28)"})
    assert read_table(text) == {
        "a:one": "pass (2/2, 2026-01-01)",
        "a:two": "pass (1/1, 2026-11-28)",
        "b:new": NOT_RUN,
    }
    assert text.startswith("# x\n\ntext before\n\n" + BEGIN + "\n")
    assert text.endswith(END + "\n\ntext after\n")
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    # Idempotent: writing no results keeps every cell.
    assert write_table(text, ROWS, {}) == text


def test_a_readme_without_markers_is_refused() -> None:
    with pytest.raises(TableError, match="compat:begin"):
        read_table("# no table\n")


def test_the_readme_table_lists_every_cell() -> None:
    table = read_table((REPO_ROOT / "README.md").read_text(encoding="utf-8"))
    assert list(table) == [cell.id for cell in cells()]
