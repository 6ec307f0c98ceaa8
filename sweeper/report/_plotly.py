"""The report's interactive figures (plotly): the figure model (``_figures``) drawn, nothing more.

What each figure shows, its names and its words are the model's; this module only gives them
plotly's symbols, sizes and fills, and places the Pareto plot's labels on estimated pixels (the
spots are chosen before a browser lays the figure out). Standalone files carry plotly.js inline,
so they open with no network.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sweeper.report._data import ReportData
from sweeper.report._figure_model import (
    ANSWER,
    BASE_LINE_TRACE,
    BASE_TRACE,
    BEST_TRACE,
    CAP_TRACE,
    CLAIM_TRACE,
    CONFIGURATION,
    FAINT,
    FRONT_TRACE,
    READINGS_TRACE,
    SIDE_BY_SIDE_TRACE,
    WINNER_TRACE,
    XY,
    ZERO_LINE,
    Effect,
    FigureModels,
    ForestModel,
    HistoryModel,
    ImportanceModel,
    Label,
    Level,
    Marks,
    ParetoModel,
    Point,
    PointGroup,
    SliceModel,
)
from sweeper.report._figures import figure_models, history_model, importance_model, pareto_model, slice_model
from sweeper.report._placement import Box, choose_label_spot
from sweeper.report._points import COLORS, FEASIBLE, LABELS

BASE_FILL = "rgba(69, 123, 157, 0.15)"
WINNER_FILL = "rgba(255, 183, 3, 0.25)"
SIDE_BY_SIDE_FILL = "rgba(141, 153, 174, 0.12)"
PLOT_CONFIG = {"displaylogo": False, "responsive": True}
SYMBOLS = {  # the model's open marks
    "circle": "circle-open",
    "cross": "x-thin-open",
    "square": "square-open",
    "diamond": "diamond-open",
    "triangle": "triangle-up-open",
}
LABEL_SIZES = {ANSWER: 13, CONFIGURATION: 10}  # the base's label: plotly's size
LEVEL_STYLES = {"base": (BASE_FILL, "dash"), "answer": (WINNER_FILL, "solid")}  # band fill, line dash


def _br(text: str) -> str:
    return text.replace("\n", "<br>")


# -- the Pareto plot ----------------------------------------------------------------------------


def _side_by_side(fig: go.Figure, model: ParetoModel) -> None:
    """Under everything: the bands of configurations set side by side, one legend entry."""
    bottom, top = model.tps_span
    for index, (left, right) in enumerate(model.bands):
        fig.add_trace(
            go.Scatter(
                x=[left, right, right, left, left],
                y=[bottom, bottom, top, top, bottom],
                mode="lines",
                fill="toself",
                fillcolor=SIDE_BY_SIDE_FILL,
                line={"width": 0},
                name=SIDE_BY_SIDE_TRACE,
                legendgroup=SIDE_BY_SIDE_TRACE,
                showlegend=index == 0,
                hovertext=model.moved,
                hoverinfo="text",
            )
        )


def _estimates(fig: go.Figure, model: ParetoModel) -> None:
    """Each server's reading a faint dot; each configuration at its estimate with its interval."""
    readings, estimates = model.readings, model.estimates
    marker = {"color": COLORS[FEASIBLE], "size": 6, "opacity": FAINT}
    fig.add_trace(_points(readings, READINGS_TRACE, marker, legendgroup=FEASIBLE))
    error_y = {
        "type": "data",
        "symmetric": False,
        "array": [e.high - e.tps for e in estimates],
        "arrayminus": [e.tps - e.low for e in estimates],
        "color": COLORS["front"],
        "thickness": 1.5,
        "width": 6,
    }
    fig.add_trace(
        go.Scatter(
            x=[e.x for e in estimates],
            y=[e.tps for e in estimates],
            mode="markers",
            name=LABELS[FEASIBLE],
            legendgroup=FEASIBLE,
            error_y=error_y,
            marker={"color": COLORS[FEASIBLE], "size": 10, "line": {"width": 1, "color": "#333"}},
            text=[e.hover for e in estimates],
            hoverinfo="text",
            customdata=[e.first for e in estimates],
        )
    )


