"""The report's interactive figures (plotly), built from ReportData only.

Trace names are part of the contract (tests and readers look for them):
``PPL cap``, one trace per trial category, ``Pareto front``,
``verified on held-out data``, ``failed verification``, ``winner``, and
where the study has a standing ``one server's reading`` and ``base manifest``.
A gate-passing configuration is drawn once, at ``Standing.tps_interval``
(its estimate, the figure the claim rests on) with the interval as an error
bar; its single readings are the faint dots. The PPL axis fits the passing
configurations and the cap: a trial far over the cap sits at the axis' edge
with its PPL written beside it, and configurations of one PPL stand side by
side, in PPL order, over a band that says so (``SIDE_BY_SIDE_TRACE``; the
hover and the note under the title give each one's PPL). The claim is drawn
at the answer: the base's figure times the claimed speedup's interval
(``CLAIM_TRACE``). Every configuration is labelled with its trial and
figure; every other point is in the legend. The history marks the readings
each estimate counts (``the answer's readings``, ``the base's readings``)
and those it does not; its labels sit in the right margin, off the data.
The slice plots mark the answer at its figure. A TPS that was imputed, not
measured, is drawn hollow and named so.
Standalone files carry plotly.js inline, so they open with no network.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from storage import VerificationStatus
from sweeper.answer import tps_text
from sweeper.report._data import (
    CATEGORIES,
    COLORS,
    FAILED_TRIAL,
    FEASIBLE,
    IMPUTED,
    INFEASIBLE,
    LABELS,
    ConfigurationPoint,
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
READINGS_TRACE = "one server's reading"
BASE_TRACE = "base manifest"
ANSWER_READINGS_TRACE = "the answer's readings"
BASE_READINGS_TRACE = "the base's readings"
UNCOUNTED_TRACE = "the reading that selected the answer (not counted)"
BASE_LINE_TRACE = "base's TPS estimate"
BASE_UNCOUNTED_TRACE = "the base's readings outside the claim's rounds (not counted)"
CLAIM_TRACE = "the claim: base's TPS x the speedup's study-wise interval"
SIDE_BY_SIDE_TRACE = "set side by side at (nearly) one PPL: the offset is not PPL"
IMPORTANCE_TITLE = "Parameter importance (PED-ANOVA; imputed TPS left out)"
LEFTOVER_FEASIBLE = "feasible trial without a full TPS reading"
FAINT = 0.35  # the opacity of single readings where estimates are drawn
BASE_FILL = "rgba(69, 123, 157, 0.15)"
WINNER_FILL = "rgba(255, 183, 3, 0.25)"
SIDE_BY_SIDE_FILL = "rgba(141, 153, 174, 0.12)"
PLOT_CONFIG = {"displaylogo": False, "responsive": True}


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def failed_x(data: ReportData) -> float:
    """Where failed trials without a PPL sit on the PPL axis: at the cap, else mid-range."""
    if data.cap is not None:
        return data.cap
    ppls = [p.ppl for p in data.points if _finite(p.ppl)]
    return (min(ppls) + max(ppls)) / 2 if ppls else 1.0


@dataclasses.dataclass(frozen=True)
class PplAxis:
    """The Pareto plot's PPL axis, fitted to the passing configurations and the cap.

    A trial whose PPL lies beyond ``edge`` (or is infinite) is drawn at the
    edge, marked as off the axis, with its PPL written beside it, so one
    far-off rejected trial does not squeeze every passing one onto a line.
    """

    low: float
    edge: float

    @property
    def high(self) -> float:
        """The axis' right end: a little room past the edge for the marks drawn there."""
        return self.edge + 0.04 * (self.edge - self.low)

    def clipped(self, ppl: float | None) -> bool:
        return ppl is not None and (not math.isfinite(ppl) or ppl > self.edge)


def ppl_axis(data: ReportData) -> PplAxis | None:
    """The fitted axis (None: nothing passed the gate, the axis spans every trial)."""
    core = [c.ppl for c in data.configurations]
    core += [p.ppl for p in data.by_category(FEASIBLE) if p.ppl is not None and math.isfinite(p.ppl)]
    if not core:
        return None
    core += [data.cap] if data.cap is not None else []
    lo, hi = min(core), max(core)
    span = hi - lo or 0.05 * abs(hi) or 0.05
    return PplAxis(low=lo - 0.15 * span, edge=hi + 0.6 * span)


def ppl_text(ppl: float | None) -> str:
    return "PPL inf" if ppl is None or not math.isfinite(ppl) else f"PPL {ppl:.2f}"


def plot_xy(point: TrialPoint, data: ReportData) -> tuple[float, float]:
    """The (PPL, TPS) position of a trial on the Pareto plot (failed: TPS 0; off the axis: its edge)."""
    axis = ppl_axis(data)
    if axis is not None and point.category != FAILED_TRIAL and axis.clipped(point.ppl):
        x = axis.edge
    else:
        x = point.ppl if _finite(point.ppl) else failed_x(data)
    y = point.tps if point.tps is not None and point.category != FAILED_TRIAL else 0.0
    return float(x), float(y)


