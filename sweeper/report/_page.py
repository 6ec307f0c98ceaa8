"""report.html: one self-contained page that ties the report together.

plotly.js is inlined once (no network needed); each figure is a div drawn
by it. A small script records any JavaScript error in ``data-errors`` and
the number of drawn plots in ``data-plots`` on ``<body>``, so a headless
browser's DOM dump tells whether the page rendered cleanly.
"""

from __future__ import annotations

import html
import logging
import math
from collections.abc import Mapping
from pathlib import Path

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from sweeper.answer import tps_text, verify_command
from sweeper.measure import phase_headline, phase_rows
from sweeper.report._data import ReportData
from sweeper.report._plotly import PLOT_CONFIG
from sweeper.study import probability_text

logger = logging.getLogger(__name__)

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #1d3557;
       background: #f8f9fa; }
main { max-width: 1100px; margin: 0 auto; padding: 24px; }
h1 { margin-bottom: 4px; } .sub { color: #555; margin-top: 0; }
.cards { display: flex; gap: 16px; flex-wrap: wrap; margin: 16px 0; }
.card { background: #fff; border-radius: 8px; padding: 12px 18px; box-shadow: 0 1px 3px #0002;
        min-width: 150px; }
.card .v { font-size: 1.6em; font-weight: 600; } .card .k { color: #666; font-size: .85em; }
.note { background: #fff3cd; border-left: 4px solid #ffb703; padding: 8px 12px; margin: 8px 0; }
.verified { color: #2a9d8f; font-weight: 700; } .failed, .unverified { color: #d62828; font-weight: 700; }
section { background: #fff; border-radius: 8px; padding: 12px 18px; margin: 18px 0;
          box-shadow: 0 1px 3px #0002; }
table { border-collapse: collapse; font-size: .9em; } td, th { padding: 4px 10px;
        border-bottom: 1px solid #ddd; text-align: left; }
.figure { min-height: 300px; } img { max-width: 100%; } code { background: #eef; padding: 0 3px; }
"""

WATCH_ERRORS = """
window.__sweeperErrors = [];
window.addEventListener('error', function (e) {
  window.__sweeperErrors.push(String(e.message || e.type));
});
"""

REPORT_STATE = """
window.addEventListener('load', function () {
  var plots = document.querySelectorAll('.figure .js-plotly-plot .main-svg').length > 0
    ? document.querySelectorAll('.figure .js-plotly-plot').length : 0;
  document.body.setAttribute('data-plots', String(plots));
  document.body.setAttribute('data-errors', window.__sweeperErrors.join(' | '));
});
"""


def _e(value: object) -> str:
    return html.escape(str(value))


def _num(value: float | None, spec: str) -> str:
    if value is None:
        return "-"
    return "inf" if not math.isfinite(value) else format(value, spec)


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cards(data: ReportData) -> str:
    record = data.answer.record
    status = data.answer.status
    cards = [
        ("trials", str(len(data.points))),
        ("searched / race servers", f"{data.searched} / {data.race_servers}"),
        ("feasible", str(sum(1 for p in data.points if p.category == "feasible"))),
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
                        _e(probability_text(statement.pass_probability)),
                    )
                )
        cards.append(("verification", f'<span class="{_e(status)}">{_e(status.upper())}</span>'))
        claim = data.claim_text()
        if claim is not None:
            cards.append(("over the base (study-wise interval)", _e(claim)))
    else:
        cards.append(("winner", '<span class="failed">none</span>'))
    return (
        '<div class="cards">'
        + "".join(f'<div class="card"><div class="v">{v}</div><div class="k">{_e(k)}</div></div>' for k, v in cards)
        + "</div>"
    )


def _winner_section(data: ReportData) -> str:
    record = data.answer.record
    if record is None:
        return "<section><h2>Winner</h2><p>No trial passed the PPL cap: there is no winner.</p></section>"
    params = "".join(f"<li><code>{_e(k)}</code> = <code>{_e(v)}</code></li>" for k, v in record.params.items())
    changes = (
        _table(
            ["env", "base" + (f" ({data.base_name})" if data.base_name else ""), "winner"],
            [
                [
                    f"<code>{_e(c.key)}</code>",
                    f"<code>{_e(c.base)}</code>" if c.base is not None else data.unset_label,
                    f"<code>{_e(c.answer)}</code>",
                ]
                for c in data.env_changes
            ],
        )
        if data.env_changes
        else "<p>No difference: the base manifest's own values won.</p>"
    )
    return (
        f"<section><h2>Winner: trial #{record.number} "
        f'<span class="{_e(data.answer.status)}">{_e(data.answer.status.upper())}</span></h2>'
        f"<p>{_e(_answer_sentence(data))}</p>"
        + (f"<p>{_e(data.winner_ppl().text())}</p>" if data.winner_ppl() is not None else "")
        + (f"<p>Noise: {_e(data.noise_line())}</p>" if data.noise_line() else "")
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
    if not data.verifications:
        command = verify_command(data.study_name, data.storage)
        body = f"<p>No trial verified yet: run <code>{_e(command)}</code>.</p>"
    else:
        body = _table(
            [
                "trial",
                "status",
                "TPS verified against",
                "held-out median TPS",
                "deviation",
                "max held-out PPL",
                "repeats",
                "reason",
            ],
            [
                [
                    f"#{v.trial_number}",
                    f'<span class="{_e(v.status)}">{_e(v.status.upper())}</span>',
                    _num(v.tuned_tps, ".1f"),
                    _num(v.median_tps, ".2f"),
                    f"{v.tps_deviation:+.1%}" if v.tps_deviation is not None else "-",
                    _num(v.max_ppl, ".4f"),
                    f"{len(v.runs)}/{v.repeats}",
                    _e(v.reason),
                ]
                for v in data.verifications
            ],
        )
    return f"<section><h2>Verification on held-out data</h2>{body}</section>"


def _phase_section(data: ReportData) -> str:
    if not data.time.phases:
        return "<section><h2>Where the time went</h2><p>No phase timings were recorded.</p></section>"
    rows = [[_e(cell) for cell in row] for row in phase_rows(data.time)]
    return (
        f"<section><h2>Where the time went</h2><p>{_e(phase_headline(data.time))}.</p>"
        f"{_table(['phase', 'time', 'share', 'per server'], rows)}</section>"
    )


def _figure_div(name: str, fig: go.Figure) -> str:
    div = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"fig-{name}", config=PLOT_CONFIG)
    return f'<div class="figure" data-figure="{_e(name)}">{div}</div>'


def report_html(data: ReportData, figures: Mapping[str, go.Figure], files: Mapping[str, Path]) -> str:
    """The whole page as one string (plotly.js inline)."""
    notes = "".join(f'<div class="note">{_e(m)}</div>' for m in data.messages())
    sections = {
        "pareto": "TPS against PPL",
        "history": "TPS by trial",
        "slices": "Slice plots",
        "importance": "Parameter importance",
    }
    plots = "".join(
        f"<section><h2>{_e(title)}</h2>{_figure_div(name, figures[name])}</section>"
        for name, title in sections.items()
        if name in figures
    )
    links = "".join(f'<li><a href="{_e(path.name)}">{_e(path.name)}</a></li>' for path in files.values())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sweeper report: {_e(data.study_name)}</title>
<style>{STYLE}</style>
<script>{WATCH_ERRORS}</script>
<script>{get_plotlyjs()}</script>
</head><body data-plots="" data-errors="">
<main>
<h1>sweeper report: {_e(data.study_name)}</h1>
<p class="sub">storage <code>{_e(data.storage)}</code>, mode {_e(data.mode)}</p>
{_cards(data)}
{notes}
{_winner_section(data)}
{plots}
{_verification_section(data)}
{_phase_section(data)}
<section><h2>Files</h2><ul>{links}</ul></section>
</main>
<script>{REPORT_STATE}</script>
</body></html>
"""
