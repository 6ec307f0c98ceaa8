"""The report read at a glance, on a study shaped like the CPU demo's (demo_like.py).

One TPS figure for the answer everywhere (its estimate after selection), every
reading the claim rests on visible and marked, imputed TPS marked and left out
of the importance, a PPL axis that fits the passing configurations, and the
trial counts split into searched trials and race servers. Every expected value
is computed here from the scripted readings and the stored trials, not taken
from the study's standing.
"""

from __future__ import annotations

import math
import re
import statistics
import warnings

import optuna
import pytest
from scipy import stats

from storage import TrialStore
from sweeper.report import _plotly, _png, build_report

ANSWER, BASE, IMPUTED_KEY = (0, 3), (0, 1), (2, 1)
IMPUTED = "infeasible (PPL over the cap), TPS imputed, not measured"


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def tps_interval(values: list[float], data) -> tuple[float, float, float]:
    """exp(mean log +- t_df(0.975) * spread / sqrt(n)) on the study's spread."""
    spread = data.answer.standing.spread
    mean = statistics.fmean(math.log(v) for v in values)
    half = stats.t.ppf(0.975, spread.df) * spread.relative / math.sqrt(len(values))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def trace(fig, name: str):
    matches = [t for t in fig.data if t.name == name]
    assert matches, f"no trace {name!r} in {[t.name for t in fig.data]}"
    return matches[0]


def labelled(ax, label: str):
    matches = [c for c in ax.collections if c.get_label() == label]
    assert matches, f"no collection {label!r} in {[c.get_label() for c in ax.collections]}"
    return matches[0]


def offsets(collection) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in collection.get_offsets()]


@pytest.fixture(scope="module")
def study(demo_like, tmp_path_factory):
    folder = tmp_path_factory.mktemp("demo-like")
    made = demo_like.make_demo_like(folder)
    store = TrialStore(made.url)
    try:
        records = store.records(made.name)
    finally:
        store.close()
    report = build_report(made.url, made.name, folder / "report")
    return made, records, report


def numbers(records, key: tuple[int, int], *, confirmation: bool | None = None) -> list[int]:
    found = [r for r in records if (r.params.get("w"), r.params.get("k")) == key]
    if confirmation is not None:
        found = [r for r in found if r.role.startswith("confirm") == confirmation]
    return sorted(r.number for r in found)


def role_of(records, number: int) -> str:
    return next(r.role for r in records if r.number == number)


def reading(records, number: int) -> float:
    return float(next(r.tps for r in records if r.number == number))


def test_the_answer_has_one_tps_figure_its_estimate_after_selection(study) -> None:
    made, records, report = study
    data = report.data
    answer = made.used[ANSWER]
    assert answer[0] == 215.0 and len(answer) >= 3  # picked for a race on its first, highest reading
    estimate, low, high = tps_interval(answer[1:], data)
    figure = f"{estimate:.1f} tok/s"
    # the report's tile
    page = (report.out_dir / "report.html").read_text()
    tiles = dict((k, v) for v, k in re.findall(r'<div class="v">(.*?)</div><div class="k">(.*?)</div>', page))
    assert tiles["winner TPS"] == figure
    # summary.md: the headline and the answer's row of the Pareto table
    summary = (report.out_dir / "summary.md").read_text()
    winner = summary.split("## Winner")[1].split("\n## ")[0]
    assert re.findall(r"\d+\.\d+ tok/s", winner) == [figure]
    assert f"- TPS {figure} (95 % interval {low:.1f}-{high:.1f}, {len(answer) - 1} servers after selection)" in winner
    first = numbers(records, ANSWER, confirmation=False)[0]
    (row,) = [line for line in summary.splitlines() if line.startswith(f"| #{first} (answer) |")]
    assert row.split(" | ")[1:3] == [figure, f"95 % {low:.1f}-{high:.1f}"]
    assert "215.0" not in summary and "215.00" not in summary  # the selecting reading is shown nowhere
    # the plots' labels
    pareto = [a.text for a in _plotly.pareto_figure(data).layout.annotations if a.text.startswith("answer")]
    history = [a.text for a in _plotly.history_figure(data).layout.annotations if a.text.startswith("answer")]
    (ax,) = _png.pareto_figure(data).axes
    drawn = [t.get_text() for t in ax.texts if t.get_text().startswith("answer")]
    for labels in (pareto, history, drawn):
        (label,) = labels
        assert re.findall(r"\d+\.\d+ tok/s", label) == [figure]
    assert trace(_plotly.pareto_figure(data), "winner").y[0] == pytest.approx(estimate)