def clipped(point: TrialPoint, data: ReportData) -> bool:
    """Is the trial drawn at the PPL axis' edge instead of at its PPL?"""
    axis = ppl_axis(data)
    return axis is not None and point.category != FAILED_TRIAL and axis.clipped(point.ppl)


DODGE = 0.025  # the share of the PPL axis between configurations of (nearly) the same PPL


def _dodge_step(data: ReportData) -> float:
    axis = ppl_axis(data)
    return DODGE * (axis.high - axis.low) if axis is not None else 0.0


def ppl_groups(data: ReportData) -> list[list[ConfigurationPoint]]:
    """The configurations by PPL, those of nearly the same PPL (closer than the bars' spacing:
    speed-only knobs leave it alone) in one group, each group in PPL order, then trial order."""
    step = _dodge_step(data)
    groups: list[list[ConfigurationPoint]] = []
    for config in sorted(data.configurations, key=lambda c: (c.ppl, c.first)):
        if groups and config.ppl - groups[-1][-1].ppl < step:
            groups[-1].append(config)
        else:
            groups.append([config])
    return groups


def config_xs(data: ReportData) -> dict[int, float]:
    """Where each configuration (by first trial) sits on the PPL axis: at its PPL, except that
    configurations of nearly the same PPL are set side by side around their mean PPL, in PPL
    order, so their bars do not cover one another; ``side_by_side`` discloses it."""
    step = _dodge_step(data)
    xs = {}
    for group in ppl_groups(data):
        centre = sum(c.ppl for c in group) / len(group)
        for index, config in enumerate(group):
            xs[config.first] = config.ppl if len(group) == 1 else centre + (index - (len(group) - 1) / 2) * step
    return xs


def side_by_side(data: ReportData) -> list[tuple[float, float, list[ConfigurationPoint]]]:
    """Each group set side by side: (left, right) of its band on the PPL axis, its members."""
    step, xs = _dodge_step(data), config_xs(data)
    return [(xs[g[0].first] - step / 2, xs[g[-1].first] + step / 2, g) for g in ppl_groups(data) if len(g) > 1]


def side_by_side_text(data: ReportData) -> str | None:
    """``set side by side (the offset is not PPL): #0, #2, #1 at PPL 2.2100`` (each one's PPL
    where they differ); None: no configuration is moved."""
    groups = side_by_side(data)
    if not groups:
        return None
    parts = []
    for _, _, group in groups:
        if len({f"{c.ppl:.4f}" for c in group}) == 1:
            parts.append(f"{', '.join(f'#{c.first}' for c in group)} at PPL {group[0].ppl:.4f}")
        else:
            parts.append(", ".join(f"#{c.first} at PPL {c.ppl:.4f}" for c in group))
    return "set side by side (the offset is not PPL): " + "; ".join(parts)


def claim_band(data: ReportData) -> tuple[float, float, float] | None:
    """(x, low, high) of the claim drawn at the answer: the base's figure times the ends of the
    claimed speedup's study-wise interval (None: no claim over the base)."""
    answer, base = data.answer_configuration, data.base_configuration
    now = data.answer.standing
    if answer is None or base is None or answer.is_base or now is None or not data.answer.is_the_claim:
        return None
    speedup = now.speedup
    if speedup is None:
        return None
    return config_xs(data)[answer.first], base.tps * speedup.low, base.tps * speedup.high


def other_configurations(data: ReportData) -> list[ConfigurationPoint]:
    """The configurations that are neither the answer nor the base: each gets a label of its own."""
    return [c for c in data.configurations if not c.is_answer and not c.is_base]


def config_label(config: ConfigurationPoint, sep: str = " ") -> str:
    """The label of a configuration that is neither the answer nor the base: its trial and figure."""
    return f"#{config.first}:{sep}{config.tps_text()}"


def config_xy(config: ConfigurationPoint, data: ReportData) -> tuple[float, float]:
    return config_xs(data)[config.first], config.tps


def position(point: TrialPoint, data: ReportData) -> tuple[float, float]:
    """Where a trial's marks go: its configuration's estimate when it has one, else its own point."""
    config = data.configuration_of(point.number)
    if config is not None:
        return config_xy(config, data)
    return plot_xy(point, data)


def tps_values(data: ReportData) -> list[float]:
    """Every TPS a plot shows: the readings and the ends of the intervals."""
    values = [p.tps for p in data.points if p.tps is not None]
    return values + [v for c in data.configurations for v in (c.low, c.high)]


def _tps_top(data: ReportData) -> float:
    values = tps_values(data)
    return max(values) * 1.08 if values else 1.0


