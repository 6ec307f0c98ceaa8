"""The confidence gate and the pooled readings of the guided plan.

Run through ``run_study`` on real SQLite files with the toy space (``toy.py``)
and evaluators that give a PPL's record standard error, as ``ServerEvaluator``
does through its per-record rows.
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

import pytest
from scipy import stats

import sweeper
from storage import TrialStore
from sweeper.study import GuidedPlan, Measurement, Observation, PplGate, StudyOptions, TrialEvent
from sweeper.study._gate import (
    BOUND_KEY,
    PASS_PROBABILITY_KEY,
    GateError,
    measured_uncertainty,
    trial_pass_probability,
)
from sweeper.study._guided import WindowState

sys.path.insert(0, str(Path(__file__).resolve().parent))
import toy  # noqa: E402

STDERR = 0.01  # of log PPL, 64 records


def _evaluate(params, context) -> Measurement:
    return Measurement(
        tps=toy.tps(params),
        ppl=toy.ppl(params),
        extras={"ppl_stderr_records": STDERR, "ppl_records": 64},
    )


def _run(tmp_path: Path, name: str, confidence: float | None = None):
    return sweeper.run_study(
        toy.SPACE,
        _evaluate,
        StudyOptions(
            study_name=name,
            storage=str(tmp_path / f"{name}.db"),
            n_trials=12,
            gate=PplGate(cap=toy.CAP, confidence=confidence),
            sampler="guided",
            seed=0,
            handle_signals=False,
        ),
    )


def test_the_confidence_gate_passes_only_configurations_with_margin(tmp_path: Path) -> None:
    point = _run(tmp_path, "point")
    sure = _run(tmp_path, "sure", confidence=0.9)
    assert point.best.params["w"] == 5  # PPL 1.2000: at the cap exactly
    z = stats.t.ppf(0.9, 64 - 1)  # Student's t on the 64 records' degrees of freedom
    sd = STDERR * math.sqrt(2.0)  # 64 measured, as many new records
    passes = [w for w in range(1, 17) if toy.ppl({"w": w}) * math.exp(z * sd) <= toy.CAP]
    assert sure.best.params["w"] == min(passes) == 6
    records = {r.number: r for r in TrialStore(sure.storage).records("sure")}
    for record in records.values():
        if record.state != "complete":
            continue
        assert record.ppl is not None
        bound = record.extras[BOUND_KEY]
        assert bound == pytest.approx(record.ppl * math.exp(z * sd))
        assert record.feasible == (bound <= toy.CAP)
        probability = stats.t.cdf(math.log(toy.CAP / record.ppl) / sd, 64 - 1)
        assert record.extras[PASS_PROBABILITY_KEY] == pytest.approx(probability)
        assert trial_pass_probability(record.ppl, record.extras, toy.CAP, 64) == pytest.approx(probability)
        if record.feasible:
            assert record.extras[PASS_PROBABILITY_KEY] >= 0.9
    # the point gate's winner would pass a re-run with probability one half
    assert trial_pass_probability(point.best.ppl, point.best.extras, toy.CAP, 64) == pytest.approx(0.5)


def test_a_resumed_study_keeps_its_confidence(tmp_path: Path) -> None:
    _run(tmp_path, "again", confidence=0.9)
    resumed = _run(tmp_path, "again", confidence=0.9)  # the same gate: resumes
    assert resumed.trials_run == 0  # its 12 trials were run already
    with pytest.raises(sweeper.errors.StudyError, match="90 % confidence"):
        _run(tmp_path, "again")


def test_the_relative_cap_adds_the_baselines_uncertainty() -> None:
    gate = PplGate(cap_rel=1.05, confidence=0.9)
    base = sweeper.study._gate.PplEstimate(ppl=2.30, stderr_log_ppl=0.01, records=64)
    alone = gate.judge_ppl(2.40, 2.415, stderr_log_ppl=0.01, records=64)
    both = gate.judge_ppl(2.40, 2.415, stderr_log_ppl=0.01, records=64, reference=base)
    z = stats.t.ppf(0.9, 64 - 1)
    assert alone.bound == pytest.approx(2.40 * math.exp(z * 0.01 * math.sqrt(2)))
    assert both.bound == pytest.approx(2.40 * math.exp(z * 0.01 * 2.0))
    assert both.pass_probability is not None and alone.pass_probability is not None
    assert both.pass_probability < alone.pass_probability
    with pytest.raises(GateError, match="ppl_confidence"):
        PplGate(cap=2.42, confidence=1.0)


def test_the_uncertainty_comes_from_the_per_record_rows() -> None:
    rows = [{"kind": "ppl", "id": str(i), "nll": 100.0 + i, "tokens": 100} for i in range(10)]
    stderr, records = measured_uncertainty({}, [*rows, {"kind": "tps", "output_tokens": 5}])
    means = [(100.0 + i) / 100 for i in range(10)]
    assert records == 10
    assert stderr == pytest.approx(statistics.stdev(means) / math.sqrt(10))
    assert measured_uncertainty({}, rows[:1]) == (None, None)


def test_repeated_readings_of_a_window_are_pooled() -> None:
    plan = GuidedPlan(toy.SPACE)
    # w=5 read just under, then just over the cap: a coin toss, not a feasible window
    observations = [
        Observation(number=0, params={"w": 16, "k": 1}, tps=150.0, gate=-0.14),
        Observation(number=1, params={"w": 6, "k": 1}, tps=200.0, gate=-0.03),
        Observation(number=2, params={"w": 5, "k": 2}, tps=210.0, gate=-0.002),
        Observation(number=3, params={"w": 5, "k": 3}, tps=215.0, gate=0.003),
        Observation(number=4, params={"w": 4, "k": 1}, tps=220.0, gate=0.05),
    ]
    pooled = {r.value: r for r in plan.window_readings(observations).values()}
    assert pooled[5].count == 2 and pooled[5].mean == pytest.approx(0.0005)
    assert pooled[5].state is WindowState.UNCERTAIN
    assert pooled[6].state is WindowState.FEASIBLE and pooled[4].state is WindowState.INFEASIBLE
    assert plan.next_window(observations) == 6  # the neighbour with margin, not w=5
    # readings that agree (a deterministic PPL) keep today's point decisions
    same = [*observations[:2], observations[2], Observation(number=5, params={"w": 5, "k": 4}, tps=216.0, gate=-0.002)]
    assert {r.value: r.state for r in plan.window_readings(same).values()}[5] is WindowState.FEASIBLE


@pytest.mark.parametrize("ppl_noise", [0.002, 0.01])
@pytest.mark.parametrize("enqueue", [False, True])
def test_the_plan_is_not_trapped_at_a_window_within_noise_of_the_cap(
    tmp_path: Path, ppl_noise: float, enqueue: bool
) -> None:
    """w=5 reads the cap + 0.001 (the cap edge), each PPL reading with noise; the plan
    spends at most 5 trials at any window over the cap and ends on a feasible one."""
    import numpy as np

    for seed in range(2):
        rng = np.random.default_rng([seed, 18])

        def ppl(w: int) -> float:
            return toy.CAP + 0.001 + 0.02 * (5 - w)  # w=5: 1.201; w=6: 1.181

        def evaluate(params, context, rng=rng) -> Measurement:
            tps = toy.tps(params) * (1 + 0.01 * rng.standard_normal())
            return Measurement(tps=tps, ppl=ppl(params["w"]) + ppl_noise * rng.standard_normal())

        name = f"trap-{seed}-{enqueue}-{ppl_noise}"
        seen: list[int] = []

        def note(event: TrialEvent, seen: list[int] = seen) -> None:
            if event.kind == "finished":
                seen.append(event.params["w"])

        sweeper.run_study(
            toy.SPACE,
            evaluate,
            StudyOptions(
                study_name=name,
                storage=str(tmp_path / f"{name}.db"),
                n_trials=20,
                gate=PplGate(cap=toy.CAP),
                sampler="guided",
                seed=seed,
                handle_signals=False,
                enqueue=[{"w": 5, "k": 4}] if enqueue else (),
                progress=note,
            ),
        )
        over = [w for w in seen if ppl(w) > toy.CAP]
        assert max((over.count(w) for w in set(over)), default=0) <= 5, seen
        assert seen.count(6) >= 1, seen  # the neighbour with margin was measured
