"""What the report shows: plot data, tables, summary; and report.html in headless Chromium."""

from __future__ import annotations

import csv
import io
import math
import re

import pytest
from scipy import stats

from sweeper.answer import VerifySettings, verify_study
from sweeper.errors import StudyError
from sweeper.report import _plotly, _png, assemble_report_data, build_report


@pytest.fixture(scope="module")
def verified(synthetic, tmp_path_factory):
    """The synthetic study with its two best candidates verified (both pass)."""
    study = synthetic.make_study(tmp_path_factory.mktemp("report-study"))
    verify_study(
        VerifySettings(top=2, repeats=2, evaluate=synthetic.synthetic_evaluator(tps_factor=1.01)),
        storage=study.url,
        study_name=study.name,
    )
    return study


@pytest.fixture(scope="module")
def report(verified, tmp_path_factory):
    return build_report(verified.url, verified.name, tmp_path_factory.mktemp("report") / "out")


# the PPL axis fits the passing trials (2.16-2.28) and the cap (2.30): it ends at 2.30 + 0.6 * 0.14 = 2.384,
# so D (PPL 2.40) is drawn at that edge with its PPL written beside it
OFF_AXIS = "PPL 2.40 \u2192"


def one_reading(data, tps: float) -> tuple[float, float]:
    """The interval of a configuration of one reading: t-interval on the study's spread."""
    spread = data.answer.standing.spread
    half = stats.t.ppf(0.975, spread.df) * spread.relative
    return tps * math.exp(-half), tps * math.exp(half)


def answer_label(data, number: int, status: str, tps: float) -> str:
    """The answer's mark for a configuration of one reading."""
    low, high = one_reading(data, tps)
    return f"answer #{number} ({status}): {tps:.1f} tok/s (95 % interval {low:.1f}-{high:.1f})"


def trace(fig, name: str):
    matches = [t for t in fig.data if t.name == name]
    assert matches, f"no trace {name!r} in {[t.name for t in fig.data]}"
    return matches[0]


def test_pareto_plot_data_holds_the_cap_the_categories_and_the_verified_winner(synthetic, verified) -> None:
    data = assemble_report_data(verified.url, verified.name)
    fig = _plotly.pareto_figure(data)
    best = verified.number(synthetic.CONFIGS["C"])
    # the cap is a vertical line at 2.30
    cap = trace(fig, "PPL cap")
    assert list(cap.x) == [synthetic.CAP, synthetic.CAP]
    # trials told apart by category
    feasible = trace(fig, "feasible (PPL under the cap)")
    infeasible = trace(fig, "infeasible (PPL over the cap)")
    failed = trace(fig, "failed (no measurement; drawn at TPS 0)")
    numbers = {name: verified.number(params) for name, params in synthetic.CONFIGS.items() if name != "E"}
    assert sorted(feasible.customdata) == sorted(numbers[n] for n in "ABC")
    assert sorted(infeasible.customdata) == sorted([0, numbers["D"]])  # the baseline (PPL 2.32) and D
    assert list(failed.y) == [0.0] and list(failed.x) == [synthetic.CAP]
    # the winner is the verified best, labelled
    winner = trace(fig, "winner")
    assert list(winner.customdata) == [best]
    assert (winner.x[0], winner.y[0]) == pytest.approx((2.28, 174.0))
    assert sorted(trace(fig, "verified on held-out data").customdata) == sorted([best, numbers["B"]])
    labels = [a.text.replace("<br>", " ") for a in fig.layout.annotations]
    others = [f"#{numbers['A']}: 147.0 tok/s", f"#{numbers['B']}: 173.0 tok/s"]  # every configuration named
    assert labels == [OFF_AXIS, answer_label(data, best, "VERIFIED", 174.0), *others]
    # one reading each: the interval is the spread's alone (the prior: nothing was re-measured)
    assert sorted(trace(fig, "one server's reading").y) == [147.0, 173.0, 174.0]
    assert sorted(feasible.y) == pytest.approx([147.0, 173.0, 174.0])
    front = trace(fig, "Pareto front")
    assert list(front.x) == pytest.approx([2.16, 2.24, 2.28])


