"""The synthetic landscapes of the search benchmark, and the guided plan's trials on them."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from sweeper.study import GuidedPlan, Observation

BASE_ENV = {"SPECULATIVE_CONFIG": '{"method": "mtp", "model": "d", "num_speculative_tokens": 4}'}


@pytest.fixture(scope="module")
def landscape(load_benchmark):
    return load_benchmark("landscape", "landscape_under_test")


def test_the_space_is_the_preset_plus_a_knob_of_no_effect(landscape) -> None:
    space = landscape.search_space().bind(BASE_ENV)
    assert space.names == ("sliding_window", "centroid_top_k", "num_speculative_tokens", "max_num_seqs")
    assert space.speed_names == ("centroid_top_k", "num_speculative_tokens", "max_num_seqs")
    assert space.overrides({**space.base_values(), "max_num_seqs": 8}) == {"MAX_NUM_SEQS": "8"}
    land = landscape.Landscape(0)
    params = {"sliding_window": 300, "centroid_top_k": 40, "num_speculative_tokens": 5}
    assert land.tps_of({**params, "max_num_seqs": 8}) == land.tps_of({**params, "max_num_seqs": 64})


def test_boundaries_spread_over_the_window_range(landscape) -> None:
    boundaries = [landscape.Landscape(seed).shape.boundary for seed in range(9)]
    for seed, boundary in enumerate(boundaries):
        low, high = landscape.BOUNDARY_ZONES[seed % 3]
        assert low <= boundary <= high
    land = landscape.Landscape(4)
    assert land.ppl(land.shape.boundary) == pytest.approx(landscape.PPL_CAP)
    windows = np.arange(128, 513, 4)
    assert np.all(np.diff(land.ppl(windows)) < 0)  # PPL falls as the window widens


def test_the_best_speed_settings_vary_and_sit_at_the_boundary(landscape) -> None:
    lands = [landscape.Landscape(seed) for seed in range(12)]
    assert {land.best["num_speculative_tokens"] for land in lands} >= {2, 4, 8}
    tops = [land.best["centroid_top_k"] for land in lands]
    assert min(tops) < 30 and max(tops) > 90
    for land in lands:
        window = land.best["sliding_window"]
        assert land.is_feasible(land.best) and not land.is_feasible({"sliding_window": window - 4})
        assert land.tps_of(land.best) == pytest.approx(landscape.TARGET_BEST_TPS)


@pytest.mark.parametrize("noise", [0.01, 0.05])
def test_noise_is_multiplicative_and_ppl_exact(landscape, noise) -> None:
    land = landscape.Landscape(1, noise=noise)
    params = dict(land.best, max_num_seqs=32)
    measured = [land(params) for _ in range(400)]
    ratios = np.array([m.tps for m in measured]) / land.tps_of(params)
    assert abs(ratios.mean() - 1) < 3 * noise / 20
    assert 0.8 * noise < ratios.std() < 1.2 * noise
    assert {m.ppl for m in measured} == {float(land.ppl(params["sliding_window"]))}


def trials_to_near_best(landscape, seed: int, noise: float, cap: int = 20) -> int | None:
    land = landscape.Landscape(seed, noise=noise)
    space = landscape.search_space().bind(BASE_ENV)
    plan = GuidedPlan(space)
    seen: list[Observation] = []
    for number in range(cap):
        proposal = plan.propose(seen)
        measured = land(proposal)
        seen.append(
            Observation(
                number=number,
                params=proposal,
                tps=measured.tps,
                gate=measured.ppl - landscape.PPL_CAP,
            )
        )
        if land.is_near_best(proposal):
            return number + 1
    return None


def test_without_known_configs_the_median_is_at_most_8_trials(landscape) -> None:
    trials = [trials_to_near_best(landscape, seed, 0.01) for seed in range(9)]
    assert statistics.median(t if t is not None else 99 for t in trials) <= 8
