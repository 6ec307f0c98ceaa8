"""run_study on real SQLite files with synthetic evaluators: answers, gate, reuse, context."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest
import toy

import sweeper
from storage import TrialStore
from sweeper.errors import StudyError, UserInputError
from sweeper.study import Measurement, PplGate, StudyOptions, TrialEvent, parse_duration


def run(tmp_path: Path, evaluate=toy.evaluate, **fields):
    fields.setdefault("study_name", "toy")
    fields.setdefault("storage", str(tmp_path / "study.db"))
    fields.setdefault("handle_signals", False)
    fields.setdefault("gate", PplGate(cap=toy.CAP))
    return sweeper.run_study(toy.SPACE, evaluate, StudyOptions(**fields))


def test_gate_rejected_trials_are_never_the_answer(tmp_path: Path) -> None:
    result = run(tmp_path, n_trials=len(toy.CONFIGS), enqueue=toy.CONFIGS, sampler="random")
    assert result.best.params == toy.BEST and result.best.tps == toy.BEST_TPS
    fastest = max(result.status.trials, key=lambda r: r.tps)
    assert fastest.params == {"w": 1, "k": 4} and fastest.feasible is False
    assert result.status.counts["feasible"] == 8 and result.status.counts["infeasible"] == 4
    # every trial carries the cap in force and its verdict
    for record in result.status.trials:
        assert record.ppl_cap == toy.CAP
        assert record.feasible == (record.ppl <= toy.CAP)
    # Optuna sees the gate as a constraint: its best trial is ours
    study = optuna.load_study(study_name="toy", storage=result.status.url)
    assert study.best_trial.params == toy.BEST
    assert study.best_trial.constraints == {"ppl_gate": pytest.approx(toy.ppl(toy.BEST) - toy.CAP)}
    # the Pareto set over (TPS up, PPL down) of the feasible trials: k=4 at every w >= 5
    assert [dict(r.params) for r in result.pareto] == [{"w": w, "k": 4} for w in (5, 6, 10, 16)]


@pytest.mark.parametrize("sampler", ["guided", "tpe", "random", "grid", "nsga2"])
def test_every_sampler_runs_a_seeded_study(tmp_path: Path, sampler: str) -> None:
    first = run(tmp_path, n_trials=5, sampler=sampler, seed=7, study_name="a")
    second = run(tmp_path, n_trials=5, sampler=sampler, seed=7, study_name="b")
    params = [dict(r.params) for r in first.status.trials]
    assert len(params) == 5 and first.status.counts["COMPLETE"] == 5
    assert params == [dict(r.params) for r in second.status.trials]  # seeded: the same trials


def test_guided_search_finds_the_boundary_and_the_best_speed(tmp_path: Path) -> None:
    # start from the safe end, as a user's plain base manifest would
    result = run(tmp_path, n_trials=9, sampler="guided", enqueue=[{"w": 16, "k": 1}], seed=0)
    trials = result.status.trials
    assert (trials[0].params, trials[0].feasible) == ({"w": 16, "k": 1}, True)  # the base first
    # the boundary (w=5 passes, 4 fails) is bracketed and the speed knob pushed to its best
    found = next(i for i, r in enumerate(trials) if r.params == toy.BEST)
    assert found <= 5, [(r.params, r.feasible) for r in trials]
    assert any(r.params["w"] == 4 and not r.feasible for r in trials)
    assert len({tuple(sorted(r.params.items())) for r in trials}) == len(trials)  # nothing twice
    assert result.best.params == toy.BEST


def test_pareto_mode_has_two_objectives(tmp_path: Path) -> None:
    result = run(tmp_path, n_trials=len(toy.CONFIGS), enqueue=toy.CONFIGS, mode="pareto", sampler="tpe")
    study = optuna.load_study(study_name="toy", storage=result.status.url)
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    assert sorted(t.number for t in study.best_trials) == sorted(r.number for r in result.pareto)
    assert result.best.params == toy.BEST


def test_relative_cap_is_set_by_the_baseline_trial(tmp_path: Path) -> None:
    # the space's baseline is its defaults: w=16, k=1 (PPL 1.0625); cap = 1.1 x that
    result = run(
        tmp_path,
        n_trials=6,
        gate=PplGate(cap_rel=1.1),
        enqueue=[{"w": 5, "k": 2}, {"w": 6, "k": 2}],
        sampler="random",
    )
    trials = result.status.trials
    assert trials[0].role == "baseline" and trials[0].params == {"w": 16, "k": 1}
    cap = 1.1 * (1 + 1 / 16)  # 1.16875: w=5 (PPL 1.2) fails, w=6 (1.1667) passes
    assert result.status.settings["reference_ppl"] == pytest.approx(1 + 1 / 16)
    assert result.status.settings["ppl_cap_rel"] == 1.1
    assert [r.ppl_cap for r in trials] == [pytest.approx(cap)] * 6
    assert [(r.params["w"], r.feasible) for r in trials[:3]] == [(16, True), (5, False), (6, True)]


def test_relative_cap_and_absolute_cap_are_exclusive(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="exactly one of ppl_cap"):
        run(tmp_path, n_trials=1, gate=PplGate(cap=1.2, cap_rel=1.05))
    with pytest.raises(StudyError, match="is new: give a PPL cap"):
        sweeper.run_study(
            toy.SPACE,
            toy.evaluate,
            StudyOptions(study_name="x", storage=str(tmp_path / "x.db"), n_trials=1, handle_signals=False),
        )


def test_quality_reuse_skips_ppl_where_only_speed_changed(tmp_path: Path) -> None:
    asked: list[tuple[int, float | None]] = []

    def evaluate(params, context):
        asked.append((context.number, context.known_ppl))
        measured = None if context.known_ppl is not None else toy.ppl(params)
        return Measurement(tps=toy.tps(params), ppl=measured)

    configs = [{"w": 6, "k": 1}, {"w": 6, "k": 3}, {"w": 7, "k": 3}, {"w": 6, "k": 4}]
    result = run(tmp_path, evaluate, n_trials=4, enqueue=configs, reuse_quality=True)
    assert asked == [
        (0, None),
        (1, pytest.approx(1 + 1 / 6)),
        (2, None),
        (3, pytest.approx(1 + 1 / 6)),
    ]
    assert [r.ppl_reused_from for r in result.status.trials] == [None, 0, None, 0]
    assert result.best.params == {"w": 6, "k": 4}


def test_a_missing_ppl_without_reuse_fails_the_trial(tmp_path: Path) -> None:
    def evaluate(params, context):
        return Measurement(tps=10.0, ppl=None)

    with pytest.raises(StudyError, match="3 consecutive failed trials"):
        run(tmp_path, evaluate, n_trials=5)
    records = TrialStore(str(tmp_path / "study.db")).records("toy")
    assert {r.error_kind for r in records} == {"measurement"}
    assert records[0].error_message is not None
    assert "no PPL, and none could be reused" in records[0].error_message


def test_early_stopped_trials_are_infeasible_and_never_best(tmp_path: Path) -> None:
    def evaluate(params, context):
        assert context.ppl_cap == toy.CAP
        if toy.ppl(params) > context.ppl_cap:
            return Measurement(tps=None, ppl=toy.ppl(params), early_stopped=True)
        return toy.evaluate(params, context)

    configs = [{"w": 8, "k": 1}, {"w": 1, "k": 4}, {"w": 6, "k": 2}, {"w": 2, "k": 1}]
    result = run(tmp_path, evaluate, n_trials=4, enqueue=configs)
    stopped = [r for r in result.status.trials if r.early_stopped]
    assert [r.params for r in stopped] == [{"w": 1, "k": 4}, {"w": 2, "k": 1}]
    # the stand-in TPS is the slowest measured so far, flagged, and never an answer
    assert [r.tps for r in stopped] == [toy.tps({"w": 8, "k": 1})] * 2
    assert all(r.tps_imputed and r.feasible is False for r in stopped)
    assert result.best.params == {"w": 6, "k": 2}


def test_infinite_ppl_is_a_gate_failure(tmp_path: Path) -> None:
    result = run(tmp_path, lambda params, context: Measurement(tps=500.0, ppl=math.inf), n_trials=1)
    record = result.status.trials[0]
    assert record.ppl == math.inf and record.feasible is False and result.best is None
    study = optuna.load_study(study_name="toy", storage=result.status.url)
    assert study.trials[0].constraints["ppl_gate"] == pytest.approx(toy.CAP)  # seen as 2 x cap


def test_the_context_reaches_storage_and_progress(tmp_path: Path) -> None:
    events: list[TrialEvent] = []

    def evaluate(params, context):
        assert context.overrides == {"W": str(params["w"]), "K": str(params["k"])}
        context.set_manifest({"name": f"trial-{context.number}", "env": context.overrides})
        context.set_server_token(f"token-{context.number}")
        with context.phase("start"):
            pass
        context.notify_progress("tps", 1, 4)
        return Measurement(
            tps=toy.tps(params),
            ppl=toy.ppl(params),
            phases={"start": 0.0, "tps": 2.5},
            requests=[{"kind": "tps", "tokens": 512}],
            extras={"accepted": 0.7},
            log_tail="ready",
        )

    result = run(tmp_path, evaluate, n_trials=1, enqueue=[{"w": 6, "k": 2}], progress=events.append)
    record = TrialStore(str(tmp_path / "study.db")).record("toy", 0)
    assert record.manifest == {"name": "trial-0", "env": {"W": "6", "K": "2"}}
    assert record.server_token == "token-0" and record.log_tail == "ready"
    assert [name for name, _ in record.phases] == ["start", "tps"]  # "start" stored once
    assert record.requests == ({"kind": "tps", "tokens": 512},)
    assert record.extras == {"accepted": 0.7}
    assert record.versions["sweeper"] == sweeper.__version__ and "optuna" in record.versions
    assert [e.kind for e in events] == ["started", "phase", "progress", "finished"]
    assert (events[-1].tps, events[-1].best_number, events[-1].state) == (210.0, 0, "complete")
    assert result.stop_reason == "n_trials"


def test_resume_continues_the_same_study(tmp_path: Path) -> None:
    first = run(tmp_path, n_trials=4, sampler="random", seed=1)
    assert first.trials_run == 4
    second = run(tmp_path, n_trials=7, sampler="random", seed=1)
    assert second.trials_run == 3
    assert [r.number for r in second.status.trials] == list(range(7))
    third = run(tmp_path, n_trials=7)  # the budget is the study's: nothing left to do
    assert third.trials_run == 0
    # the gate and the mode belong to the study
    with pytest.raises(StudyError, match=r"started with the gate PPL <= 1.2, not PPL <= 1.3"):
        run(tmp_path, n_trials=8, gate=PplGate(cap=1.3))
    with pytest.raises(StudyError, match="runs in mode 'tps', not 'pareto'"):
        run(tmp_path, n_trials=8, mode="pareto")
    resumed = sweeper.run_study(
        toy.SPACE,
        toy.evaluate,
        StudyOptions(study_name="toy", storage=str(tmp_path / "study.db"), n_trials=8, handle_signals=False),
    )
    assert resumed.trials_run == 1  # no cap given: the stored one


def test_timeout_stops_before_a_new_trial(tmp_path: Path) -> None:
    import time

    def slow(params, context):
        time.sleep(0.6)
        return toy.evaluate(params, context)

    result = run(tmp_path, slow, timeout_s=parse_duration("1s"), n_trials=50)
    assert result.stop_reason == "timeout"
    # each trial takes over 0.6 s: at most two can start within the first second
    assert 1 <= result.trials_run <= 2


def test_an_external_stop_event_ends_the_run(tmp_path: Path) -> None:
    import threading

    stop = threading.Event()

    def progress(event):
        if event.kind == "finished" and event.number == 2:
            stop.set()

    result = run(tmp_path, n_trials=20, progress=progress, stop_event=stop)
    assert (result.trials_run, result.stop_reason) == (3, "stopped")


def test_bad_options_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="sampler must be one of"):
        run(tmp_path, n_trials=1, sampler="bayes")
    with pytest.raises(UserInputError, match="n_trials must be a positive integer"):
        run(tmp_path, n_trials=0)
    with pytest.raises(UserInputError, match="cannot read '8 hours'"):
        run(tmp_path, n_trials=1, timeout_s=parse_duration("8 hours"))


def test_an_evaluator_must_return_a_measurement(tmp_path: Path) -> None:
    def evaluate(params, context):
        return {"tps": 1.0, "ppl": 1.0}  # a mapping is not accepted in place of a Measurement

    with pytest.raises(StudyError, match="3 consecutive failed trials"):
        run(tmp_path, evaluate, n_trials=5)
    records = TrialStore(str(tmp_path / "study.db")).records("toy")
    assert {r.error_kind for r in records} == {"measurement"}
    assert records[0].error_message is not None
    assert "the evaluator returned dict, not a Measurement" in records[0].error_message
