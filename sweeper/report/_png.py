"""The report's static figures (matplotlib PNGs): the figure model (``_figures``) drawn, nothing more.

Uses matplotlib's object API (``Figure`` + the Agg canvas), never pyplot, so nothing global
changes in the calling process. Artist labels are the model's names, the same as the plotly
traces'; this module gives them matplotlib's markers, sizes and fills, and places the Pareto
plot's labels on the laid-out figure, where the text and the marks are measured.
"""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.transforms import Bbox

from sweeper.report._data import ReportData
from sweeper.report._figure_model import (
    ANSWER,
    BASE,
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
    FigureModels,
    ForestModel,
    HistoryModel,
    ImportanceModel,
    Label,
    Marks,
    ParetoModel,
    PointGroup,
    SliceModel,
    Value,
)
from sweeper.report._figures import history_model, importance_model, pareto_model, slice_model
from sweeper.report._placement import Box, choose_label_spot
from sweeper.report._points import COLORS, FAILED_TRIAL, FEASIBLE, LABELS

DPI = 110
BOX = {"boxstyle": "round,pad=0.25", "facecolor": "white", "edgecolor": "none", "alpha": 0.85}
MARKERS = {"circle": "o", "cross": "X", "square": "s", "diamond": "D", "triangle": "^"}  # the model's open marks
LABEL_SIZES = {ANSWER: 10, CONFIGURATION: 8, BASE: 9}
# an estimate across the history: its band's opacity, its line's style
LEVEL_STYLES: dict[str, tuple[float, dict[str, Any]]] = {
    "base": (0.12, {"linestyle": "--", "linewidth": 1.8}),
    "answer": (0.25, {"linewidth": 2.2}),
}


def new_figure(width: float = 8.0, height: float = 5.0) -> Figure:
    """A figure on its own Agg canvas (no pyplot: nothing global changes)."""
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def legend_below(ax: Axes, order: Sequence[str] = (), *, below: float = -0.13) -> None:
    """The legend under the axes, off the data; the labels named in ``order`` first, in that order.
    ``below``: its top edge, in axes heights under the axes' bottom (lower for a short axes)."""
    handles, labels = ax.get_legend_handles_labels()
    rank = {label: index for index, label in enumerate(order)}
    pairs = sorted(zip(handles, labels), key=lambda pair: rank.get(pair[1], len(rank)))
    ax.legend(
        [h for h, _ in pairs],
        [label for _, label in pairs],
        fontsize=8,
        loc="upper center",
        bbox_to_anchor=(0.5, below),
        ncol=2,
        frameon=False,
    )


def _fill(color: str, *, hollow: bool, **filled: Any) -> dict[str, Any]:
    """A mark's colours: a hollow one (an imputed TPS) only its edge, a filled one ``color`` and ``filled``."""
    return {"facecolors": "none", "edgecolors": color} if hollow else {"color": color, **filled}


# -- the Pareto plot ----------------------------------------------------------------------------


def _side_by_side(ax: Axes, model: ParetoModel) -> None:
    """The disclosure, under everything: one legend entry for every band."""
    for index, (left, right) in enumerate(model.bands):
        label = SIDE_BY_SIDE_TRACE if index == 0 else "_nolegend_"
        ax.axvspan(left, right, color=COLORS[FAILED_TRIAL], alpha=0.12, linewidth=0, zorder=0, label=label)


def _estimates(ax: Axes, model: ParetoModel) -> None:
    """Each configuration once, at its estimate with the interval as an error bar; readings faint."""
    readings, estimates = model.readings, model.estimates
    xs, ys = [p.x for p in readings], [p.y for p in readings]
    ax.scatter(xs, ys, s=14, color=COLORS[FEASIBLE], alpha=FAINT, linewidths=0, label=READINGS_TRACE, zorder=2)
    ax.errorbar(
        [e.x for e in estimates],
        [e.tps for e in estimates],
        yerr=[[e.tps - e.low for e in estimates], [e.high - e.tps for e in estimates]],
        fmt="o",
        markersize=7,
        color=COLORS[FEASIBLE],
        markeredgecolor="#333",
        markeredgewidth=0.6,
        ecolor=COLORS["front"],
        elinewidth=1.2,
        capsize=3,
        label=LABELS[FEASIBLE],
        zorder=3,
    )


