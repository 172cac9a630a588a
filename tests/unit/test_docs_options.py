"""The option tables of the docs list exactly the declared options, with their defaults."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from spark_statestore.connectors.spark.option_table import (
    KAFKA_PREFIX,
    SCHEMA_REGISTRY_PREFIX,
    OptionSpec,
    Surface,
    options_of,
    spec_of,
)
from tests.conftest import REPO_ROOT

# (file, the heading above the table) -> the surfaces the table documents
TABLES = {
    ("docs/spark.md", "Follower source"): {Surface.SOURCE},
    ("docs/spark.md", "Snapshot reader"): {Surface.READER},
    ("docs/sink.md", "Options"): {Surface.SINK, Surface.BATCH_WRITER},
}
HEADER = "| option | default | meaning |"
PASSTHROUGH = f"{KAFKA_PREFIX}*"
REGISTRY_PASSTHROUGH = "schemaRegistry.*"
assert REGISTRY_PASSTHROUGH.lower() == f"{SCHEMA_REGISTRY_PREFIX}*"


@dataclass(frozen=True)
class Row:
    names: tuple[str, ...]
    default: str


def option_tables() -> dict[tuple[str, str], list[Row]]:
    """Every ``| option | default | meaning |`` table of README.md and docs/ naming data
    source options (not CLI flags), keyed by file and the heading above it."""
    tables: dict[tuple[str, str], list[Row]] = {}
    for path in [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]:
        heading, rows = "", None
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("#"):
                heading = line.lstrip("#").strip()
            if line.strip() == HEADER:
                rows = tables.setdefault((str(path.relative_to(REPO_ROOT)), heading), [])
            elif rows is not None and line.startswith("|") and not line.startswith("|---"):
                option, default = (cell.strip() for cell in line.strip("|").split("|")[:2])
                # `path` / `.load(p)`: the method forms are not option names
                names = [n for n in re.findall(r"`([^`]+)`", option) if not n.startswith(".")]
                rows.append(Row(tuple(names), default))
            elif not line.startswith("|"):
                rows = None
    return {key: rows for key, rows in tables.items() if not rows[0].names[0].startswith("--")}


def declared(surfaces: set[Surface]) -> set[str]:
    names = {spec.name for surface in surfaces for spec in options_of(surface)}
    registry = {REGISTRY_PASSTHROUGH} if "schemaRegistryUrl" in names else set()
    return names | {PASSTHROUGH} | registry


def test_every_option_table_is_checked() -> None:
    assert set(option_tables()) == set(TABLES)


@pytest.mark.parametrize(("where", "surfaces"), TABLES.items(), ids=lambda v: str(v))
def test_a_table_lists_exactly_the_declared_options(
    where: tuple[str, str], surfaces: set[Surface]
) -> None:
    documented = [name for row in option_tables()[where] for name in row.names]
    assert sorted(documented) == sorted(declared(surfaces))


def default_cells(row: Row) -> list[tuple[OptionSpec, str]]:
    """Each option of a row with its part of the default cell (``a``, ``b`` | ``1``, ``2``)."""
    parts = row.default.split(", ")
    if len(parts) != len(row.names):
        parts = [row.default] * len(row.names)
    return [
        (spec_of(name), part)
        for name, part in zip(row.names, parts, strict=True)
        if name not in (PASSTHROUGH, REGISTRY_PASSTHROUGH)
    ]


@pytest.mark.parametrize(("where", "surfaces"), TABLES.items(), ids=lambda v: str(v))
def test_a_table_shows_the_declared_defaults(
    where: tuple[str, str], surfaces: set[Surface]
) -> None:
    for row in option_tables()[where]:
        if row.default == "as above":  # documented in an earlier table of the same file
            continue
        for spec, cell in default_cells(row):
            required = bool(spec.required & surfaces)
            if spec.default is not None:
                assert cell == f"`{spec.default}`", (spec.name, cell)
            # "required with `changelog`" is a rule between options, not a declaration
            unconditional = cell == "required" or cell.startswith("required (")
            assert required == unconditional, (spec.name, cell)