def test_png_pareto_draws_the_cap_line_and_labels_the_winner(synthetic, verified) -> None:
    data = assemble_report_data(verified.url, verified.name)
    fig = _png.pareto_figure(data)
    (ax,) = fig.axes
    caps = [line for line in ax.get_lines() if line.get_label().startswith("PPL cap")]
    assert len(caps) == 1 and list(caps[0].get_xdata()) == [synthetic.CAP, synthetic.CAP]
    best = verified.number(synthetic.CONFIGS["C"])
    a, b = (verified.number(synthetic.CONFIGS[n]) for n in "AB")
    assert [t.get_text().replace("\n", " ") for t in ax.texts] == [
        OFF_AXIS,
        answer_label(data, best, "VERIFIED", 174.0),
        f"#{a}: 147.0 tok/s",
        f"#{b}: 173.0 tok/s",
    ]
    labels = ax.get_legend_handles_labels()[1]
    for label in (
        "feasible (PPL under the cap)",
        "infeasible (PPL over the cap)",
        "one server's reading",
        "failed (no measurement; drawn at TPS 0)",
        "verified on held-out data",
        "winner",
    ):
        assert label in labels


def test_history_and_importance(synthetic, verified) -> None:
    data = assemble_report_data(verified.url, verified.name)
    best_so_far = dict(data.best_so_far)
    a, b, c = (verified.number(synthetic.CONFIGS[n]) for n in "ABC")
    assert best_so_far[0] is None  # the baseline is over the cap
    assert best_so_far[a] == 147.0 and best_so_far[b] == 173.0 and best_so_far[c] == 174.0
    assert max(best_so_far) == 5 and best_so_far[5] == 174.0
    history = _plotly.history_figure(data)
    # with a standing the history shows the answer's estimate, not the best reading so far
    assert list(trace(history, "answer's TPS estimate").y) == [174.0, 174.0]
    assert "best feasible TPS so far" not in [t.name for t in history.data]
    # PED-ANOVA on 5 trials: every parameter gets a share, for TPS and for PPL
    for target in ("tps", "ppl"):
        assert set(data.importance[target]) == {"sliding_window", "centroid_top_k", "num_speculative_tokens"}
        assert sum(data.importance[target].values()) == pytest.approx(1.0)
    slices = _plotly.slices_figure(data)
    assert [a.text for a in slices.layout.annotations] == list(data.param_names)


def test_report_files_hold_the_tables_and_the_summary(synthetic, verified, report) -> None:
    out = report.out_dir
    best = verified.number(synthetic.CONFIGS["C"])
    expected = {
        "report.html",
        "pareto.html",
        "pareto.png",
        "history.png",
        "importance.png",
        "slice-sliding_window.png",
        "slice-centroid_top_k.png",
        "slice-num_speculative_tokens.png",
        "trials.csv",
        "summary.md",
    }
    assert set(report.files) == expected
    assert all((out / name).stat().st_size > 0 for name in expected)
    assert report.messages == ()

    rows = list(csv.DictReader(io.StringIO((out / "trials.csv").read_text())))
    assert len(rows) == 6
    by_number = {int(r["number"]): r for r in rows}
    assert by_number[best]["winner"] == "1" and by_number[best]["verification"] == "verified"
    assert by_number[best]["param:sliding_window"] == "36" and by_number[best]["tps"] == "174.0000"
    assert [r["category"] for r in rows].count("failed") == 1

    summary = (out / "summary.md").read_text()
    assert f"Trial **#{best}** (enqueued-2): **VERIFIED**" in summary
    assert "| `SLIDING_WINDOW` | `32` | `36` |" in summary  # the base manifest's value, then the winner's
    assert "| `CENTROID_TOP_K` | `8` | `4` |" in summary
    assert f"| #{best} | VERIFIED | 174.0 | 175.74 | +1.0% | 2.2800 | 2/2 |" in summary
    # one figure for the answer: its estimate, one decimal, in the headline and the Pareto table
    data = report.data
    low, high = one_reading(data, 174.0)
    assert f"- TPS 174.0 tok/s (95 % interval {low:.1f}-{high:.1f}, 1 server), PPL 2.2800" in summary
    assert "- trials: 6 (6 searched, 0 race servers; " in summary
    pareto = summary.split("## Pareto front")[1].split("##")[0]
    rows = [line for line in pareto.splitlines() if line.startswith("| #")]
    expected = []
    for name, tps, ppl in (("A", 147.0, 2.16), ("B", 173.0, 2.24), ("C", 174.0, 2.28)):
        lo, hi = one_reading(data, tps)
        mark = " (answer)" if name == "C" else ""
        params = " | ".join(str(synthetic.CONFIGS[name][p]) for p in data.param_names)
        expected.append(
            f"| #{verified.number(synthetic.CONFIGS[name])}{mark} | {tps:.1f} tok/s | 95 % {lo:.1f}-{hi:.1f} | 1 "
            f"| {ppl:.4f} | {params} |"
        )
    assert rows == expected
    # 5 measured trials and 2 candidates x 2 verification repeats, 4 s of TPS each, of 49.5 s in all
    assert f"| TPS | 36 s | {36 / 49.5 * 100:.1f} % | 4.0 s |" in summary
    assert "| **total** | 50 s | 100% |  |" in summary

    # the interactive Pareto page is self-contained: plotly.js inline, nothing from a CDN
    pareto = (out / "pareto.html").read_text()
    assert "<script src=" not in pareto and "<link" not in pareto
    assert "Plotly.newPlot" in pareto
    assert "PPL cap" in pareto and len(pareto) > 1_000_000


