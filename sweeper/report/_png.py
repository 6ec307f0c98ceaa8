"""The report's static figures (matplotlib PNGs), built from ReportData only.

Uses matplotlib's object API (``Figure`` + the Agg canvas), never pyplot,
so nothing global changes in the calling process. Artist labels mirror the
plotly traces: ``PPL cap``, the trial categories, ``winner #N (STATUS)``.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from sweeper.report._data import CATEGORIES, COLORS, FAILED, LABELS, ReportData
from sweeper.report._plotly import CAP_TRACE, FRONT_TRACE, VERIFIED_TRACE, VERIFY_FAILED_TRACE, plot_xy

logger = logging.getLogger(__name__)

DPI = 110


def _new_figure(width: float = 8.0, height: float = 5.0) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def pareto_figure(data: ReportData) -> Figure:
    fig = _new_figure(9.0, 5.6)
    ax = fig.add_subplot()
    for category in CATEGORIES:
        points = data.by_category(category)
        if not points:
            continue
        xy = [plot_xy(p, data) for p in points]
        solid = [(x, y) for (x, y), p in zip(xy, points) if not p.tps_imputed]
        hollow = [(x, y) for (x, y), p in zip(xy, points) if p.tps_imputed]
        marker = "x" if category == FAILED else "o"
        if solid:
            ax.scatter(*zip(*solid), s=45, marker=marker, color=COLORS[category], label=LABELS[category],
                       edgecolors="#333" if marker == "o" else None, linewidths=0.6, zorder=3)  # fmt: skip
        if hollow:
            ax.scatter(*zip(*hollow), s=45, marker="o", facecolors="none", edgecolors=COLORS[category],
                       label=f"{LABELS[category]}, TPS imputed", zorder=3)  # fmt: skip
    front = sorted((data.point(n) for n in data.pareto), key=lambda p: p.ppl or 0.0)
    if len(front) > 1:
        ax.step([p.ppl for p in front], [p.tps for p in front], where="post", linestyle=":",
                color=COLORS["front"], label=FRONT_TRACE, zorder=2)  # fmt: skip
    for status, label, marker, color in (
        ("verified", VERIFIED_TRACE, "o", COLORS["verified"]),
        ("failed", VERIFY_FAILED_TRACE, "X", COLORS["verify-failed"]),
    ):
        marked = [plot_xy(p, data) for p in data.points if p.verification == status]
        if marked:
            ax.scatter(*zip(*marked), s=260, marker=marker, facecolors="none", edgecolors=color,
                       linewidths=2.2, label=label, zorder=4)  # fmt: skip
    if data.cap is not None:
        ax.axvline(data.cap, color=COLORS["cap"], linestyle="--", linewidth=1.8,
                   label=f"{CAP_TRACE} {data.cap:.4f}", zorder=1)  # fmt: skip
    winner = data.winner
    if winner is not None:
        x, y = plot_xy(winner, data)
        ax.scatter([x], [y], s=300, marker="*", color=COLORS["winner"], edgecolors="#333", zorder=5,
                   label="winner")  # fmt: skip
        left = x > sum(ax.get_xlim()) / 2  # keep the label inside the axes
        ax.annotate(
            f"winner #{winner.number} ({data.answer.status.upper()})", (x, y),
            xytext=(-18 if left else 18, -28), textcoords="offset points", fontsize=10,
            fontweight="bold", ha="right" if left else "left",
            arrowprops={"arrowstyle": "->", "color": "#333"},
        )  # fmt: skip
    ax.set_xlabel("PPL (lower is better)")
    ax.set_ylabel("TPS (output tokens/s, higher is better)")
    ax.set_title(f"{data.study_name}: TPS against PPL ({len(data.points)} trials)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return fig


def history_figure(data: ReportData) -> Figure:
    fig = _new_figure()
    ax = fig.add_subplot()
    for category in CATEGORIES:
        points = data.by_category(category)
        if points:
            ax.scatter([p.number for p in points], [p.tps if p.tps is not None else 0.0 for p in points],
                       color=COLORS[category], marker="x" if category == FAILED else "o", s=35,
                       label=LABELS[category], zorder=3)  # fmt: skip
    series = [(n, v) for n, v in data.best_so_far if v is not None]
    if series:
        ax.step(*zip(*series), where="post", color=COLORS["front"], linewidth=2,
                label="best feasible TPS so far")  # fmt: skip
    ax.set_xlabel("trial number")
    ax.set_ylabel("TPS")
    ax.set_title("Best feasible TPS against trial number")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def slice_figure(data: ReportData, name: str) -> Figure:
    fig = _new_figure(6.0, 4.2)
    ax = fig.add_subplot()
    for category in CATEGORIES:
        points = [p for p in data.by_category(category) if name in p.params]
        if points:
            ax.scatter([p.params[name] for p in points], [p.tps if p.tps is not None else 0.0 for p in points],
                       color=COLORS[category], marker="x" if category == FAILED else "o", s=35,
                       label=LABELS[category])  # fmt: skip
    ax.set_xlabel(name)
    ax.set_ylabel("TPS")
    ax.set_title(f"Slice: {name}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def importance_figure(data: ReportData) -> Figure:
    names = list(data.param_names)
    fig = _new_figure(7.0, 1.2 + 0.5 * max(1, len(names)))
    ax = fig.add_subplot()
    if data.importance and names:
        height = 0.38
        for offset, (target, color) in enumerate((("tps", COLORS["feasible"]), ("ppl", COLORS["infeasible"]))):
            values = data.importance.get(target)
            if values:
                ax.barh([i + offset * height for i in range(len(names))],
                        [values.get(n, 0.0) for n in names], height=height, color=color,
                        label=f"importance for {target.upper()}")  # fmt: skip
        ax.set_yticks([i + height / 2 for i in range(len(names))], names)
        ax.legend(fontsize=8)
        ax.set_xlabel("importance (share of variance)")
    else:
        ax.text(0.5, 0.5, f"parameter importance: {data.importance_note}", ha="center", va="center",
                transform=ax.transAxes)  # fmt: skip
        ax.set_axis_off()
    ax.set_title("Parameter importance (PED-ANOVA)")
    return fig


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name) or "parameter"


def _save(fig: Figure, path: Path) -> Path:
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, format="png")
    os.replace(tmp, path)
    return path


def write_pngs(data: ReportData, out_dir: Path) -> dict[str, Path]:
    """pareto.png, history.png, importance.png and slice-<param>.png; returns them by stem."""
    written = {
        "pareto": _save(pareto_figure(data), out_dir / "pareto.png"),
        "history": _save(history_figure(data), out_dir / "history.png"),
        "importance": _save(importance_figure(data), out_dir / "importance.png"),
    }
    for name in data.param_names:
        stem = f"slice-{_slug(name)}"
        written[stem] = _save(slice_figure(data, name), out_dir / f"{stem}.png")
    return written
