"""The report's tables as plain data, and their two writers: Markdown (summary.md) and HTML (report.html).

A ``Table`` is built once from ReportData (``verification_table_model``); ``table_markdown`` and
``table_html`` only write it. A cell without a value (``Cell.text`` None) is left empty in
Markdown and reads ``-`` on the page; a ``code`` cell is code in both; a ``mark`` is the class
the page colours a cell by (a verification's status), which Markdown has no use for. A table
with no rows is written as its ``empty`` sentence instead.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from sweeper.answer import verify_command
from sweeper.report._data import ReportData
from sweeper.report._html import escape, html_table


@dataclasses.dataclass(frozen=True)
class Cell:
    """One cell, or one part of a sentence: its text (None: no value), whether it is code, and
    the class the page marks it with (None: plain)."""

    text: str | None
    code: bool = False
    mark: str | None = None


@dataclasses.dataclass(frozen=True)
class Table:
    """A table's header and rows, and the sentence that stands in its place when it has no rows."""

    header: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    empty: tuple[Cell, ...] = ()


def number_cell(value: float | None, spec: str) -> str | None:
    """A cell's text: ``value`` in ``spec``; 'inf' for an infinite one, None (an empty cell) for none."""
    if value is None:
        return None
    return "inf" if not math.isfinite(value) else format(value, spec)


VERIFICATION_HEADER = (
    "trial",
    "status",
    "TPS verified against",
    "held-out median TPS",
    "deviation",
    "max held-out PPL",
    "repeats",
    "reason",
)


def verification_table_model(data: ReportData) -> Table:
    """Each verified trial's held-out figures against its tuned ones; empty: how to verify."""
    rows = tuple(
        (
            Cell(f"#{v.trial_number}"),
            Cell(v.status.upper(), mark=str(v.status)),
            Cell(number_cell(v.tuned_tps, ".1f")),
            Cell(number_cell(v.median_tps, ".2f")),
            Cell(f"{v.tps_deviation:+.1%}" if v.tps_deviation is not None else None),
            Cell(number_cell(v.max_ppl, ".4f")),
            Cell(f"{len(v.runs)}/{v.repeats}"),
            Cell(v.reason),
        )
        for v in data.verifications
    )
    command = verify_command(data.study_name, data.storage)
    empty = (Cell("No trial verified yet: run "), Cell(command, code=True), Cell("."))
    return Table(header=VERIFICATION_HEADER, rows=rows, empty=empty)


# -- Markdown ----------------------------------------------------------------------------------------


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The lines of a markdown table (a ``|`` in a cell is escaped, a line break becomes a space)."""

    def clean(cell: str) -> str:
        return str(cell).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(clean(c) for c in row) + " |" for row in rows]
    return lines


def markdown_cell(cell: Cell) -> str:
    text = cell.text if cell.text is not None else ""
    return f"`{text}`" if cell.code else text


def table_markdown(table: Table) -> list[str]:
    """The table's lines in Markdown, or its ``empty`` sentence as one line."""
    if not table.rows:
        return ["".join(markdown_cell(c) for c in table.empty)]
    return markdown_table(table.header, [[markdown_cell(c) for c in row] for row in table.rows])


# -- HTML --------------------------------------------------------------------------------------------


def html_cell(cell: Cell) -> str:
    text = escape(cell.text) if cell.text is not None else "-"
    if cell.code:
        text = f"<code>{text}</code>"
    return f'<span class="{escape(cell.mark)}">{text}</span>' if cell.mark is not None else text


def table_html(table: Table) -> str:
    """The table as HTML, or its ``empty`` sentence as a paragraph."""
    if not table.rows:
        return f"<p>{''.join(html_cell(c) for c in table.empty)}</p>"
    return html_table(list(table.header), [[html_cell(c) for c in row] for row in table.rows])
