"""The report's interactive figures (plotly), built from ReportData only.

Trace names are part of the contract (tests and readers look for them):
``PPL cap``, one trace per trial category, ``Pareto front``,
``verified on held-out data``, ``failed verification``, ``winner``.
Standalone files carry plotly.js inline, so they open with no network.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sweeper.report._data import (
    CATEGORIES,
    COLORS,
    FAILED,
    INFEASIBLE,
    LABELS,
    ReportData,
    TrialPoint,
)

logger = logging.getLogger(__name__)

CAP_TRACE = "PPL cap"
WINNER_TRACE = "winner"
VERIFIED_TRACE = "verified on held-out data"
VERIFY_FAILED_TRACE = "failed verification"
FRONT_TRACE = "Pareto front"
BEST_TRACE = "best feasible TPS so far"
PLOT_CONFIG = {"displaylogo": False, "responsive": True}


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def failed_x(data: ReportData) -> float:
    """Where failed trials without a PPL sit on the PPL axis: at the cap, else mid-range."""
    if data.cap is not None:
        return data.cap
    ppls = [p.ppl for p in data.points if _finite(p.ppl)]
    return (min(ppls) + max(ppls)) / 2 if ppls else 1.0


def plot_xy(point: TrialPoint, data: ReportData) -> tuple[float, float]:
    """The (PPL, TPS) position of a trial on the Pareto plot (failed: TPS 0)."""
    x = point.ppl if _finite(point.ppl) else failed_x(data)
    y = point.tps if point.tps is not None and point.category != FAILED else 0.0
    return float(x), float(y)


def _tps_top(data: ReportData) -> float:
    values = [p.tps for p in data.points if p.tps is not None]
    return max(values) * 1.08 if values else 1.0


def _tps_bottom(data: ReportData) -> float:
    """Failed trials sit at TPS 0; without them the axis starts near the slowest trial."""
    values = [p.tps for p in data.points if p.tps is not None]
    if data.by_category(FAILED) or not values:
        return 0.0
    return min(values) * 0.9


def pareto_figure(data: ReportData) -> go.Figure:
    """TPS against PPL: the cap line, trials by category, verification marks, the winner."""
    fig = go.Figure()
    for category in CATEGORIES:
        points = data.by_category(category)
        if not points:
            continue
        xy = [plot_xy(p, data) for p in points]
        fig.add_trace(
            go.Scatter(
                x=[x for x, _ in xy],
                y=[y for _, y in xy],
                mode="markers",
                name=LABELS[category],
                legendgroup=category,
                marker={
                    "color": COLORS[category],
                    "size": 10,
                    "symbol": [
                        "x" if category == FAILED else "circle-open" if p.tps_imputed else "circle"
                        for p in points
                    ],
                    "line": {"width": 1, "color": "#333"},
                },
                text=[p.hover() for p in points],
                hoverinfo="text",
                customdata=[p.number for p in points],
            )
        )
    front = sorted((data.point(n) for n in data.pareto), key=lambda p: p.ppl or 0.0)
    if len(front) > 1:
        fig.add_trace(
            go.Scatter(
                x=[p.ppl for p in front], y=[p.tps for p in front], mode="lines", name=FRONT_TRACE,
                line={"color": COLORS["front"], "dash": "dot", "shape": "hv"}, hoverinfo="skip",
            )  # fmt: skip
        )
    for status, name, symbol, color in (
        ("verified", VERIFIED_TRACE, "circle-open", COLORS["verified"]),
        ("failed", VERIFY_FAILED_TRACE, "x-thin-open", COLORS["verify-failed"]),
    ):
        marked = [p for p in data.points if p.verification == status]
        if marked:
            xy = [plot_xy(p, data) for p in marked]
            fig.add_trace(
                go.Scatter(
                    x=[x for x, _ in xy], y=[y for _, y in xy], mode="markers", name=name,
                    marker={"symbol": symbol, "size": 20, "color": color, "line": {"width": 2.5, "color": color}},
                    text=[p.hover() for p in marked], hoverinfo="text",
                    customdata=[p.number for p in marked],
                )  # fmt: skip
            )
    if data.cap is not None:
        fig.add_trace(
            go.Scatter(
                x=[data.cap, data.cap], y=[_tps_bottom(data), _tps_top(data)], mode="lines", name=CAP_TRACE,
                line={"color": COLORS["cap"], "dash": "dash", "width": 2},
                hovertext=f"PPL cap {data.cap:.4f}", hoverinfo="text",
            )  # fmt: skip
        )
    winner = data.winner
    if winner is not None:
        x, y = plot_xy(winner, data)
        label = f"winner #{winner.number} ({data.answer.status.upper()})"
        fig.add_trace(
            go.Scatter(
                x=[x], y=[y], mode="markers", name=WINNER_TRACE,
                marker={"symbol": "star", "size": 18, "color": COLORS["winner"], "line": {"width": 1, "color": "#333"}},
                text=[winner.hover()], hoverinfo="text", customdata=[winner.number],
            )  # fmt: skip
        )
        xs = [plot_xy(p, data)[0] for p in data.points] + ([data.cap] if data.cap is not None else [])
        left = x > (min(xs) + max(xs)) / 2  # keep the label inside the plot
        fig.add_annotation(x=x, y=y, text=label, showarrow=True, arrowhead=2, ax=-60 if left else 60, ay=30)
    fig.update_layout(
        title=f"{data.study_name}: TPS against PPL ({len(data.points)} trials)",
        xaxis_title="PPL (lower is better)",
        yaxis_title="TPS (output tokens/s, higher is better)",
        template="plotly_white",
        legend={"orientation": "h", "y": -0.2},
        height=560,
    )
    return fig


def history_figure(data: ReportData) -> go.Figure:
    """Each trial's TPS by trial number, and the best feasible TPS so far."""
    fig = go.Figure()
    for category in (c for c in CATEGORIES if c != FAILED):
        points = [p for p in data.by_category(category) if p.tps is not None]
        if points:
            fig.add_trace(
                go.Scatter(
                    x=[p.number for p in points], y=[p.tps for p in points], mode="markers",
                    name=LABELS[category], marker={"color": COLORS[category], "size": 9},
                    text=[p.hover() for p in points], hoverinfo="text",
                )  # fmt: skip
            )
    failed = data.by_category(FAILED)
    if failed:
        fig.add_trace(
            go.Scatter(
                x=[p.number for p in failed], y=[0.0] * len(failed), mode="markers", name=LABELS[FAILED],
                marker={"color": COLORS[FAILED], "symbol": "x", "size": 9},
                text=[p.hover() for p in failed], hoverinfo="text",
            )  # fmt: skip
        )
    series = [(n, v) for n, v in data.best_so_far if v is not None]
    if series:
        fig.add_trace(
            go.Scatter(
                x=[n for n, _ in series], y=[v for _, v in series], mode="lines", name=BEST_TRACE,
                line={"color": COLORS["front"], "shape": "hv", "width": 2.5},
            )  # fmt: skip
        )
    fig.update_layout(
        title="Best feasible TPS against trial number", xaxis_title="trial number",
        yaxis_title="TPS", template="plotly_white", height=420,
    )  # fmt: skip
    return fig


