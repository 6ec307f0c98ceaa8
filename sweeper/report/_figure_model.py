"""The figure model: the report's figures as plain data, what each one shows.

``FigureModels`` holds the Pareto plot, the TPS history, one slice per parameter and the
importance: every point with its trial and hover text, the lines, the labels and what they
must not cover, the axes and the titles' words. ``_figures`` builds it once from ReportData;
``_plotly`` and ``_png`` only draw it, each in its own style (sizes, symbols, fills).

The names are part of the contract (tests and readers look for them): ``PPL cap``, one group
per trial category, ``Pareto front``, ``verified on held-out data``, ``failed verification``,
``winner``, and where the study has a standing ``one server's reading`` and ``base manifest``.
A gate-passing configuration is drawn once, at ``Standing.tps_interval`` (its estimate, the
figure the claim rests on) with the interval as an error bar; its single readings are the
faint dots. Where the Pareto plot puts things is ``_geometry``'s: a trial far over the cap sits
at the PPL axis' edge with its PPL written beside it, and configurations of one PPL stand side
by side over a band that says so (``SIDE_BY_SIDE_TRACE``). The claim is drawn at the answer:
the base's figure times the claimed speedup's interval (``CLAIM_TRACE``). Every configuration
is labelled with its trial and figure; every other point is in the legend. The history marks
the readings each estimate counts and those it does not, its labels beside the axes, off the
data. The slice plots mark the answer at its figure. A TPS that was imputed, not measured, is
drawn hollow and named so. A label's line breaks are ``\\n``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sweeper.report._points import FAILED_TRIAL, IMPUTED, LABELS

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
OFF_AXIS = ", PPL off the axis"  # appended to a group's name for its points drawn at the axis' edge
FAINT = 0.35  # the opacity of single readings where estimates are drawn
PPL_TITLE = "PPL (lower is better)"
TPS_TITLE = "TPS (output tokens/s, higher is better)"
# what a label is: the answer's, another configuration's, the base's; each renderer sizes them
ANSWER, CONFIGURATION, BASE = "answer", "configuration", "base"

Value = float | str  # where a point sits on x: a number, or a parameter's value on a slice plot
XY = tuple[float, float]


def trial_name(category: str, imputed: bool) -> str:
    """A group of trials' name in a legend: its category, and whether its TPS is imputed."""
    return f"{LABELS[category]}, {IMPUTED}" if imputed else LABELS[category]


@dataclasses.dataclass(frozen=True)
class Point:
    """One mark: where it sits, which trial it is, what hovering over it says."""

    x: Value
    y: float
    number: int
    hover: str


@dataclasses.dataclass(frozen=True)
class TrialMark(Point):
    """A trial drawn on its own on the Pareto plot (no configuration's estimate stands for it)."""

    imputed: bool  # its TPS is a stand-in: drawn hollow
    note: str | None  # drawn at the PPL axis' edge, this (its PPL) written beside it; None: at its PPL

    @property
    def off_axis(self) -> bool:
        return self.note is not None


@dataclasses.dataclass(frozen=True)
class CategoryGroup:
    """Trials of one category (feasible, infeasible, failed, ...), drawn as one trace."""

    category: str

    @property
    def failed(self) -> bool:
        return self.category == FAILED_TRIAL


@dataclasses.dataclass(frozen=True)
class PointGroup(CategoryGroup):
    """Trials drawn alike: one category, measured or imputed (``name`` says which)."""

    imputed: bool
    name: str
    color: str
    points: tuple[Point, ...]


@dataclasses.dataclass(frozen=True)
class TrialGroup(CategoryGroup):
    """A category's trials on the Pareto plot; each mark says whether it is imputed or off the axis."""

    name: str
    color: str
    points: tuple[TrialMark, ...]

    def part_name(self, imputed: bool, off_axis: bool) -> str:
        """The name of the part of the group drawn alike (imputed or not, off the axis or not)."""
        return (trial_name(self.category, True) if imputed else self.name) + (OFF_AXIS if off_axis else "")


