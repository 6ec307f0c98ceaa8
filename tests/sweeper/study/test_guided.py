"""The guided plan as a pure function of the observations."""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pytest
import toy
from scipy.linalg import hadamard

from search_spaces import space_from_dict
from sweeper.study import GuidedPlan, Observation
from sweeper.study._boundary_search import EDGE_DWELL, MAX_UNCERTAIN_READINGS
from sweeper.study._guided import _design_signs

CAP = 2.42

# the challenge's knobs (window 128-512 step 4, resolution 8) and a knob that does nothing
SPACE = space_from_dict(
    {
        "name": "challenge-like",
        "parameters": [
            {
                "name": "window",
                "type": "int",
                "low": 128,
                "high": 512,
                "step": 4,
                "affects": "quality",
                "faster": "lower",
                "default": 512,
                "resolution": 8,
                "env": "W",
            },
            {
                "name": "top_k",
                "type": "int",
                "low": 16,
                "high": 128,
                "log": True,
                "affects": "speed",
                "default": 32,
                "env": "C",
            },
            {"name": "tokens", "type": "int", "low": 1, "high": 8, "affects": "speed", "default": 4, "env": "K"},
            {"name": "dead", "type": "int", "low": 8, "high": 64, "affects": "speed", "default": 32, "env": "D"},
        ],
    },
    source="challenge-like.yaml",
).bind({})


def curve(boundary: float, power: float, decay: float = 80.0):
    """A PPL curve over the window that crosses the cap at ``boundary``."""
    amplitude = (CAP - 2.30) / math.exp(-(((boundary - 128) / decay) ** power))
    return lambda w: 2.30 + amplitude * math.exp(-(((w - 128) / decay) ** power))


def smallest_feasible(ppl) -> int:
    return min(w for w in range(128, 513, 4) if ppl(w) <= CAP)


def speed_tps(params) -> float:
    """Unimodal in K (best 5) and in log top-k (best 40); the window helps a little."""
    k, c, w = params["tokens"], params["top_k"], params["window"]
    return 500.0 * math.exp(-0.02 * (k - 5) ** 2) * math.exp(-0.3 * math.log(c / 40) ** 2) * (1 + 0.2 * (512 - w) / 384)


def observe(number: int, params, ppl, tps=None) -> Observation:
    return Observation(
        number=number,
        params=dict(params),
        tps=speed_tps(params) if tps is None else tps,
        gate=ppl(params["window"]) - CAP,
    )


def search(ppl, trials: int, noise: float = 0.0, seed: int = 0) -> list[Observation]:
    plan = GuidedPlan(SPACE)
    rng = np.random.default_rng(seed)
    seen: list[Observation] = []
    for number in range(trials):
        proposal = plan.propose(seen)
        assert proposal is not None
        tps = speed_tps(proposal) * (1 + noise * rng.standard_normal())
        seen.append(observe(number, proposal, ppl, tps))
    return seen


@pytest.mark.parametrize(("boundary", "power"), [(150, 1.0), (230, 0.75), (300, 1.3), (420, 1.0), (480, 0.75)])
def test_the_boundary_is_found_to_its_resolution_in_few_probes(boundary, power) -> None:
    ppl = curve(boundary, power)
    plan = GuidedPlan(SPACE)
    seen: list[Observation] = []
    for number in range(7):
        window = plan.next_window(seen)
        if any(o.params["window"] == window for o in seen):
            break  # the plan stays at a window it measured: the boundary is known
        seen.append(observe(number, {**SPACE.base_values(), "window": window}, ppl))
    else:
        pytest.fail(f"no boundary after 7 probes: {[o.params['window'] for o in seen]}")
    truth = smallest_feasible(ppl)
    assert truth <= window <= truth + 8
    assert ppl(window) <= CAP
    assert seen[0].params["window"] == 512  # nothing is known yet: the safe end first


def test_the_first_probe_after_a_safe_start_is_the_fast_end_on_a_small_range() -> None:
    plan = GuidedPlan(toy.SPACE)
    first = Observation(
        number=0, params={"w": 16, "k": 1}, tps=toy.tps({"w": 16, "k": 1}), gate=toy.ppl({"w": 16, "k": 1}) - toy.CAP
    )
    assert plan.next_window([first]) == 9  # the middle, then interpolation


