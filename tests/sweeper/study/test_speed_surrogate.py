"""The guided plan's speed model: the regression, and the residuals' process beside it."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from test_guided import SPACE

from sweeper.study import Observation
from sweeper.study._speed_surrogate import NOISE_FLOOR, RESIDUAL_SD, SpeedSurrogate, to_unit

WINDOW = SPACE.parameter("window")
TOP_K = SPACE.parameter("top_k")
TOKENS = SPACE.parameter("tokens")


def interacting_log_tps(top_k: int, tokens: int) -> float:
    """K pays only with a wide top-k (the drafter's interaction): best at top-k 128, 8 tokens."""
    u, v = to_unit(TOP_K, top_k) - 0.5, to_unit(TOKENS, tokens) - 0.5
    return math.log(500.0) + 0.4 * u * v + 0.05 * v


def grid_readings(readings: int, noise: float, seed: int = 0) -> list[Observation]:
    """A 3 x 3 grid of top-k and tokens at the middle window (its slope term is 0 there)."""
    rng = np.random.default_rng(seed)
    seen = []
    for top_k in (16, 45, 128):
        for tokens in (1, 4, 8):
            for _ in range(readings):
                params = {"window": 320, "top_k": top_k, "tokens": tokens, "dead": 32}
                tps = math.exp(interacting_log_tps(top_k, tokens) + noise * rng.standard_normal())
                seen.append(Observation(number=len(seen), params=params, tps=tps, gate=-0.1))
    return seen


def surrogate(seen: list[Observation]) -> SpeedSurrogate:
    return SpeedSurrogate(SPACE, WINDOW, seen, {}, design_runs=4)


def test_the_residuals_put_back_an_interaction_the_quadratic_cannot_fit() -> None:
    seen = grid_readings(readings=3, noise=0.01)
    fit = surrogate(seen)
    settings = [dict(o.params) for o in seen[::3]]
    mean, _ = fit.posterior(settings)
    truth = np.array([interacting_log_tps(s["top_k"], s["tokens"]) for s in settings])
    # compared from the grid's middle, as the plan compares candidates (the intercept cancels)
    middle = next(i for i, s in enumerate(settings) if (s["top_k"], s["tokens"]) == (45, 4))
    error = np.abs((mean - mean[middle]) - (truth - truth[middle]))
    assert error.max() < 0.03, error
    # the regression alone is off by about the interaction's size at a corner
    features = np.array([fit._features(s, window_coordinate=None) for s in settings])
    additive = features @ fit.mean
    assert np.abs((additive - additive[middle]) - (truth - truth[middle])).max() > 0.05
    best, _ = fit.incumbent()
    assert (best["top_k"], best["tokens"]) == (128, 8)


def test_a_setting_far_from_every_reading_keeps_the_residuals_prior_uncertainty() -> None:
    seen = grid_readings(readings=3, noise=0.01)
    fit = surrogate(seen)
    measured = {"top_k": 45, "tokens": 4, "dead": 32}
    unmeasured = {"top_k": 45, "tokens": 4, "dead": 64}  # the dead knob's far end: never read
    _, sd = fit.posterior([measured, unmeasured])
    assert sd[1] >= RESIDUAL_SD * 0.9
    assert sd[0] < sd[1] / 2


def test_one_readings_noise_comes_from_repeated_readings_where_there_are_enough() -> None:
    seen = grid_readings(readings=3, noise=0.04, seed=5)
    fit = surrogate(seen)
    groups: dict[tuple[int, int], list[float]] = {}
    for o in seen:
        groups.setdefault((o.params["top_k"], o.params["tokens"]), []).append(math.log(o.tps))
    pooled = math.sqrt(sum(statistics.variance(v) * (len(v) - 1) for v in groups.values()) / (len(seen) - len(groups)))
    assert fit.reading_noise == pytest.approx(max(pooled, NOISE_FLOOR))
    # one reading per configuration: nothing repeated, the regression's own estimate
    single = surrogate(grid_readings(readings=1, noise=0.04, seed=5))
    assert single.reading_noise == single.noise


def test_before_any_reading_every_setting_is_scored_with_the_priors_uncertainty() -> None:
    fit = surrogate([])
    scores = fit.scores()
    assert len(scores) == len(fit.candidates) > 0
    _, sd = fit.posterior(fit.candidates[:3])
    assert np.all(sd >= RESIDUAL_SD) and np.all(np.isfinite(scores))
    assert fit.incumbent() == (None, -math.inf)
