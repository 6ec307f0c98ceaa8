"""An ablation's report: each switch's effect on TPS with its interval, as a plot and as tables.

``build_ablation_report(storage, name, out_dir)`` judges the stored
ablation the way ``sweeper status --ablation`` does (``analyse`` on the
servers stored so far, a running or interrupted one's too) and writes
into ``out_dir``::

    ablation.html   the forest plot, the verdicts, what the intervals rest on,
                    the closing race and the servers (self-contained, opens offline)
    effects.png     the forest plot as a PNG
    switches.csv    one row per switch; effects as ratios, subject over reference
    servers.csv     one row per server of the schedule that is stored
    summary.md      the verdicts and their figures

The forest plot has one row per switch: its TPS effect in percent (the
subject value's TPS over the reference value's, minus one) with the
interval as a horizontal bar, coloured by verdict, and a line at 0 %. A
switch whose arm never ran beside a base has no effect to draw: it is an
``x`` at 0 %. Trace names are the verdicts' words.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import logging
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from storage import (
    ABLATION_INTERRUPTED,
    ABLATION_RUNNING,
    AblationRecord,
    AblationServer,
    ClosingServer,
    normalize_url,
    redact,
    stored_ablation,
)
from sweeper.ablation import (
    AblationPlan,
    AblationResult,
    ClosingRace,
    SwitchReport,
    SwitchVerdict,
    closing_text,
    effect_text,
    failures_text,
    judge_stored,
    outputs_text,
    ppl_text,
)
from sweeper.errors import StudyError
from sweeper.report._files import write_text
from sweeper.report._tables import markdown_table

if TYPE_CHECKING:  # plotly and matplotlib are imported where a figure is drawn, as build_report does
    import plotly.graph_objects as go
    from matplotlib.figure import Figure

logger = logging.getLogger(__name__)

VERDICT_COLORS = {
    SwitchVerdict.HELPS: "#2a9d8f",
    SwitchVerdict.HELPS_CHANGES_OUTPUT: "#f4a261",
    SwitchVerdict.NO_EFFECT: "#8d99ae",
    SwitchVerdict.HURTS: "#d62828",
    SwitchVerdict.FAILS_TO_START: "#343a40",
}
ZERO_LINE = "#333"
UNMEASURED = "no TPS pair, drawn at 0 %"  # appended to the verdict's name for a switch without an effect


@dataclasses.dataclass(frozen=True, kw_only=True)
class AblationReportData:
    """A stored ablation and its verdicts, as the report shows them."""

    record: AblationRecord
    plan: AblationPlan
    result: AblationResult
    storage: str  # redacted
    planned_servers: int  # the schedule's servers, to the last round stored

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def status(self) -> str:
        return self.record.status

    @property
    def closing(self) -> ClosingRace | None:
        """The closing race of the exported manifest against the original (None: none stored)."""
        return self.result.closing

    @property
    def closing_servers(self) -> tuple[ClosingServer, ...]:
        """The stored servers of the closing race of this export (not those of an earlier one)."""
        changes = self.result.changes
        return self.record.closing_for(changes) if changes else ()

    def stored_text(self) -> str:
        return (
            f"{len(self.record.servers)} of {self.planned_servers} servers of {self.plan.rounds} round(s) stored, "
            f"started {self.record.started_at:%Y-%m-%d %H:%M} UTC"
        )

    def messages(self) -> tuple[str, ...]:
        """What a reader must know before trusting the figures: an ablation that has not finished."""
        stored = f"{len(self.record.servers)} of {self.planned_servers} servers of {self.plan.rounds} round(s)"
        if self.status == ABLATION_RUNNING:
            return (f"ablation {self.name} is still running: the report shows the {stored} stored so far",)
        if self.status == ABLATION_INTERRUPTED:
            return (
                f"ablation {self.name} was interrupted: the report shows the {stored} stored; "
                "the same 'sweeper ablate' command goes on from the next server",
            )
        return ()

    def basis_line(self) -> str:
        """What the intervals rest on: the facts of ``sweeper status --ablation``'s last line."""
        effects, result = self.result.effects, self.result
        spread = effects.spread
        return (
            f"intervals at {effects.level:.2%} each ({self.plan.confidence:.0%} for the whole ablation); "
            f"between-server spread {spread.relative:.1%} on {spread.df:g} df; {result.servers} servers, "
            f"{result.failed_servers} failed, {result.gpu_seconds / 60:.1f} GPU minutes"
        )

    def arm_label(self, server: AblationServer) -> str:
        if server.arm is None:
            return "base"
        switches = self.plan.switches
        return switches[server.arm].label if 0 <= server.arm < len(switches) else f"arm {server.arm}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class AblationReportFiles:
    """What ``build_ablation_report`` wrote, and what a reader must know (``messages``)."""

    out_dir: Path
    files: dict[str, Path]
    data: AblationReportData
    messages: tuple[str, ...]

    @property
    def page(self) -> Path:
        return self.files["ablation.html"]

    def to_dict(self) -> dict[str, object]:
        closing = self.data.closing
        return {
            "ablation": self.data.name,
            "out_dir": str(self.out_dir),
            "files": {name: str(path) for name, path in self.files.items()},
            "status": self.data.status,
            "messages": list(self.messages),
            "verdicts": {r.switch.label: r.verdict.value for r in self.data.result.reports},
            "changes": self.data.result.changes,
            "closing": closing.to_dict() if closing is not None else None,
        }