def _tps_bottom(data: ReportData) -> float:
    """Failed trials sit at TPS 0; without them the axis starts near the slowest trial."""
    values = tps_values(data)
    if data.by_category(FAILED_TRIAL) or not values:
        return 0.0
    return min(values) * 0.9


def _error_y(configs: list[ConfigurationPoint]) -> dict:
    return {
        "type": "data",
        "symmetric": False,
        "array": [c.high - c.tps for c in configs],
        "arrayminus": [c.tps - c.low for c in configs],
        "color": COLORS["front"],
        "thickness": 1.5,
        "width": 6,
    }


def _readings_trace(data: ReportData) -> go.Scatter:
    """Each server's reading of a configuration: a faint dot at the configuration's PPL."""
    configs = data.configurations
    xs = config_xs(data)
    return go.Scatter(
        x=[xs[c.first] for c in configs for _ in c.readings],
        y=[v for c in configs for _, v in c.readings],
        mode="markers",
        name=READINGS_TRACE,
        legendgroup=FEASIBLE,
        marker={"color": COLORS[FEASIBLE], "size": 6, "opacity": FAINT},
        text=[f"trial #{n}: one server read {v:.2f} tok/s" for c in configs for n, v in c.readings],
        hoverinfo="text",
        customdata=[n for c in configs for n, _ in c.readings],
    )


Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in pixels, y up


@dataclasses.dataclass(frozen=True)
class Spot:
    """Where a label goes: ``anchors[anchor]`` moved by (dx, dy) pixels (y up), aligned by ha/va."""

    anchor: int
    dx: float
    dy: float
    ha: str  # left | right | center
    va: str  # top | bottom | center
    box: Box


def _box(x: float, y: float, width: float, height: float, ha: str, va: str) -> Box:
    x0 = {"left": x, "right": x - width, "center": x - width / 2}[ha]
    y0 = {"bottom": y, "top": y - height, "center": y - height / 2}[va]
    return x0, y0, x0 + width, y0 + height