def claim_rounds(records, answer_first: int) -> list[tuple[float, float]]:
    """(answer, base) readings of each round of the answer's race, from the stored roles."""
    pairs = []
    for round_number in (1, 2, 3, 4):
        role = f"confirm:{answer_first}:{round_number}"
        group = {(r.params["w"], r.params["k"]): float(r.tps) for r in records if r.role == role}
        if group:
            pairs.append((group[ANSWER], group[BASE]))
    return pairs


def test_the_claimed_speedup_is_drawn_on_the_pareto_plot(study) -> None:
    _, records, report = study
    data = report.data
    first = numbers(records, ANSWER, confirmation=False)[0]
    pairs = claim_rounds(records, first)
    assert len(pairs) == 2
    spread, races = data.answer.standing.spread, data.answer.standing.basis.races
    diffs = [math.log(a) - math.log(b) for a, b in pairs]
    half = stats.t.ppf(1 - 0.05 / races / 2, spread.df) * spread.relative * math.sqrt(2 / len(diffs))
    mean = statistics.fmean(diffs)

    def pct(x: float) -> str:
        return f"{(math.exp(x) - 1) * 100:+.1f}"

    claim = f"{pct(mean)} % (95 % {pct(mean - half)} to {pct(mean + half)}) over the base"
    # the base's figure is that of the claim's rounds: the answer's over it is the claim
    base = geomean([b for _, b in pairs])
    answer = geomean([a for a, _ in pairs])
    assert f"{pct(math.log(answer / base))} %" == claim.split(" (")[0]
    fig = _plotly.pareto_figure(data)
    assert any(a.text.endswith(claim) for a in fig.layout.annotations)
    assert list(trace(fig, "base's TPS estimate").y) == pytest.approx([base, base])
    (ax,) = _png.pareto_figure(data).axes
    assert any(t.get_text().endswith(claim) for t in ax.texts)
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "base's TPS estimate"]
    assert list(line.get_ydata()) == pytest.approx([base, base])