def test_no_configuration_is_proposed_twice() -> None:
    seen = search(curve(260, 1.0), 25, noise=0.05)
    keys = [tuple(sorted(o.params.items())) for o in seen]
    assert len(set(keys)) == len(keys)


def test_re_measured_configurations_count_as_one_and_are_not_proposed_again() -> None:
    ppl = curve(260, 1.0)
    seen = search(ppl, 8)
    # two confirmations of the last configuration, one lucky and one not
    last = seen[-1].params
    seen += [observe(8, last, ppl, tps=900.0), observe(9, last, ppl, tps=100.0)]
    proposal = GuidedPlan(SPACE).propose(seen)
    assert proposal is not None and proposal != last
    assert ppl(proposal["window"]) <= CAP


def test_the_plan_is_a_pure_function_of_the_trials() -> None:
    seen = search(curve(330, 1.0), 9, noise=0.05)
    plan = GuidedPlan(SPACE)
    first = plan.propose(seen)
    assert GuidedPlan(SPACE).propose(list(reversed(seen))) == first
    # a second worker, with that proposal running, is given another one
    second = plan.propose(seen, pending=[first])
    assert second is not None and second != first


@pytest.mark.parametrize("noise", [0.0, 0.01])
def test_a_knob_that_does_nothing_stops_moving(noise: float) -> None:
    seen = search(curve(300, 1.0), 16, noise=noise, seed=1)
    after_design = seen[5:]
    # it settles on one value or two neighbours of its grid (8-64 in 24 points: 2-3 apart)
    dead = sorted({o.params["dead"] for o in after_design})
    assert dead[-1] - dead[0] <= 3
    # while the knobs that matter go on moving, and no trial measures the
    # window, top-k and K of an earlier one again with only the dead knob changed
    combos = [(o.params["window"], o.params["top_k"], o.params["tokens"]) for o in seen]
    assert len(set(combos[5:])) == len(combos[5:]) > 8
    assert len(set(combos)) == len(combos)


def test_a_knob_measured_at_several_values_without_effect_is_frozen() -> None:
    ppl = curve(300, 1.0)
    seen = search(ppl, 8)
    varied = [(40, 5, 8), (40, 5, 64), (30, 4, 20), (50, 6, 50)]  # the dead knob over its range
    seen += [
        observe(8 + i, {"window": 300, "top_k": c, "tokens": k, "dead": d}, ppl) for i, (c, k, d) in enumerate(varied)
    ]
    plan = GuidedPlan(SPACE)
    frozen = plan.frozen_knobs(seen)
    assert set(frozen) == {"dead"}
    # every later proposal keeps it there
    proposal = plan.propose(seen)
    assert proposal["dead"] == frozen["dead"]


def test_the_search_ends_near_the_best_speed_settings_at_the_boundary() -> None:
    ppl = curve(300, 1.0)
    seen = search(ppl, 12, noise=0.01)
    boundary = smallest_feasible(ppl)
    best = max(
        speed_tps({"window": boundary, "top_k": c, "tokens": k, "dead": 32})
        for c in range(16, 129)
        for k in range(1, 9)
    )
    reached = [o.number for o in seen if ppl(o.params["window"]) <= CAP and speed_tps(o.params) >= 0.99 * best]
    assert reached and reached[0] < 10


def test_a_configuration_that_failed_is_not_proposed_again() -> None:
    ppl = curve(260, 1.0)
    seen = search(ppl, 3)
    plan = GuidedPlan(SPACE)
    proposal = plan.propose(seen)
    assert plan.propose(seen, failed=[proposal]) != proposal


def test_after_its_budget_the_plan_hands_over() -> None:
    seen = search(curve(260, 1.0), 6)
    assert GuidedPlan(SPACE, max_trials=6).propose(seen) is None
    assert GuidedPlan(SPACE, max_trials=7).propose(seen) is not None


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
    assert plan.propose([Observation(number=0, params={"w": 5, "k": 1}, tps=1.0, gate=0)]) is None


def test_contradictory_gate_results_do_not_break_the_plan() -> None:
    plan = GuidedPlan(toy.SPACE)
    passing = Observation(number=0, params={"w": 8, "k": 1}, tps=180.0, gate=-0.01)
    failing = Observation(number=1, params={"w": 8, "k": 3}, tps=185.0, gate=0.01)
    proposal = plan.propose([passing, failing])
    assert proposal is not None and proposal not in ({"w": 8, "k": 1}, {"w": 8, "k": 3})


