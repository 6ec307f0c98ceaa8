"""Pictures that do not mislead, on the study shaped like the CPU demo's (demo_like.py).

No configuration is moved along the PPL axis without the plot saying so; the claim's
speedup and its interval are drawn; every configuration is labelled and every other point
is in the legend; the slice plots mark the answer; importance is drawn only where the
configurations can tell the settings apart. Every expected value is computed here from
the stored trials and the scripted readings, not taken from the report's data.
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Mapping

import pytest
from scipy import stats

from search_spaces import space_from_dict
from storage import TrialStore
from sweeper.report import _plotly, _png, assemble_report_data, build_report
from sweeper.study import ConfirmSettings, Measurement, PplGate, StudyOptions, run_study

ANSWER, BASE = (0, 3), (0, 1)
SIDE_BY_SIDE = "set side by side at (nearly) one PPL: the offset is not PPL"
CLAIM = "the claim: base's TPS x the speedup's study-wise interval"


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


@pytest.fixture(scope="module")
def study(demo_like, tmp_path_factory):
    folder = tmp_path_factory.mktemp("pictures")
    made = demo_like.make_demo_like(folder)
    store = TrialStore(made.url)
    try:
        records = store.records(made.name)
    finally:
        store.close()
    return made, records, assemble_report_data(made.url, made.name)


def configurations(records) -> dict[tuple[int, int], list]:
    """The gate-passing configurations' trials, by (w, k), from the stored trials."""
    found: dict[tuple[int, int], list] = {}
    for r in sorted(records, key=lambda r: r.number):
        if r.state == "complete" and r.feasible and r.tps is not None and not r.tps_imputed:
            found.setdefault((r.params["w"], r.params["k"]), []).append(r)
    return found


def claim_pairs(records, first: int) -> list[tuple[float, float]]:
    """(answer, base) readings of each round after the answer was picked, from the stored roles."""
    rounds: dict[str, dict[tuple[int, int], float]] = {}
    for r in records:
        if r.role.startswith(f"confirm:{first}:") or r.role.startswith(f"confirm:claim:{first}:"):
            rounds.setdefault(r.role, {})[(r.params["w"], r.params["k"])] = float(r.tps)
    return [(pair[ANSWER], pair[BASE]) for pair in rounds.values() if ANSWER in pair and BASE in pair]


def test_configurations_of_one_ppl_are_set_apart_only_over_a_band_that_says_so(demo_like, study) -> None:
    _, records, data = study
    found = configurations(records)
    same = sorted((trials[0].number, key) for key, trials in found.items() if trials[0].ppl == demo_like.PPL[0])
    assert len(same) == 3  # the base and two speed-only configurations share PPL 2.21
    (ax,) = _png.pareto_figure(data).axes
    (container,) = [c for c in ax.containers if c.get_label() == "feasible (PPL under the cap)"]
    xs = {round(float(y), 6): float(x) for x, y in zip(container.lines[0].get_xdata(), container.lines[0].get_ydata())}
    # the configurations of other PPLs sit exactly at their PPL
    for key, trials in found.items():
        if trials[0].ppl != demo_like.PPL[0]:
            drawn = [x for x in xs.values() if abs(x - trials[0].ppl) < 1e-9]
            assert drawn, (key, xs)
    # the three of one PPL: moved, so each one's x is not its PPL, and the plot says so where they are
    moved = sorted(x for x in xs.values() if abs(x - demo_like.PPL[0]) < 0.01)
    assert len(moved) == 3 and moved[0] < demo_like.PPL[0] < moved[-1]
    (band,) = [p for p in ax.patches if p.get_label() == SIDE_BY_SIDE]
    assert band.get_x() < moved[0] and moved[-1] < band.get_x() + band.get_width()
    note = "set side by side (the offset is not PPL): " + ", ".join(f"#{n}" for n, _ in same)
    assert f"{note} at PPL {demo_like.PPL[0]:.4f}" in ax.get_title()
    assert SIDE_BY_SIDE in ax.get_legend_handles_labels()[1]
    # left to right in trial order (their PPL is one), never by TPS
    order = sorted(((x, y) for y, x in xs.items() if abs(x - demo_like.PPL[0]) < 0.01))
    expected_order = [n for n, _ in same]
    by_tps = {round(c.tps, 6): c.first for c in data.configurations}
    assert [by_tps[y] for _, y in order] == expected_order
    # plotly: the same band, named in the legend, and the note under the title
    fig = _plotly.pareto_figure(data)
    bands = [t for t in fig.data if t.name == SIDE_BY_SIDE]
    assert len(bands) == 1 and min(bands[0].x) < moved[0] and moved[-1] < max(bands[0].x)
    assert note in fig.layout.title.text
    # each configuration's hover gives its PPL as measured
    feasible = next(t for t in fig.data if t.name == "feasible (PPL under the cap)")
    for text, first in zip(feasible.text, feasible.customdata):
        ppl = next(trials[0].ppl for trials in found.values() if trials[0].number == first)
        assert f"PPL {ppl:.4f}" in text


