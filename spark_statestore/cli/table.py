"""Plain text tables for the commands' output (numbers right-aligned, text left-aligned)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["render_table"]


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """``headers`` and ``rows`` as aligned columns separated by two blanks; a column whose
    cells are integers (or ``-``, unknown) is right-aligned."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    numeric = [
        all(_is_number(row[i]) for row in rows) and any(row[i] != "-" for row in rows)
        for i in range(len(headers))
    ]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.rjust(width) if right else cell.ljust(width)
            for cell, width, right in zip(cells, widths, numeric, strict=True)
        ).rstrip()

    return "\n".join([line(headers), *(line(row) for row in rows)])


def _is_number(cell: str) -> bool:
    return cell == "-" or cell.lstrip("-").isdigit()