def _overlaps(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


ARROW_SPOTS = (  # (dx, dy, ha, va) in points: beside the point first, then further away
    (30, -36, "left", "top"),
    (-30, -36, "right", "top"),
    (30, 36, "left", "bottom"),
    (-30, 36, "right", "bottom"),
    (40, 0, "left", "center"),
    (-40, 0, "right", "center"),
    (30, -90, "left", "top"),
    (-30, -90, "right", "top"),
    (30, 90, "left", "bottom"),
    (-30, 90, "right", "bottom"),
    (60, -150, "left", "top"),
    (-60, -150, "right", "top"),
    (60, 150, "left", "bottom"),
    (-60, 150, "right", "bottom"),
    (60, -220, "left", "top"),
    (-60, -220, "right", "top"),
    # further along the axis, for a point in a crowd (several configurations of one PPL)
    (110, 50, "left", "bottom"),
    (110, -50, "left", "top"),
    (-110, 50, "right", "bottom"),
    (-110, -50, "right", "top"),
    (180, 100, "left", "bottom"),
    (180, -100, "left", "top"),
    (-180, 100, "right", "bottom"),
    (-180, -100, "right", "top"),
)


# right beside the point, clear of its bar, no arrow: where a small label (a configuration's trial
# and figure) goes when one of them covers no other label
CLOSE_SPOTS = (
    (8, 0, "left", "center"),
    (-8, 0, "right", "center"),
    (8, -6, "left", "top"),
    (-8, -6, "right", "top"),
    (8, 6, "left", "bottom"),
    (-8, 6, "right", "bottom"),
)
# (text, anchors in data coordinates, font or style, beside the point first: no arrow there)
Label = tuple[str, list[tuple[float, float]], dict, bool]


def choose_spot(
    anchors: list[tuple[float, float]],
    size: tuple[float, float],
    obstacles: list[tuple[float, float]],
    area: Box,
    taken: list[Box],
    spots: tuple[tuple[float, float, str, str], ...] = ARROW_SPOTS,
    scale: float = 1.0,
    reach: bool = False,
) -> Spot:
    """The spot, around any of ``anchors``, whose label box covers the fewest ``obstacles``.

    Everything in pixels, y up; ``spots`` are offsets times ``scale``. A box
    that leaves ``area`` or covers a label already placed (``taken``) comes
    last; ties go to the earlier anchor and spot. The box checked is a few
    pixels larger than the text; with ``reach``, against ``taken`` it spans
    the arrow to the anchor too.
    """
    width, height = size[0] + 8, size[1] + 6
    best: tuple[tuple[float, int, int], Spot] | None = None
    for which, (ax, ay) in enumerate(anchors):
        for index, (dx, dy, ha, va) in enumerate(spots):
            dx, dy = dx * scale, dy * scale
            box = _box(ax + dx, ay + dy, width, height, ha, va)
            inside = box[0] >= area[0] and box[1] >= area[1] and box[2] <= area[2] and box[3] <= area[3]
            covered = sum(1 for x, y in obstacles if box[0] <= x <= box[2] and box[1] <= y <= box[3])
            span = (min(box[0], ax), min(box[1], ay), max(box[2], ax), max(box[3], ay)) if reach else box
            score = covered + (0 if inside else 1000) + 500 * sum(_overlaps(span, t) for t in taken)
            rank = (score, index, which)
            if best is None or rank < best[0]:
                best = (rank, Spot(anchor=which, dx=dx, dy=dy, ha=ha, va=va, box=box))
    assert best is not None
    return best[1]


def choose_label_spot(
    anchors: list[tuple[float, float]],
    size: tuple[float, float],
    obstacles: list[tuple[float, float]],
    area: Box,
    taken: list[Box],
    *,
    close: bool,
    scale: float = 1.0,
) -> tuple[Spot, bool]:
    """(spot, beside): a ``close`` label right beside its point (no arrow) where such a spot stays
    inside ``area`` and covers no label in ``taken``; else, and for every other label, the best
    spot for an arrow whose text and arrow cover no label already placed (``choose_spot``)."""
    if close:
        spot = choose_spot(anchors, size, obstacles, area, taken, CLOSE_SPOTS, scale)
        box = spot.box
        inside = box[0] >= area[0] and box[1] >= area[1] and box[2] <= area[2] and box[3] <= area[3]
        if inside and not any(_overlaps(box, t) for t in taken):
            return spot, True
    return choose_spot(anchors, size, obstacles, area, taken, ARROW_SPOTS, scale, reach=True), False


def pareto_obstacles(data: ReportData) -> list[tuple[float, float]]:
    """What a label on the Pareto plot should not cover: each mark, and each bar (sampled)."""
    found = [plot_xy(p, data) for p in data.points if data.configuration_of(p.number) is None]
    axis = ppl_axis(data)
    for x, y in [plot_xy(p, data) for p in data.points if clipped(p, data)]:
        assert axis is not None
        found += [(x - (axis.high - axis.low) * i / 40, y) for i in range(1, 7)]  # its written PPL
    xs = config_xs(data)
    for config in data.configurations:
        x = xs[config.first]
        found += [(x, v) for _, v in config.readings]
        found += [(x, config.low + (config.high - config.low) * i / 10) for i in range(11)]
    if data.cap is not None:
        bottom, top = _tps_bottom(data), _tps_top(data)
        found += [(data.cap, bottom + (top - bottom) * i / 60) for i in range(61)]
    base = data.base_configuration
    if base is not None and not base.is_answer and axis is not None:  # the base's estimate, a line
        found += [(axis.low + (axis.high - axis.low) * i / 60, base.tps) for i in range(61)]
    claim = claim_band(data)
    if claim is not None:
        cx, low, high = claim
        found += [(cx, low + (high - low) * i / 10) for i in range(11)]
    if axis is not None:  # the answer's star and the base's square: wider than a point, and never to hide
        bottom, top = _tps_bottom(data), _tps_top(data)
        rx, ry = 0.015 * (axis.high - axis.low), 0.04 * (top - bottom)
        for config in (data.answer_configuration, base):
            if config is not None:
                x, y = xs[config.first], config.tps
                found += [(x + i * rx / 2, y + j * ry / 2) for i in range(-2, 3) for j in range(-2, 3)] * 3
    return found


# the plot area plotly gives the Pareto figure in a page about 1200 pixels wide (an estimate: the
# label spots are chosen before a browser lays the figure out)
PARETO_PIXELS = (900.0, 300.0)
CHAR_PIXELS, LINE_PIXELS = 7.0, 17.0


def _text_size(text: str) -> tuple[float, float]:
    lines = text.split("<br>")
    return max(len(line) for line in lines) * CHAR_PIXELS, len(lines) * LINE_PIXELS


def _place_labels(
    fig: go.Figure,
    labels: list[Label],
    obstacles: list[tuple[float, float]],
    pixels: tuple[float, float],
    x_range: tuple[float, float] | None = None,
) -> None:
    """Each (text, anchors, font, close) label with an arrow to the anchor where it covers the
    fewest ``obstacles`` (data coordinates; the axes span the obstacles, padded as plotly pads
    them, or ``x_range`` where the figure sets its x axis); a ``close`` one right beside its
    point, with no arrow, where there is room."""
    if not labels:
        return
    xs, ys = [x for x, _ in obstacles], [y for _, y in obstacles]
    x_lo, x_hi, y_lo, y_hi = min(xs), max(xs), min(ys), max(ys)
    pad_x, pad_y = (x_hi - x_lo) * 0.05 or 1.0, (y_hi - y_lo) * 0.05 or 1.0
    x_lo, x_hi, y_lo, y_hi = x_lo - pad_x, x_hi + pad_x, y_lo - pad_y, y_hi + pad_y
    if x_range is not None:
        x_lo, x_hi = x_range
    width, height = pixels

    def to_pixels(x: float, y: float) -> tuple[float, float]:
        return (x - x_lo) / (x_hi - x_lo) * width, (y - y_lo) / (y_hi - y_lo) * height

    points = [to_pixels(x, y) for x, y in obstacles]
    taken: list[Box] = []
    for text, anchors, font, close in labels:
        anchored = [to_pixels(x, y) for x, y in anchors]
        area = (0.0, 0.0, width, height)
        spot, beside = choose_label_spot(anchored, _text_size(text), points, area, taken, close=close)
        taken.append(spot.box)
        x, y = anchors[spot.anchor]
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
            font=font,
            **place,
        )