def test_a_study_with_no_feasible_trial_still_gets_a_report_that_says_so(synthetic, tmp_path) -> None:
    study = synthetic.make_study(tmp_path, name="hopeless", configs=list(synthetic.INFEASIBLE_CONFIGS.values()))
    written = build_report(study.url, study.name, tmp_path / "out")
    assert written.messages == (
        "no trial of study 'hopeless' passed the PPL cap 2.3000: there is no winner (the report shows what was tried)",
    )
    assert written.data.answer.record is None
    assert "winner" not in [t.name for t in _plotly.pareto_figure(written.data).data]
    assert "No trial passed the PPL cap: there is no winner." in (tmp_path / "out" / "summary.md").read_text()


def test_an_unverified_winner_is_flagged(synthetic, tmp_path) -> None:
    study = synthetic.make_study(tmp_path)
    written = build_report(study.url, study.name, tmp_path / "out")
    best = study.number(synthetic.CONFIGS["C"])
    assert written.messages == (
        f"the winner, trial #{best}, is UNVERIFIED: run 'sweeper verify --study synthetic "
        f"--storage {study.url}' to re-measure it on held-out data",
    )
    fig = _plotly.pareto_figure(written.data)
    labels = [a.text.replace("<br>", " ") for a in fig.layout.annotations]
    a, b = (study.number(synthetic.CONFIGS[n]) for n in "AB")
    others = [f"#{a}: 147.0 tok/s", f"#{b}: 173.0 tok/s"]
    assert labels == [OFF_AXIS, answer_label(written.data, best, "UNVERIFIED", 174.0), *others]
    assert "verified on held-out data" not in [t.name for t in fig.data]


def test_an_empty_study_gets_no_report(synthetic, tmp_path) -> None:
    empty = synthetic.make_empty_study(tmp_path)
    with pytest.raises(StudyError, match="has no trials yet: nothing to report"):
        build_report(empty.url, empty.name, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# -- a real browser ----------------------------------------------------------------------------


def test_report_html_renders_in_headless_chromium(report, tmp_path, chromium) -> None:
    page = report.page
    dom = chromium(page, tmp_path / "profile-dom", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body[^>]*>", dom.stdout).group(0)
    # every figure was drawn by plotly.js, and no script error happened
    assert 'data-plots="4"' in body, body
    assert 'data-errors=""' in body, body
    assert dom.stdout.count('class="main-svg"') >= 4
    assert "VERIFIED" in dom.stdout

    shot = tmp_path / "report.png"
    result = chromium(page, tmp_path / "profile-shot", "--window-size=1280,1800", f"--screenshot={shot}")
    assert result.returncode == 0 and shot.is_file(), result.stderr[-2000:]
    from PIL import Image

    image = Image.open(shot).convert("RGB")
    assert image.size == (1280, 1800)
    colors = image.getcolors(maxcolors=1 << 20)
    background = max(colors)[1]
    inked = sum(count for count, color in colors if color != background)
    assert len(colors) > 100, "the screenshot is (nearly) one color"
    assert inked / (1280 * 1800) > 0.10, "less than a tenth of the page is drawn"
    # the plot colors are on screen: the cap line's red and the feasible trials' green
    rgb = {color for _, color in colors}
    assert (0xD6, 0x28, 0x28) in rgb and (0x2A, 0x9D, 0x8F) in rgb