def edge_curve(edge: int, offset: float = 0.001, decay: float = 80.0, power: float = 1.0):
    """A PPL curve that reads ``CAP + offset`` at the grid window ``edge``: a coin toss there."""
    amplitude = (CAP + offset - 2.30) / math.exp(-(((edge - 128) / decay) ** power))
    return lambda w: 2.30 + amplitude * math.exp(-(((w - 128) / decay) ** power))


@pytest.mark.parametrize("ppl_noise", [0.002, 0.01])
@pytest.mark.parametrize("known", [False, True])
def test_a_window_within_noise_of_the_cap_does_not_trap_the_plan(ppl_noise, known) -> None:
    """W188 reads the cap + 0.001 (every reading with noise), W192 is 0.005 under it.

    The plan reads the edge window a few times (``MAX_UNCERTAIN_READINGS``),
    then about once for every ``EDGE_DWELL`` searched trials at the boundary's
    window (the readings cannot tell it from passing, and a window just past
    the boundary is where a too-safe answer is put right), with or without a
    known configuration there measured first, and spends most of its speed
    trials on a window truly under the cap.
    """
    edge = 188
    ppl = edge_curve(edge)
    assert ppl(edge) > CAP > ppl(edge + 4) and CAP - ppl(edge + 4) > 0.004
    for seed in range(3):
        plan = GuidedPlan(SPACE)
        rng = np.random.default_rng([seed, 18])
        seen: list[Observation] = []
        enqueued = [{"window": edge, "top_k": 49, "tokens": 7, "dead": 32}, SPACE.base_values()]
        for number in range(30):
            proposal = dict(enqueued[number]) if known and number < len(enqueued) else plan.propose(seen)
            assert proposal is not None
            tps = speed_tps(proposal) * (1 + 0.01 * rng.standard_normal())
            reading = ppl(proposal["window"]) + ppl_noise * rng.standard_normal()
            seen.append(Observation(number=number, params=proposal, tps=tps, gate=reading - CAP))
        windows = [o.params["window"] for o in seen]
        # a few readings, then the edge's share: one trial in EDGE_DWELL + 1 at most
        over = [w for w in windows if ppl(w) > CAP]
        most = MAX_UNCERTAIN_READINGS + len(windows) // (EDGE_DWELL + 1)
        assert max((over.count(w) for w in set(over)), default=0) <= most, windows
        # most of the trials are at windows truly under the cap, and near the edge
        under = [w for w in windows if ppl(w) <= CAP]
        assert len(under) >= 20, windows
        assert statistics.median(under) <= edge + 24, windows


def _read(number: int, window: int, gate: float) -> Observation:
    params = {"window": window, "top_k": 40, "tokens": 5, "dead": 8 + number}
    return Observation(number=number, params=params, tps=speed_tps(params), gate=gate)


def test_an_uncertain_window_is_read_again_a_few_times_then_passed_over() -> None:
    """One pair of readings (W192: -0.017 and +0.005) makes a wide noise estimate (one
    degree of freedom): every window read once is uncertain. The plan reads W192 again
    until it has three readings, then the next window with margin, instead of stepping
    up the range one reading at a time."""
    plan = GuidedPlan(SPACE)
    seen = [
        _read(0, 512, -0.127),
        _read(1, 324, -0.110),
        _read(2, 128, 0.190),
        _read(3, 136, 0.160),
        _read(4, 204, -0.023),
        _read(5, 192, -0.017),
        _read(6, 184, 0.003),
        _read(7, 192, 0.005),
    ]
    states = {r.value: r.state for r in plan.window_readings(seen).values()}
    assert states[192] == states[204] == "uncertain"
    assert plan.next_window(seen) == 192
    seen.append(_read(8, 192, 0.004))  # three readings, still uncertain: counted as failing
    assert {r.value: r.state for r in plan.window_readings(seen).values()}[192] == "uncertain"
    assert plan.next_window(seen) == 204
    # another worker already reading W204 again: nothing to read again, the bracket goes on
    assert plan.next_window(seen, pending=[{"window": 204}, {"window": 204}]) != 204


