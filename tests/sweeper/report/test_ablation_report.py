"""sweeper report --ablation: the forest plot, the tables and the page, from ablations stored in SQLite.

The ablations are written row by row with ``storage.AblationStore`` (the
report's input is the stored record, nothing else), with TPS, PPL rows and
greedy fidelity chosen here; the expected effects are computed in the tests
from those stored figures, not by the code under test.
"""

from __future__ import annotations

import csv
import dataclasses
import html
import io
import json
import math
import re
import statistics
import sys

import pytest
from click.testing import CliRunner
from scipy import stats

from storage import (
    ABLATION_FINISHED,
    ABLATION_INTERRUPTED,
    AblationServer,
    AblationStore,
    ClosingServer,
    stored_ablation,
)
from storage._queries import StudyNotFoundError
from sweeper.ablation import AblationMode, SwitchVerdict, analyse, find_switches, plan_from_record
from sweeper.cli import app, main
from sweeper.errors import StudyError, UserInputError
from sweeper.report import _ablation_plot, build_ablation_report

MODE = AblationMode.LEAVE_ONE_OUT
# leave-one-out: the two flags the manifest sets to 1 are judged by arms that run them at 0 (effect =
# base / arm), the three it sets to 0 by arms that run them at 1 (effect = arm / base)
SWITCHES = find_switches(
    {"ENFORCE_EAGER": "1", "CUDA_GRAPHS": "1", "PREFIX_CACHE": "0", "FAST_KV": "0", "SPEC_DECODE": "0"}
)
SETTINGS = {"block_size": 4, "confidence": 0.95}  # 5 switches in blocks of 3 and 2, each with its own base
# the TPS each server reads, by arm (None: the block's base) and round; None: the server failed
TPS = {
    None: (100.0, 101.0),
    0: (66.0, 67.5),  # ENFORCE_EAGER=1 helps: base / arm is about 1.5
    1: (100.5, 100.0),  # CUDA_GRAPHS=1: no effect
    2: (60.0, 61.0),  # PREFIX_CACHE=1 hurts: arm / base is about 0.6
    3: (None, None),  # FAST_KV=1 fails to start
    4: (160.0, 163.0),  # SPEC_DECODE=1 is faster, but it changes the tokens and the PPL
}
BASE_NLL = [20.0, 31.5, 12.25, 40.0, 18.5, 27.0]
TOKENS = [10, 16, 6, 20, 9, 14]
PPL_SHIFT = {4: [0.3, 0.5, 0.1, 0.6, 0.2, 0.4]}  # SPEC_DECODE's records score worse
IDENTICAL = {4: 2}  # of 4 prompts compared; the other arms reproduce all 4


def ppl_rows(arm: int | None) -> list[dict]:
    shift = PPL_SHIFT.get(arm, [0.0] * len(BASE_NLL))
    return [
        {"kind": "ppl", "id": f"rec-{i}", "nll": nll + extra, "tokens": tokens}
        for i, (nll, tokens, extra) in enumerate(zip(BASE_NLL, TOKENS, shift, strict=True))
    ]


def fidelity(identical: int) -> dict:
    return {"compared": 4, "identical": identical, "divergences": [], "duration_s": 0.5}


def server(round_number: int, block: int, arm: int | None, figures: dict = TPS) -> AblationServer:
    overrides = {} if arm is None else {SWITCHES[arm].key: SWITCHES[arm].arm_value(MODE)}
    tps = figures[arm][round_number - 1]
    if tps is None:
        return AblationServer(
            round=round_number,
            block=block,
            arm=arm,
            overrides=overrides,
            state="failed",
            error_kind="oom-start",
            error_message="CUDA out of memory",
            seconds=20.0,
        )
    first = round_number == 1
    control = round_number == 2 and block == 0 and arm is None  # the base against its own tokens
    compared = (first and arm is not None) or control
    return AblationServer(
        round=round_number,
        block=block,
        arm=arm,
        overrides=overrides,
        state="complete",
        tps=tps,
        ppl=2.5 if first else None,
        ppl_scores=ppl_rows(arm) if first else [],
        fidelity=fidelity(IDENTICAL.get(arm, 4)) if compared else None,
        phases={"start": 30.0, "tps": 20.0},
        seconds=60.0,
    )


