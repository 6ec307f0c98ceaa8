"""TPS intervals: checked against the delta method and by their coverage on known populations."""

from __future__ import annotations

import math
import random
import statistics

import numpy as np
import pytest

from evaluators.intervals import (
    PriorFit,
    paired_ratio_interval,
    pooled_spread,
    prior_fit,
    ratio_interval,
    repeat_interval,
    request_interval,
    screen_floor,
    speedup_interval,
    t_cdf,
    t_quantile,
)
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


# -- between servers: the pooled spread and the speedup over a base ------------------------


def test_pooled_spread_equals_the_one_way_anova_residual_spread_with_the_prior_as_extra_df() -> None:
    groups = [[100.0, 110.0, 95.0], [200.0, 180.0], [150.0]]
    spread = pooled_spread(groups, prior=0.1, prior_df=2.0)
    # written out independently: residual sum of squares of log TPS around each group's mean
    logs = [np.log(np.array(g)) for g in groups]
    rss = sum(float(((x - x.mean()) ** 2).sum()) for x in logs)
    assert spread.measured_df == 3
    assert spread.df == 5.0
    assert spread.relative == pytest.approx(math.sqrt((rss + 0.01 * 2.0) / 5.0))
    assert pooled_spread([[120.0]], prior=0.07).relative == pytest.approx(0.07)


def test_pooled_spread_refuses_nonsense() -> None:
    with pytest.raises(MeasurementError, match="prior"):
        pooled_spread([[1.0, 2.0]], prior=0.0)
    with pytest.raises(MeasurementError, match="positive"):
        pooled_spread([[1.0, -2.0]], prior=0.1)
    with pytest.raises(MeasurementError, match="no repeats"):
        pooled_spread([[1.0]], prior=0.1, prior_df=0.0)


# the GPU demo's readings on a noisy H100 lease (2026-12-06): the base, then the answer, in fresh servers
NOISY_LEASE = [(634.7, 548.1, 457.4), (1172.2, 751.8, 890.7)]


def test_prior_fit_is_a_two_sided_chi_square_test_of_the_repeats_against_the_prior() -> None:
    from scipy import stats

    logs = [np.log(np.array(g)) for g in NOISY_LEASE]
    rss, df = sum(float(((x - x.mean()) ** 2).sum()) for x in logs), 4
    for prior in (0.02, 0.13, 1.0):
        check = prior_fit(NOISY_LEASE, prior=prior)
        p_upper = stats.chi2.sf(rss / prior**2, df)  # written out: the chance of so much spread
        p_lower = stats.chi2.cdf(rss / prior**2, df)
        want = PriorFit.HOST_NOISIER if p_upper < 0.005 else PriorFit.HOST_QUIETER if p_lower < 0.005 else PriorFit.FITS
        assert check.fit is want and check.df == df
        assert check.measured == pytest.approx(math.sqrt(rss / df), rel=1e-12)
    # the lease's 19.6 % is no spread a prior of 2 % gives; 13 % could; a prior of 100 % is too wide for it
    assert [prior_fit(NOISY_LEASE, prior=p).fit for p in (0.02, 0.13, 1.0)] == [
        PriorFit.HOST_NOISIER,
        PriorFit.FITS,
        PriorFit.HOST_QUIETER,
    ]
    assert prior_fit(NOISY_LEASE, prior=0.02).describe() == (
        "the repeats alone show 19.6% on 4 df, above the prior of 2.0% (chi-square, 99%): "
        "a study on this host should pass --noise 0.20"
    )
    assert prior_fit(NOISY_LEASE, prior=0.13).describe() == ""
    # a host quieter than the prior: lowered only to the measured spread's one-sided 95 % upper bound
    quiet = [(900.0, 905.0, 898.0), (1200.0, 1190.0)]
    q_logs = [np.log(np.array(g)) for g in quiet]
    q_rss = sum(float(((x - x.mean()) ** 2).sum()) for x in q_logs)
    upper = math.sqrt(q_rss / stats.chi2.ppf(0.05, 3))
    check = prior_fit(quiet, prior=0.13)
    assert check.fit is PriorFit.HOST_QUIETER and check.suggested == pytest.approx(upper, rel=1e-12)
    assert check.describe() == (
        f"the repeats alone show {math.sqrt(q_rss / 3):.1%} on 3 df, below the prior of 13.0% (chi-square, 99%): "
        f"a study on this host may pass --noise {upper:.2f} (their 95 % upper bound)"
    )
    assert prior_fit([(100.0, 100.0)], prior=0.5).suggested == 0.01  # never a --noise of 0.00
    assert prior_fit([(100.0,), (120.0,)], prior=0.1) is None  # nothing measured twice