def test_history_marks_every_reading_the_claim_rests_on_and_hides_none(study) -> None:
    _, records, report = study
    data = report.data
    first = numbers(records, ANSWER, confirmation=False)[0]
    after = [(n, reading(records, n)) for n in numbers(records, ANSWER, confirmation=True)]
    # the base's readings of the answer's rounds, the ones the claim pairs with the answer's
    rounds = {f"confirm:{first}:{i}" for i in range(1, 5)} | {f"confirm:claim:{first}:{i}" for i in range(1, 5)}
    base = [(n, reading(records, n)) for n in numbers(records, BASE) if role_of(records, n) in rounds]
    rest = [(n, reading(records, n)) for n in numbers(records, BASE) if role_of(records, n) not in rounds]
    assert len(base) == 2 and len(rest) >= 1  # its own first reading, and those of the other race
    (ax,) = _png.history_figure(data).axes
    assert sorted(offsets(labelled(ax, "the answer's readings"))) == after
    assert offsets(labelled(ax, "the reading that selected the answer (not counted)")) == [(first, 215.0)]
    assert sorted(offsets(labelled(ax, "the base's readings"))) == base
    # the base's other readings (before any round, or in another race) are shown and said not to be counted
    outside = "the base's readings outside the claim's rounds (not counted)"
    assert sorted(offsets(labelled(ax, outside))) == rest
    # the readings each round of the claim paired are among the marked ones
    for answer_tps, base_tps in claim_rounds(records, first):
        assert answer_tps in [v for _, v in after] and base_tps in [v for _, v in base]
    # no label or legend covers a reading: the labels sit right of the axes, the legend below
    fig = ax.get_figure()
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.texts] + [ax.get_legend().get_window_extent(renderer)]
    assert len(ax.texts) == 2 and all(b.x0 > ax.bbox.x1 for b in boxes[:-1]) and boxes[-1].y1 < ax.bbox.y0
    every = [(r.number, float(r.tps) if r.tps is not None else 0.0) for r in records]
    pixels = ax.transData.transform(every)
    assert not any(b.contains(x, y) for b in boxes for x, y in pixels)
    assert all(ax.bbox.contains(x, y) for x, y in pixels)
    # the same in plotly: marks by trace, labels in the right margin (paper coordinates)
    history = _plotly.history_figure(data)
    mine = trace(history, "the answer's readings")
    assert sorted(zip(mine.x, mine.y)) == after
    assert list(trace(history, "the reading that selected the answer (not counted)").x) == [first]
    assert sorted(trace(history, "the base's readings").x) == [n for n, _ in base]
    assert sorted(trace(history, outside).x) == [n for n, _ in rest]
    assert [a.xref for a in history.layout.annotations] == ["paper", "paper"]
    assert all(a.x >= 1.0 for a in history.layout.annotations)