def read_ablation(storage: str | None, name: str) -> AblationReportData:
    """Ablation ``name`` judged from its stored servers; one with none stored is a ``StudyError``."""
    record = stored_ablation(storage, name)
    if not record.servers:
        raise StudyError(
            f"ablation {name!r} ({record.status}) has no servers stored yet: nothing to report "
            "(run 'sweeper ablate' first)"
        )
    stored = judge_stored(record)
    return AblationReportData(
        record=record,
        plan=stored.plan,
        result=stored.result,
        storage=redact(normalize_url(storage)),
        planned_servers=stored.planned_servers,
    )


def build_ablation_report(storage: str | None, name: str, out_dir: str | Path | None = None) -> AblationReportFiles:
    """Write ablation ``name``'s report into ``out_dir`` (default ``./report-ablation-<name>``).

    Raises StudyNotFoundError (nothing written, no database created) for an
    unknown ablation and StudyError (nothing written) for one with no
    servers stored; a running or interrupted one gets the report of what
    is stored, with ``messages`` saying so.
    """
    from sweeper.report._png import save_png

    data = read_ablation(storage, name)
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", data.name)
    out = Path(out_dir) if out_dir is not None else Path(f"report-ablation-{stem}")
    out = out.expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {
        "effects.png": save_png(effects_png(data), out / "effects.png"),
        "switches.csv": write_text(out / "switches.csv", switches_csv(data)),
        "servers.csv": write_text(out / "servers.csv", servers_csv(data)),
        "summary.md": write_text(out / "summary.md", ablation_markdown(data)),
    }
    page = ablation_html(data, effects_figure(data), files)
    files = {"ablation.html": write_text(out / "ablation.html", page), **files}
    logger.info("wrote the report of ablation %s to %s (%d files)", data.name, out, len(files))
    return AblationReportFiles(out_dir=out, files=files, data=data, messages=data.messages())


# -- the figures in words ----------------------------------------------------------------------


def row_label(report: SwitchReport) -> str:
    """How a plot's row and a table's first cells name a switch: ``ENFORCE_EAGER=1 vs 0``."""
    return f"{report.switch.label} vs {report.switch.reference_text}"


def percent(ratio: float) -> float:
    return (ratio - 1.0) * 100.0


def closing_lines(data: AblationReportData) -> list[str]:
    """What the closing race of the exported manifest against the original says, or why none is stored."""
    if data.closing is not None:
        return [closing_text(data.result)]
    return [f"no closing race stored: {closing_text(data.result)}"]


# -- the forest plot -------------------------------------------------------------------------------


def _x_range(reports: tuple[SwitchReport, ...]) -> tuple[float, float]:
    """The percent axis: every interval and 0 %, padded."""
    ends = [0.0]
    ends += [percent(v) for r in reports if r.tps_effect is not None for v in (r.tps_effect.low, r.tps_effect.high)]
    low, high = min(ends), max(ends)
    pad = 0.08 * (high - low) or 1.0
    return low - pad, high + pad


def _title(data: AblationReportData, sep: str) -> str:
    return (
        f"{data.name}: TPS effect of each switch, subject over reference{sep}"
        f"bars: {data.result.effects.level:.2%} intervals ({data.plan.confidence:.0%} for the whole ablation)"
    )


def _by_verdict(
    reports: tuple[SwitchReport, ...],
) -> Iterator[tuple[SwitchVerdict, str, list[SwitchReport], list[SwitchReport]]]:
    """Each verdict with its colour, its switches with a TPS effect and those without (one trace each)."""
    for verdict in SwitchVerdict:
        chosen = [r for r in reports if r.verdict is verdict]
        measured = [r for r in chosen if r.tps_effect is not None]
        yield verdict, VERDICT_COLORS[verdict], measured, [r for r in chosen if r.tps_effect is None]