def test_with_nothing_feasible_the_window_most_likely_to_pass_is_read_again() -> None:
    """A wide pair of readings at W200 leaves the safe end, read under the cap, uncertain:
    the plan reads it again instead of handing over to the fallback sampler, and goes
    on doing so past three readings while nothing else may pass."""
    plan = GuidedPlan(SPACE)
    seen = [_read(0, 512, -0.05), _read(1, 200, 0.06), _read(2, 200, -0.05)]
    assert all(r.state == "uncertain" for r in plan.window_readings(seen).values())
    assert plan.next_window(seen) == 512  # W200 reads over the cap on average
    seen += [_read(3, 512, -0.04), _read(4, 512, -0.06)]
    pooled = {r.value: r for r in plan.window_readings(seen).values()}
    assert pooled[512].count == 3 and pooled[512].state == "uncertain"
    assert plan.next_window(seen) == 512
    assert plan.propose(seen)["window"] == 512


def _trial(number: int, window: int, top_k: int, tokens: int, dead: int, tps: float, gate: float):
    params = {"window": window, "top_k": top_k, "tokens": tokens, "dead": dead}
    return Observation(number=number, params=params, tps=tps, gate=gate)


# a cap-edge run (benchmarks/ppl_gate.py trap, landscape 4, PPL noise 0.01): the design,
# then two speed trials; the best so far is W208, top-k 28, 4 tokens
EDGE_RUN = [
    _trial(0, 512, 45, 4, 36, 429.1, -0.1003),
    _trial(1, 324, 84, 7, 53, 371.3, -0.0835),
    _trial(2, 128, 24, 7, 19, 476.1, 0.0794),
    _trial(3, 136, 84, 2, 19, 433.5, 0.0817),
    _trial(4, 144, 24, 2, 53, 477.9, 0.0717),
    _trial(5, 208, 28, 4, 35, 494.4, -0.018),
    _trial(6, 196, 18, 4, 30, 480.1, -0.029),
]


def test_the_speed_settings_are_chosen_near_the_incumbent() -> None:
    """The surrogate's choice is made within a quarter of each range of the best settings
    measured: one token either way of 4 and top-k within a factor 1.7 of 28 (the plan
    before this rule proposed 2 tokens here, and 1 token on the run's next trials)."""
    plan = GuidedPlan(SPACE)
    fit = plan._fit(EDGE_RUN)
    incumbent, _ = fit.incumbent()
    assert (incumbent["top_k"], incumbent["tokens"]) == (28, 4)
    proposal = plan.propose(EDGE_RUN)
    # (the knob of no effect takes whichever value the fit leans to)
    assert {name: proposal[name] for name in ("window", "top_k", "tokens")} == {"window": 188, "top_k": 30, "tokens": 3}
    # every later proposal of the run stays in the region while it holds a candidate
    seen = list(EDGE_RUN)
    for number in range(7, 12):
        proposal = plan.propose(seen)
        best, _ = plan._fit(seen).incumbent()
        assert abs(proposal["tokens"] - best["tokens"]) <= 1, proposal
        assert 1 / 1.7 <= proposal["top_k"] / best["top_k"] <= 1.7, proposal
        params = {**proposal}
        seen.append(Observation(number=number, params=params, tps=speed_tps(params), gate=-0.02))


def test_a_candidate_that_cannot_beat_the_incumbent_waits() -> None:
    """After the design, a proposal's score (the surrogate's mean + exploration) reaches
    the incumbent's fitted value whenever some untried candidate's does: the plan does
    not spend a trial on settings it expects to be worse than the best it knows."""
    plan = GuidedPlan(SPACE)
    ppl = curve(300, 1.0)
    rng = np.random.default_rng(3)
    seen = search(ppl, 5)
    promising = []
    for number in range(5, 20):
        proposal = plan.propose(seen)
        fit = plan._fit(seen)
        _, incumbent_mean = fit.incumbent()
        scores = fit.scores()
        speed = {name: proposal[name] for name in ("top_k", "tokens", "dead")}
        promising.append(bool(scores[fit.candidates.index(speed)] >= incumbent_mean))
        if not promising[-1]:  # nothing untried at this window may beat the incumbent (the knobs whose
            # effect stands out from the noise tell "untried" apart)
            live = fit.live_knobs()
            tried = {plan._live_key(o.params, live) for o in seen}
            window = {"window": proposal["window"]}
            assert all(
                plan._live_key({**window, **c}, live) in tried
                for c, score in zip(fit.candidates, scores)
                if score >= incumbent_mean
            )
        tps = speed_tps(proposal) * (1 + 0.01 * rng.standard_normal())
        seen.append(observe(number, proposal, ppl, tps))
    # five proposals may beat the incumbent; from trial 11 on, with the best settings
    # at the boundary measured, no untried candidate may
    # the first proposals may beat the incumbent; by the end, with the best settings at
    # the boundary measured, no untried candidate may
    assert promising[0] and not any(promising[-3:]), promising