def test_the_claims_speedup_and_its_interval_are_drawn(study) -> None:
    _, records, data = study
    found = configurations(records)
    first = found[ANSWER][0].number
    pairs = claim_pairs(records, first)
    assert len(pairs) >= 2
    now = data.answer.standing
    spread, races = now.spread, now.basis.races
    diffs = [math.log(a / b) for a, b in pairs]
    half = stats.t.ppf(1 - 0.05 / races / 2, spread.df) * spread.relative * math.sqrt(2 / len(diffs))
    mean = statistics.fmean(diffs)
    base = geomean([b for _, b in pairs])
    low, high = base * math.exp(mean - half), base * math.exp(mean + half)
    # the base's figure times the interval's ends, at the answer; its middle is the answer's figure
    assert base * math.exp(mean) == pytest.approx(geomean([a for a, _ in pairs]))
    fig = _plotly.pareto_figure(data)
    (drawn,) = [t for t in fig.data if t.name == CLAIM]
    winner = next(t for t in fig.data if t.name == "winner")
    assert list(drawn.x) == pytest.approx([winner.x[0]] * 2)
    assert list(drawn.y) == pytest.approx([low, high])
    (ax,) = _png.pareto_figure(data).axes
    (lines,) = [c for c in ax.collections if c.get_label() == CLAIM]
    ((x0, y0), (x1, y1)) = lines.get_segments()[0]
    assert (x0, x1) == pytest.approx([winner.x[0]] * 2) and sorted((y0, y1)) == pytest.approx([low, high])


def test_every_configuration_is_labelled_and_every_other_point_is_in_the_legend(study) -> None:
    _, records, data = study
    found = configurations(records)
    (ax,) = _png.pareto_figure(data).axes
    texts = [t.get_text().replace("\n", " ") for t in ax.texts]
    fig = _plotly.pareto_figure(data)
    notes = [a.text.replace("<br>", " ") for a in fig.layout.annotations]
    for key, trials in found.items():
        first = trials[0].number
        config = data.configuration_of(first)
        if key == ANSWER:
            mark = f"answer #{first} "
        elif key == BASE:
            mark = "base: "
        else:
            mark = f"#{first}: {config.tps:.1f} tok/s"
        assert [t for t in texts if t.startswith(mark)], (mark, texts)
        assert [t for t in notes if t.startswith(mark)], (mark, notes)
    # the points that are not configurations are named by the legend: each artist with data has a label
    legend = set(ax.get_legend_handles_labels()[1])
    bars = {id(part): c.get_label() for c in ax.containers for part in c.get_children()}  # error bars: their set's
    for artist in ax.collections:
        if len(artist.get_offsets()) or getattr(artist, "get_segments", lambda: [])():
            assert bars.get(id(artist), artist.get_label()) in legend, artist.get_label()
    for trace in fig.data:
        assert trace.name and (trace.showlegend is not False or trace.legendgroup), trace.name