def pareto_figure(data: ReportData) -> go.Figure:
    """TPS against PPL: the cap line, configurations at their estimates, the base and the answer.

    With a standing, each gate-passing configuration is one marker at its
    TPS estimate with the interval as an error bar, and each server's reading
    a faint dot; without one (an old study), each trial is a point.
    """
    fig = go.Figure()
    configs = list(data.configurations)
    drawn = {n for c in configs for n in c.numbers}
    xs = config_xs(data)
    axis = ppl_axis(data)
    moved = side_by_side_text(data)
    for index, (left, right, _) in enumerate(side_by_side(data)):  # under everything: the disclosure
        bottom, top = _tps_bottom(data), _tps_top(data)
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
                hovertext=moved,
                hoverinfo="text",
            )
        )
    if configs:
        fig.add_trace(_readings_trace(data))
        fig.add_trace(
            go.Scatter(
                x=[xs[c.first] for c in configs],
                y=[c.tps for c in configs],
                mode="markers",
                name=LABELS[FEASIBLE],
                legendgroup=FEASIBLE,
                error_y=_error_y(configs),
                marker={"color": COLORS[FEASIBLE], "size": 10, "line": {"width": 1, "color": "#333"}},
                text=[c.hover() for c in configs],
                hoverinfo="text",
                customdata=[c.first for c in configs],
            )
        )
    for category in CATEGORIES:
        points = [p for p in data.by_category(category) if p.number not in drawn]
        if not points:
            continue
        xy = [plot_xy(p, data) for p in points]
        fig.add_trace(
            go.Scatter(
                x=[x for x, _ in xy],
                y=[y for _, y in xy],
                mode="markers",
                name=LEFTOVER_FEASIBLE if category == FEASIBLE and configs else LABELS[category],
                legendgroup=category,
                marker={
                    "color": COLORS[category],
                    "size": 10,
                    "symbol": [
                        "x"
                        if category == FAILED_TRIAL
                        else ("triangle-right" if clipped(p, data) else "circle") + ("-open" if p.tps_imputed else "")
                        for p in points
                    ],
                    "line": {"width": 1, "color": "#333"},
                },
                text=[p.hover() for p in points],
                hoverinfo="text",
                customdata=[p.number for p in points],
            )
        )
        for p, (x, y) in zip(points, xy):
            if clipped(p, data):  # off the axis: its PPL written beside its mark
                fig.add_annotation(
                    x=x, y=y, text=f"{ppl_text(p.ppl)} \u2192", showarrow=False, xanchor="right", xshift=-8
                )
    if configs:
        front_xy = [config_xy(c, data) for c in data.configuration_front()]
    else:
        front_xy = [(p.ppl, p.tps) for p in sorted((data.point(n) for n in data.pareto), key=lambda p: p.ppl or 0.0)]
    if len(front_xy) > 1:
        fig.add_trace(
            go.Scatter(
                x=[x for x, _ in front_xy],
                y=[y for _, y in front_xy],
                mode="lines",
                name=FRONT_TRACE,
                line={"color": COLORS["front"], "dash": "dot", "shape": "hv"},
                hoverinfo="skip",
            )
        )
    for status, name, symbol, color in (
        (VerificationStatus.VERIFIED, VERIFIED_TRACE, "circle-open", COLORS["verified"]),
        (VerificationStatus.FAILED, VERIFY_FAILED_TRACE, "x-thin-open", COLORS["verify-failed"]),
    ):
        marked = [p for p in data.points if p.verification is status]
        if marked:
            xy = [position(p, data) for p in marked]
            fig.add_trace(
                go.Scatter(
                    x=[x for x, _ in xy],
                    y=[y for _, y in xy],
                    mode="markers",
                    name=name,
                    marker={"symbol": symbol, "size": 20, "color": color, "line": {"width": 2.5, "color": color}},
                    text=[p.hover() for p in marked],
                    hoverinfo="text",
                    customdata=[p.number for p in marked],
                )
            )
    if data.cap is not None:
        fig.add_trace(
            go.Scatter(
                x=[data.cap, data.cap],
                y=[_tps_bottom(data), _tps_top(data)],
                mode="lines",
                name=CAP_TRACE,
                line={"color": COLORS["cap"], "dash": "dash", "width": 2},
                hovertext=f"PPL cap {data.cap:.4f}",
                hoverinfo="text",
            )
        )
    base = data.base_configuration
    if base is not None and not base.is_answer:  # the claim is drawn: the answer's bar over this line
        fig.add_trace(
            go.Scatter(
                x=[axis.low if axis is not None else base.ppl, axis.high if axis is not None else base.ppl],
                y=[base.tps, base.tps],
                mode="lines",
                name=BASE_LINE_TRACE,
                line={"color": COLORS["base"], "dash": "dash", "width": 1.5},
                hovertext=base.hover(),
                hoverinfo="text",
            )
        )
    if base is not None:
        fig.add_trace(
            go.Scatter(
                x=[config_xs(data)[base.first]],
                y=[base.tps],
                mode="markers",
                name=BASE_TRACE,
                marker={"symbol": "square-open", "size": 22, "color": COLORS["base"], "line": {"width": 2.5}},
                text=[base.hover()],
                hoverinfo="text",
                customdata=[base.first],
            )
        )
    claim = claim_band(data)
    if claim is not None:  # the claim itself: answer / base, at the study-wise level
        cx, low, high = claim
        fig.add_trace(
            go.Scatter(
                x=[cx, cx],
                y=[low, high],
                mode="lines",
                name=CLAIM_TRACE,
                line={"color": WINNER_FILL, "width": 14},
                hovertext=f"the claim: {data.claim_text()} over the base: {low:.1f}-{high:.1f} tok/s",
                hoverinfo="text",
            )
        )
    winner = data.winner
    if winner is not None:
        config = data.answer_configuration
        x, y = config_xy(config, data) if config is not None else plot_xy(winner, data)
        fig.add_trace(
            go.Scatter(
                x=[x],
                y=[y],
                mode="markers",
                name=WINNER_TRACE,
                marker={"symbol": "star", "size": 18, "color": COLORS["winner"], "line": {"width": 1, "color": "#333"}},
                text=[config.hover() if config is not None else winner.hover()],
                hoverinfo="text",
                customdata=[winner.number],
            )
        )
    labels = []  # the answer's first: it gets the best spot; the small ones next, right beside their points
    if winner is not None:
        labels.append((data.answer_label(sep="<br>"), [(x, y)], {"size": 13}, False))
    for config in other_configurations(data):  # every configuration is named; other points: the legend
        labels.append((config_label(config), [config_xy(config, data)], {"size": 10, "color": COLORS["front"]}, True))
    if base is not None and not base.is_answer:  # the answer's label says so when the base is the answer
        labels.append((data.base_label(sep="<br>"), [config_xy(base, data)], {"color": COLORS["base"]}, False))
    x_range = (axis.low, axis.high) if axis is not None else None
    _place_labels(fig, labels, pareto_obstacles(data), PARETO_PIXELS, x_range)
    if x_range is not None:
        fig.update_xaxes(range=list(x_range))
    fig.update_layout(
        title=f"{data.study_name}: TPS against PPL ({data.trials_text()}"
        + (f"; {len(configs)} gate-passing configurations at their estimates)" if configs else ")")
        + (f"<br><sup>{moved}</sup>" if moved else ""),
        xaxis_title="PPL (lower is better)",
        yaxis_title="TPS (output tokens/s, higher is better)",
        template="plotly_white",
        legend={"orientation": "h", "y": -0.2},
        height=560,
    )
    return fig


