"""An ablation's forest plot as a figure model (``ForestModel``): a row per switch, its TPS effect
in percent (the subject value's TPS over the reference value's, minus one) with its interval,
coloured by verdict. ``_plotly.draw_forest`` and ``_png.draw_forest`` draw it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sweeper.ablation import SwitchReport, SwitchVerdict, effect_text
from sweeper.report._ablation_data import AblationReportData, row_label
from sweeper.report._figure_model import Effect, ForestModel, VerdictGroup

if TYPE_CHECKING:  # plotly and matplotlib are imported where a figure is drawn
    import plotly.graph_objects as go
    from matplotlib.figure import Figure

VERDICT_COLORS = {
    SwitchVerdict.HELPS: "#2a9d8f",
    SwitchVerdict.HELPS_CHANGES_OUTPUT: "#f4a261",
    SwitchVerdict.NO_EFFECT: "#8d99ae",
    SwitchVerdict.HURTS: "#d62828",
    SwitchVerdict.FAILS_TO_START: "#343a40",
}
UNMEASURED = "no TPS pair, drawn at 0 %"  # appended to the verdict's name for a switch without an effect


def percent_change(ratio: float) -> float:
    """A ratio as its change in percent, a number for the plot's axis: ``1.182`` is ``18.2``."""
    return (ratio - 1.0) * 100.0


def _x_range(effects: list[Effect]) -> tuple[float, float]:
    """The percent axis: every interval and 0 %, padded."""
    ends = [0.0] + [v for e in effects for v in (e.low, e.high)]
    low, high = min(ends), max(ends)
    pad = 0.08 * (high - low) or 1.0
    return low - pad, high + pad


def _title(data: AblationReportData) -> str:
    return (
        f"{data.name}: TPS effect of each switch, subject over reference\n"
        f"bars: {data.result.effects.level:.2%} intervals ({data.plan.confidence:.0%} for the whole ablation)"
    )


def unmeasured_name(verdict: SwitchVerdict) -> str:
    return f"{verdict.value} ({UNMEASURED})"


def _hover(report: SwitchReport) -> str:
    effect = report.tps_effect
    tps = "no TPS pair" if effect is None else f"TPS {effect_text(effect)}"
    return (
        f"{row_label(report)}: {report.verdict.value}<br>{tps}, {report.pairs} pair(s)<br>"
        f"PPL {report.ppl.value}; outputs {report.outputs.value}"
    )


def _effect(report: SwitchReport) -> Effect:
    """The switch's effect in percent; a switch without one (its arm never ran beside a base) at 0."""
    effect, row, key = report.tps_effect, row_label(report), report.switch.key
    if effect is None:
        return Effect(row=row, value=0.0, low=0.0, high=0.0, hover=_hover(report), key=key)
    value, low, high = percent_change(effect.value), percent_change(effect.low), percent_change(effect.high)
    return Effect(row=row, value=value, low=low, high=high, hover=_hover(report), key=key)


def forest_model(data: AblationReportData) -> ForestModel:
    """The forest plot: a point and an interval per switch, coloured by verdict, a line at 0 %."""
    reports = data.result.reports
    groups: list[VerdictGroup] = []
    measured: list[Effect] = []
    for verdict in SwitchVerdict:
        chosen = [r for r in reports if r.verdict is verdict]
        with_effect = tuple(_effect(r) for r in chosen if r.tps_effect is not None)
        without = tuple(_effect(r) for r in chosen if r.tps_effect is None)
        measured += with_effect
        color = VERDICT_COLORS[verdict]
        groups.append(VerdictGroup(verdict.value, unmeasured_name(verdict), color, with_effect, without))
    return ForestModel(
        rows=tuple(row_label(r) for r in reports),
        groups=tuple(groups),
        x_range=_x_range(measured),
        title=_title(data),
        legend_order=tuple(label for verdict in SwitchVerdict for label in (verdict.value, unmeasured_name(verdict))),
    )


# each drawing straight from the data, its model built on the way
def effects_figure(data: AblationReportData) -> go.Figure:
    from sweeper.report._plotly import draw_forest

    return draw_forest(forest_model(data))


def effects_png(data: AblationReportData) -> Figure:
    from sweeper.report._png import draw_forest

    return draw_forest(forest_model(data))