def test_prior_fit_calls_a_true_prior_wrong_about_1_percent_of_the_time() -> None:
    rng = random.Random(7)
    prior, studies = 0.05, 4000
    wrong = 0
    for _ in range(studies):  # 3 configurations, 3 fresh servers each, spread exactly the prior
        groups = [[100.0 * (1 + c) * math.exp(rng.gauss(0.0, prior)) for _ in range(3)] for c in range(3)]
        wrong += prior_fit(groups, prior=prior).fit is not PriorFit.FITS
    # binomial(4000, 0.01): 40 expected, 99.9 % of draws within 21-62
    assert 21 <= wrong <= 62, wrong


def test_speedup_interval_matches_a_two_sample_t_interval_on_logs() -> None:
    from scipy import stats

    candidate, base = [230.0, 215.0, 241.0], [200.0, 190.0, 212.0]
    spread = pooled_spread([candidate, base], prior=0.1, prior_df=0.0)
    interval = speedup_interval(candidate, base, spread=spread)
    # scipy's pooled-variance two-sample t test gives the same t statistic on the logs
    result = stats.ttest_ind(np.log(candidate), np.log(base), equal_var=True)
    difference = float(np.mean(np.log(candidate)) - np.mean(np.log(base)))
    half = stats.t.ppf(0.975, 4) * difference / float(result.statistic)
    assert interval.value == pytest.approx(math.exp(difference))
    assert interval.low == pytest.approx(math.exp(difference - half))
    assert interval.high == pytest.approx(math.exp(difference + half))


def test_speedup_interval_covers_the_true_ratio_about_95_times_in_100() -> None:
    rng = random.Random(5)
    covered = 0
    runs = 400
    for _ in range(runs):
        # 12 % between-server spread, the candidate truly 5 % faster, 3 repeats a side
        candidate = [210.0 * math.exp(rng.gauss(0.0, 0.12)) for _ in range(3)]
        base = [200.0 * math.exp(rng.gauss(0.0, 0.12)) for _ in range(3)]
        spread = pooled_spread([candidate, base], prior=0.12, prior_df=2.0)
        interval = speedup_interval(candidate, base, spread=spread)
        covered += interval.low <= 1.05 <= interval.high
    assert 0.91 * runs <= covered <= 0.99 * runs


# -- Student's t, the paired ratio interval and the screen floor (the one home of the statistics) --


@pytest.mark.parametrize(
    ("p", "df", "table"),
    [(0.975, 3, 3.182446), (0.975, 10, 2.228139), (0.95, 5, 2.015048)],
)
def test_t_quantile_matches_printed_tables(p: float, df: int, table: float) -> None:
    assert t_quantile(p, df) == pytest.approx(table, abs=5e-7)  # tables print six decimals
    assert t_quantile(1.0 - p, df) == pytest.approx(-table, abs=5e-7)


@pytest.mark.parametrize("x", [-3.0, -0.4, 0.0, 0.7, 5.0])
def test_t_cdf_and_quantile_match_the_closed_forms_on_one_and_two_df(x: float) -> None:
    assert t_cdf(x, 1) == pytest.approx(0.5 + math.atan(x) / math.pi, abs=1e-12)  # Cauchy
    assert t_cdf(x, 2) == pytest.approx(0.5 + x / (2.0 * math.sqrt(2.0 + x * x)), abs=1e-12)
    p = 0.5 + math.atan(x) / math.pi
    assert t_quantile(p, 1) == pytest.approx(x, abs=1e-9)
    q = 0.5 + x / (2.0 * math.sqrt(2.0 + x * x))
    assert t_quantile(q, 2) == pytest.approx((2 * q - 1) / math.sqrt(2 * q * (1 - q)), abs=1e-9)


def test_t_quantile_without_degrees_of_freedom_is_infinite_and_bad_input_is_an_error() -> None:
    assert t_quantile(0.95, 0) == math.inf
    assert t_quantile(0.05, 0) == -math.inf
    with pytest.raises(MeasurementError, match="t_quantile: p"):
        t_quantile(1.5, 3)
    with pytest.raises(MeasurementError, match="t_cdf: df"):
        t_cdf(1.0, 0)


