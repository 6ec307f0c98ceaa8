"""TPS intervals: checked against the delta method and by their coverage on known populations."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from evaluators.intervals import repeat_interval, request_interval
from sweeper.errors import MeasurementError


def requests(rng: random.Random, count: int) -> tuple[list[int], list[float]]:
    """Requests whose speed varies by prompt (acceptance), 512 tokens each."""
    tokens = [512] * count
    latencies = [512 / rng.lognormvariate(math.log(80.0), 0.15) for _ in range(count)]
    return tokens, latencies


def test_request_interval_matches_the_delta_method() -> None:
    tokens, latencies = requests(random.Random(1), 128)
    interval = request_interval(tokens, latencies, resamples=4000)
    ratio = sum(tokens) / sum(latencies)
    # the delta-method standard error of a ratio of sums, written out independently
    residuals = [t - ratio * s for t, s in zip(tokens, latencies)]
    se = math.sqrt(sum(r * r for r in residuals) / (len(tokens) * (len(tokens) - 1))) / statistics.fmean(latencies)
    assert interval.value == pytest.approx(ratio)
    assert interval.low == pytest.approx(ratio - 1.96 * se, rel=0.01)
    assert interval.high == pytest.approx(ratio + 1.96 * se, rel=0.01)
    assert interval.samples == 128 and "bootstrap" in interval.method


def test_request_interval_is_scaled_to_the_runs_own_tps_and_reproducible() -> None:
    tokens, latencies = requests(random.Random(2), 64)
    ratio = sum(tokens) / sum(latencies)
    wall = request_interval(tokens, latencies, tps=ratio * 0.98)  # 2 % between requests
    plain = request_interval(tokens, latencies)
    assert wall.value == pytest.approx(ratio * 0.98)
    assert wall.low == pytest.approx(plain.low * 0.98) and wall.high == pytest.approx(plain.high * 0.98)
    assert request_interval(tokens, latencies) == plain  # seeded


def test_request_interval_covers_the_population_ratio_about_95_times_in_100() -> None:
    rng = random.Random(3)
    population_tokens, population_latencies = requests(rng, 20_000)
    truth = sum(population_tokens) / sum(population_latencies)
    covered = 0
    runs = 300
    for run in range(runs):
        picked = [rng.randrange(20_000) for _ in range(64)]
        interval = request_interval(
            [population_tokens[i] for i in picked],
            [population_latencies[i] for i in picked],
            resamples=400,
            seed=run,
        )
        covered += interval.low <= truth <= interval.high
    # 95 % nominal; with 300 runs the count lies within 90-99 % with overwhelming odds
    assert 0.90 * runs <= covered <= 0.99 * runs


def test_repeat_interval_is_the_t_interval_and_covers_the_mean() -> None:
    values = [100.0, 104.0, 98.0, 110.0]
    interval = repeat_interval(values)
    half = 3.182446305284263 * statistics.stdev(values) / 2.0  # t(0.975, 3), from tables
    assert (interval.low, interval.high) == pytest.approx((103.0 - half, 103.0 + half))
    rng = random.Random(4)
    covered = sum(
        (lambda i: i.low <= 500.0 <= i.high)(repeat_interval([rng.gauss(500.0, 40.0) for _ in range(3)]))
        for _ in range(2000)
    )
    assert 0.93 * 2000 <= covered <= 0.97 * 2000


def test_bad_input_is_a_clear_error() -> None:
    with pytest.raises(MeasurementError, match="at least 2 requests"):
        request_interval([1], [1.0])
    with pytest.raises(MeasurementError, match="differ in length"):
        request_interval([1, 2], [1.0])
    with pytest.raises(MeasurementError, match="positive"):
        request_interval([1, 2], [1.0, 0.0])
    with pytest.raises(MeasurementError, match="at least 2 repeats"):
        repeat_interval([1.0])
    with pytest.raises(MeasurementError, match="confidence"):
        repeat_interval([1.0, 2.0], confidence=1.5)