def _trials(fig: go.Figure, model: ParetoModel) -> None:
    """The trials drawn on their own, a trace per category; off the axis: its PPL written beside it."""
    for group in model.trials:
        points = group.points
        symbols = [
            "x" if group.failed else ("triangle-right" if p.off_axis else "circle") + ("-open" if p.imputed else "")
            for p in points
        ]
        marker = {"color": group.color, "size": 10, "symbol": symbols, "line": {"width": 1, "color": "#333"}}
        fig.add_trace(_points(points, group.name, marker, legendgroup=group.category))
        for p in points:
            if p.note is not None:
                fig.add_annotation(x=p.x, y=p.y, text=p.note, showarrow=False, xanchor="right", xshift=-8)


def _marks(fig: go.Figure, marks: Marks, size: int, width: float) -> None:
    marker = {
        "symbol": SYMBOLS[marks.shape],
        "size": size,
        "color": marks.color,
        "line": {"width": width, "color": marks.color},
    }
    fig.add_trace(_points(marks.points, marks.name, marker))


def _line(x: Sequence[float], y: Sequence[float], name: str, line: dict[str, Any], hover: str) -> go.Scatter:
    return go.Scatter(x=list(x), y=list(y), mode="lines", name=name, line=line, hovertext=hover, hoverinfo="text")


def _lines(fig: go.Figure, model: ParetoModel) -> None:
    """The front, the verification marks, the cap, the base's line and mark, the claim."""
    front = model.front
    if len(front) > 1:
        fig.add_trace(
            go.Scatter(
                x=[x for x, _ in front],
                y=[y for _, y in front],
                mode="lines",
                name=FRONT_TRACE,
                line={"color": COLORS["front"], "dash": "dot", "shape": "hv"},
                hoverinfo="skip",
            )
        )
    for marks in model.verifications:
        _marks(fig, marks, 20, 2.5)
    if model.cap is not None:
        cap, line = model.cap, {"color": COLORS["cap"], "dash": "dash", "width": 2}
        fig.add_trace(_line([cap, cap], model.tps_span, CAP_TRACE, line, f"PPL cap {cap:.4f}"))
    base_line = model.base_line
    if base_line is not None:  # the claim is drawn: the answer's bar over this line
        line = {"color": COLORS["base"], "dash": "dash", "width": 1.5}
        xy = [base_line.x0, base_line.x1], [base_line.y0, base_line.y1]
        fig.add_trace(_line(*xy, BASE_LINE_TRACE, line, base_line.hover))
    base = model.base
    if base is not None:
        marker = {"symbol": "square-open", "size": 22, "color": COLORS["base"], "line": {"width": 2.5}}
        fig.add_trace(_mark(base.x, base.y, BASE_TRACE, marker, base.hover, base.number))
    claim = model.claim
    if claim is not None:  # the claim itself: answer / base, at the study-wise level
        line = {"color": WINNER_FILL, "width": 14}
        fig.add_trace(_line([claim.x0, claim.x1], [claim.y0, claim.y1], CLAIM_TRACE, line, claim.hover))


def _points(points: Sequence[Point], name: str, marker: dict[str, Any], **more: Any) -> go.Scatter:
    """Trials as marks: each hovers its words and carries its trial number."""
    return go.Scatter(
        x=[p.x for p in points],
        y=[p.y for p in points],
        mode="markers",
        name=name,
        marker=marker,
        text=[p.hover for p in points],
        hoverinfo="text",
        customdata=[p.number for p in points],
        **more,
    )


def _mark(x: object, y: float, name: str, marker: dict[str, Any], hover: str, number: int) -> go.Scatter:
    return go.Scatter(
        x=[x], y=[y], mode="markers", name=name, marker=marker, text=[hover], hoverinfo="text", customdata=[number]
    )


# the plot area plotly gives the Pareto figure in a page about 1200 pixels wide (an estimate: the
# label spots are chosen before a browser lays the figure out)
PARETO_PIXELS = (900.0, 300.0)
CHAR_PIXELS, LINE_PIXELS = 7.0, 17.0


