"""The report's static figures (matplotlib PNGs), built from ReportData only.

Uses matplotlib's object API (``Figure`` + the Agg canvas), never pyplot,
so nothing global changes in the calling process. Artist labels mirror the
plotly traces: ``PPL cap``, the trial categories, ``winner``, ``base manifest``,
``one server's reading``, the claim and the band of configurations set side by
side; the answer's label is ``answer #N (STATUS): X tok/s (95% interval
LOW-HIGH)``, at its configuration's estimate, and every other configuration is
labelled with its trial and figure.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from storage import VerificationStatus
from sweeper.report._data import CATEGORIES, COLORS, FAILED_TRIAL, FEASIBLE, IMPUTED, LABELS, ReportData
from sweeper.report._plotly import (
    BASE_LINE_TRACE,
    BASE_TRACE,
    BEST_TRACE,
    CAP_TRACE,
    CLAIM_TRACE,
    FAINT,
    FRONT_TRACE,
    IMPORTANCE_TITLE,
    LEFTOVER_FEASIBLE,
    READINGS_TRACE,
    SIDE_BY_SIDE_TRACE,
    VERIFIED_TRACE,
    VERIFY_FAILED_TRACE,
    WINNER_TRACE,
    Label,
    choose_label_spot,
    claim_band,
    clipped,
    config_label,
    config_xs,
    config_xy,
    history_labels,
    history_marks,
    other_configurations,
    pareto_obstacles,
    plot_xy,
    position,
    ppl_axis,
    ppl_text,
    side_by_side,
    side_by_side_text,
    slice_answer,
    slice_groups,
    whole_ticks,
)

logger = logging.getLogger(__name__)

DPI = 110
BOX = {"boxstyle": "round,pad=0.25", "facecolor": "white", "edgecolor": "none", "alpha": 0.85}


def new_figure(width: float = 8.0, height: float = 5.0) -> Figure:
    """A figure on its own Agg canvas (no pyplot: nothing global changes)."""
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _configurations(ax: Axes, data: ReportData) -> None:
    """Each configuration once, at its estimate with the interval as an error bar; readings faint."""
    configs = data.configurations
    xs = config_xs(data)
    readings = [(xs[c.first], v) for c in configs for _, v in c.readings]
    ax.scatter(*zip(*readings), s=14, color=COLORS[FEASIBLE], alpha=FAINT, linewidths=0, label=READINGS_TRACE, zorder=2)
    ax.errorbar(
        [xs[c.first] for c in configs],
        [c.tps for c in configs],
        yerr=[[c.tps - c.low for c in configs], [c.high - c.tps for c in configs]],
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


def _place_labels(ax: Axes, labels: list[Label], obstacles: list[tuple[float, float]]) -> None:
    """Each (text, anchors, style, close) label with an arrow to the anchor where it covers the
    fewest ``obstacles`` (all in data coordinates); a ``close`` one right beside its point, with
    no arrow, where there is room.

    The figure is laid out first, so the label boxes and the marks are
    measured where they will be drawn.
    """
    fig = ax.get_figure()
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    points = [tuple(xy) for xy in ax.transData.transform(obstacles)] if obstacles else []
    area = tuple(ax.bbox.extents)
    per_point = fig.dpi / 72.0  # offsets are in points, the boxes in pixels
    legend = ax.get_legend()
    taken = [tuple(legend.get_window_extent(renderer).extents)] if legend is not None else []
    taken += [tuple(t.get_window_extent(renderer).extents) for t in ax.texts]  # e.g. an off-axis PPL
    drawn: list[tuple[float, float, float, float]] = []
    for text, anchors, style, close in labels:
        probe = ax.text(0, 0, text, **style, bbox=BOX)
        extent = probe.get_window_extent(renderer)
        probe.remove()
        pixels = [tuple(xy) for xy in ax.transData.transform(anchors)]
        # a small label keeps clear of the others' arrows too (each one's extent as drawn)
        avoid = taken + drawn if close else taken
        size = (extent.width, extent.height)
        spot, beside = choose_label_spot(pixels, size, points, area, avoid, close=close, scale=per_point)
        taken.append(spot.box)
        placed = ax.annotate(
            text,
            anchors[spot.anchor],
            xytext=(spot.dx / per_point, spot.dy / per_point),
            textcoords="offset points",
            ha=spot.ha,
            va=spot.va,
            bbox=BOX,
            zorder=6,
            arrowprops=None if beside else {"arrowstyle": "->", "color": "#333"},
            **style,
        )
        drawn.append(tuple(placed.get_window_extent(renderer).extents))


def pareto_figure(data: ReportData) -> Figure:
    fig = new_figure(9.0, 5.6)
    ax = fig.add_subplot()
    configs = data.configurations
    drawn = {n for c in configs for n in c.numbers}
    for index, (left, right, _) in enumerate(side_by_side(data)):  # the disclosure, under everything
        ax.axvspan(
            left,
            right,
            color=COLORS[FAILED_TRIAL],
            alpha=0.12,
            linewidth=0,
            zorder=0,
            label=SIDE_BY_SIDE_TRACE if index == 0 else "_nolegend_",
        )
    if configs:
        _configurations(ax, data)
    for category in CATEGORIES:
        points = [p for p in data.by_category(category) if p.number not in drawn]
        if not points:
            continue
        label = LEFTOVER_FEASIBLE if category == FEASIBLE and configs else LABELS[category]
        xy = [plot_xy(p, data) for p in points]
        for p, (x, y) in zip(points, xy):
            if clipped(p, data):  # off the axis: at its edge, its PPL written beside it
                ax.annotate(
                    f"{ppl_text(p.ppl)} \u2192",
                    (x, y),
                    xytext=(-9, 0),
                    textcoords="offset points",
                    ha="right",
                    va="center",
                    fontsize=8,
                    color=COLORS[category],
                )
        for imputed in (False, True):
            for off in (False, True):
                chosen = [xy for xy, p in zip(xy, points) if p.tps_imputed == imputed and clipped(p, data) == off]
                if not chosen:
                    continue
                marker = "x" if category == FAILED_TRIAL else ">" if off else "o"
                name = f"{LABELS[category]}, {IMPUTED}" if imputed else label
                ax.scatter(
                    *zip(*chosen),
                    s=55 if off else 45,
                    marker=marker,
                    label=name + (", PPL off the axis" if off else ""),
                    linewidths=0.9 if imputed else 0.6,
                    zorder=3,
                    **(
                        {"facecolors": "none", "edgecolors": COLORS[category]}
                        if imputed
                        else {"color": COLORS[category], "edgecolors": "#333" if marker != "x" else None}
                    ),
                )
    if configs:
        front = [config_xy(c, data) for c in data.configuration_front()]
    else:
        front = [(p.ppl, p.tps) for p in sorted((data.point(n) for n in data.pareto), key=lambda p: p.ppl or 0.0)]
    if len(front) > 1:
        ax.step(*zip(*front), where="post", linestyle=":", color=COLORS["front"], label=FRONT_TRACE, zorder=2)
    for status, label, marker, color in (
        (VerificationStatus.VERIFIED, VERIFIED_TRACE, "o", COLORS["verified"]),
        (VerificationStatus.FAILED, VERIFY_FAILED_TRACE, "X", COLORS["verify-failed"]),
    ):
        marked = [position(p, data) for p in data.points if p.verification is status]
        if marked:
            ax.scatter(
                *zip(*marked),
                s=260,
                marker=marker,
                facecolors="none",
                edgecolors=color,
                linewidths=2.2,
                label=label,
                zorder=4,
            )
    if data.cap is not None:
        ax.axvline(
            data.cap, color=COLORS["cap"], linestyle="--", linewidth=1.8, label=f"{CAP_TRACE} {data.cap:.4f}", zorder=1
        )
    base = data.base_configuration
    if base is not None and not base.is_answer:  # the claim: the answer's bar over the base's line
        ax.axhline(base.tps, color=COLORS["base"], linestyle="--", linewidth=1.2, label=BASE_LINE_TRACE, zorder=1)
    if base is not None:
        ax.scatter(
            [config_xs(data)[base.first]],
            [base.tps],
            s=220,
            marker="s",
            facecolors="none",
            edgecolors=COLORS["base"],
            linewidths=2.2,
            label=BASE_TRACE,
            zorder=4,
        )
    claim = claim_band(data)
    if claim is not None:  # the claim itself: answer / base, at the study-wise level
        cx, low, high = claim
        ax.vlines(cx, low, high, linewidth=11, color=COLORS["winner"], alpha=0.35, label=CLAIM_TRACE, zorder=2)
    winner = data.winner
    if winner is not None:
        config = data.answer_configuration
        x, y = config_xy(config, data) if config is not None else plot_xy(winner, data)
        ax.scatter([x], [y], s=300, marker="*", color=COLORS["winner"], edgecolors="#333", zorder=5, label=WINNER_TRACE)
    labels = []  # the answer's first: it gets the best spot; the small ones next, right beside their points
    if winner is not None:
        labels.append((data.answer_label(sep="\n"), [(x, y)], {"fontsize": 10, "fontweight": "bold"}, False))
    for other in other_configurations(data):  # every configuration is named; other points: the legend
        labels.append((config_label(other), [config_xy(other, data)], {"fontsize": 8, "color": COLORS["front"]}, True))
    if base is not None and not base.is_answer:
        labels.append(
            (data.base_label(sep="\n"), [config_xy(base, data)], {"fontsize": 9, "color": COLORS["base"]}, False)
        )
    axis = ppl_axis(data)
    if axis is not None:
        ax.set_xlim(axis.low, axis.high)
    ax.set_xlabel("PPL (lower is better)")
    ax.set_ylabel("TPS (output tokens/s, higher is better)")
    title = f"{data.study_name}: TPS against PPL ({data.trials_text()})"
    if configs:
        title += f"\n{len(configs)} gate-passing configurations at their estimates, bars: {configs[0].level} intervals"
    moved = side_by_side_text(data)
    if moved:
        title += f"\n{moved}"
    ax.set_title(title)
    ax.grid(alpha=0.3)
    legend_below(ax)
    _place_labels(ax, labels, pareto_obstacles(data))  # last: once everything else is drawn
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


def _history_readings(ax: Axes, data: ReportData, alpha: float) -> None:
    for category in CATEGORIES:
        for imputed in (False, True):
            points = [p for p in data.by_category(category) if p.tps_imputed == imputed]
            if not points:
                continue
            ax.scatter(
                [p.number for p in points],
                [p.tps if p.tps is not None else 0.0 for p in points],
                marker="x" if category == FAILED_TRIAL else "o",
                s=35,
                label=f"{LABELS[category]}, {IMPUTED}" if imputed else LABELS[category],
                zorder=3,
                **(
                    {"facecolors": "none", "edgecolors": COLORS[category]}
                    if imputed
                    else {"color": COLORS[category], "alpha": alpha}
                ),
            )


def history_figure(data: ReportData) -> Figure:
    fig = new_figure(10.0, 6.0)
    ax = fig.add_subplot()
    answer, base = data.answer_configuration, data.base_configuration
    if answer is None and base is None:  # no standing: the best reading so far
        _history_readings(ax, data, 1.0)
        series = [(n, v) for n, v in data.best_so_far if v is not None]
        if series:
            ax.step(*zip(*series), where="post", color=COLORS["front"], linewidth=2, label=BEST_TRACE)
        ax.set_title("Best feasible TPS against trial number")
    else:
        _history_readings(ax, data, FAINT)
        if base is not None and not base.is_answer:
            ax.axhspan(
                base.low,
                base.high,
                color=COLORS["base"],
                alpha=0.12,
                linewidth=0,
                label=f"base's {base.level} interval",
            )
            ax.axhline(base.tps, color=COLORS["base"], linestyle="--", linewidth=1.8, label="base's TPS estimate")
        if answer is not None:
            ax.axhspan(
                answer.low,
                answer.high,
                color=COLORS["winner"],
                alpha=0.25,
                linewidth=0,
                label=f"answer's {answer.level} interval",
            )
            ax.axhline(answer.tps, color=COLORS["winner"], linewidth=2.2, label="answer's TPS estimate")
        for readings, name, symbol, color, _ in history_marks(data):
            ax.scatter(
                [n for n, _ in readings],
                [v for _, v in readings],
                s=120,
                marker=_MARKERS[symbol],
                linewidths=1.8,
                label=name,
                zorder=4,
                facecolors="none",
                edgecolors=color,
            )
        ax.set_title("TPS readings by trial (faint), the answer's estimate and the base's")
    ax.set_xlabel("trial number")
    ax.set_ylabel("TPS")
    ax.grid(alpha=0.3)
    legend_below(ax)
    for text, y, color, above in history_labels(data, sep="\n"):
        # in the right margin, level with its line: off the data
        ax.annotate(
            text,
            (1.0, y),
            xycoords=("axes fraction", "data"),
            xytext=(6, 2 if above else -2),
            textcoords="offset points",
            ha="left",
            va="bottom" if above else "top",
            fontsize=8.5,
            color=color,
            fontweight="bold" if color != COLORS["base"] else "normal",
            annotation_clip=False,
        )
    return fig


# plotly symbol -> matplotlib marker
_MARKERS = {"circle-open": "o", "square-open": "s", "diamond-open": "D", "triangle-up-open": "^"}


def slice_figure(data: ReportData, name: str) -> Figure:
    fig = new_figure(6.0, 4.2)
    ax = fig.add_subplot()
    for category, imputed, points in slice_groups(data, name):
        ax.scatter(
            [p.params[name] for p in points],
            [p.tps if p.tps is not None else 0.0 for p in points],
            marker="x" if category == FAILED_TRIAL else "o",
            s=35,
            label=f"{LABELS[category]}, {IMPUTED}" if imputed else LABELS[category],
            zorder=4 if imputed else 3,
            **({"facecolors": "none", "edgecolors": COLORS[category]} if imputed else {"color": COLORS[category]}),
        )
    mark = slice_answer(data, name)
    if mark is not None:
        value, tps, label = mark
        ax.scatter([value], [tps], s=220, marker="*", color=COLORS["winner"], edgecolors="#333", zorder=5, label=label)
    ticks = whole_ticks(data, name)
    if ticks is not None:
        ax.set_xticks(ticks)
    ax.set_xlabel(name)
    ax.set_ylabel("TPS")
    ax.set_title(f"Slice: {name}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, frameon=False)
    return fig


def importance_figure(data: ReportData) -> Figure:
    names = list(data.param_names)
    fig = new_figure(7.0, 1.2 + 0.5 * max(1, len(names)))
    ax = fig.add_subplot()
    if data.importance and names:
        height = 0.38
        for offset, (target, color) in enumerate((("tps", COLORS["feasible"]), ("ppl", COLORS["infeasible"]))):
            values = data.importance.get(target)
            if values:
                ax.barh(
                    [i + offset * height for i in range(len(names))],
                    [values.get(n, 0.0) for n in names],
                    height=height,
                    color=color,
                    label=f"importance for {target.upper()}",
                )
        ax.set_yticks([i + height / 2 for i in range(len(names))], names)
        ax.legend(fontsize=8)
        ax.set_xlabel("importance (share of variance)")
    else:
        ax.text(
            0.5, 0.5, f"parameter importance: {data.importance_note}", ha="center", va="center", transform=ax.transAxes
        )
        ax.set_axis_off()
    ax.set_title(IMPORTANCE_TITLE)
    return fig


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name) or "parameter"


def save_png(fig: Figure, path: Path) -> Path:
    """Atomically: the file is the old one or the whole new one."""
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, format="png")
    os.replace(tmp, path)
    return path


def write_pngs(data: ReportData, out_dir: Path) -> dict[str, Path]:
    """pareto.png, history.png, importance.png and slice-<param>.png; returns them by stem."""
    written = {
        "pareto": save_png(pareto_figure(data), out_dir / "pareto.png"),
        "history": save_png(history_figure(data), out_dir / "history.png"),
        "importance": save_png(importance_figure(data), out_dir / "importance.png"),
    }
    for name in data.param_names:
        stem = f"slice-{_slug(name)}"
        written[stem] = save_png(slice_figure(data, name), out_dir / f"{stem}.png")
    return written
