"""An ablation's tables: switches.csv and servers.csv for spreadsheets, summary.md for reading,
and ablation.html, the page that ties them to the forest plot."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from storage import AblationServer, ClosingServer
from sweeper.ablation import SwitchReport, effect_text, failures_text, outputs_text, ppl_text
from sweeper.report._ablation_data import AblationReportData, closing_lines
from sweeper.report._ablation_plot import VERDICT_COLORS
from sweeper.report._html import escape, figure_div, html_page, html_table
from sweeper.report._tables import markdown_table

if TYPE_CHECKING:  # plotly is imported where a figure is drawn
    import plotly.graph_objects as go


def _number(value: float | None) -> str:
    """A CSV cell: the float as Python writes it back exactly; empty for none."""
    if value is None:
        return ""
    return repr(float(value)) if math.isfinite(value) else "inf"


SWITCH_COLUMNS = [
    "switch",
    "key",
    "subject",
    "reference",
    "verdict",
    "speed",
    "tps_ratio",
    "tps_ratio_low",
    "tps_ratio_high",
    "level",
    "pairs",
    "ppl_check",
    "ppl_ratio",
    "ppl_ratio_low",
    "ppl_ratio_high",
    "outputs",
    "identical",
    "compared",
    "failures",
]


def switches_csv(data: AblationReportData) -> str:
    """One row per switch: the effect on TPS as a ratio (subject over reference) with its interval
    at the per-switch ``level``, the PPL ratio and its check, greedy fidelity and its check."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(SWITCH_COLUMNS)
    for report in data.result.reports:
        effect, ppl, fidelity = report.tps_effect, report.ppl_ratio, report.fidelity
        writer.writerow(
            [
                report.switch.label,
                report.switch.key,
                report.switch.subject,
                report.switch.reference_text,
                report.verdict.value,
                report.speed.value,
                _number(effect.value if effect else None),
                _number(effect.low if effect else None),
                _number(effect.high if effect else None),
                _number(data.result.effects.level),
                report.pairs,
                report.ppl.value,
                _number(ppl.value if ppl else None),
                _number(ppl.low if ppl else None),
                _number(ppl.high if ppl else None),
                report.outputs.value,
                "" if fidelity is None else fidelity.identical,
                "" if fidelity is None else fidelity.compared,
                ";".join(report.failures),
            ]
        )
    return out.getvalue()


SERVER_COLUMNS = [
    "round",
    "block",
    "arm",
    "switch",
    "overrides",
    "state",
    "error_kind",
    "tps",
    "ppl",
    "fidelity_identical",
    "fidelity_compared",
    "seconds",
]


