"""The figure model (``_figure_model``) built from ReportData: ``figure_models`` describes every
figure of the report once, for both renderers; ``pareto_model``, ``history_model``, ``slice_model``
and ``importance_model`` one figure each. Where the Pareto plot puts things is ``_geometry``'s.
"""

from __future__ import annotations

import math

from storage import VerificationStatus
from sweeper.answer import tps_text
from sweeper.report._data import ReportData
from sweeper.report._figure_model import (
    ANSWER,
    ANSWER_READINGS_TRACE,
    BASE,
    BASE_READINGS_TRACE,
    BASE_UNCOUNTED_TRACE,
    CONFIGURATION,
    LEFTOVER_FEASIBLE,
    UNCOUNTED_TRACE,
    VERIFIED_TRACE,
    VERIFY_FAILED_TRACE,
    XY,
    Bars,
    Estimate,
    FigureModels,
    HistoryModel,
    ImportanceModel,
    Label,
    Level,
    Line,
    MarginLabel,
    Marks,
    ParetoModel,
    Point,
    PointGroup,
    SliceAnswer,
    SliceModel,
    TrialGroup,
    TrialMark,
    trial_name,
)
from sweeper.report._geometry import (
    claim_band,
    clipped,
    clipped_ppl_label,
    config_xs,
    config_xy,
    pareto_obstacles,
    plot_xy,
    position,
    ppl_axis,
    side_by_side,
    side_by_side_text,
    tps_bottom,
    tps_top,
)
from sweeper.report._points import CATEGORIES, COLORS, FEASIBLE, INFEASIBLE, LABELS, ConfigurationPoint


def figure_models(data: ReportData) -> FigureModels:
    """Every figure of the report, described once for both renderers."""
    return FigureModels(
        pareto=pareto_model(data),
        history=history_model(data),
        slices=tuple(slice_model(data, name) for name in data.param_names),
        importance=importance_model(data),
    )


# -- the Pareto plot ----------------------------------------------------------------------------


def config_label(config: ConfigurationPoint, sep: str = " ") -> str:
    """The label of a configuration that is neither the answer nor the base: its trial and figure."""
    return f"#{config.first}:{sep}{config.tps_text()}"


def _trial_groups(data: ReportData) -> tuple[TrialGroup, ...]:
    """The trials no configuration's estimate stands for, by category."""
    configs = data.configurations
    drawn = {n for c in configs for n in c.numbers}
    groups = []
    for category in CATEGORIES:
        points = [p for p in data.by_category(category) if p.number not in drawn]
        if not points:
            continue
        marks = []
        for p in points:
            x, y = plot_xy(p, data)
            note = f"{clipped_ppl_label(p.ppl)} \u2192" if clipped(p, data) else None
            marks.append(TrialMark(x, y, p.number, p.hover(), imputed=p.tps_imputed, note=note))
        name = LEFTOVER_FEASIBLE if category == FEASIBLE and configs else LABELS[category]
        groups.append(TrialGroup(category=category, name=name, color=COLORS[category], points=tuple(marks)))
    return tuple(groups)


def _front(data: ReportData) -> tuple[XY, ...]:
    """The Pareto front: of the configurations' estimates, else (no standing) of the trials."""
    if data.configurations:
        return tuple(config_xy(c, data) for c in data.configuration_front())
    points = sorted((data.point(n) for n in data.pareto), key=lambda p: p.ppl or 0.0)
    return tuple((p.ppl, p.tps) for p in points if p.ppl is not None and p.tps is not None)


def _verification_marks(data: ReportData) -> tuple[Marks, ...]:
    found = []
    for status, name, shape, color in (
        (VerificationStatus.VERIFIED, VERIFIED_TRACE, "circle", COLORS["verified"]),
        (VerificationStatus.FAILED, VERIFY_FAILED_TRACE, "cross", COLORS["verify-failed"]),
    ):
        marked = [p for p in data.points if p.verification is status]
        if marked:
            points = tuple(Point(*position(p, data), p.number, p.hover()) for p in marked)
            found.append(Marks(name=name, shape=shape, color=color, points=points))
    return tuple(found)


def _base_line(data: ReportData) -> Line | None:
    """The base's estimate across the axis, where the answer's claim stands over it."""
    base, axis = data.base_configuration, ppl_axis(data)
    if base is None or base.is_answer:
        return None
    x0, x1 = (axis.low, axis.high) if axis is not None else (base.ppl, base.ppl)
    return Line(x0, base.tps, x1, base.tps, base.hover())


