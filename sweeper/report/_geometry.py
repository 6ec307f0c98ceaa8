"""Where the Pareto plot puts things, from ReportData only: its PPL axis, each trial and
configuration, the bands of configurations set side by side, the claim, and what a label
must not cover. Both renderers draw these coordinates through the figure model (``_figures``).

The PPL axis fits the passing configurations and the cap: a trial far over the cap sits at
the axis' edge, and configurations of one PPL stand side by side, in PPL order, over a band
that says so. Failed trials sit at TPS 0.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TypeGuard

from sweeper.report._data import ReportData
from sweeper.report._points import FAILED_TRIAL, FEASIBLE, ConfigurationPoint, TrialPoint


def _finite(value: float | None) -> TypeGuard[float]:
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


def clipped_ppl_label(ppl: float | None) -> str:
    """The PPL of a point drawn at the axis' edge, beside its arrow: ``PPL 12.34`` (``PPL inf``)."""
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


def tps_top(data: ReportData) -> float:
    values = tps_values(data)
    return max(values) * 1.08 if values else 1.0


def tps_bottom(data: ReportData) -> float:
    """Failed trials sit at TPS 0; without them the axis starts near the slowest trial."""
    values = tps_values(data)
    if data.by_category(FAILED_TRIAL) or not values:
        return 0.0
    return min(values) * 0.9


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
        bottom, top = tps_bottom(data), tps_top(data)
        found += [(data.cap, bottom + (top - bottom) * i / 60) for i in range(61)]
    base = data.base_configuration
    if base is not None and not base.is_answer and axis is not None:  # the base's estimate, a line
        found += [(axis.low + (axis.high - axis.low) * i / 60, base.tps) for i in range(61)]
    claim = claim_band(data)
    if claim is not None:
        cx, low, high = claim
        found += [(cx, low + (high - low) * i / 10) for i in range(11)]
    if axis is not None:  # the answer's star and the base's square: wider than a point, and never to hide
        bottom, top = tps_bottom(data), tps_top(data)
        rx, ry = 0.015 * (axis.high - axis.low), 0.04 * (top - bottom)
        for marked in (data.answer_configuration, base):
            if marked is not None:
                x, y = xs[marked.first], marked.tps
                found += [(x + i * rx / 2, y + j * ry / 2) for i in range(-2, 3) for j in range(-2, 3)] * 3
    return found