def servers_csv(data: AblationReportData) -> str:
    """One row per stored server, in the order they ran (``arm`` empty and ``switch`` base: the base)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(SERVER_COLUMNS)
    for server in data.record.servers:
        fidelity = server.fidelity or {}
        writer.writerow(
            [
                server.round,
                server.block,
                "" if server.arm is None else server.arm,
                data.arm_label(server),
                json.dumps(dict(server.overrides)),
                server.state,
                server.error_kind or "",
                _number(server.tps),
                _number(server.ppl),
                fidelity.get("identical", ""),
                fidelity.get("compared", ""),
                _number(server.seconds),
            ]
        )
    return out.getvalue()


def _overrides_text(server: AblationServer) -> str:
    return " ".join(f"{key}={value}" for key, value in server.overrides.items()) or "none"


def _state_text(server: AblationServer) -> str:
    return server.state if server.state == "complete" else f"{server.state} ({server.error_kind or 'unknown'})"


def _fidelity_text(server: AblationServer) -> str:
    fidelity = server.fidelity
    return "-" if not fidelity else f"{fidelity.get('identical')}/{fidelity.get('compared')} identical"


def _server_cells(data: AblationReportData, server: AblationServer) -> list[str]:
    return [
        str(server.round),
        str(server.block),
        data.arm_label(server),
        _overrides_text(server),
        _state_text(server),
        "-" if server.tps is None else f"{server.tps:.2f}",
        "-" if server.ppl is None else f"{server.ppl:.4f}",
        _fidelity_text(server),
        f"{server.seconds:.0f}",
    ]


CLOSING_HEADER = ["pair", "side", "state", "tok/s", "fidelity", "seconds"]


def _closing_cells(server: ClosingServer) -> list[str]:
    fidelity = server.fidelity
    return [
        str(server.pair),
        server.side,
        server.state if server.state == "complete" else f"{server.state} ({server.error_kind or 'unknown'})",
        "-" if server.tps is None else f"{server.tps:.2f}",
        "-" if not fidelity else f"{fidelity.get('identical')}/{fidelity.get('compared')} identical",
        f"{server.seconds:.0f}",
    ]


SERVER_HEADER = ["round", "block", "arm", "overrides", "state", "tok/s", "PPL", "fidelity", "seconds"]


def _verdict_header(data: AblationReportData) -> list[str]:
    return [
        "switch",
        "against",
        "verdict",
        f"TPS effect ({data.result.effects.level:.2%} interval)",
        "pairs",
        "PPL ratio (interval): check",
        "outputs: check",
        "failures",
    ]


def _verdict_cells(report: SwitchReport) -> list[str]:
    return [
        report.switch.label,
        report.switch.reference_text,
        report.verdict.value,
        effect_text(report.tps_effect),
        str(report.pairs),
        ppl_text(report),
        outputs_text(report),
        failures_text(report),
    ]


def ablation_markdown(data: AblationReportData) -> str:
    """The verdicts and their figures, what the intervals rest on, the closing race."""
    record, result = data.record, data.result
    lines = [
        f"# Ablation `{data.name}`",
        "",
        f"- storage: `{data.storage}`",
        f"- mode: {result.mode.value}; status: {record.status}",
        f"- {data.stored_text()}",
        "",
    ]
    for message in data.messages():
        lines += [f"> **Note:** {message}", ""]
    lines += ["## Verdicts", ""]
    lines += markdown_table(_verdict_header(data), [_verdict_cells(r) for r in result.reports])
    lines += ["", data.basis_line() + ".", "", "## Closing race", ""]
    lines += closing_lines(data)
    if data.closing_servers:
        lines.append("")
        lines += markdown_table(CLOSING_HEADER, [_closing_cells(c) for c in data.closing_servers])
    lines += ["", "## Servers", ""]
    lines += markdown_table(SERVER_HEADER, [_server_cells(data, s) for s in record.servers])
    lines.append("")
    return "\n".join(lines)


# -- the page --------------------------------------------------------------------------------------


def ablation_html(data: AblationReportData, figure: go.Figure, files: dict[str, Path]) -> str:
    """The whole page as one string (plotly.js inline)."""
    record, result = data.record, data.result
    notes = "".join(f'<div class="note">{escape(m)}</div>' for m in data.messages())
    verdict_rows = []
    for report in result.reports:
        cells = [escape(cell) for cell in _verdict_cells(report)]
        cells[0] = f"<code>{cells[0]}</code>"
        color = VERDICT_COLORS[report.verdict]
        cells[2] = f'<span style="color: {color}; font-weight: 700">{cells[2]}</span>'
        verdict_rows.append(cells)
    server_rows = []
    for server in record.servers:
        cells = [escape(cell) for cell in _server_cells(data, server)]
        cells[3] = f"<code>{cells[3]}</code>"
        server_rows.append(cells)
    closing = "".join(f"<p>{escape(line)}</p>" for line in closing_lines(data))
    if data.closing_servers:
        rows = [[escape(cell) for cell in _closing_cells(c)] for c in data.closing_servers]
        closing += html_table(CLOSING_HEADER, rows)
    links = "".join(f'<li><a href="{escape(path.name)}">{escape(path.name)}</a></li>' for path in files.values())
    main = f"""<h1>sweeper ablation: {escape(data.name)}</h1>
<p class="sub">storage <code>{escape(data.storage)}</code>, mode {escape(result.mode.value)}, {escape(record.status)};
{escape(data.stored_text())}</p>
{notes}
<section><h2>TPS effect of each switch</h2>{figure_div("effects", figure)}</section>
<section><h2>Verdicts</h2>{html_table(_verdict_header(data), verdict_rows)}
<p>{escape(data.basis_line())}.</p></section>
<section><h2>Closing race</h2>{closing}</section>
<section><h2>Servers</h2>{html_table(SERVER_HEADER, server_rows)}</section>
<section><h2>Files</h2><ul>{links}</ul></section>"""
    return html_page(f"sweeper ablation: {data.name}", main)