def store_ablation(
    url: str, name: str, *, rounds: int = 2, status: str | None = ABLATION_FINISHED, figures: dict = TPS
) -> None:
    """Ablation ``name`` server by server as ``run_ablation`` orders them (``status`` None: still running)."""
    lineups = {0: [None, 0, 1, 2], 1: [None, 3, 4]}
    with AblationStore(url) as store:
        record = store.start(
            name=name,
            mode=MODE.value,
            manifest={"name": "tiny"},
            switches=[dataclasses.asdict(s) for s in SWITCHES],
            settings=SETTINGS,
        )
        for round_number in range(1, rounds + 1):
            for block, lineup in lineups.items():
                for arm in lineup if round_number % 2 else reversed(lineup):
                    store.add_server(record.id, server(round_number, block, arm, figures))
        if status is not None:
            store.finish(record.id, status=status, verdicts=None)


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ablation")
    url = f"sqlite:///{folder / 'ablations.db'}"
    store_ablation(url, "five-switches")
    return url


@pytest.fixture(scope="module")
def written(stored, tmp_path_factory):
    return build_ablation_report(stored, "five-switches", tmp_path_factory.mktemp("report") / "out")


def csv_rows(path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


def expected_effect(record, index: int) -> float | None:
    """The switch's effect from the stored TPS: the geometric mean over rounds of its arm's TPS over
    its block's base's, turned round where the base holds the subject value."""
    servers = {(s.round, s.block, s.arm): s for s in record.servers}
    logs = []
    for (round_number, block, arm), arm_server in servers.items():
        base = servers.get((round_number, block, None))
        if arm == index and arm_server.tps is not None and base is not None and base.tps is not None:
            logs.append(math.log(arm_server.tps / base.tps))
    if not logs:
        return None
    sign = 1 if SWITCHES[index].arm_value(MODE) == SWITCHES[index].subject else -1
    return math.exp(sign * sum(logs) / len(logs))


def test_switches_csv_holds_the_effects_of_the_stored_tps_and_the_verdicts_of_analyse(stored, written) -> None:
    record = stored_ablation(stored, "five-switches")
    result = analyse(record, plan_from_record(record))
    rows = csv_rows(written.files["switches.csv"])
    assert [r["switch"] for r in rows] == [s.label for s in SWITCHES]
    assert [r["verdict"] for r in rows] == [r.verdict.value for r in result.reports]
    # the figures chosen above give every verdict there is, once
    assert [r["verdict"] for r in rows] == [
        "helps",
        "no effect",
        "hurts",
        "fails to start",
        "helps, changes outputs",
    ]
    level = 1 - 0.05 / len(SWITCHES)  # Bonferroni over the five switches
    spread = result.effects.spread
    for index, row in enumerate(rows):
        assert float(row["level"]) == pytest.approx(level)
        effect = expected_effect(record, index)
        if effect is None:
            assert (row["tps_ratio"], row["pairs"], row["failures"]) == ("", "0", "oom-start;oom-start")
            continue
        assert row["pairs"] == "2"
        assert float(row["tps_ratio"]) == pytest.approx(effect, rel=1e-12)
        # a t-interval of the mean log ratio: a ratio of two servers has sqrt(2) times their spread
        half = stats.t.ppf(1 - (1 - level) / 2, spread.df) * spread.relative * math.sqrt(2 / 2)
        assert float(row["tps_ratio_low"]) == pytest.approx(effect * math.exp(-half), rel=1e-9)
        assert float(row["tps_ratio_high"]) == pytest.approx(effect * math.exp(half), rel=1e-9)
    # ENFORCE_EAGER's arm runs it at 0: its effect is the base's TPS over the arm's, about +50 %
    assert float(rows[0]["tps_ratio"]) == pytest.approx(math.sqrt(100.0 / 66.0 * 101.0 / 67.5))


def test_the_ppl_ratio_is_the_paired_ratio_of_the_stored_rows(written) -> None:
    rows = {r["key"]: r for r in csv_rows(written.files["switches.csv"])}
    shifted = PPL_SHIFT[4]
    # subject (the arm, SPEC_DECODE=1) over reference (the base) on the same records
    expected = math.exp(sum(shifted) / sum(TOKENS))
    spec = rows["SPEC_DECODE"]
    assert float(spec["ppl_ratio"]) == pytest.approx(expected, rel=1e-12)
    assert float(spec["ppl_ratio_low"]) < expected < float(spec["ppl_ratio_high"])
    assert (spec["ppl_check"], spec["outputs"], spec["identical"], spec["compared"]) == (
        "higher PPL",
        "changed tokens",
        "2",
        "4",
    )
    eager = rows["ENFORCE_EAGER"]
    assert (float(eager["ppl_ratio"]), eager["ppl_check"], eager["outputs"]) == (1.0, "no PPL change", "same tokens")
    assert (rows["FAST_KV"]["ppl_check"], rows["FAST_KV"]["ppl_ratio"]) == ("not measured", "")


def test_servers_csv_is_the_stored_servers_in_the_order_they_ran(stored, written) -> None:
    record = stored_ablation(stored, "five-switches")
    rows = csv_rows(written.files["servers.csv"])
    assert len(rows) == len(record.servers) == 2 * (len(SWITCHES) + 2)
    for row, stored_server in zip(rows, record.servers, strict=True):
        assert (int(row["round"]), int(row["block"])) == (stored_server.round, stored_server.block)
        assert row["switch"] == ("base" if stored_server.arm is None else SWITCHES[stored_server.arm].label)
        assert json.loads(row["overrides"]) == dict(stored_server.overrides)
        assert row["tps"] == ("" if stored_server.tps is None else repr(stored_server.tps))
    failed = [r for r in rows if r["state"] == "failed"]
    assert [(r["switch"], r["error_kind"]) for r in failed] == [("FAST_KV=1", "oom-start")] * 2
    assert rows[1]["overrides"] == '{"ENFORCE_EAGER": "0"}'  # leave-one-out: its arm turns it off


def test_the_forest_plot_draws_each_effect_in_percent_coloured_by_verdict(stored, written) -> None:
    data = written.data
    fig = _ablation_plot.effects_figure(data)
    by_name = {t.name: t for t in fig.data}
    assert set(by_name) == {
        "helps",
        "no effect",
        "hurts",
        "helps, changes outputs",
        "fails to start (no TPS pair, drawn at 0 %)",
    }
    rows = {r["switch"]: r for r in csv_rows(written.files["switches.csv"])}
    for verdict in (
        SwitchVerdict.HELPS,
        SwitchVerdict.NO_EFFECT,
        SwitchVerdict.HURTS,
        SwitchVerdict.HELPS_CHANGES_OUTPUT,
    ):
        trace = by_name[verdict.value]
        (label,) = trace.y
        row = rows[label.split(" vs ")[0]]
        ratio, low, high = (float(row[k]) for k in ("tps_ratio", "tps_ratio_low", "tps_ratio_high"))
        assert trace.x[0] == pytest.approx((ratio - 1) * 100)
        assert trace.error_x.array[0] == pytest.approx((high - ratio) * 100)
        assert trace.error_x.arrayminus[0] == pytest.approx((ratio - low) * 100)
        assert trace.marker.color == _ablation_plot.VERDICT_COLORS[verdict]
    assert by_name["fails to start (no TPS pair, drawn at 0 %)"].x == (0.0,)
    (line,) = fig.layout.shapes
    assert (line.x0, line.x1) == (0.0, 0.0)  # the line of no effect
    assert list(fig.layout.yaxis.categoryarray) == [f"{s.label} vs 0" for s in SWITCHES]
    assert fig.layout.xaxis.range[0] < (0.6 - 1) * 100 and fig.layout.xaxis.range[1] > (1.6 - 1) * 100


def test_the_page_and_the_summary_show_each_switch_its_verdict_and_what_the_intervals_rest_on(written) -> None:
    page = written.page.read_text()
    summary = written.files["summary.md"].read_text()
    result = written.data.result
    spread = result.effects.spread
    basis = (
        f"intervals at 99.00% each (95% for the whole ablation); between-server spread {spread.relative:.1%} "
        f"on {spread.df:g} df; 14 servers, 2 failed, "
        f"{(12 * 60.0 + 2 * 20.0) / 60:.1f} GPU minutes"
    )
    assert basis in page and basis in summary
    for report in result.reports:
        color = _ablation_plot.VERDICT_COLORS[report.verdict]
        assert (
            f"<td><code>{report.switch.label}</code></td><td>{report.switch.reference_text}</td>"
            f'<td><span style="color: {color}; font-weight: 700">{report.verdict.value}</span></td>'
        ) in page
        assert f"| {report.switch.label} | {report.switch.reference_text} | {report.verdict.value} |" in summary
    nothing = "no closing race stored: none needed, the verdicts keep the manifest as it is"
    assert nothing in page and nothing in summary
    assert "plotly" in page and "<script src=" not in page  # plotly.js inline: opens offline
    assert 'data-figure="effects"' in page
    assert "| 2 | 1 | FAST_KV=1 | FAST_KV=1 | failed (oom-start) | - | - | - | 20 |" in summary
    assert written.messages == () and "Note" not in summary


def test_the_page_renders_offline_in_headless_chromium(written, tmp_path, chromium) -> None:
    dom = chromium(written.page, tmp_path / "profile", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body[^>]*>", dom.stdout).group(0)
    assert 'data-plots="1"' in body and 'data-errors=""' in body, body  # the forest plot drawn, no error
    assert dom.stdout.count("ENFORCE_EAGER=1 vs 0") >= 1  # a row label of the plot, drawn by plotly.js


def test_effects_png_is_a_png(written) -> None:
    from PIL import Image

    path = written.files["effects.png"]
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        width, height = image.size
    assert width > 600 and height > 300


# ENFORCE_EAGER's arm (run at 0) is now the faster: the flag hurts, and the export turns it off
EAGER_HURTS = {**TPS, 0: (150.0, 152.0)}
# the closing race of that export: (exported, original) TPS of each pair
CLOSING_TPS = {1: (148.0, 100.0), 2: (151.0, 102.0), 3: (149.5, 99.0)}


def store_closing_race(url: str, name: str) -> None:
    changes = {"ENFORCE_EAGER": "0"}
    with AblationStore(url) as store:
        ablation_id = store.find(name).id
        for pair, (exported, original) in CLOSING_TPS.items():
            for side in ("original", "exported") if pair % 2 else ("exported", "original"):
                compared = (pair, side) in ((1, "exported"), (2, "original"))
                store.add_closing(
                    ablation_id,
                    ClosingServer(
                        changes=changes,
                        pair=pair,
                        side=side,
                        state="complete",
                        tps=exported if side == "exported" else original,
                        fidelity=fidelity(4) if compared else None,
                        seconds=50.0,
                    ),
                )


def test_the_closing_race_is_shown_once_it_is_stored(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    store_ablation(url, "exports", figures=EAGER_HURTS)
    before = build_ablation_report(url, "exports", tmp_path / "before")
    assert [r["verdict"] for r in csv_rows(before.files["switches.csv"])][0] == "hurts"
    line = "no closing race stored: not measured yet for the exported manifest (ENFORCE_EAGER=0)"
    assert line in before.files["summary.md"].read_text() and line in before.page.read_text()
    assert before.to_dict()["changes"] == {"ENFORCE_EAGER": "0"} and before.to_dict()["closing"] is None

    store_closing_race(url, "exports")
    after = build_ablation_report(url, "exports", tmp_path / "after")
    closing = after.data.result.closing
    # the speedup: the geometric mean of the pairs' exported over original TPS
    ratio = math.exp(statistics.fmean(math.log(e / o) for e, o in CLOSING_TPS.values()))
    assert closing.to_dict()["ratio"] == pytest.approx(ratio, rel=1e-12)
    assert after.to_dict()["closing"] == json.loads(json.dumps(closing.to_dict()))
    text = closing.describe()
    assert f"{ratio - 1:+.1%} over 3 pair(s)" in text
    summary, page = after.files["summary.md"].read_text(), after.page.read_text()
    assert text in summary and html.escape(text) in page
    assert "no closing race stored" not in summary
    assert "| 1 | original | complete | 100.00 | - | 50 |" in summary
    assert "| 1 | exported | complete | 148.00 | 4/4 identical | 50 |" in summary
    assert "<td>2</td><td>original</td><td>complete</td><td>102.00</td><td>4/4 identical</td>" in page


@pytest.mark.parametrize(
    ("status", "note"),
    [
        (None, "ablation partial is still running: the report shows the 7 of 7 servers of 1 round(s) stored so far"),
        (
            ABLATION_INTERRUPTED,
            "ablation partial was interrupted: the report shows the 7 of 7 servers of 1 round(s) stored; "
            "the same 'sweeper ablate' command goes on from the next server",
        ),
    ],
)
def test_an_unfinished_ablation_gets_the_report_of_what_is_stored_and_a_note(tmp_path, status, note) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    store_ablation(url, "partial", rounds=1, status=status)
    written = build_ablation_report(url, "partial", tmp_path / "out")
    assert written.messages == (note,)
    assert written.to_dict()["status"] == ("running" if status is None else status)
    assert html.escape(note) in written.page.read_text()
    assert f"> **Note:** {note}" in written.files["summary.md"].read_text()
    assert len(csv_rows(written.files["servers.csv"])) == 7


def test_an_unknown_ablation_names_the_stored_ones_and_creates_no_database(stored, tmp_path) -> None:
    with pytest.raises(StudyNotFoundError, match=r"no ablation 'other' .*\(stored: five-switches\)"):
        build_ablation_report(stored, "other", tmp_path / "out")
    missing = tmp_path / "none.db"
    with pytest.raises(StudyNotFoundError, match="no study database"):
        build_ablation_report(f"sqlite:///{missing}", "five-switches", tmp_path / "out")
    assert not missing.exists() and not (tmp_path / "out").exists()


def test_an_ablation_with_no_servers_gets_no_report(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    store_ablation(url, "empty", rounds=0, status=ABLATION_INTERRUPTED)
    with pytest.raises(StudyError, match=r"^ablation 'empty' \(interrupted\) has no servers stored yet: nothing"):
        build_ablation_report(url, "empty", tmp_path / "out")
    assert not (tmp_path / "out").exists()


# -- the command -----------------------------------------------------------------------------------


def test_the_command_writes_the_report_and_prints_json(stored, tmp_path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["report", "--ablation", "five-switches", "--storage", stored, "-o", str(out), "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["ablation"] == "five-switches" and data["status"] == ABLATION_FINISHED
    assert data["out_dir"] == str(out) and data["messages"] == [] and data["closing"] is None
    assert set(data["files"]) == {"ablation.html", "effects.png", "switches.csv", "servers.csv", "summary.md"}
    assert all((out / name).is_file() for name in data["files"])
    assert data["verdicts"]["PREFIX_CACHE=1"] == "hurts"

    result = CliRunner().invoke(app, ["report", "--ablation", "five-switches", "--storage", stored, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[:3] == [
        f"report of ablation 'five-switches' written to {out}",
        f"  open {out / 'ablation.html'}",
        "  ENFORCE_EAGER=1 vs 0: helps",
    ]


def test_the_default_folder_is_named_after_the_ablation(stored, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["report", "--ablation", "five-switches", "--storage", stored])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report-ablation-five-switches" / "ablation.html").is_file()


def test_study_and_ablation_together_is_a_user_error(stored, tmp_path) -> None:
    args = ["report", "--study", "s", "--ablation", "five-switches", "--storage", stored, "-o", str(tmp_path / "o")]
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, UserInputError)
    assert str(result.exception) == "give --study or --ablation, not both: a report is of one study or one ablation"
    assert not (tmp_path / "o").exists()


def sweeper(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """The console script in this process, with its one exit path for errors: (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["sweeper", *args])
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    else:
        code = 0
    out, err = capsys.readouterr()
    return code, out, err


def test_errors_are_one_line_and_a_non_zero_exit_code(stored, tmp_path, monkeypatch, capsys) -> None:
    out = str(tmp_path / "out")
    code, stdout, stderr = sweeper(
        monkeypatch, capsys, "report", "--study", "s", "--ablation", "x", "--storage", stored, "-o", out
    )
    assert (code, stdout) == (2, "")
    assert stderr == "error: give --study or --ablation, not both: a report is of one study or one ablation\n"
    code, stdout, stderr = sweeper(monkeypatch, capsys, "report", "--ablation", "x", "--storage", stored, "-o", out)
    assert (code, stdout) == (2, "") and stderr.count("\n") == 1
    assert stderr.startswith("error: no ablation 'x' in sqlite:///") and "(stored: five-switches)" in stderr
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    store_ablation(url, "empty", rounds=0, status=None)
    code, stdout, stderr = sweeper(monkeypatch, capsys, "report", "--ablation", "empty", "--storage", url, "-o", out)
    assert (code, stdout) == (1, "")
    assert stderr == (
        "error: ablation 'empty' (running) has no servers stored yet: nothing to report (run 'sweeper ablate' first)\n"
    )
    assert not (tmp_path / "out").exists()


def test_help_explains_both_forms() -> None:
    result = CliRunner().invoke(app, ["report", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "--study NAME" in text and "--ablation NAME" in text
    assert "report.html" in text and "ablation.html" in text and "switches.csv" in text
    assert "an ablation's (not both at once)" in text and "instead of a study; not with --study" in text