def _text_size(text: str) -> tuple[float, float]:
    lines = text.split("<br>")
    return max(len(line) for line in lines) * CHAR_PIXELS, len(lines) * LINE_PIXELS


def _font(label: Label) -> dict[str, Any]:
    font: dict[str, Any] = {"size": LABEL_SIZES[label.kind]} if label.kind in LABEL_SIZES else {}
    return font | ({"color": label.color} if label.color is not None else {})


def _place_labels(
    fig: go.Figure,
    labels: Sequence[Label],
    obstacles: Sequence[XY],
    pixels: tuple[float, float],
    x_range: tuple[float, float] | None = None,
) -> None:
    """Each label with an arrow to the anchor where it covers the fewest ``obstacles`` (data
    coordinates; the axes span the obstacles, padded as plotly pads them, or ``x_range`` where
    the figure sets its x axis); a ``close`` one right beside its point, with no arrow, where
    there is room."""
    if not labels:
        return
    xs, ys = [x for x, _ in obstacles], [y for _, y in obstacles]
    x_lo, x_hi, y_lo, y_hi = min(xs), max(xs), min(ys), max(ys)
    pad_x, pad_y = (x_hi - x_lo) * 0.05 or 1.0, (y_hi - y_lo) * 0.05 or 1.0
    x_lo, x_hi, y_lo, y_hi = x_lo - pad_x, x_hi + pad_x, y_lo - pad_y, y_hi + pad_y
    if x_range is not None:
        x_lo, x_hi = x_range
    width, height = pixels

    def to_pixels(x: float, y: float) -> XY:
        return (x - x_lo) / (x_hi - x_lo) * width, (y - y_lo) / (y_hi - y_lo) * height

    points = [to_pixels(x, y) for x, y in obstacles]
    taken: list[Box] = []
    for label in labels:
        text = _br(label.text)
        anchored = [to_pixels(x, y) for x, y in label.anchors]
        area = (0.0, 0.0, width, height)
        spot, beside = choose_label_spot(anchored, _text_size(text), points, area, taken, close=label.close)
        taken.append(spot.box)
        x, y = label.anchors[spot.anchor]
        place = {"xshift": spot.dx, "yshift": spot.dy} if beside else {"ax": spot.dx, "ay": -spot.dy, "arrowhead": 2}
        fig.add_annotation(
            x=x,
            y=y,
            text=text,
            showarrow=not beside,
            xanchor=spot.ha,
            yanchor="middle" if spot.va == "center" else spot.va,
            align="left",
            bgcolor="rgba(255, 255, 255, 0.85)",
            font=_font(label),
            **place,
        )


def _pareto_title(model: ParetoModel) -> str:
    title = f"{model.title} ({model.trials_text}"
    title += f"; {model.estimates_text})" if model.estimates_text is not None else ")"
    return title + (f"<br><sup>{model.moved}</sup>" if model.moved else "")


def draw_pareto(model: ParetoModel) -> go.Figure:
    """The Pareto plot: configurations at their estimates, the cap, the base and the answer, labelled."""
    fig = go.Figure()
    _side_by_side(fig, model)
    if model.estimates:
        _estimates(fig, model)
    _trials(fig, model)
    _lines(fig, model)
    winner = model.winner
    if winner is not None:
        marker = {"symbol": "star", "size": 18, "color": COLORS["winner"], "line": {"width": 1, "color": "#333"}}
        fig.add_trace(_mark(winner.x, winner.y, WINNER_TRACE, marker, winner.hover, winner.number))
    _place_labels(fig, model.labels, model.obstacles, PARETO_PIXELS, model.x_range)
    if model.x_range is not None:
        fig.update_xaxes(range=list(model.x_range))
    fig.update_layout(
        title=_pareto_title(model),
        xaxis_title=model.x_title,
        yaxis_title=model.y_title,
        template="plotly_white",
        legend={"orientation": "h", "y": -0.2},
        height=560,
    )
    return fig


# -- the history --------------------------------------------------------------------------------


