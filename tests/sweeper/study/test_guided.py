"""The guided plan as a pure function of the observations."""

from __future__ import annotations

import toy

from search_spaces import space_from_dict
from sweeper.study import GuidedPlan, Observation


def observe(number: int, w: int, k: int) -> Observation:
    params = {"w": w, "k": k}
    return Observation(
        number=number, params=params, tps=toy.tps(params), gate=toy.ppl(params) - toy.CAP
    )


def test_the_first_probe_after_a_safe_start_is_the_fast_end() -> None:
    plan = GuidedPlan(toy.SPACE)
    assert plan.propose([observe(0, 16, 1)]) == {"w": 1, "k": 1}


def test_probes_use_the_speed_settings_of_the_fastest_trial_even_over_the_cap() -> None:
    # speed knobs do not move PPL: the gate-failing trial's k is the one to keep
    plan = GuidedPlan(toy.SPACE)
    proposal = plan.propose([observe(0, 1, 4), observe(1, 16, 1)])
    assert proposal["k"] == 4 and 1 < proposal["w"] < 16


def test_a_probe_another_worker_runs_is_not_proposed_again() -> None:
    plan = GuidedPlan(toy.SPACE)
    seen = [observe(0, 16, 1), observe(1, 1, 1)]
    first = plan.propose(seen)
    assert first == {"w": 12, "k": 1}
    # with that probe pending, the second worker works on the speed knob instead
    second = plan.propose(seen, pending=[first])
    assert second is not None and second["w"] == 16 and second["k"] == 2


def test_a_configuration_that_failed_is_not_proposed_again() -> None:
    plan = GuidedPlan(toy.SPACE)
    seen = [observe(0, 16, 1), observe(1, 1, 1)]
    assert plan.propose(seen, failed=[{"w": 12, "k": 1}]) != {"w": 12, "k": 1}


def test_when_the_plan_is_done_it_hands_over() -> None:
    plan = GuidedPlan(toy.SPACE)
    seen = [
        observe(n, w, k)
        for n, (w, k) in enumerate(
            [(16, 1), (1, 1), (12, 1), (6, 1), (5, 1), (5, 2), (5, 3), (5, 4), (4, 1)]
        )
    ]
    assert plan.propose(seen) is None


def test_spaces_it_cannot_guide_go_to_the_fallback() -> None:
    no_direction = space_from_dict(
        {
            "parameters": [
                {"name": "w", "type": "int", "low": 1, "high": 9, "affects": "quality", "env": "W"},
                {"name": "k", "type": "int", "low": 1, "high": 4, "affects": "speed", "env": "K"},
            ]
        }
    ).bind({})
    plan = GuidedPlan(no_direction)
    assert not plan.applicable
    assert plan.propose([observe(0, 5, 1)]) is None


def test_contradictory_gate_results_do_not_break_the_plan() -> None:
    plan = GuidedPlan(toy.SPACE)
    passing = Observation(number=0, params={"w": 8, "k": 1}, tps=180.0, gate=-0.01)
    failing = Observation(number=1, params={"w": 8, "k": 3}, tps=185.0, gate=0.01)
    proposal = plan.propose([passing, failing])
    assert proposal == {"w": 8, "k": 2}  # no boundary to bisect: the speed knob moves on
