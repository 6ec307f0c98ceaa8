"""Where the guided plan spends its trials under noise: race servers outside its budget, and a
decided failing edge not read again for the boundary (docs/study.md,
"Where the search dwelt")."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import optuna
from scipy import stats
from test_guided import CAP, SPACE, curve, search, speed_tps

from storage import TrialStore
from sweeper.study import (
    ConfirmSettings,
    GuidedPlan,
    Measurement,
    Observation,
    PplGate,
    StudyOptions,
    is_confirmation,
    run_study,
)
from sweeper.study._boundary_search import EDGE_DWELL
from sweeper.study._guided import READING_CONFIDENCE
from sweeper.study._sampling import observations


def test_race_re_measurements_do_not_use_the_plans_budget() -> None:
    seen = search(curve(260, 1.0), 6)
    races = [dataclasses.replace(o, number=100 + i, searched=False) for i, o in enumerate(seen[-2:] * 4)]
    history = seen + races
    searched = sum(1 for o in history if o.searched)
    assert searched == 6 and len(history) == 14
    assert GuidedPlan(SPACE, max_trials=6).propose(history) is None
    assert GuidedPlan(SPACE, max_trials=7).propose(history) is not None
    # queued race servers are pending but not searched: 6 searched + 2 pending - 2 racing < 7
    queued = [dict(seen[-1].params), dict(seen[-2].params)]
    assert GuidedPlan(SPACE, max_trials=7).propose(history, queued, racing=2) is not None
    assert GuidedPlan(SPACE, max_trials=7).propose(history, queued, racing=1) is None


def _read(number: int, window: int, gate: float) -> Observation:
    params = {"window": window, "top_k": 40, "tokens": 5, "dead": 8 + number}
    return Observation(number=number, params=params, tps=speed_tps(params), gate=gate)


def _states(readings: dict[int, list[float]]) -> dict[int, str]:
    """Each window's verdict, computed here from the readings: pooled SD over repeated windows,
    a one-sided Student-t bound at the plan's confidence on each window's mean."""
    repeated = [g for g in readings.values() if len(g) > 1]
    dof = sum(len(g) - 1 for g in repeated)
    sd = math.sqrt(sum(sum((x - np.mean(g)) ** 2 for x in g) for g in repeated) / dof)
    t = stats.t.ppf(READING_CONFIDENCE, dof)
    states = {}
    for window, gates in readings.items():
        mean, half = float(np.mean(gates)), t * sd / math.sqrt(len(gates))
        states[window] = "infeasible" if mean - half > 0 else "feasible" if mean + half <= 0 else "uncertain"
    return states


def _history(readings: dict[int, list[float]]) -> list[Observation]:
    flat = [(w, g) for w, gates in readings.items() for g in gates]
    return [_read(n, w, g) for n, (w, g) in enumerate(flat)]


def test_a_decided_failing_edge_is_not_read_again() -> None:
    plan = GuidedPlan(SPACE)
    readings = {512: [-0.12], 300: [-0.05, -0.04, -0.06], 292: [0.08], 128: [0.30]}
    assert _states(readings)[292] == "infeasible"
    assert plan.next_window(_history(readings)) == 300


def test_an_uncertain_failing_edge_is_read_again_as_the_boundary_is_searched() -> None:
    """One reading just over the cap closed the bracket a resolution from the boundary's window:
    while the readings cannot tell that window from passing, it gets one more reading for every
    EDGE_DWELL searched trials at the boundary's window since its last, and none while a race's
    servers are what read the boundary's window."""
    plan = GuidedPlan(SPACE)
    # in trial order: the safe end, a failing probe, the boundary's window twice, the edge once
    # (just over the cap), then the boundary's window again
    order = [(512, -0.12), (128, 0.30), (300, -0.045), (300, -0.035), (292, 0.002)]
    history = [_read(n, w, g) for n, (w, g) in enumerate(order)]
    readings: dict[int, list[float]] = {}
    for w, g in order:
        readings.setdefault(w, []).append(g)
    assert _states(readings)[292] == "uncertain" and _states(readings)[300] == "feasible"
    gates = [-0.04, -0.05, -0.035, -0.045, -0.04, -0.05]
    for i, gate in enumerate(gates[: EDGE_DWELL - 1]):
        history.append(_read(len(history), 300, gate))
        assert plan.next_window(history) == 300, i
    # a race's servers at the boundary's window are not the search dwelling there
    races = [dataclasses.replace(_read(len(history) + i, 300, -0.04), searched=False) for i in range(4)]
    assert plan.next_window(history + races) == 300
    history.append(_read(len(history), 300, gates[EDGE_DWELL - 1]))
    assert plan.next_window(history) == 292
    assert plan.next_window(history, pending=[{"window": 292}]) == 300  # being read: not twice at once
    # read again and passing, well under the cap: the bracket opens and the probe goes on below
    history.append(_read(len(history), 292, -0.03))
    readings[292].append(-0.03)
    assert _states({**readings, 300: [g for w, g in order if w == 300] + gates})[292] == "feasible"
    assert plan.next_window(history) not in (292, 300) and plan.next_window(history) < 292
    # shown failing (over the cap by more than the noise), or not shown failing but over it by more
    # than a standard error of its mean: never read again, however long the dwell
    for edge in (0.08, 0.008):
        failing = [_read(n, w, edge if w == 292 else g) for n, (w, g) in enumerate(order)]
        failing += [_read(len(failing) + i, 300, gates[i % len(gates)]) for i in range(3 * EDGE_DWELL)]
        at = {w: [o.gate for o in failing if o.params["window"] == w] for w in (512, 128, 300, 292)}
        dof = len(at[300]) - 1
        standard_error = float(np.std(at[300], ddof=1))  # of one reading: only W300 was read twice
        assert _states(at)[292] == ("infeasible" if edge == 0.08 else "uncertain") and edge > standard_error
        assert dof > 1 and plan.next_window(failing) == 300


class _Noisy:
    """TPS with 5 % noise on a smooth landscape; PPL from a curve crossing the cap at W260."""

    def __init__(self) -> None:
        self.rng = np.random.default_rng(48)
        self.ppl = curve(260, 1.0)

    def __call__(self, params, context) -> Measurement:
        tps = speed_tps(params) * (1 + 0.05 * float(self.rng.standard_normal()))
        return Measurement(tps=tps, ppl=self.ppl(params["window"]))


def test_the_sampler_marks_race_servers_as_not_searched(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'races.db'}"
    run_study(
        SPACE,
        _Noisy(),
        StudyOptions(
            study_name="races",
            storage=url,
            n_trials=6,
            gate=PplGate(cap=CAP),
            seed=0,
            enqueue_base=True,
            confirm=ConfirmSettings(rounds=2),
            handle_signals=False,
        ),
    )
    store = TrialStore(url)
    try:
        roles = {r.number: r.role for r in store.records("races")}
    finally:
        store.close()
    study = optuna.load_study(study_name="races", storage=url)
    seen = observations(study.get_trials(deepcopy=False))
    assert any(is_confirmation(roles[o.number]) for o in seen)  # the study did race
    assert {o.number: o.searched for o in seen} == {o.number: not is_confirmation(roles[o.number]) for o in seen}
    assert sum(o.searched for o in seen) == 6
