"""The plots draw a configuration at its estimate, the figure the claim rests on, never one reading.

A study with a confirmation race, as in the GPU demo: the base manifest read
689.7 tok/s in its first server and 900.0 and 920.0 in two re-measurements,
so the study claims their geometric mean (about 830), and a plot that put the
answer at 689.7 would show it as one of the slowest feasible points.
Every expected value here is computed from the scripted readings, not taken
from the standing.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from pathlib import Path

import pytest
from matplotlib.container import ErrorbarContainer
from scipy import stats

import sweeper
from search_spaces import space_from_dict
from sweeper.errors import MeasurementError
from sweeper.report import _plotly, _png, assemble_report_data, build_report
from sweeper.study import ConfirmSettings, Measurement, PplGate, StudyOptions

CAP = 1.20
PRIOR, PRIOR_DF = 0.10, 2.0
RACING = ConfirmSettings(rounds=2, noise=PRIOR, prior_df=PRIOR_DF)
SPACE = space_from_dict(
    {
        "name": "estimates",
        "parameters": [
            {"name": "c", "type": "int", "low": 0, "high": 4, "affects": "quality", "default": 0, "env": "C"}
        ],
    },
    source="estimates.yaml",
).bind({})
PPL = {0: 1.10, 1: 1.09, 2: 1.08, 3: 1.30}  # c=0 is the base manifest; c=3 is over the cap; c=4 crashes

# each configuration's readings, in the order its servers ran; c=1 reads a little faster than the
# base in each round of its race, so the race runs both rounds and ends a tie the base keeps
BASE_WINS = {0: [689.7, 900.0, 920.0], 1: [850.0, 905.0, 925.0], 2: [500.0], 3: [1200.0]}
# c=1 reads far faster than the base in every round: it wins its race (one or more rounds)
CONTENDER_WINS = {0: [689.7, 700.0, 705.0, 702.0], 1: [1000.0, 1010.0, 1005.0, 1008.0], 2: [500.0], 3: [1200.0]}

FEASIBLE = "feasible (PPL under the cap)"
# the PPL axis fits the passing configurations (1.08-1.10) and the cap (1.20): it ends at
# 1.20 + 0.6 * (1.20 - 1.08) = 1.272, so c=3 (PPL 1.30) sits at that edge with its PPL written
EDGE = 1.20 + 0.6 * (1.20 - 1.08)
OFF_AXIS = "PPL 1.30 \u2192"


@dataclasses.dataclass(frozen=True)
class RaceStudy:
    url: str
    readings: dict[int, list[float]]  # what each configuration's servers read, in order


def race_study(folder: Path, figures: dict[int, list[float]], confirm: ConfirmSettings = RACING) -> RaceStudy:
    """The base, c=1..4 enqueued, and the race of c=1 against the base that follows."""
    left = {c: list(values) for c, values in figures.items()}
    used: dict[int, list[float]] = {c: [] for c in figures}

    def evaluate(params, context) -> Measurement:
        c = params["c"]
        if c == 4:
            raise MeasurementError("scripted crash")
        assert left[c], f"the study measured c={c} more often than scripted"
        used[c].append(left[c].pop(0))
        return Measurement(tps=used[c][-1], ppl=PPL[c])

    url = f"sqlite:///{folder / 'race.db'}"
    sweeper.run_study(
        SPACE,
        evaluate,
        StudyOptions(
            study_name="race",
            storage=url,
            n_trials=5,
            gate=PplGate(cap=CAP),
            sampler="random",
            seed=0,
            enqueue=[{"c": c} for c in (1, 2, 3, 4)],
            enqueue_base=True,
            confirm=confirm,
            handle_signals=False,
        ),
    )
    return RaceStudy(url=url, readings=used)


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def interval(values: list[float], data) -> tuple[float, float, float]:
    """(estimate, low, high): exp(mean log +- t_df(0.975) * spread / sqrt(n)), the study's spread."""
    spread, df = data.answer.standing.spread.relative, data.answer.standing.spread.df
    mean = statistics.fmean(math.log(v) for v in values)
    half = stats.t.ppf(0.975, df) * spread / math.sqrt(len(values))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def claim(answer: list[float], base: list[float], data) -> str:
    """The claim over the base from round-paired figures: exp(mean log ratio +- t * spread * sqrt(2 / n))
    at the race's share of the study-wise 5 %, written at the study-wise 95 %."""
    spread, races = data.answer.standing.spread, data.answer.standing.basis.races
    diffs = [math.log(a) - math.log(b) for a, b in zip(answer, base, strict=True)]
    half = stats.t.ppf(1 - 0.05 / races / 2, spread.df) * spread.relative * math.sqrt(2 / len(diffs))
    mean = statistics.fmean(diffs)

    def pct(x: float) -> str:
        return f"{(math.exp(x) - 1) * 100:+.1f}"

    return f"{pct(mean)} % (95 % {pct(mean - half)} to {pct(mean + half)})"