def test_the_safe_end_read_over_the_cap_once_is_read_again() -> None:
    """The known configuration (W188) far over the cap, then the base manifest (W512) over
    it by 0.0026 on one reading: with no window read twice there is no noise estimate,
    and the plan reads the safe end again instead of handing over to the fallback; read
    over the cap again, exactly (no noise), it hands over."""
    plan = GuidedPlan(SPACE)
    seen = [_trial(0, 188, 49, 7, 32, 474.5, 0.5552), _trial(1, 512, 32, 4, 32, 468.9, 0.0026)]
    assert plan.next_window(seen) == 512
    assert plan.propose(seen)["window"] == 512
    assert plan.next_window(seen, pending=[{"window": 512}]) is None  # another worker reads it
    seen.append(_trial(2, 512, 45, 4, 36, 459.0, 0.0026))
    assert plan.next_window(seen) is None
    # a second reading under the cap makes it uncertain: read again, as any uncertain window
    seen[2] = _trial(2, 512, 45, 4, 36, 459.0, -0.0040)
    assert plan.next_window(seen) == 512


# landscape 0 of the trap with exact PPL: the best is 8 tokens at top-k 44 (36-56 within 1 %);
# top-k was frozen at 62 (0.984 of the best) after the seventh trial, and 8 tokens at W192
# has been measured; four trials since moved only the knob that does nothing
FROZEN_RUN = [
    _trial(0, 512, 45, 4, 36, 389.0, -0.1097),
    _trial(1, 324, 84, 7, 53, 458.0, -0.0828),
    _trial(2, 152, 24, 7, 19, 451.2, 0.0641),
    _trial(3, 176, 84, 2, 19, 321.5, 0.0177),
    _trial(4, 192, 24, 2, 53, 309.2, -0.0039),
    _trial(5, 184, 52, 8, 40, 492.0, 0.0062),
    _trial(6, 192, 57, 8, 35, 494.4, -0.0039),
    _trial(7, 192, 62, 8, 37, 484.3, -0.0039),
    _trial(8, 192, 62, 8, 32, 485.5, -0.0039),
    _trial(9, 192, 62, 8, 40, 480.9, -0.0039),
    _trial(10, 192, 62, 8, 30, 490.1, -0.0039),
]


def test_a_knob_is_frozen_only_once_its_effect_is_shown_small() -> None:
    """On FROZEN_RUN the plan once froze top-k at 62 (0.984 of the best) and then moved only
    the knob that does nothing, four trials running. A knob now stops moving only when its
    fitted effect plus two standard deviations is under 5 %: top-k's reads 5.4 % +- 10 % and
    the dead knob's 4.3 % +- 4.7 %, neither shown small, so nothing is frozen, and every
    proposal measures a top-k and token count not measured at the window yet."""
    plan = GuidedPlan(SPACE)
    fit = plan._fit(FROZEN_RUN)
    assert fit.frozen == {}
    for name, (spread, sd) in {"top_k": (0.054, 0.103), "dead": (0.043, 0.047)}.items():
        measured_spread, measured_sd, _ = fit._effect(SPACE.parameter(name))
        assert (measured_spread, measured_sd) == pytest.approx((spread, sd), abs=0.001)
        assert measured_spread + 2 * measured_sd >= 0.05
    for n in range(7, len(FROZEN_RUN) + 1):
        proposal = plan.propose(FROZEN_RUN[:n])
        tried = {(o.params["top_k"], o.params["tokens"]) for o in FROZEN_RUN[:n] if o.params["window"] == 192}
        assert proposal["window"] == 192
        assert (proposal["top_k"], proposal["tokens"]) not in tried