@dataclasses.dataclass(frozen=True)
class Marks:
    """Open marks around points drawn elsewhere (verification, counted readings); ``shape`` is
    circle, cross, square, diamond or triangle."""

    name: str
    shape: str
    color: str
    points: tuple[Point, ...]


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A gate-passing configuration at its TPS estimate, the interval as an error bar."""

    x: float
    tps: float
    low: float
    high: float
    first: int
    hover: str


@dataclasses.dataclass(frozen=True)
class Line:
    """A line from (x0, y0) to (x1, y1) with what hovering over it says."""

    x0: float
    y0: float
    x1: float
    y1: float
    hover: str


@dataclasses.dataclass(frozen=True)
class Label:
    """A label placed where it covers the fewest marks (``_placement``), with an arrow to one of
    its ``anchors``; a ``close`` one right beside its point, with no arrow, where there is room."""

    text: str
    anchors: tuple[XY, ...]
    kind: str  # ANSWER, CONFIGURATION or BASE
    color: str | None
    close: bool


@dataclasses.dataclass(frozen=True)
class ParetoModel:
    """TPS against PPL: the cap line, configurations at their estimates, the base and the answer.

    Drawn in this order: the side-by-side bands (under everything), the readings and the
    estimates, the trials drawn on their own, the front, the verification marks, the cap, the
    base's line and mark, the claim, the winner; the labels last, placed around the rest.
    """

    bands: tuple[tuple[float, float], ...]  # (left, right) of each group set side by side
    moved: str | None  # what the bands mean, with each configuration's PPL
    tps_span: tuple[float, float]  # (bottom, top) of the bands and the cap line
    readings: tuple[Point, ...]
    estimates: tuple[Estimate, ...]
    trials: tuple[TrialGroup, ...]
    front: tuple[XY, ...]  # drawn as steps where it has more than one point
    verifications: tuple[Marks, ...]
    cap: float | None
    base_line: Line | None  # the base's estimate under the answer's claim
    base: Point | None
    claim: Line | None
    winner: Point | None
    labels: tuple[Label, ...]  # the answer's first: it gets the best spot
    obstacles: tuple[XY, ...]  # what a label should not cover
    x_range: tuple[float, float] | None  # None: the axis spans every trial
    title: str
    trials_text: str
    estimates_text: str | None  # how many configurations are drawn at their estimates
    bars_text: str | None  # what the error bars are
    x_title: str = PPL_TITLE
    y_title: str = TPS_TITLE


@dataclasses.dataclass(frozen=True)
class Level:
    """An estimate across the history: its line at ``tps`` and its interval's band."""

    who: str  # base | answer
    tps: float
    low: float
    high: float
    level: str
    hover: str
    color: str

    @property
    def band_name(self) -> str:
        return f"{self.who}'s {self.level} interval"

    @property
    def line_name(self) -> str:
        return f"{self.who}'s TPS estimate"


@dataclasses.dataclass(frozen=True)
class MarginLabel:
    """A label beside the axes, level with its line: above it or below it."""

    text: str
    y: float
    kind: str  # ANSWER or BASE
    color: str
    above: bool


@dataclasses.dataclass(frozen=True)
class HistoryModel:
    """Each trial's TPS reading by trial number; with a standing, the answer's and the base's
    estimates over faint readings, else the best feasible reading so far."""

    standing: bool
    readings: tuple[PointGroup, ...]  # a trial without a TPS at 0
    best_so_far: tuple[tuple[int, float], ...]  # without a standing only
    levels: tuple[Level, ...]  # the base's (when it is not the answer), then the answer's
    marks: tuple[Marks, ...]
    labels: tuple[MarginLabel, ...]
    x_span: tuple[float, float]  # the trial numbers, half a trial either side
    title: str
    x_title: str = "trial number"
    y_title: str = "TPS"

    @property
    def opacity(self) -> float:
        """The single readings' opacity: faint where estimates are drawn."""
        return FAINT if self.standing else 1.0


@dataclasses.dataclass(frozen=True)
class SliceAnswer:
    value: Any
    tps: float
    label: str


@dataclasses.dataclass(frozen=True)
class SliceModel:
    """One parameter against TPS, by trial category, the answer marked at its figure."""

    name: str
    groups: tuple[PointGroup, ...]  # x: the parameter's value; a trial without a TPS at 0
    answer: SliceAnswer | None
    ticks: tuple[int, ...] | None  # whole-number ticks (None: not all values are integers)


@dataclasses.dataclass(frozen=True)
class Bars:
    """One target's importance per parameter; ``offset``: its place among the targets."""

    name: str
    color: str
    names: tuple[str, ...]
    values: tuple[float, ...]
    offset: int


@dataclasses.dataclass(frozen=True)
class ImportanceModel:
    names: tuple[str, ...]  # the study's parameters
    bars: tuple[Bars, ...]
    note: str | None  # why there is no importance (None: there is)
    title: str = IMPORTANCE_TITLE


@dataclasses.dataclass(frozen=True)
class FigureModels:
    """Every figure of the report, described once."""

    pareto: ParetoModel
    history: HistoryModel
    slices: tuple[SliceModel, ...]
    importance: ImportanceModel


# -- an ablation's forest plot -------------------------------------------------------------------

ZERO_LINE = "#333"  # the forest plot's line of no effect


@dataclasses.dataclass(frozen=True)
class Effect:
    """One switch's TPS effect in percent, with its interval (a switch without one: at 0)."""

    row: str  # the switch's row
    value: float
    low: float
    high: float
    hover: str
    key: str


@dataclasses.dataclass(frozen=True)
class VerdictGroup:
    """The switches of one verdict: those with a TPS effect, and those without (drawn at 0 %)."""

    name: str
    unmeasured_name: str
    color: str
    measured: tuple[Effect, ...]
    unmeasured: tuple[Effect, ...]


@dataclasses.dataclass(frozen=True)
class ForestModel:
    """An ablation's forest plot: a row per switch, its effect and interval coloured by verdict."""

    rows: tuple[str, ...]  # top to bottom
    groups: tuple[VerdictGroup, ...]
    x_range: tuple[float, float]
    title: str
    legend_order: tuple[str, ...]
    x_title: str = "TPS effect (%): the subject value's TPS over the reference value's"