def _band(x0: float, x1: float, config: ConfigurationPoint, name: str, color: str, group: str) -> go.Scatter:
    return go.Scatter(
        x=[x0, x1, x1, x0, x0],
        y=[config.low, config.low, config.high, config.high, config.low],
        mode="lines",
        fill="toself",
        fillcolor=color,
        line={"width": 0},
        name=name,
        legendgroup=group,
        hovertext=f"{name}: {config.low:.2f}-{config.high:.2f} tok/s",
        hoverinfo="text",
    )


def _history_readings(fig: go.Figure, data: ReportData, opacity: float) -> None:
    for category in (c for c in CATEGORIES if c != FAILED_TRIAL):
        for imputed in (False, True):
            points = [p for p in data.by_category(category) if p.tps is not None and p.tps_imputed == imputed]
            if not points:
                continue
            fig.add_trace(
                go.Scatter(
                    x=[p.number for p in points],
                    y=[p.tps for p in points],
                    mode="markers",
                    name=f"{LABELS[category]}, {IMPUTED}" if imputed else LABELS[category],
                    marker={
                        "color": COLORS[category],
                        "size": 9,
                        "opacity": 1.0 if imputed else opacity,
                        "symbol": "circle-open" if imputed else "circle",
                    },
                    text=[p.hover() for p in points],
                    hoverinfo="text",
                    customdata=[p.number for p in points],
                )
            )
    failed = data.by_category(FAILED_TRIAL)
    if failed:
        fig.add_trace(
            go.Scatter(
                x=[p.number for p in failed],
                y=[0.0] * len(failed),
                mode="markers",
                name=LABELS[FAILED_TRIAL],
                marker={"color": COLORS[FAILED_TRIAL], "symbol": "x", "size": 9, "opacity": opacity},
                text=[p.hover() for p in failed],
                hoverinfo="text",
                customdata=[p.number for p in failed],
            )
        )


