"""What the user watches during `sweeper run`: the live view, the plain lines, the logs.

Driven by real studies (run_study, real SQLite) with an evaluator that reports its phases'
progress as the server evaluator does, so the events are the ones a real run produces.
"""

from __future__ import annotations

import io
import logging

from rich.console import Console

from sweeper.cli._run_view import LiveView, PlainView, TrialCount, log_through
from sweeper.study import Measurement, PplGate, StudyOptions, run_study

PPL_RECORDS, TPS_REQUESTS = 4, 3


def progress_evaluator(params, context) -> Measurement:
    """Reports PPL records and TPS requests done of total, like ServerEvaluator's forwarder."""
    for phase, total in (("ppl", PPL_RECORDS), ("tps warm-up", 1), ("tps", TPS_REQUESTS)):
        context.notify_phase(phase, 0, total)
        for done in range(1, total + 1):
            context.notify_progress(phase, done, total)
    return Measurement(tps=100.0 + params["num_speculative_tokens"], ppl=2.0)


def run(tmp_path, view, n_trials: int, name: str = "view"):
    from search_spaces import load_preset
    from sweeper.demo import demo_paths
    from sweeper.manifest import Manifest

    space = load_preset("tiny-cpu").bind(Manifest.load(demo_paths().manifest).env)
    return run_study(
        space,
        progress_evaluator,
        StudyOptions(
            study_name=name,
            storage=f"sqlite:///{tmp_path / 'v.db'}",
            n_trials=n_trials,
            gate=PplGate(cap=2.5),
            sampler="random",
            seed=0,
            handle_signals=False,
            progress=view,
        ),
    )


def console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=150, color_system=None), out


def test_the_trial_count_never_reads_past_the_budget() -> None:
    count = TrialCount(2)
    count.running = True
    assert count.line() == "searching 1 of 2, 1 to go after it"
    count.running, count.done = False, 1
    assert count.line() == "1 of 2 searched, 1 to go"
    count.running = True
    assert count.line() == "searching 2 of 2, 0 to go after it"
    count.running, count.done = False, 2
    assert count.line() == "2 of 2 searched, 0 to go"  # not "searching 3 of 2"
    count.start("confirm:1:1")
    assert count.line() == "race server 1 of this run (outside the budget), 2 of 2 searched"
    resumed = TrialCount(8, done_before=5)
    resumed.running = True
    assert resumed.line() == "searching 6 of 8, 2 to go after it"
    unlimited = TrialCount(None, done_before=3)
    assert unlimited.line() == "3 of ∞ searched"


def test_the_live_view_shows_phase_progress_and_ends_on_the_last_trial(tmp_path) -> None:
    terminal, out = console()
    seen: list[str] = []
    with LiveView(terminal, 2) as view:
        original = view.__call__

        def spy(event):
            original(event)
            seen.append(view.phase)

        result = run(tmp_path, spy, 2)
    assert result.trials_run == 2
    assert "PPL records 4/4" in seen and "TPS requests 3/3" in seen and "TPS warm-up requests 1/1" in seen
    assert view.phase == "-"
    shown = out.getvalue()
    assert shown.count("tok/s, PPL 2.000: feasible") == 2  # one line per finished trial, above the view
    last_frame = shown.rsplit("\x1b[2K", 1)[-1].splitlines()
    assert last_frame[0].split() == ["trials", "2", "of", "2", "searched,", "0", "to", "go"]
    assert last_frame[1].split() == ["params", "-"] and last_frame[2].split() == ["phase", "-"]
    assert "trial 3" not in shown


def test_the_plain_view_writes_one_line_per_event(tmp_path) -> None:
    lines: list[str] = []
    with PlainView(2, write=lines.append) as view:
        run(tmp_path, view, 2, name="plain")
    # a trial is named by its number in the study alone; the budget is counted in searched trials
    assert lines[0].startswith("trial 0 (baseline) {") and lines[0].endswith("}: searching 1 of 2, 1 to go after it")
    assert not any("#" in line for line in lines)
    assert f"trial 0: PPL records 0/{PPL_RECORDS}" in lines
    assert f"trial 0: PPL records {PPL_RECORDS}/{PPL_RECORDS}" in lines
    assert f"trial 1: TPS requests {TPS_REQUESTS}/{TPS_REQUESTS}" in lines
    assert not any("PPL records 2/" in line for line in lines)  # not one line per request
    finished = [line for line in lines if ": feasible" in line]
    assert len(finished) == 2 and finished[-1].endswith("; 2 of 2 searched, 0 to go")
    assert lines[-1] == "trials: 2 of 2 searched, 0 to go"
    assert all("\x1b" not in line for line in lines)  # no terminal control codes


def test_log_lines_go_through_rich_on_the_views_console_and_the_handlers_come_back() -> None:
    root = logging.getLogger()
    before = list(root.handlers)
    terminal, out = console()
    with log_through(terminal, None):
        logging.getLogger("sweeper.test").warning("the server took %d s", 12)
    assert "sweeper.test: the server took 12 s" in out.getvalue()
    assert root.handlers == before
    with log_through(None, logging.WARNING):
        assert not logging.getLogger("sweeper.test").isEnabledFor(logging.INFO)
    assert root.handlers == before


def test_a_trial_stopped_over_the_cap_shows_no_stand_in_tps(tmp_path) -> None:
    """The study stores a stand-in TPS (the slowest seen) for a trial stopped early; the run's line
    for it says its TPS was not measured instead of printing the stand-in as a reading."""
    from search_spaces import load_preset
    from storage import study_status
    from sweeper.demo import demo_paths
    from sweeper.manifest import Manifest

    def evaluate(params, context) -> Measurement:
        if params["sliding_window"] == 16:
            return Measurement(tps=None, ppl=4.97, early_stopped=True)
        return Measurement(tps=150.0, ppl=2.0)

    lines: list[str] = []
    space = load_preset("tiny-cpu").bind(Manifest.load(demo_paths().manifest).env)
    url = f"sqlite:///{tmp_path / 'stopped.db'}"
    with PlainView(2, write=lines.append) as view:
        run_study(
            space,
            evaluate,
            StudyOptions(
                study_name="stopped",
                storage=url,
                n_trials=2,
                gate=PplGate(cap=2.5),
                sampler="random",
                seed=0,
                enqueue=[{"sliding_window": 16, "centroid_top_k": 8, "num_speculative_tokens": 2}],
                handle_signals=False,
                progress=view,
            ),
        )
    stopped = next(r for r in study_status(url, "stopped").trials if r.params["sliding_window"] == 16)
    assert stopped.tps_imputed and stopped.tps == 150.0  # the stand-in the study keeps for Optuna
    (line,) = [line for line in lines if line.startswith(f"trial {stopped.number} ") and "rejected" in line]
    verdict = line.split(";")[0]  # what is said of this trial (then the best so far, the count)
    assert verdict.endswith(": TPS not measured, PPL 4.970: rejected by the gate") and "150.0" not in verdict