def _readings(fig: go.Figure, groups: Sequence[PointGroup], opacity: float) -> None:
    for group in groups:
        marker = {
            "color": group.color,
            "size": 9,
            "opacity": 1.0 if group.imputed else opacity,
            "symbol": "x" if group.failed else "circle-open" if group.imputed else "circle",
        }
        fig.add_trace(_points(group.points, group.name, marker))


def _level(fig: go.Figure, level: Level, x_span: tuple[float, float]) -> None:
    """An estimate across every trial: its interval's band, then its line."""
    (x0, x1), (fill, dash) = x_span, LEVEL_STYLES[level.who]
    name = level.band_name
    fig.add_trace(
        go.Scatter(
            x=[x0, x1, x1, x0, x0],
            y=[level.low, level.low, level.high, level.high, level.low],
            mode="lines",
            fill="toself",
            fillcolor=fill,
            line={"width": 0},
            name=name,
            legendgroup=level.who,
            hovertext=f"{name}: {level.low:.2f}-{level.high:.2f} tok/s",
            hoverinfo="text",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[x0, x1],
            y=[level.tps, level.tps],
            mode="lines",
            name=level.line_name,
            legendgroup=level.who,
            line={"color": level.color, "width": 2.5, "dash": dash},
            hovertext=level.hover,
            hoverinfo="text",
        )
    )


def draw_history(model: HistoryModel) -> go.Figure:
    """The readings by trial number, with the answer's and the base's estimates (or the best so far)."""
    fig = go.Figure()
    if not model.standing:
        _readings(fig, model.readings, model.opacity)
        if model.best_so_far:
            line = {"color": COLORS["front"], "shape": "hv", "width": 2.5}
            x, y = [n for n, _ in model.best_so_far], [v for _, v in model.best_so_far]
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=BEST_TRACE, line=line))
        layout: dict[str, Any] = {"height": 420}
    else:
        for level in model.levels:
            _level(fig, level, model.x_span)
        _readings(fig, model.readings, model.opacity)
        for marks in model.marks:
            _marks(fig, marks, 14, 2)
        for label in model.labels:  # in the right margin, level with its line, the legend below: off the data
            fig.add_annotation(
                xref="paper",
                x=1.0,
                y=label.y,
                xanchor="left",
                yanchor="bottom" if label.above else "top",
                xshift=6,
                text=_br(label.text),
                showarrow=False,
                align="left",
                font={"color": label.color, "size": 11},
            )
        layout = {"height": 480, "margin": {"r": 290}, "legend": {"orientation": "h", "y": -0.2}}
    fig.update_layout(
        title=model.title, xaxis_title=model.x_title, yaxis_title=model.y_title, template="plotly_white", **layout
    )
    return fig


# -- the slices and the importance --------------------------------------------------------------


def _slice(fig: go.Figure, model: SliceModel, row: int, col: int, first: bool) -> None:
    for group in model.groups:
        marker = {
            "color": group.color,
            "size": 9,
            "symbol": "x" if group.failed else "circle-open" if group.imputed else "circle",
        }
        trace = _points(group.points, group.name, marker, legendgroup=group.name, showlegend=first)
        fig.add_trace(trace, row=row, col=col)
    answer = model.answer
    if answer is not None:
        trace = go.Scatter(
            x=[answer.value],
            y=[answer.tps],
            mode="markers",
            name=answer.label,
            legendgroup=WINNER_TRACE,
            showlegend=first,
            marker={"symbol": "star", "size": 16, "color": COLORS["winner"], "line": {"width": 1, "color": "#333"}},
            hovertext=answer.label,
            hoverinfo="text",
        )
        fig.add_trace(trace, row=row, col=col)
    if model.ticks is not None:
        fig.update_xaxes(tickmode="array", tickvals=list(model.ticks), row=row, col=col)
    fig.update_xaxes(title_text=model.name, row=row, col=col)


