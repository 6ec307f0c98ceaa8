"""One table model, two writers: summary.md's Markdown and report.html's HTML say the same cells."""

from __future__ import annotations

import dataclasses

from sweeper.report._tables import Cell, Table, table_html, table_markdown

TABLE = Table(
    header=("trial", "status", "reason"),
    rows=(
        (Cell("#3"), Cell("VERIFIED", mark="verified"), Cell("a | b <c>")),
        (Cell("#4"), Cell(None), Cell("x", code=True)),
    ),
    empty=(Cell("No trial verified yet: run "), Cell("sweeper verify <x>", code=True), Cell(".")),
)


def test_markdown_leaves_a_missing_cell_empty_and_escapes_the_column_bar() -> None:
    assert table_markdown(TABLE) == [
        "| trial | status | reason |",
        "|---|---|---|",
        "| #3 | VERIFIED | a \\| b <c> |",
        "| #4 |  | `x` |",
    ]


def test_html_writes_a_missing_cell_as_a_dash_escapes_the_text_and_marks_the_status() -> None:
    assert table_html(TABLE) == (
        "<table><thead><tr><th>trial</th><th>status</th><th>reason</th></tr></thead><tbody>"
        '<tr><td>#3</td><td><span class="verified">VERIFIED</span></td><td>a | b &lt;c&gt;</td></tr>'
        "<tr><td>#4</td><td>-</td><td><code>x</code></td></tr>"
        "</tbody></table>"
    )


def test_a_table_without_rows_is_its_sentence_in_both() -> None:
    empty = dataclasses.replace(TABLE, rows=())
    assert table_markdown(empty) == ["No trial verified yet: run `sweeper verify <x>`."]
    assert table_html(empty) == "<p>No trial verified yet: run <code>sweeper verify &lt;x&gt;</code>.</p>"