def test_paired_ratio_interval_is_the_t_interval_of_the_log_ratios() -> None:
    pairs = [(121.0, 99.0), (119.0, 101.0), (124.0, 100.0), (118.0, 103.0)]
    logs = [math.log(a / b) for a, b in pairs]
    mean = statistics.fmean(logs)
    half = 3.182446305284263 * statistics.stdev(logs) / 2.0  # t(0.975, 3), from tables; 4 pairs
    got = paired_ratio_interval(pairs)
    assert (got.value, got.low, got.high) == pytest.approx(
        (math.exp(mean), math.exp(mean - half), math.exp(mean + half))
    )
    assert got.confidence == 0.95 and got.samples == 8
    assert got.method == "paired t-interval of the log ratio over 4 pairs (3 df)"
    same = ratio_interval([a / b for a, b in pairs])
    assert (same.value, same.low, same.high) == pytest.approx((got.value, got.low, got.high), rel=1e-12)
    with pytest.raises(MeasurementError, match="at least 2 pairs"):
        paired_ratio_interval(pairs[:1])
    with pytest.raises(MeasurementError, match="positive"):
        ratio_interval([1.1, -0.9])


def test_screen_floor_is_two_standard_errors_of_a_single_figure_difference_below_the_geometric_mean() -> None:
    screens = [80.0, 90.0, 85.0]
    geometric = (80.0 * 90.0 * 85.0) ** (1.0 / 3.0)
    # a difference of two single figures at SD 0.10 of log TPS has SD 0.10 * sqrt(2); two of them below
    assert screen_floor(screens, spread=0.10) == pytest.approx(geometric * math.exp(-2.0 * 0.10 * math.sqrt(2.0)))
    assert screen_floor([50.0], spread=0.0) == pytest.approx(50.0)
    with pytest.raises(MeasurementError, match="screen_floor"):
        screen_floor([], spread=0.1)


def test_nested_spread_splits_between_and_within_servers() -> None:
    from scipy import stats

    from evaluators import nested_spread

    servers = [[700.0, 660.0, 720.0], [810.0, 861.0, 790.0], [640.0, 700.0, 655.0], [750.0, 742.0, 780.0]]
    split = nested_spread(servers)
    logs = np.log(np.array(servers))
    # one-way random-effects ANOVA written out with numpy
    ms_within = logs.var(axis=1, ddof=1).mean()
    ms_between = 3 * logs.mean(axis=1).var(ddof=1)
    assert split.within == pytest.approx(math.sqrt(ms_within))
    assert split.between == pytest.approx(math.sqrt((ms_between - ms_within) / 3))
    assert (split.servers, split.within_df, split.between_df, split.runs_per_server) == (4, 8, 3, 3)
    assert split.f_p_value == pytest.approx(stats.f.sf(ms_between / ms_within, 3, 8))
    assert split.within_low < split.within < split.within_high
    assert split.within_high == pytest.approx(math.sqrt(8 * ms_within / stats.chi2.ppf(0.025, 8)))
    assert split.server_means_sd == pytest.approx(logs.mean(axis=1).std(ddof=1))
    assert split.single_run == pytest.approx(math.sqrt(split.between**2 + split.within**2))
    assert split.pair_sd(4) == pytest.approx(math.sqrt(2 * (split.between**2 + split.within**2 / 4)))
    # servers that differ less than their runs predict: no between-server part
    assert nested_spread([[100.0, 110.0], [105.0, 104.0]]).between == 0.0
    with pytest.raises(MeasurementError):
        nested_spread([[100.0, 110.0], [105.0]])


def test_nested_spread_recovers_the_parts_it_was_drawn_from() -> None:
    from evaluators import nested_spread

    rng = np.random.default_rng(7)
    estimates = []
    for _ in range(400):
        levels = rng.normal(0.0, 0.08, size=6)
        servers = [np.exp(6.0 + level + rng.normal(0.0, 0.05, size=5)) for level in levels]
        estimates.append(nested_spread(servers))
    within = np.mean([e.within**2 for e in estimates])
    between = np.mean([(e.server_means_sd**2 - e.within**2 / 5) for e in estimates])  # unbiased, unclipped
    assert math.sqrt(within) == pytest.approx(0.05, rel=0.03)
    assert math.sqrt(between) == pytest.approx(0.08, rel=0.06)
    covered = np.mean([e.within_low <= 0.05 <= e.within_high for e in estimates])
    assert 0.92 <= covered <= 0.98