def flat(pairs) -> list[float]:
    """[(x, y), ...] -> [x, y, ...], for pytest.approx."""
    return [float(v) for pair in pairs for v in pair]


def trace(fig, name: str):
    matches = [t for t in fig.data if t.name == name]
    assert matches, f"no trace {name!r} in {[t.name for t in fig.data]}"
    return matches[0]


def labelled(ax, label: str):
    matches = [c for c in ax.collections if c.get_label() == label]
    assert matches, f"no collection {label!r} in {[c.get_label() for c in ax.collections]}"
    return matches[0]


def errorbars(ax, label: str) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """The (x, y) of an errorbar container's markers and the (low, high) of its bars, by x."""
    (container,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer) and c.get_label() == label]
    line, _, (bars,) = container.lines
    points = list(zip(line.get_xdata(), line.get_ydata()))
    ends = {float(seg[0][0]): (float(min(seg[:, 1])), float(max(seg[:, 1]))) for seg in bars.get_segments()}
    return sorted(points), [ends[x] for x, _ in sorted(points)]


@pytest.fixture(scope="module")
def base_wins(tmp_path_factory):
    study = race_study(tmp_path_factory.mktemp("base-wins"), BASE_WINS)
    assert study.readings == BASE_WINS  # the premise: the base measured in three servers
    return assemble_report_data(study.url, "race")


@pytest.fixture(scope="module")
def contender_wins(tmp_path_factory):
    study = race_study(tmp_path_factory.mktemp("contender-wins"), CONTENDER_WINS)
    return study, assemble_report_data(study.url, "race")


def expected_base_wins(data) -> dict[int, tuple[float, float, float]]:
    return {
        # the base: every figure (it is measured whatever it reads)
        0: interval(BASE_WINS[0], data),
        # c=1 was picked for the race on its first figure (850): it stands on the two re-measurements
        1: interval(BASE_WINS[1][1:], data),
        2: interval(BASE_WINS[2], data),
    }