def draw_slices(models: Sequence[SliceModel]) -> go.Figure:
    """One panel per parameter: its value against TPS, colored by feasibility."""
    names = [m.name for m in models] or ["(no parameters)"]
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=names, shared_yaxes=True)
    for index, model in enumerate(models):
        _slice(fig, model, index // cols + 1, index % cols + 1, index == 0)
    fig.update_yaxes(title_text="TPS", col=1)
    fig.update_layout(title="Slice plot: each parameter against TPS", template="plotly_white", height=360 * rows)
    return fig


def draw_importance(model: ImportanceModel) -> go.Figure:
    """PED-ANOVA importance of each parameter, for TPS and for PPL."""
    fig = go.Figure()
    for bars in model.bars:
        fig.add_trace(
            go.Bar(
                x=list(bars.values), y=list(bars.names), orientation="h", name=bars.name, marker={"color": bars.color}
            )
        )
    title = model.title + (f": {model.note}" if model.note is not None else "")
    fig.update_layout(
        title=title, xaxis_title="importance (share of variance)", barmode="group", template="plotly_white", height=320
    )
    return fig


def draw_figures(models: FigureModels) -> dict[str, go.Figure]:
    """The report's figures by file stem, in page order."""
    return {
        "pareto": draw_pareto(models.pareto),
        "history": draw_history(models.history),
        "slices": draw_slices(models.slices),
        "importance": draw_importance(models.importance),
    }


# each figure straight from ReportData, its model built on the way
def pareto_figure(data: ReportData) -> go.Figure:
    return draw_pareto(pareto_model(data))


def history_figure(data: ReportData) -> go.Figure:
    return draw_history(history_model(data))


def slices_figure(data: ReportData) -> go.Figure:
    return draw_slices([slice_model(data, name) for name in data.param_names])


def importance_figure(data: ReportData) -> go.Figure:
    return draw_importance(importance_model(data))


def figures(data: ReportData) -> dict[str, go.Figure]:
    return draw_figures(figure_models(data))


def write_html(fig: go.Figure, path: Path) -> Path:
    """A standalone, self-contained page (plotly.js inline: no network needed)."""
    tmp = path.with_name(f".{path.name}.tmp")
    fig.write_html(tmp, include_plotlyjs=True, full_html=True, config=PLOT_CONFIG)
    os.replace(tmp, path)
    return path


# -- an ablation's forest plot ------------------------------------------------------------------


def draw_forest(model: ForestModel) -> go.Figure:
    """A point and an interval per switch, coloured by verdict, a line at 0 %."""
    fig = go.Figure()
    for group in model.groups:
        measured, unmeasured = group.measured, group.unmeasured
        if measured:
            error_x = {
                "type": "data",
                "symmetric": False,
                "array": [e.high - e.value for e in measured],
                "arrayminus": [e.value - e.low for e in measured],
                "color": group.color,
                "thickness": 2,
                "width": 6,
            }
            marker = {"color": group.color, "size": 11, "line": {"width": 1, "color": "#333"}}
            fig.add_trace(_effects(measured, group.name, marker, error_x=error_x))
        if unmeasured:
            marker = {"color": group.color, "size": 12, "symbol": "x"}
            fig.add_trace(_effects(unmeasured, group.unmeasured_name, marker))
    fig.add_vline(x=0.0, line={"color": ZERO_LINE, "dash": "dash", "width": 1.5})
    fig.update_xaxes(range=list(model.x_range), ticksuffix=" %", zeroline=False)
    fig.update_yaxes(categoryorder="array", categoryarray=list(model.rows), autorange="reversed")
    fig.update_layout(
        title=_br(model.title),
        xaxis_title=model.x_title,
        template="plotly_white",
        legend={"orientation": "h", "y": -0.25},
        height=260 + 44 * len(model.rows),
        margin={"l": 40},
    )
    return fig


def _effects(effects: Sequence[Effect], name: str, marker: dict[str, Any], **more: Any) -> go.Scatter:
    return go.Scatter(
        x=[e.value for e in effects],
        y=[e.row for e in effects],
        mode="markers",
        name=name,
        marker=marker,
        text=[e.hover for e in effects],
        hoverinfo="text",
        customdata=[e.key for e in effects],
        **more,
    )