def _trials(ax: Axes, model: ParetoModel) -> None:
    """The trials drawn on their own: off the axis at its edge, its PPL written beside it."""
    for group in model.trials:
        for p in group.points:
            if p.note is not None:
                xy = (p.x, p.y)
                style: dict[str, Any] = {"ha": "right", "va": "center", "fontsize": 8, "color": group.color}
                ax.annotate(p.note, xy, xytext=(-9, 0), textcoords="offset points", **style)
        for imputed in (False, True):
            for off in (False, True):
                chosen = [p for p in group.points if p.imputed == imputed and p.off_axis == off]
                if not chosen:
                    continue
                marker = "x" if group.failed else ">" if off else "o"
                ax.scatter(
                    [p.x for p in chosen],
                    [p.y for p in chosen],
                    s=55 if off else 45,
                    marker=marker,
                    label=group.part_name(imputed, off),
                    linewidths=0.9 if imputed else 0.6,
                    zorder=3,
                    **_fill(group.color, hollow=imputed, edgecolors="#333" if marker != "x" else None),
                )


def _open_marks(ax: Axes, marks: Marks, size: float, width: float) -> None:
    """Marks drawn open around the points they mark, in their shape and colour."""
    ax.scatter(
        [p.x for p in marks.points],
        [p.y for p in marks.points],
        s=size,
        marker=MARKERS[marks.shape],
        facecolors="none",
        edgecolors=marks.color,
        linewidths=width,
        label=marks.name,
        zorder=4,
    )


def _lines(ax: Axes, model: ParetoModel) -> None:
    """The front, the verification marks, the cap, the base's line and mark, the claim."""
    if len(model.front) > 1:
        xs, ys = [x for x, _ in model.front], [y for _, y in model.front]
        ax.step(xs, ys, where="post", linestyle=":", color=COLORS["front"], label=FRONT_TRACE, zorder=2)
    for marks in model.verifications:
        _open_marks(ax, marks, 260, 2.2)
    if model.cap is not None:
        label = f"{CAP_TRACE} {model.cap:.4f}"
        ax.axvline(model.cap, color=COLORS["cap"], linestyle="--", linewidth=1.8, label=label, zorder=1)
    if model.base_line is not None:  # the claim: the answer's bar over the base's line
        y = model.base_line.y0
        ax.axhline(y, color=COLORS["base"], linestyle="--", linewidth=1.2, label=BASE_LINE_TRACE, zorder=1)
    base = model.base
    if base is not None:
        ax.scatter(
            [base.x],
            [base.y],
            s=220,
            marker="s",
            facecolors="none",
            edgecolors=COLORS["base"],
            linewidths=2.2,
            label=BASE_TRACE,
            zorder=4,
        )
    claim = model.claim
    if claim is not None:  # the claim itself: answer / base, at the study-wise level
        ax.vlines(
            claim.x0, claim.y0, claim.y1, linewidth=11, color=COLORS["winner"], alpha=0.35, label=CLAIM_TRACE, zorder=2
        )


def _style(label: Label) -> dict[str, Any]:
    style: dict[str, Any] = {"fontsize": LABEL_SIZES[label.kind]}
    style |= {"fontweight": "bold"} if label.kind == ANSWER else {}
    return style | ({"color": label.color} if label.color is not None else {})


def _extents(box: Bbox) -> Box:
    x0, y0, x1, y1 = (float(v) for v in box.extents)
    return x0, y0, x1, y1


def _place_labels(ax: Axes, labels: Sequence[Label], obstacles: Sequence[XY]) -> None:
    """Each label with an arrow to the anchor where it covers the fewest ``obstacles`` (all in
    data coordinates); a ``close`` one right beside its point, with no arrow, where there is room.

    The figure is laid out first, so the label boxes and the marks are
    measured where they will be drawn.
    """
    fig = ax.figure
    assert isinstance(fig, Figure)
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]  # the Agg canvas has one
    points = [(float(x), float(y)) for x, y in ax.transData.transform(obstacles)] if obstacles else []
    area = _extents(ax.bbox)
    per_point = fig.dpi / 72.0  # offsets are in points, the boxes in pixels
    legend = ax.get_legend()
    taken = [_extents(legend.get_window_extent(renderer))] if legend is not None else []
    taken += [_extents(t.get_window_extent(renderer)) for t in ax.texts]  # e.g. an off-axis PPL
    drawn: list[Box] = []
    for label in labels:
        style = _style(label)
        probe = ax.text(0, 0, label.text, **style, bbox=BOX)
        extent = probe.get_window_extent(renderer)
        probe.remove()
        pixels = [(float(x), float(y)) for x, y in ax.transData.transform(label.anchors)]
        # a small label keeps clear of the others' arrows too (each one's extent as drawn)
        avoid = taken + drawn if label.close else taken
        size = (extent.width, extent.height)
        spot, beside = choose_label_spot(pixels, size, points, area, avoid, close=label.close, scale=per_point)
        taken.append(spot.box)
        placed = ax.annotate(
            label.text,
            label.anchors[spot.anchor],
            xytext=(spot.dx / per_point, spot.dy / per_point),
            textcoords="offset points",
            ha=spot.ha,
            va=spot.va,
            bbox=BOX,
            zorder=6,
            arrowprops=None if beside else {"arrowstyle": "->", "color": "#333"},
            **style,
        )
        drawn.append(_extents(placed.get_window_extent(renderer)))