def test_plotly_pareto_draws_the_answer_at_the_geometric_mean_of_its_three_servers(base_wins) -> None:
    expected = expected_base_wins(base_wins)
    fig = _plotly.pareto_figure(base_wins)
    winner = trace(fig, "winner")
    answer = geomean([689.7, 900.0, 920.0])
    assert answer == pytest.approx(829.65, abs=0.01)
    assert list(winner.customdata) == [0]
    assert (winner.x[0], winner.y[0]) == pytest.approx((1.10, answer))
    assert winner.y[0] > 689.7 + 100  # not at the first server's reading
    # one marker per configuration, at its estimate, the interval as an asymmetric error bar
    feasible = trace(fig, FEASIBLE)
    assert list(feasible.customdata) == [0, 1, 2]
    assert list(feasible.x) == pytest.approx([PPL[0], PPL[1], PPL[2]])
    assert list(feasible.y) == pytest.approx([expected[c][0] for c in (0, 1, 2)])
    assert feasible.error_y.symmetric is False
    assert list(feasible.error_y.array) == pytest.approx([expected[c][2] - expected[c][0] for c in (0, 1, 2)])
    assert list(feasible.error_y.arrayminus) == pytest.approx([expected[c][0] - expected[c][1] for c in (0, 1, 2)])
    # each server's reading a faint dot at its configuration's PPL
    readings = trace(fig, "one server's reading")
    assert flat(sorted(zip(readings.x, readings.y))) == pytest.approx(
        flat(sorted((PPL[c], v) for c in (0, 1, 2) for v in BASE_WINS[c]))
    )
    assert sorted(readings.customdata) == [0, 1, 2, 5, 6, 7, 8]
    assert readings.marker.opacity < 0.5 and readings.marker.size < feasible.marker.size
    # the base is marked (a square), here under the star: it is the answer
    base = trace(fig, "base manifest")
    assert (base.x[0], base.y[0]) == pytest.approx((1.10, answer)) and base.marker.symbol == "square-open"
    # the answer's label, with the estimate and the interval it rests on; every other configuration's
    _, low, high = expected[0]
    assert [a.text.replace("<br>", " ") for a in fig.layout.annotations] == [
        OFF_AXIS,
        f"answer #0 (UNVERIFIED), the base manifest: {answer:.1f} tok/s (95 % interval {low:.1f}-{high:.1f})",
        f"#1: {expected[1][0]:.1f} tok/s",
        f"#2: {expected[2][0]:.1f} tok/s",
    ]
    # the front is made of the estimates: c=2 (PPL 1.08, 500), then c=1 (1.09, 915), which
    # is above the base at its estimate (the tie went to the base), not at its first reading
    front = trace(fig, "Pareto front")
    assert list(front.x) == pytest.approx([1.08, 1.09])
    assert list(front.y) == pytest.approx([expected[2][0], expected[1][0]])
    # trials off the gate stay single points; c=3 at the axis' edge, marked as off it
    infeasible = trace(fig, "infeasible (PPL over the cap)")
    assert list(infeasible.y) == [1200.0] and list(infeasible.x) == pytest.approx([EDGE])
    assert list(infeasible.marker.symbol) == ["triangle-right"]
    assert fig.layout.xaxis.range[0] < 1.08 and EDGE < fig.layout.xaxis.range[1] < 1.30
    failed = trace(fig, "failed (no measurement; drawn at TPS 0)")
    assert list(failed.customdata) == [4] and list(failed.x) == [CAP] and list(failed.y) == [0.0]
    # the cap line reaches above the highest bar
    assert max(trace(fig, "PPL cap").y) >= max(high for _, _, high in expected.values())


def test_png_pareto_draws_the_same_bars_dots_base_and_answer(base_wins) -> None:
    expected = expected_base_wins(base_wins)
    fig = _png.pareto_figure(base_wins)
    (ax,) = fig.axes
    points, ends = errorbars(ax, FEASIBLE)
    assert flat(points) == pytest.approx(flat(sorted((PPL[c], expected[c][0]) for c in (0, 1, 2))))
    by_ppl = {PPL[c]: c for c in (0, 1, 2)}
    assert flat(ends) == pytest.approx(flat(expected[by_ppl[x]][1:] for x, _ in points))
    readings = labelled(ax, "one server's reading")
    assert flat(sorted(map(tuple, readings.get_offsets()))) == pytest.approx(
        flat(sorted((PPL[c], v) for c in (0, 1, 2) for v in BASE_WINS[c]))
    )
    assert readings.get_alpha() < 0.5
    answer = geomean(BASE_WINS[0])
    assert flat(labelled(ax, "winner").get_offsets()) == pytest.approx(flat([(1.10, answer)]))
    assert flat(labelled(ax, "base manifest").get_offsets()) == pytest.approx(flat([(1.10, answer)]))
    _, low, high = expected[0]
    assert [t.get_text().replace("\n", " ") for t in ax.texts] == [
        OFF_AXIS,
        f"answer #0 (UNVERIFIED), the base manifest: {answer:.1f} tok/s (95 % interval {low:.1f}-{high:.1f})",
        f"#1: {expected[1][0]:.1f} tok/s",
        f"#2: {expected[2][0]:.1f} tok/s",
    ]
    assert ax.texts[0].xy == pytest.approx((EDGE, 1200.0))
    assert flat(labelled(ax, "infeasible (PPL over the cap), PPL off the axis").get_offsets()) == pytest.approx(
        [EDGE, 1200.0]
    )
    assert ax.get_xlim()[0] < 1.08 and EDGE < ax.get_xlim()[1] < 1.30
    # the bars fit in the axes
    bottom, top = ax.get_ylim()
    assert bottom <= min(e[0] for e in ends) and top >= max(e[1] for e in ends)