def test_an_imputed_tps_is_marked_in_the_slices_and_left_out_of_the_importance(demo_like, study) -> None:
    made, records, report = study
    data = report.data
    (refused,) = [r for r in records if r.params.get("w") == 2]
    assert refused.tps_imputed
    # the stand-in: the slowest TPS measured before it
    standin = min(float(r.tps) for r in records if r.number < refused.number and r.tps and not r.tps_imputed)
    assert refused.tps == pytest.approx(standin)
    for name, value in (("w", 2), ("k", 1)):
        (ax,) = _png.slice_figure(data, name).axes
        imputed = labelled(ax, IMPUTED)
        assert offsets(imputed) == [(value, pytest.approx(standin))]
        assert len(imputed.get_facecolors()) == 0  # hollow
        assert IMPUTED not in [c.get_label() for c in ax.collections if c is not imputed]
    slices = _plotly.slices_figure(data)
    drawn = trace(slices, IMPUTED)
    assert list(drawn.customdata) == [refused.number] and drawn.marker.symbol == "circle-open"
    # whole-number settings get whole-number ticks
    assert list(_png.slice_figure(data, "k").axes[0].get_xticks()) == [1, 2, 3, 4]
    assert list(_png.slice_figure(data, "w").axes[0].get_xticks()) == [0, 1, 2, 3]
    assert [list(slices.layout[f"xaxis{i}"].tickvals) for i in ("", "2")] == [[0, 1, 2, 3], [1, 2, 3, 4]]
    # the importance, from our own table's measured trials only (the stand-in left out)
    distributions = {
        "w": optuna.distributions.IntDistribution(0, 3),
        "k": optuna.distributions.IntDistribution(1, 4),
    }
    measured = [r for r in records if r.state == "complete" and r.tps is not None and not r.tps_imputed]
    assert len(measured) == len(records) - 2  # all but the refused and the crashed
    scratch = optuna.create_study(direction="minimize")
    scratch.add_trials(
        optuna.trial.create_trial(params=dict(r.params), distributions=distributions, value=-float(r.tps))
        for r in measured
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = optuna.importance.get_param_importances(
            scratch, evaluator=optuna.importance.PedAnovaImportanceEvaluator(target_quantile=0.25)
        )
    assert data.importance["tps"] == pytest.approx(dict(expected))
    assert "imputed TPS left out" in _png.importance_figure(data).axes[0].get_title()
    assert (
        "a TPS imputed for a trial stopped early or refused is left out" in (report.out_dir / "summary.md").read_text()
    )


def test_the_pareto_axis_fits_the_passing_configurations(demo_like, study) -> None:
    _, records, report = study
    data = report.data
    # passing PPLs 2.21 and 2.23 and the cap 2.26: the axis ends at 2.26 + 0.6 * 0.05
    edge = demo_like.CAP + 0.6 * (demo_like.CAP - demo_like.PPL[0])
    (refused,) = [r for r in records if r.params.get("w") == 2]
    (ax,) = _png.pareto_figure(data).axes
    low, high = ax.get_xlim()
    assert low < demo_like.PPL[0] and edge < high < edge + 0.01 < demo_like.PPL[2]
    off = labelled(ax, f"{IMPUTED}, PPL off the axis")
    assert offsets(off) == [(pytest.approx(edge), pytest.approx(float(refused.tps)))]
    assert "PPL 4.97 \u2192" in [t.get_text() for t in ax.texts]
    # three configurations share PPL 2.21 (k leaves it alone): set side by side in trial order (their
    # PPL is one), far enough apart that their bars' caps do not touch, over a band that says so
    (container,) = [c for c in ax.containers if c.get_label() == "feasible (PPL under the cap)"]
    line = container.lines[0]
    points = sorted(zip(line.get_xdata(), line.get_ydata()))
    same = [(x, y) for x, y in points if abs(x - demo_like.PPL[0]) < 0.01]
    keys = sorted(((0, 1), (0, 2), (0, 3)), key=lambda key: numbers(records, key)[0])
    first = numbers(records, ANSWER, confirmation=False)[0]
    base_counted = [b for _, b in claim_rounds(records, first)]
    expected = [
        geomean(base_counted)
        if key == BASE
        else geomean([reading(records, n) for n in (numbers(records, key, confirmation=True) or numbers(records, key))])
        for key in keys
    ]
    assert [y for _, y in same] == pytest.approx(expected)
    pixels = ax.transData.transform(same)
    cap_pixels = 2 * 3 * ax.get_figure().dpi / 72  # two caps of 3 points
    assert all(b[0] - a[0] > cap_pixels for a, b in zip(pixels, pixels[1:]))
    moved = ", ".join(f"#{numbers(records, key)[0]}" for key in keys)
    assert f"set side by side (the offset is not PPL): {moved} at PPL {demo_like.PPL[0]:.4f}" in ax.get_title()
    (band,) = [p for p in ax.patches if p.get_label() == "set side by side at (nearly) one PPL: the offset is not PPL"]
    left, right = band.get_x(), band.get_x() + band.get_width()
    assert left < min(x for x, _ in same) and max(x for x, _ in same) < right
    # plotly: the same axis, the refused trial at its edge with its PPL written
    fig = _plotly.pareto_figure(data)
    assert fig.layout.xaxis.range[1] == pytest.approx(high)
    infeasible = trace(fig, "infeasible (PPL over the cap)")
    assert list(infeasible.x) == pytest.approx([edge]) and list(infeasible.marker.symbol) == ["triangle-right-open"]
    assert "PPL 4.97 \u2192" in [a.text for a in fig.layout.annotations]


def test_trial_counts_say_searched_and_race_servers(study) -> None:
    _, records, report = study
    races = sum(1 for r in records if r.role.startswith("confirm:"))
    searched = len(records) - races
    assert (searched, races) == (6, 8)  # the base, five searched (one crashed); two races of two rounds
    summary = (report.out_dir / "summary.md").read_text()
    assert f"- trials: {len(records)} ({searched} searched, {races} race servers; " in summary
    page = (report.out_dir / "report.html").read_text()
    assert f'<div class="v">{searched} / {races}</div><div class="k">searched / race servers</div>' in page
    (ax,) = _png.pareto_figure(report.data).axes
    assert f"({len(records)} trials: {searched} searched, {races} race servers)" in ax.get_title()