def _pareto_title(model: ParetoModel) -> str:
    title = f"{model.title} ({model.trials_text})"
    if model.estimates_text is not None:
        title += f"\n{model.estimates_text}, {model.bars_text}"
    return title + (f"\n{model.moved}" if model.moved else "")


def _answer_star(ax: Axes, x: Value, y: float, size: float, label: str) -> None:
    """The answer's mark, above every other: a star in the winner's colour."""
    ax.scatter([x], [y], s=size, marker="*", color=COLORS["winner"], edgecolors="#333", zorder=5, label=label)


def draw_pareto(model: ParetoModel) -> Figure:
    """The Pareto plot: configurations at their estimates, the cap, the base and the answer, labelled."""
    fig = new_figure(9.0, 5.6)
    ax = fig.add_subplot()
    _side_by_side(ax, model)
    if model.estimates:
        _estimates(ax, model)
    _trials(ax, model)
    _lines(ax, model)
    winner = model.winner
    if winner is not None:
        _answer_star(ax, winner.x, winner.y, 300, WINNER_TRACE)
    if model.x_range is not None:
        ax.set_xlim(*model.x_range)
    ax.set_xlabel(model.x_title)
    ax.set_ylabel(model.y_title)
    ax.set_title(_pareto_title(model))
    ax.grid(alpha=0.3)
    legend_below(ax)
    _place_labels(ax, model.labels, model.obstacles)  # last: once everything else is drawn
    return fig


# -- the history --------------------------------------------------------------------------------


def _trial_groups(ax: Axes, groups: Sequence[PointGroup], *, imputed_on_top: bool, **filled: Any) -> None:
    """Trials a group at a time: a cross if failed, else a dot (hollow if its TPS is imputed)."""
    for group in groups:
        ax.scatter(
            [p.x for p in group.points],
            [p.y for p in group.points],
            marker="x" if group.failed else "o",
            s=35,
            label=group.name,
            zorder=4 if imputed_on_top and group.imputed else 3,
            **_fill(group.color, hollow=group.imputed, **filled),
        )


def _estimate_lines(ax: Axes, model: HistoryModel) -> None:
    """The base's and the answer's estimates: each a band (its interval) and a line."""
    for level in model.levels:
        alpha, line = LEVEL_STYLES[level.who]
        ax.axhspan(level.low, level.high, color=level.color, alpha=alpha, linewidth=0, label=level.band_name)
        ax.axhline(level.tps, color=level.color, label=level.line_name, **line)
    for marks in model.marks:
        _open_marks(ax, marks, 120, 1.8)


def draw_history(model: HistoryModel) -> Figure:
    """The readings by trial number, with the answer's and the base's estimates (or the best so far)."""
    fig = new_figure(10.0, 6.0)
    ax = fig.add_subplot()
    _trial_groups(ax, model.readings, imputed_on_top=False, alpha=model.opacity)
    if model.best_so_far:  # no standing: the best reading so far
        xs, ys = [n for n, _ in model.best_so_far], [v for _, v in model.best_so_far]
        ax.step(xs, ys, where="post", color=COLORS["front"], linewidth=2, label=BEST_TRACE)
    _estimate_lines(ax, model)
    ax.set_title(model.title)
    ax.set_xlabel(model.x_title)
    ax.set_ylabel(model.y_title)
    ax.grid(alpha=0.3)
    legend_below(ax)
    for label in model.labels:  # in the right margin, level with its line: off the data
        ax.annotate(
            label.text,
            (1.0, label.y),
            xycoords=("axes fraction", "data"),
            xytext=(6, 2 if label.above else -2),
            textcoords="offset points",
            ha="left",
            va="bottom" if label.above else "top",
            fontsize=8.5,
            color=label.color,
            fontweight="bold" if label.kind == ANSWER else "normal",
            annotation_clip=False,
        )
    return fig


# -- the slices and the importance --------------------------------------------------------------


