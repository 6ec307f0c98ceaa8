"""report.html: one self-contained page that ties the report together.

plotly.js is inlined once (no network needed); each figure is a div drawn
by it. The page's shell, style and render check are ``_html``'s, shared
with the ablation's page.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import plotly.graph_objects as go

from sweeper.answer import tps_text
from sweeper.measure import phase_headline, phase_rows
from sweeper.report._data import ReportData
from sweeper.report._html import escape, figure_div, html_page, html_table
from sweeper.report._points import FEASIBLE
from sweeper.report._tables import table_html, verification_table_model
from sweeper.study import probability_text


def _num(value: float | None, spec: str) -> str:
    if value is None:
        return "-"
    return "inf" if not math.isfinite(value) else format(value, spec)


def _cards(data: ReportData) -> str:
    record = data.answer.record
    status = data.answer.status
    cards = [
        ("trials", str(len(data.points))),
        ("searched / race servers", f"{data.searched} / {data.race_servers}"),
        ("feasible", str(sum(1 for p in data.points if p.category == FEASIBLE))),
        ("PPL cap", _num(data.cap, ".4f")),
    ]
    if record is not None:
        cards += [
            ("winner", f"#{record.number}"),
            ("winner TPS", tps_text(data.answer_tps) if data.answer_tps is not None else "-"),
            ("winner PPL", _num(record.ppl, ".4f")),
        ]
        statement = data.winner_ppl()
        if statement is not None:
            assert statement.low is not None and statement.high is not None
            cards.append(
                (
                    f"winner PPL, {statement.level * 100:.0f} % interval ({statement.records} records)",
                    f"{statement.low:.4f}-{statement.high:.4f}",
                )
            )
            if statement.pass_probability is not None:
                against = (
                    ", against the baseline on the same records"
                    if statement.paired
                    else ", the baseline's record noise included"
                    if statement.baseline_noise
                    else ""
                )
                cards.append(
                    (
                        f"P(PPL under the cap on {statement.rerun_records} new records{against})",
                        escape(probability_text(statement.pass_probability)),
                    )
                )
        cards.append(("verification", f'<span class="{escape(status)}">{escape(status.upper())}</span>'))
        claim = data.claim_text()
        if claim is not None:
            cards.append(("over the base (study-wise interval)", escape(claim)))
    else:
        cards.append(("winner", '<span class="failed">none</span>'))
    return (
        '<div class="cards">'
        + "".join(f'<div class="card"><div class="v">{v}</div><div class="k">{escape(k)}</div></div>' for k, v in cards)
        + "</div>"
    )


def _winner_section(data: ReportData) -> str:
    record = data.answer.record
    if record is None:
        return "<section><h2>Winner</h2><p>No trial passed the PPL cap: there is no winner.</p></section>"
    params = "".join(f"<li><code>{escape(k)}</code> = <code>{escape(v)}</code></li>" for k, v in record.params.items())
    changes = (
        html_table(
            ["env", "base" + (f" ({data.base_name})" if data.base_name else ""), "winner"],
            [
                [
                    f"<code>{escape(c.key)}</code>",
                    f"<code>{escape(c.base)}</code>" if c.base is not None else data.unset_label,
                    f"<code>{escape(c.answer)}</code>",
                ]
                for c in data.env_changes
            ],
        )
        if data.env_changes
        else "<p>No difference: the base manifest's own values won.</p>"
    )
    ppl = data.winner_ppl()
    return (
        f"<section><h2>Winner: trial #{record.number} "
        f'<span class="{escape(data.answer.status)}">{escape(data.answer.status.upper())}</span></h2>'
        f"<p>{escape(_answer_sentence(data))}</p>"
        + (f"<p>{escape(ppl.text())}</p>" if ppl is not None else "")
        + (f"<p>Noise: {escape(data.noise_line())}</p>" if data.noise_line() else "")
        + f"<ul>{params}</ul>"
        f"<h3>How its manifest differs from the base</h3>{changes}</section>"
    )


def _answer_sentence(data: ReportData) -> str:
    record = data.answer.record
    assert record is not None
    claim = data.claim_line()
    text = f"trial #{record.number}: TPS {data.answer_tps_text()}, PPL {_num(record.ppl, '.4f')}"
    return f"{text}; {claim}" if claim else text


def _verification_section(data: ReportData) -> str:
    return f"<section><h2>Verification on held-out data</h2>{table_html(verification_table_model(data))}</section>"


def _phase_section(data: ReportData) -> str:
    if not data.time.phases:
        return "<section><h2>Where the time went</h2><p>No phase timings were recorded.</p></section>"
    rows = [[escape(cell) for cell in row] for row in phase_rows(data.time)]
    return (
        f"<section><h2>Where the time went</h2><p>{escape(phase_headline(data.time))}.</p>"
        f"{html_table(['phase', 'time', 'share', 'per server'], rows)}</section>"
    )


def report_html(data: ReportData, figures: Mapping[str, go.Figure], files: Mapping[str, Path]) -> str:
    """The whole page as one string (plotly.js inline)."""
    notes = "".join(f'<div class="note">{escape(m)}</div>' for m in data.messages())
    sections = {
        "pareto": "TPS against PPL",
        "history": "TPS by trial",
        "slices": "Slice plots",
        "importance": "Parameter importance",
    }
    plots = "".join(
        f"<section><h2>{escape(title)}</h2>{figure_div(name, figures[name])}</section>"
        for name, title in sections.items()
        if name in figures
    )
    links = "".join(f'<li><a href="{escape(path.name)}">{escape(path.name)}</a></li>' for path in files.values())
    main = f"""<h1>sweeper report: {escape(data.study_name)}</h1>
<p class="sub">storage <code>{escape(data.storage)}</code>, mode {escape(data.mode)}</p>
{_cards(data)}
{notes}
{_winner_section(data)}
{plots}
{_verification_section(data)}
{_phase_section(data)}
<section><h2>Files</h2><ul>{links}</ul></section>"""
    return html_page(f"sweeper report: {data.study_name}", main)
