"""The compatibility table's cells: test results read from pytest's junit XML, and the
README table between ``<!-- compat:begin -->`` and ``<!-- compat:end -->`` rewritten with
the cells a run produced, every other row kept as it was."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

BEGIN = "<!-- compat:begin -->"
END = "<!-- compat:end -->"
HEADER = "| cell | peer | version | what the tests check | result |"
RULE = "|---|---|---|---|---|"
NOT_RUN = "not run yet"


class TableError(ValueError):
    """The README has no compatibility table between its markers, or a malformed one."""


@dataclass(frozen=True)
class Case:
    """One test case of a junit report.

    Attributes
    ----------
    module
        The test module, dotted (``tests.interop.test_kafka_streams``).
    name
        The test's name with its parameter ids (``test_x[position-headers]``).
    outcome
        ``passed``, ``failed`` (a failure or an error) or ``skipped``.
    message
        The skip reason or the failure's first line.
    seconds
        Its time.
    """

    module: str
    name: str
    outcome: str
    message: str = ""
    seconds: float = 0.0


def read_junit(path: Path) -> list[Case]:
    """The test cases of a pytest ``--junitxml`` report."""
    cases = []
    for element in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for child in element:
            if child.tag in ("failure", "error"):
                outcome = "failed"
                text = child.get("message") or child.text or child.tag
                message = text.strip().splitlines()[0] if text.strip() else child.tag
                break
            if child.tag == "skipped":
                outcome, message = "skipped", (child.get("message") or "").strip()
        cases.append(
            Case(
                module=element.get("classname", ""),
                name=element.get("name", ""),
                outcome=outcome,
                message=message,
                seconds=float(element.get("time") or 0.0),
            )
        )
    return cases


def selects(selector: str, case: Case) -> bool:
    """Whether a pytest selector (``tests/x/test_y.py`` or ``tests/x/test_y.py::test_z``)
    names ``case``."""
    path, _, name = selector.partition("::")
    module = path.removesuffix(".py").replace("/", ".")
    if case.module != module:
        return False
    return not name or case.name == name or case.name.startswith(f"{name}[")


def soak_skip(case: Case) -> bool:
    """A skipped soak variant (``make soak`` runs it): not part of a cell's count."""
    return case.outcome == "skipped" and "soak" in case.message


@dataclass(frozen=True)
class Outcome:
    """What a cell's run found: its cases, or why it has none."""

    cases: tuple[Case, ...] = ()
    problem: str = ""
    """``does not build: ...``, ``error (...)``: the cell has no test result."""
    seconds: float = field(default=0.0, compare=False)

    def text(self, day: str) -> str:
        """The cell: ``pass (12/12, <day>)``, ``fail (3/12: test_x, ...; <day>)`` (passed of
        run, then the failed tests), ``n/a (<skip reason>; <day>)`` when every case skipped."""
        if self.problem:
            return f"{self.problem} ({day})"
        counted = [c for c in self.cases if not soak_skip(c)]
        ran = [c for c in counted if c.outcome != "skipped"]
        skipped = [c for c in counted if c.outcome == "skipped"]
        if not counted:
            return f"error (no test collected; {day})"
        if not ran:
            return f"n/a ({_cell_safe(skipped[0].message)}; {day})"
        passed = sum(1 for c in ran if c.outcome == "passed")
        extra = f", {len(skipped)} skipped" if skipped else ""
        if passed == len(ran):
            return f"pass ({passed}/{len(ran)}{extra}, {day})"
        failed = ", ".join(c.name for c in ran if c.outcome == "failed")
        return f"fail ({passed}/{len(ran)}: {failed}{extra}; {day})"


def _cell_safe(text: str) -> str:
    text = re.sub(r"^Skipped:\s*", "", text).replace("|", "/").replace("\n", " ")
    return text if len(text) <= 120 else text[:117] + "..."


@dataclass(frozen=True)
class Row:
    """One row of the table: a cell's id, what it is, and its result."""

    cell: str
    peer: str
    version: str
    what: str
    result: str = NOT_RUN

    def line(self) -> str:
        return f"| `{self.cell}` | {self.peer} | {self.version} | {self.what} | {self.result} |"


def read_table(readme: str) -> dict[str, str]:
    """``{cell id: result}`` of the README's table.

    Raises
    ------
    TableError
        The markers are missing or out of order.
    """
    begin, end = readme.find(BEGIN), readme.find(END)
    if begin < 0 or end < begin:
        raise TableError(f"README.md has no {BEGIN} ... {END} section for the table")
    results = {}
    for line in readme[begin + len(BEGIN) : end].splitlines():
        columns = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(columns) == 5 and columns[0].startswith("`"):
            results[columns[0].strip("`")] = columns[4]
    return results


def write_table(readme: str, rows: Sequence[Row], results: Mapping[str, str]) -> str:
    """``readme`` with its table rewritten: ``rows`` in order, each with the result of this
    run (``results``) or, for a cell not run now, the result the table had."""
    before = read_table(readme)
    lines = [HEADER, RULE]
    for row in rows:
        result = results.get(row.cell) or before.get(row.cell) or NOT_RUN
        lines.append(Row(row.cell, row.peer, row.version, row.what, result).line())
    begin, end = readme.find(BEGIN), readme.find(END)
    return readme[: begin + len(BEGIN)] + "\n" + "\n".join(lines) + "\n" + readme[end:]


def assign(cases: Iterable[Case], selectors: Sequence[str]) -> tuple[Case, ...]:
    """The cases any of a cell's selectors names."""
    return tuple(c for c in cases if any(selects(s, c) for s in selectors))