def _claim(data: ReportData) -> Line | None:
    claim = claim_band(data)
    if claim is None:
        return None
    x, low, high = claim
    return Line(x, low, x, high, f"the claim: {data.claim_text()} over the base: {low:.1f}-{high:.1f} tok/s")


def _winner(data: ReportData) -> Point | None:
    """The answer's star: at its configuration's estimate, else (no standing) at its trial."""
    winner = data.winner
    if winner is None:
        return None
    config = data.answer_configuration
    x, y = config_xy(config, data) if config is not None else plot_xy(winner, data)
    return Point(x, y, winner.number, config.hover() if config is not None else winner.hover())


def _pareto_labels(data: ReportData, winner: Point | None) -> tuple[Label, ...]:
    """The answer's label first (it gets the best spot), the small ones next, right beside their
    points; every configuration is named, every other point is in the legend."""
    labels = []
    if winner is not None:
        text = data.answer_label(sep="\n")
        assert text is not None
        labels.append(Label(text, ((float(winner.x), winner.y),), ANSWER, None, close=False))
    for config in data.configurations:
        if not config.is_answer and not config.is_base:
            labels.append(Label(config_label(config), (config_xy(config, data),), CONFIGURATION, COLORS["front"], True))
    base = data.base_configuration
    if base is not None and not base.is_answer:  # the answer's label says so when the base is the answer
        text = data.base_label(sep="\n")
        assert text is not None
        labels.append(Label(text, (config_xy(base, data),), BASE, COLORS["base"], close=False))
    return tuple(labels)


def pareto_model(data: ReportData) -> ParetoModel:
    configs = data.configurations
    xs = config_xs(data)
    axis = ppl_axis(data)
    base = data.base_configuration
    winner = _winner(data)
    return ParetoModel(
        bands=tuple((left, right) for left, right, _ in side_by_side(data)),
        moved=side_by_side_text(data),
        tps_span=(tps_bottom(data), tps_top(data)),
        readings=tuple(
            Point(xs[c.first], v, n, f"trial #{n}: one server read {v:.2f} tok/s")
            for c in configs
            for n, v in c.readings
        ),
        estimates=tuple(Estimate(xs[c.first], c.tps, c.low, c.high, c.first, c.hover()) for c in configs),
        trials=_trial_groups(data),
        front=_front(data),
        verifications=_verification_marks(data),
        cap=data.cap,
        base_line=_base_line(data),
        base=Point(xs[base.first], base.tps, base.first, base.hover()) if base is not None else None,
        claim=_claim(data),
        winner=winner,
        labels=_pareto_labels(data, winner),
        obstacles=tuple(pareto_obstacles(data)),
        x_range=(axis.low, axis.high) if axis is not None else None,
        title=f"{data.study_name}: TPS against PPL",
        trials_text=data.trials_text(),
        estimates_text=f"{len(configs)} gate-passing configurations at their estimates" if configs else None,
        bars_text=f"bars: {configs[0].level} intervals" if configs else None,
    )


# -- the history --------------------------------------------------------------------------------


def _reading_groups(data: ReportData) -> tuple[PointGroup, ...]:
    """Each trial's reading by trial number, by category and imputed or not; no TPS: at 0."""
    groups = []
    for category in CATEGORIES:
        for imputed in (False, True):
            points = [p for p in data.by_category(category) if p.tps_imputed == imputed]
            if points:
                drawn = tuple(Point(p.number, p.tps if p.tps is not None else 0.0, p.number, p.hover()) for p in points)
                groups.append(PointGroup(category, imputed, trial_name(category, imputed), COLORS[category], drawn))
    return tuple(groups)


def _levels(data: ReportData) -> tuple[Level, ...]:
    answer, base = data.answer_configuration, data.base_configuration
    levels = []
    for config, who, color in (
        (base if base is not None and not base.is_answer else None, "base", COLORS["base"]),
        (answer, "answer", COLORS["winner"]),
    ):
        if config is not None:
            levels.append(Level(who, config.tps, config.low, config.high, config.level, config.hover(), color))
    return tuple(levels)