def history_figure(data: ReportData) -> go.Figure:
    """Each trial's TPS reading by trial number, with the answer's and the base's estimates.

    With a standing the readings are faint: what the study claims is the
    answer's estimate (a line) and its interval (a band), next to the base's;
    without one (an old study), the best feasible reading so far.
    """
    fig = go.Figure()
    answer, base = data.answer_configuration, data.base_configuration
    if answer is None and base is None:
        _history_readings(fig, data, 1.0)
        series = [(n, v) for n, v in data.best_so_far if v is not None]
        if series:
            fig.add_trace(
                go.Scatter(
                    x=[n for n, _ in series],
                    y=[v for _, v in series],
                    mode="lines",
                    name=BEST_TRACE,
                    line={"color": COLORS["front"], "shape": "hv", "width": 2.5},
                )
            )
        fig.update_layout(
            title="Best feasible TPS against trial number",
            xaxis_title="trial number",
            yaxis_title="TPS",
            template="plotly_white",
            height=420,
        )
        return fig
    numbers = [p.number for p in data.points]
    x0, x1 = min(numbers) - 0.5, max(numbers) + 0.5
    for config, name, color, fill, dash in (
        (base if base is not None and not base.is_answer else None, "base", COLORS["base"], BASE_FILL, "dash"),
        (answer, "answer", COLORS["winner"], WINNER_FILL, "solid"),
    ):
        if config is None:
            continue
        level = config.level
        fig.add_trace(_band(x0, x1, config, f"{name}'s {level} interval", fill, name))
        fig.add_trace(
            go.Scatter(
                x=[x0, x1],
                y=[config.tps, config.tps],
                mode="lines",
                name=f"{name}'s TPS estimate",
                legendgroup=name,
                line={"color": color, "width": 2.5, "dash": dash},
                hovertext=config.hover(),
                hoverinfo="text",
            )
        )
    _history_readings(fig, data, FAINT)
    for readings, name, symbol, color, who in history_marks(data):
        fig.add_trace(
            go.Scatter(
                x=[n for n, _ in readings],
                y=[v for _, v in readings],
                mode="markers",
                name=name,
                marker={"symbol": symbol, "size": 14, "color": color, "line": {"width": 2, "color": color}},
                text=[f"trial #{n}: one server of {who} read {v:.2f} tok/s" for n, v in readings],
                hoverinfo="text",
                customdata=[n for n, _ in readings],
            )
        )
    # the labels sit in the right margin, level with their lines, the legend below: off the data
    for text, y, color, above in history_labels(data, sep="<br>"):
        fig.add_annotation(
            xref="paper",
            x=1.0,
            y=y,
            xanchor="left",
            yanchor="bottom" if above else "top",
            xshift=6,
            text=text,
            showarrow=False,
            align="left",
            font={"color": color, "size": 11},
        )
    fig.update_layout(
        title="TPS readings by trial (faint), the answer's estimate and the base's",
        xaxis_title="trial number",
        yaxis_title="TPS",
        template="plotly_white",
        height=480,
        margin={"r": 290},
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


Marks = tuple[tuple[tuple[int, float], ...], str, str, str, str]


def history_marks(data: ReportData) -> list[Marks]:
    """The readings the estimates (and so the claim) rest on, the one that selected the answer
    and the base's outside the claim's rounds: (readings, legend name, plotly symbol, color, whose)."""
    marks: list[Marks] = []
    answer, base = data.answer_configuration, data.base_configuration
    if answer is not None:
        marks.append((answer.counted_readings, ANSWER_READINGS_TRACE, "circle-open", COLORS["winner"], "the answer"))
        if answer.uncounted_readings:
            marks.append((answer.uncounted_readings, UNCOUNTED_TRACE, "diamond-open", "#555", "the answer"))
    if base is not None and not base.is_answer:
        marks.append((base.counted_readings, BASE_READINGS_TRACE, "square-open", COLORS["base"], "the base"))
        if base.uncounted_readings:
            marks.append((base.uncounted_readings, BASE_UNCOUNTED_TRACE, "triangle-up-open", "#777", "the base"))
    return [m for m in marks if m[0]]


def history_labels(data: ReportData, sep: str) -> list[tuple[str, float, str, bool]]:
    """(text, TPS level, color, above its line) of the answer's and the base's labels: the upper
    one above its line and the lower one below, so that the two never cover each other."""
    answer, base = data.answer_configuration, data.base_configuration
    labels = []
    if answer is not None:
        text = data.answer_label(sep=sep)
        assert text is not None
        labels.append((text, answer.tps, "#1d3557", base is None or base.is_answer or answer.tps >= base.tps))
    if base is not None and not base.is_answer:
        text = data.base_label(sep=sep)
        assert text is not None
        labels.append((text, base.tps, COLORS["base"], answer is None or base.tps > answer.tps))
    return labels


def slices_figure(data: ReportData) -> go.Figure:
    """One panel per parameter: its value against TPS, colored by feasibility."""
    names = list(data.param_names) or ["(no parameters)"]
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=names, shared_yaxes=True)
    for index, name in enumerate(data.param_names):
        row, col = index // cols + 1, index % cols + 1
        for category, imputed, points in slice_groups(data, name):
            label = f"{LABELS[category]}, {IMPUTED}" if imputed else LABELS[category]
            fig.add_trace(
                go.Scatter(
                    x=[p.params[name] for p in points],
                    y=[p.tps if p.tps is not None else 0.0 for p in points],
                    mode="markers",
                    name=label,
                    legendgroup=label,
                    showlegend=index == 0,
                    marker={
                        "color": COLORS[category],
                        "size": 9,
                        "symbol": "x" if category == FAILED_TRIAL else "circle-open" if imputed else "circle",
                    },
                    text=[p.hover() for p in points],
                    hoverinfo="text",
                    customdata=[p.number for p in points],
                ),
                row=row,
                col=col,
            )
        mark = slice_answer(data, name)
        if mark is not None:
            value, tps, label = mark
            fig.add_trace(
                go.Scatter(
                    x=[value],
                    y=[tps],
                    mode="markers",
                    name=label,
                    legendgroup=WINNER_TRACE,
                    showlegend=index == 0,
                    marker={
                        "symbol": "star",
                        "size": 16,
                        "color": COLORS["winner"],
                        "line": {"width": 1, "color": "#333"},
                    },
                    hovertext=label,
                    hoverinfo="text",
                ),
                row=row,
                col=col,
            )
        ticks = whole_ticks(data, name)
        if ticks is not None:
            fig.update_xaxes(tickmode="array", tickvals=ticks, row=row, col=col)
        fig.update_xaxes(title_text=name, row=row, col=col)
    fig.update_yaxes(title_text="TPS", col=1)
    fig.update_layout(title="Slice plot: each parameter against TPS", template="plotly_white", height=360 * rows)
    return fig