def test_history_shows_the_answer_estimate_and_its_interval_over_faint_readings(base_wins) -> None:
    answer, low, high = expected_base_wins(base_wins)[0]
    fig = _plotly.history_figure(base_wins)
    names = [t.name for t in fig.data]
    assert "best feasible TPS so far" not in names  # the luckiest single reading is not the claim
    assert list(trace(fig, "answer's TPS estimate").y) == pytest.approx([answer, answer])
    band = trace(fig, "answer's 95 % interval")
    assert (min(band.y), max(band.y)) == pytest.approx((low, high))
    assert (min(band.x), max(band.x)) == (-0.5, 8.5)  # across every trial
    mine = trace(fig, "the answer's readings")
    assert list(zip(mine.x, mine.y)) == [(0, 689.7), (6, 900.0), (7, 920.0)]  # round 2 ran base first
    feasible = trace(fig, FEASIBLE)
    assert sorted(feasible.customdata) == [0, 1, 2, 5, 6, 7, 8] and feasible.marker.opacity < 0.5
    assert "base's TPS estimate" not in names  # the base is the answer: one line
    # the PNG: the same line and band
    (ax,) = _png.history_figure(base_wins).axes
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "answer's TPS estimate"]
    assert list(line.get_ydata()) == pytest.approx([answer, answer])
    (span,) = [p for p in ax.patches if p.get_label() == "answer's 95 % interval"]
    assert (span.get_y(), span.get_y() + span.get_height()) == pytest.approx((low, high))
    assert flat(labelled(ax, "the answer's readings").get_offsets()) == [0, 689.7, 6, 900.0, 7, 920.0]
    assert not [ln for ln in ax.get_lines() if ln.get_label() == "best feasible TPS so far"]


def test_a_contender_that_won_its_race_is_the_answer_and_the_base_is_marked_apart(contender_wins) -> None:
    study, data = contender_wins
    rounds = len(study.readings[1]) - 1
    assert rounds >= 1 and len(study.readings[0]) == rounds + 1  # each round: contender, base
    # the base at its figures of the claim's rounds (its first, before any round, is not paired)
    base = interval(study.readings[0][1:], data)
    # won on its re-measurements: the first figure (1000) picked it for the race and does not count
    answer = interval(study.readings[1][1:], data)
    fig = _plotly.pareto_figure(data)
    winner = trace(fig, "winner")
    assert list(winner.customdata) == [1]
    assert (winner.x[0], winner.y[0]) == pytest.approx((PPL[1], answer[0]))
    marked = trace(fig, "base manifest")
    assert list(marked.customdata) == [0] and (marked.x[0], marked.y[0]) == pytest.approx((PPL[0], base[0]))
    feasible = trace(fig, FEASIBLE)
    assert feasible.y[0] == pytest.approx(base[0])
    assert feasible.error_y.arrayminus[0] == pytest.approx(base[0] - base[1])
    assert feasible.error_y.array[0] == pytest.approx(base[2] - base[0])
    # the claim: the answer's figures after selection paired with the base's of the same rounds
    over = claim(study.readings[1][1:], study.readings[0][1:], data)
    assert [a.text.replace("<br>", " ") for a in fig.layout.annotations] == [
        OFF_AXIS,
        f"answer #1 (UNVERIFIED): {answer[0]:.1f} tok/s (95 % interval {answer[1]:.1f}-{answer[2]:.1f}) "
        f"{over} over the base",
        "#2: 500.0 tok/s",
        f"base: {base[0]:.1f} tok/s (95 % interval {base[1]:.1f}-{base[2]:.1f})",
    ]
    # the answer's figure over the base's is the claim
    assert f"{(answer[0] / base[0] - 1) * 100:+.1f} %" == over.split(" (")[0]
    # the claim is drawn: the base's estimate as a line under the answer's bar
    assert list(trace(fig, "base's TPS estimate").y) == pytest.approx([base[0]] * 2)
    (ax,) = _png.pareto_figure(data).axes
    assert flat(labelled(ax, "base manifest").get_offsets()) == pytest.approx([PPL[0], base[0]])
    assert flat(labelled(ax, "winner").get_offsets()) == pytest.approx([PPL[1], answer[0]])
    texts = ax.texts
    plotly_texts = [a.text.replace("<br>", " ") for a in fig.layout.annotations]
    assert [t.get_text().replace("\n", " ") for t in texts] == plotly_texts
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "base's TPS estimate"]
    assert list(line.get_ydata()) == pytest.approx([base[0]] * 2)
    # the labels and the legend do not cover one another; the labels stay inside the axes, the legend below
    renderer = ax.get_figure().canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    boxes = [t.get_window_extent(renderer) for t in texts] + [legend]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    assert all(ax.bbox.contains(b.x0, b.y0) and ax.bbox.contains(b.x1, b.y1) for b in boxes[:-1])
    assert legend.y1 < ax.bbox.y0
    # the history: the base's estimate as a reference line with its band, the answer's above it
    history = _plotly.history_figure(data)
    assert list(trace(history, "base's TPS estimate").y) == pytest.approx([base[0]] * 2)
    band = trace(history, "base's 95 % interval")
    assert (min(band.y), max(band.y)) == pytest.approx(base[1:])
    assert list(trace(history, "answer's TPS estimate").y) == pytest.approx([answer[0]] * 2)
    (ax,) = _png.history_figure(data).axes
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "base's TPS estimate"]
    assert list(line.get_ydata()) == pytest.approx([base[0]] * 2)