def effects_figure(data: AblationReportData) -> go.Figure:
    """The forest plot: a point and an interval per switch, coloured by verdict, a line at 0 %."""
    import plotly.graph_objects as go

    reports = data.result.reports
    labels = [row_label(r) for r in reports]
    fig = go.Figure()
    for verdict, color, measured, unmeasured in _by_verdict(reports):
        if measured:
            effects = [r.tps_effect for r in measured]
            fig.add_trace(
                go.Scatter(
                    x=[percent(e.value) for e in effects],
                    y=[row_label(r) for r in measured],
                    mode="markers",
                    name=verdict.value,
                    marker={"color": color, "size": 11, "line": {"width": 1, "color": "#333"}},
                    error_x={
                        "type": "data",
                        "symmetric": False,
                        "array": [percent(e.high) - percent(e.value) for e in effects],
                        "arrayminus": [percent(e.value) - percent(e.low) for e in effects],
                        "color": color,
                        "thickness": 2,
                        "width": 6,
                    },
                    text=[_hover(r) for r in measured],
                    hoverinfo="text",
                    customdata=[r.switch.key for r in measured],
                )
            )
        if unmeasured:
            fig.add_trace(
                go.Scatter(
                    x=[0.0] * len(unmeasured),
                    y=[row_label(r) for r in unmeasured],
                    mode="markers",
                    name=_unmeasured_name(verdict),
                    marker={"color": color, "size": 12, "symbol": "x"},
                    text=[_hover(r) for r in unmeasured],
                    hoverinfo="text",
                    customdata=[r.switch.key for r in unmeasured],
                )
            )
    fig.add_vline(x=0.0, line={"color": ZERO_LINE, "dash": "dash", "width": 1.5})
    fig.update_xaxes(range=list(_x_range(reports)), ticksuffix=" %", zeroline=False)
    fig.update_yaxes(categoryorder="array", categoryarray=labels, autorange="reversed")
    fig.update_layout(
        title=_title(data, "<br>"),
        xaxis_title="TPS effect (%): the subject value's TPS over the reference value's",
        template="plotly_white",
        legend={"orientation": "h", "y": -0.25},
        height=260 + 44 * len(reports),
        margin={"l": 40},
    )
    return fig


def _unmeasured_name(verdict: SwitchVerdict) -> str:
    return f"{verdict.value} ({UNMEASURED})"


def _hover(report: SwitchReport) -> str:
    effect = report.tps_effect
    tps = "no TPS pair" if effect is None else f"TPS {effect_text(effect)}"
    return (
        f"{row_label(report)}: {report.verdict.value}<br>{tps}, {report.pairs} pair(s)<br>"
        f"PPL {report.ppl.value}; outputs {report.outputs.value}"
    )


def effects_png(data: AblationReportData) -> Figure:
    """The forest plot, static."""
    from sweeper.report._png import legend_below, new_figure

    reports = data.result.reports
    rows = {row_label(r): index for index, r in enumerate(reports)}
    height = 2.8 + 0.5 * len(reports)
    fig = new_figure(9.0, height)
    ax = fig.add_subplot()
    for verdict, color, measured, unmeasured in _by_verdict(reports):
        if measured:
            effects = [r.tps_effect for r in measured]
            ax.errorbar(
                [percent(e.value) for e in effects],
                [rows[row_label(r)] for r in measured],
                xerr=[
                    [percent(e.value) - percent(e.low) for e in effects],
                    [percent(e.high) - percent(e.value) for e in effects],
                ],
                fmt="o",
                markersize=8,
                color=color,
                markeredgecolor="#333",
                markeredgewidth=0.6,
                elinewidth=2,
                capsize=4,
                label=verdict.value,
                zorder=3,
            )
        if unmeasured:
            ax.scatter(
                [0.0] * len(unmeasured),
                [rows[row_label(r)] for r in unmeasured],
                marker="x",
                s=70,
                color=color,
                linewidths=2,
                label=_unmeasured_name(verdict),
                zorder=3,
            )
    ax.axvline(0.0, color=ZERO_LINE, linestyle="--", linewidth=1.2, zorder=1)
    ax.set_yticks(list(rows.values()), list(rows))
    ax.set_ylim(len(reports) - 0.5, -0.5)  # the first switch on top, as in the tables
    ax.set_xlim(*_x_range(reports))
    ax.xaxis.set_major_formatter(lambda value, _: f"{value:+g} %" if value else "0 %")
    ax.set_xlabel("TPS effect (%): the subject value's TPS over the reference value's")
    ax.set_title(_title(data, "\n"), fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    order = [label for verdict in SwitchVerdict for label in (verdict.value, _unmeasured_name(verdict))]
    # under the tick labels and the axis title, which take about 0.6 inch whatever the axes' height
    legend_below(ax, order=order, below=-0.6 / (0.6 * height))
    return fig


# -- the tables ------------------------------------------------------------------------------------


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
    from sweeper.report._html import escape, figure_div, html_page, html_table

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