def slice_answer(data: ReportData, name: str) -> tuple[object, float, str] | None:
    """(its value of ``name``, its TPS, legend label) of the answer on a slice plot, at its one
    figure (None: no answer, or it has no value of ``name``)."""
    record, tps = data.answer.record, data.answer_tps
    if record is None or tps is None or name not in record.params:
        return None
    return record.params[name], tps, f"answer #{record.number}: {tps_text(tps)} (its estimate)"


def slice_groups(data: ReportData, name: str) -> list[tuple[str, bool, list[TrialPoint]]]:
    """The trials of a slice by (category, TPS imputed): an imputed TPS (a stand-in, not a
    reading) is drawn hollow and named so."""
    groups = []
    for category in CATEGORIES:
        for imputed in (False, True):
            points = [p for p in data.by_category(category) if name in p.params and p.tps_imputed == imputed]
            if points:
                groups.append((category, imputed, points))
    return groups


def whole_ticks(data: ReportData, name: str, most: int = 10) -> list[int] | None:
    """Whole-number ticks for a parameter whose values are all integers (None: not one)."""
    values = [p.params[name] for p in data.points if name in p.params]
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return None
    low, high = min(values), max(values)
    step = max(1, math.ceil((high - low + 1) / most))
    return list(range(low, high + 1, step))


def importance_figure(data: ReportData) -> go.Figure:
    """PED-ANOVA importance of each parameter, for TPS and for PPL."""
    fig = go.Figure()
    for target, color in (("tps", COLORS["feasible"]), ("ppl", COLORS[INFEASIBLE])):
        values = data.importance.get(target)
        if values:
            names = list(data.param_names) or list(values)
            fig.add_trace(
                go.Bar(
                    x=[values.get(n, 0.0) for n in names],
                    y=names,
                    orientation="h",
                    name=f"importance for {target.upper()}",
                    marker={"color": color},
                )
            )
    title = IMPORTANCE_TITLE
    if not data.importance:
        title += f": {data.importance_note}"
    fig.update_layout(
        title=title, xaxis_title="importance (share of variance)", barmode="group", template="plotly_white", height=320
    )
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