def slices_figure(data: ReportData) -> go.Figure:
    """One panel per parameter: its value against TPS, colored by feasibility."""
    names = list(data.param_names) or ["(no parameters)"]
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=names, shared_yaxes=True)
    for index, name in enumerate(data.param_names):
        row, col = index // cols + 1, index % cols + 1
        for category in CATEGORIES:
            points = [p for p in data.by_category(category) if name in p.params]
            if not points:
                continue
            fig.add_trace(
                go.Scatter(
                    x=[p.params[name] for p in points],
                    y=[p.tps if p.tps is not None else 0.0 for p in points],
                    mode="markers", name=LABELS[category], legendgroup=category,
                    showlegend=index == 0, marker={"color": COLORS[category], "size": 9},
                    text=[p.hover() for p in points], hoverinfo="text",
                ),
                row=row, col=col,
            )  # fmt: skip
        fig.update_xaxes(title_text=name, row=row, col=col)
    fig.update_yaxes(title_text="TPS", col=1)
    fig.update_layout(title="Slice plot: each parameter against TPS", template="plotly_white",
                      height=360 * rows)  # fmt: skip
    return fig


def importance_figure(data: ReportData) -> go.Figure:
    """PED-ANOVA importance of each parameter, for TPS and for PPL."""
    fig = go.Figure()
    for target, color in (("tps", COLORS["feasible"]), ("ppl", COLORS[INFEASIBLE])):
        values = data.importance.get(target)
        if values:
            names = list(data.param_names) or list(values)
            fig.add_trace(
                go.Bar(
                    x=[values.get(n, 0.0) for n in names], y=names, orientation="h",
                    name=f"importance for {target.upper()}", marker={"color": color},
                )  # fmt: skip
            )
    title = "Parameter importance (PED-ANOVA)"
    if not data.importance:
        title += f": {data.importance_note}"
    fig.update_layout(title=title, xaxis_title="importance (share of variance)", barmode="group",
                      template="plotly_white", height=320)  # fmt: skip
    return fig


def figures(data: ReportData) -> dict[str, go.Figure]:
    """The report's figures by file stem, in page order."""
    return {
        "pareto": pareto_figure(data),
        "history": history_figure(data),
        "slices": slices_figure(data),
        "importance": importance_figure(data),
    }


def write_html(fig: go.Figure, path: Path) -> Path:
    """A standalone, self-contained page (plotly.js inline: no network needed)."""
    tmp = path.with_name(f".{path.name}.tmp")
    fig.write_html(tmp, include_plotlyjs=True, full_html=True, config=PLOT_CONFIG)
    os.replace(tmp, path)
    return path