def test_the_slice_plots_mark_the_answer_at_its_figure(study) -> None:
    _, records, data = study
    found = configurations(records)
    answer = found[ANSWER]
    figure = geomean([r.tps for r in answer if r.role.startswith("confirm")])
    label = f"answer #{answer[0].number}: {figure:.1f} tok/s (its estimate)"
    for name, value in (("w", ANSWER[0]), ("k", ANSWER[1])):
        (ax,) = _png.slice_figure(data, name).axes
        (star,) = [c for c in ax.collections if c.get_label() == label]
        assert [tuple(map(float, xy)) for xy in star.get_offsets()] == [(value, pytest.approx(figure))]
    slices = _plotly.slices_figure(data)
    stars = [t for t in slices.data if t.name == label]
    assert len(stars) == 2
    assert sorted((t.x[0], t.y[0]) for t in stars) == [
        (ANSWER[0], pytest.approx(figure)),
        (ANSWER[1], pytest.approx(figure)),
    ]


CONFOUNDED = space_from_dict(
    {
        "name": "together",
        "parameters": [
            {"name": "window", "type": "int", "low": 0, "high": 3, "affects": "quality", "default": 0, "env": "W"},
            {"name": "tokens", "type": "int", "low": 1, "high": 4, "affects": "speed", "default": 1, "env": "K"},
        ],
    },
    source="together.yaml",
).bind({})


def together_study(folder, configs: list[Mapping[str, int]]) -> str:
    def evaluate(params: Mapping[str, int], context) -> Measurement:
        return Measurement(tps=100.0 + 10 * params["tokens"] + 3 * params["window"], ppl=2.0 + 0.01 * params["window"])

    url = f"sqlite:///{folder / 'together.db'}"
    run_study(
        CONFOUNDED,
        evaluate,
        StudyOptions(
            study_name="together",
            storage=url,
            n_trials=len(configs) + 1,
            gate=PplGate(cap=2.5),
            sampler="random",
            seed=0,
            enqueue=configs,
            enqueue_base=True,
            confirm=ConfirmSettings(rounds=0),
            handle_signals=False,
        ),
    )
    return url


def test_importance_is_not_drawn_when_the_settings_changed_together_in_every_configuration(tmp_path) -> None:
    # the base (0, 1) and four more: window and tokens always change together, one fixing the other
    together = [{"window": w, "tokens": w + 1} for w in (1, 2, 3)] + [{"window": 1, "tokens": 2}]
    url = together_study(tmp_path, together)
    written = build_report(url, "together", tmp_path / "report")
    data = written.data
    assert data.importance == {}
    note = "not drawn: tokens and window changed together in all 4 configurations measured"
    assert data.importance_note.startswith(note)
    figure = _png.importance_figure(data)
    (ax,) = figure.axes
    assert not ax.patches and any(note in " ".join(t.get_text().split()) for t in ax.texts)
    # the whole note is on the picture, and the layout holds (it gave up on one long line)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _png.save_png(figure, tmp_path / "importance.png")
    renderer = figure.canvas.get_renderer()
    page = figure.bbox
    for text in ax.texts:
        box = text.get_window_extent(renderer)
        assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1, box
    assert note in _plotly.importance_figure(data).layout.title.text
    assert f"Not available: {note}" in (tmp_path / "report" / "summary.md").read_text()


def test_importance_is_drawn_when_the_configurations_tell_the_settings_apart(tmp_path) -> None:
    apart = [
        {"window": 0, "tokens": 2},
        {"window": 1, "tokens": 1},
        {"window": 2, "tokens": 3},
        {"window": 2, "tokens": 2},
    ]
    url = together_study(tmp_path, apart)
    data = assemble_report_data(url, "together")
    assert set(data.importance["tps"]) == {"window", "tokens"} and data.importance_note == ""