def test_without_a_standing_each_trial_is_a_point_as_before(base_wins, tmp_path) -> None:
    data = dataclasses.replace(base_wins, configurations=())  # what a study without a standing reads
    fig = _plotly.pareto_figure(data)
    names = [t.name for t in fig.data]
    assert "one server's reading" not in names and "base manifest" not in names
    assert sorted(trace(fig, FEASIBLE).customdata) == [0, 1, 2, 5, 6, 7, 8]
    winner = trace(fig, "winner")
    assert (winner.x[0], winner.y[0]) == pytest.approx((1.10, 689.7))  # the trial's own reading
    assert [a.text.replace("<br>", " ") for a in fig.layout.annotations] == [OFF_AXIS, "answer #0 (UNVERIFIED)"]
    history = _plotly.history_figure(data)
    assert list(trace(history, "best feasible TPS so far").y)[-1] == max(v for c in (0, 1, 2) for v in BASE_WINS[c])
    (ax,) = _png.pareto_figure(data).axes
    assert not [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert [t.get_text().replace("\n", " ") for t in ax.texts] == [OFF_AXIS, "answer #0 (UNVERIFIED)"]
    _png.history_figure(data)


def test_the_race_study_gets_a_whole_report(base_wins, tmp_path) -> None:
    written = build_report(base_wins.storage, "race", tmp_path / "out")
    assert {"pareto.png", "history.png", "pareto.html", "report.html"} <= set(written.files)
    assert "one server's reading" in (tmp_path / "out" / "pareto.html").read_text()


def test_the_noise_line_says_when_the_repeats_outvote_a_narrow_prior(base_wins, tmp_path) -> None:
    # the repeats' own spread, written out: log TPS around each configuration's mean, pooled
    groups = [BASE_WINS[0], BASE_WINS[1]]
    rss = sum(sum((math.log(v) - statistics.fmean(map(math.log, g))) ** 2 for v in g) for g in groups)
    measured = math.sqrt(rss / 4)
    assert stats.chi2.sf(rss / PRIOR**2, 4) > 0.005 and stats.chi2.cdf(rss / PRIOR**2, 4) > 0.005
    assert base_wins.noise_line().endswith(" race(s)")  # the 10 % prior fits these repeats
    narrow = ConfirmSettings(rounds=2, noise=0.02, prior_df=PRIOR_DF)
    assert stats.chi2.sf(rss / 0.02**2, 4) < 0.005
    data = assemble_report_data(race_study(tmp_path, BASE_WINS, narrow).url, "race")
    assert data.noise_line().endswith(
        f"; the repeats alone show {measured:.1%} on 4 df, above the prior of 2.0% (chi-square, 99%): "
        f"a study on this host should pass --noise {measured:.2f}"
    )