def history_marks(data: ReportData) -> tuple[Marks, ...]:
    """The readings the estimates (and so the claim) rest on, the one that selected the answer
    and the base's outside the claim's rounds."""
    found: list[tuple[tuple[tuple[int, float], ...], str, str, str, str]] = []
    answer, base = data.answer_configuration, data.base_configuration
    if answer is not None:
        found.append((answer.counted_readings, ANSWER_READINGS_TRACE, "circle", COLORS["winner"], "the answer"))
        if answer.uncounted_readings:
            found.append((answer.uncounted_readings, UNCOUNTED_TRACE, "diamond", "#555", "the answer"))
    if base is not None and not base.is_answer:
        found.append((base.counted_readings, BASE_READINGS_TRACE, "square", COLORS["base"], "the base"))
        if base.uncounted_readings:
            found.append((base.uncounted_readings, BASE_UNCOUNTED_TRACE, "triangle", "#777", "the base"))
    return tuple(
        Marks(
            name=name,
            shape=shape,
            color=color,
            points=tuple(Point(n, v, n, f"trial #{n}: one server of {who} read {v:.2f} tok/s") for n, v in readings),
        )
        for readings, name, shape, color, who in found
        if readings
    )


def history_labels(data: ReportData) -> tuple[MarginLabel, ...]:
    """The answer's and the base's labels, level with their lines: the upper one above its line
    and the lower one below, so that the two never cover each other."""
    answer, base = data.answer_configuration, data.base_configuration
    labels = []
    if answer is not None:
        text = data.answer_label(sep="\n")
        assert text is not None
        above = base is None or base.is_answer or answer.tps >= base.tps
        labels.append(MarginLabel(text, answer.tps, ANSWER, "#1d3557", above))
    if base is not None and not base.is_answer:
        text = data.base_label(sep="\n")
        assert text is not None
        labels.append(MarginLabel(text, base.tps, BASE, COLORS["base"], answer is None or base.tps > answer.tps))
    return tuple(labels)


def history_model(data: ReportData) -> HistoryModel:
    standing = data.answer_configuration is not None or data.base_configuration is not None
    numbers = [p.number for p in data.points]
    best = tuple((n, v) for n, v in data.best_so_far if v is not None)
    return HistoryModel(
        standing=standing,
        readings=_reading_groups(data),
        best_so_far=() if standing else best,
        levels=_levels(data),
        marks=history_marks(data),
        labels=history_labels(data),
        x_span=(min(numbers) - 0.5, max(numbers) + 0.5),
        title="TPS readings by trial (faint), the answer's estimate and the base's"
        if standing
        else "Best feasible TPS against trial number",
    )


# -- the slices and the importance --------------------------------------------------------------


def slice_answer(data: ReportData, name: str) -> SliceAnswer | None:
    """The answer on a slice plot, at its one figure (None: no answer, or it has no value of ``name``)."""
    record, tps = data.answer.record, data.answer_tps
    if record is None or tps is None or name not in record.params:
        return None
    return SliceAnswer(record.params[name], tps, f"answer #{record.number}: {tps_text(tps)} (its estimate)")


def slice_groups(data: ReportData, name: str) -> tuple[PointGroup, ...]:
    """The trials of a slice by (category, TPS imputed): an imputed TPS (a stand-in, not a
    reading) is drawn hollow and named so."""
    groups = []
    for category in CATEGORIES:
        for imputed in (False, True):
            points = [p for p in data.by_category(category) if name in p.params and p.tps_imputed == imputed]
            if points:
                drawn = tuple(
                    Point(p.params[name], p.tps if p.tps is not None else 0.0, p.number, p.hover()) for p in points
                )
                groups.append(PointGroup(category, imputed, trial_name(category, imputed), COLORS[category], drawn))
    return tuple(groups)


def whole_ticks(data: ReportData, name: str, most: int = 10) -> tuple[int, ...] | None:
    """Whole-number ticks for a parameter whose values are all integers (None: not one)."""
    values = [p.params[name] for p in data.points if name in p.params]
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return None
    low, high = min(values), max(values)
    step = max(1, math.ceil((high - low + 1) / most))
    return tuple(range(low, high + 1, step))


def slice_model(data: ReportData, name: str) -> SliceModel:
    return SliceModel(
        name=name, groups=slice_groups(data, name), answer=slice_answer(data, name), ticks=whole_ticks(data, name)
    )


def importance_model(data: ReportData) -> ImportanceModel:
    """PED-ANOVA importance of each parameter, for TPS and for PPL."""
    bars = []
    for offset, (target, color) in enumerate((("tps", COLORS[FEASIBLE]), ("ppl", COLORS[INFEASIBLE]))):
        values = data.importance.get(target)
        if values:
            names = tuple(data.param_names) or tuple(values)
            values_ = tuple(values.get(n, 0.0) for n in names)
            bars.append(Bars(f"importance for {target.upper()}", color, names, values_, offset))
    return ImportanceModel(
        names=tuple(data.param_names), bars=tuple(bars), note=None if data.importance else data.importance_note
    )