def draw_slice(model: SliceModel) -> Figure:
    fig = new_figure(6.0, 4.2)
    ax = fig.add_subplot()
    _trial_groups(ax, model.groups, imputed_on_top=True)
    answer = model.answer
    if answer is not None:
        _answer_star(ax, answer.value, answer.tps, 220, answer.label)
    if model.ticks is not None:
        ax.set_xticks(list(model.ticks))
    ax.set_xlabel(model.name)
    ax.set_ylabel("TPS")
    ax.set_title(f"Slice: {model.name}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, frameon=False)
    return fig


NOTE_WIDTH = 80  # characters a line of a figure's note holds at its font size in 7 inches


def draw_importance(model: ImportanceModel) -> Figure:
    names = list(model.names)
    drawn = model.note is None and bool(names)
    # a note in place of the bars is wrapped to the figure's width: one long line was cut off at
    # both edges, and the layout gave up on the axes (matplotlib warned "axes sizes collapsed")
    note = textwrap.fill(f"parameter importance: {model.note or ''}", NOTE_WIDTH) if not drawn else ""
    rows = len(names) if drawn else note.count("\n") + 1
    fig = new_figure(7.0, 1.2 + 0.5 * max(1, rows))
    ax = fig.add_subplot()
    if drawn:
        height = 0.38
        for bars in model.bars:
            positions = [i + bars.offset * height for i in range(len(names))]
            ax.barh(positions, list(bars.values), height=height, color=bars.color, label=bars.name)
        ax.set_yticks([i + height / 2 for i in range(len(names))], names)
        ax.legend(fontsize=8)
        ax.set_xlabel("importance (share of variance)")
    else:
        ax.text(0.5, 0.5, note, ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    ax.set_title(model.title)
    return fig


# each figure straight from ReportData, its model built on the way
def pareto_figure(data: ReportData) -> Figure:
    return draw_pareto(pareto_model(data))


def history_figure(data: ReportData) -> Figure:
    return draw_history(history_model(data))


def slice_figure(data: ReportData, name: str) -> Figure:
    return draw_slice(slice_model(data, name))


def importance_figure(data: ReportData) -> Figure:
    return draw_importance(importance_model(data))


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name) or "parameter"


def save_png(fig: Figure, path: Path) -> Path:
    """Atomically: the file is the old one or the whole new one."""
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, format="png")
    os.replace(tmp, path)
    return path


def write_pngs(models: FigureModels, out_dir: Path) -> dict[str, Path]:
    """pareto.png, history.png, importance.png and slice-<param>.png; returns them by stem."""
    written = {
        "pareto": save_png(draw_pareto(models.pareto), out_dir / "pareto.png"),
        "history": save_png(draw_history(models.history), out_dir / "history.png"),
        "importance": save_png(draw_importance(models.importance), out_dir / "importance.png"),
    }
    for model in models.slices:
        stem = f"slice-{_slug(model.name)}"
        written[stem] = save_png(draw_slice(model), out_dir / f"{stem}.png")
    return written


# -- an ablation's forest plot ------------------------------------------------------------------


def draw_forest(model: ForestModel) -> Figure:
    """A point and an interval per switch, coloured by verdict, a line at 0 %; the first switch on top."""
    rows = {row: index for index, row in enumerate(model.rows)}
    height = 2.8 + 0.5 * len(model.rows)
    fig = new_figure(9.0, height)
    ax = fig.add_subplot()
    for group in model.groups:
        measured, unmeasured = group.measured, group.unmeasured
        if measured:
            ax.errorbar(
                [e.value for e in measured],
                [rows[e.row] for e in measured],
                xerr=[[e.value - e.low for e in measured], [e.high - e.value for e in measured]],
                fmt="o",
                markersize=8,
                color=group.color,
                markeredgecolor="#333",
                markeredgewidth=0.6,
                elinewidth=2,
                capsize=4,
                label=group.name,
                zorder=3,
            )
        if unmeasured:
            ys = [rows[e.row] for e in unmeasured]
            ax.scatter(
                [0.0] * len(unmeasured),
                ys,
                marker="x",
                s=70,
                color=group.color,
                linewidths=2,
                label=group.unmeasured_name,
                zorder=3,
            )
    ax.axvline(0.0, color=ZERO_LINE, linestyle="--", linewidth=1.2, zorder=1)
    ax.set_yticks(list(rows.values()), list(rows))
    ax.set_ylim(len(model.rows) - 0.5, -0.5)  # the first switch on top, as in the tables
    ax.set_xlim(*model.x_range)
    ax.xaxis.set_major_formatter(lambda value, _: f"{value:+g} %" if value else "0 %")
    ax.set_xlabel(model.x_title)
    ax.set_title(model.title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    # under the tick labels and the axis title, which take about 0.6 inch whatever the axes' height
    legend_below(ax, order=model.legend_order, below=-0.6 / (0.6 * height))
    return fig