def test_a_knob_the_fit_points_away_from_the_incumbent_is_live() -> None:
    """A knob whose effect is not yet told from the noise still tells two candidates apart
    when the fit says moving it alone off the incumbent gains 1 % or more (the plan once
    held 4 tokens for 30 trials while its fit put the best at 5). On FROZEN_RUN the tokens
    are live (effect 50 % +- 3 %), the others are not: top-k's best gain off the incumbent
    (top-k 57) is 0.05 %, the dead knob's 0.01 %."""
    plan = GuidedPlan(SPACE)
    fit = plan._fit(FROZEN_RUN)
    incumbent, _ = fit.incumbent()
    assert incumbent is not None and incumbent["top_k"] == 57
    assert fit.live_knobs(incumbent) == {"tokens"}
    assert fit._gain_over(SPACE.parameter("top_k"), incumbent) == pytest.approx(0.0005, abs=0.0001)
    # the same fit with the incumbent's top-k at the low end of its range: moving it gains
    far = {**incumbent, "top_k": 16}
    assert fit._gain_over(SPACE.parameter("top_k"), far) >= 0.01
    assert "top_k" in fit.live_knobs(far)


def test_an_infinite_ppl_at_the_bracket_s_end_bisects_the_bracket() -> None:
    """A window that read an infinite PPL (a server whose PPL came back NaN or inf) ends the
    bracket from below, and no line runs through it (before, the secant through it was NaN
    and the plan raised). With only the bracket's two ends read, the root is put at the
    middle (feasible 320, infinite 256: 288) and the probe, as every probe, half a
    resolution (8) past it on the feasible side: 292. With a second feasible window, the
    secant through the two finite readings puts the root near the true boundary (300),
    and the probe at 304."""
    ppl = curve(boundary=300.0, power=1.0)
    base = {"top_k": 32, "tokens": 4, "dead": 32}
    infinite = Observation(number=2, params={"window": 256, **base}, tps=400.0, gate=math.inf)
    bracket = [observe(1, {"window": 320, **base}, ppl), infinite]
    assert GuidedPlan(SPACE).next_window(bracket) == 292
    assert GuidedPlan(SPACE).next_window([observe(0, {"window": 512, **base}, ppl), *bracket]) == 304


@pytest.mark.parametrize("knobs", range(1, 8))
def test_the_design_has_a_corner_per_knob_and_one_more_as_informative_as_any(knobs: int) -> None:
    """With four speed knobs the design took all 8 rows of its orthogonal array (9 trials with the
    middle); it takes knobs + 1, and no other choice of that many rows of the array tells the slopes
    apart better (D-criterion, over every subset of Sylvester's Hadamard matrix's columns)."""
    design = np.array(_design_signs(knobs))
    assert design.shape == (knobs + 1, knobs)
    runs = 2 ** math.ceil(math.log2(knobs + 1))
    array = hadamard(runs)[:, 1 : knobs + 1]
    assert {tuple(row) for row in design} <= {tuple(row) for row in array}

    def information(rows: np.ndarray) -> float:
        x = np.column_stack([np.ones(len(rows)), rows])
        return float(np.linalg.det(x.T @ x))

    best = max(information(array[list(subset)]) for subset in itertools.combinations(range(runs), knobs + 1))
    assert information(design) == pytest.approx(best) and best > 0


def test_configurations_measured_before_the_design_do_not_take_its_corners() -> None:
    """The base and the enqueued known configurations come first. They used to count as the
    design's first rows, so two of them displaced its middle and its first corner, and the slopes
    were told apart from points that were not the design's: at 5 % noise, on the cheap-drafter
    landscapes with the known configurations first, a median of 12.5 searched trials to 1 % of
    the best, against 8.5 with every corner measured (docs/study.md)."""
    plan = GuidedPlan(SPACE)
    ppl = curve(260, 1.0)
    corners = [plan._design_row(row, {}) for row in range(1, 1 + len(plan._design))]
    speed = ("top_k", "tokens", "dead")
    base = {"window": 512, "top_k": 32, "tokens": 4, "dead": 32}
    known = {"window": 188, "top_k": 49, "tokens": 7, "dead": 32}
    seen = [observe(0, base, ppl), observe(1, known, ppl)]
    for number in range(2, 2 + len(corners)):
        proposal = plan.propose(seen)
        assert proposal is not None
        seen.append(observe(number, proposal, ppl))
    measured = [{name: o.params[name] for name in speed} for o in seen[2:]]
    assert measured == corners  # every corner, in the design's order
    # with nothing measured first, the first trial is the middle, then the corners
    fresh = search(ppl, 1 + len(corners))
    assert [{name: o.params[name] for name in speed} for o in fresh] == [plan._design_row(0, {}), *corners]
