"""The night simulation: its draws, its GPU clock and its statistics agree with computations made here."""

from __future__ import annotations

import dataclasses
import math
import statistics

import pytest

from evaluators import Spread as EvaluatorSpread
from evaluators import blocked_spread, paired_speedup_interval, pooled_spread


@pytest.fixture(scope="module")
def night(load_benchmark):
    return load_benchmark("night")


def _setting(night, **noise):
    base = night.SETTINGS["a10g"]
    return dataclasses.replace(base, noise=dataclasses.replace(base.noise, **noise))


def test_a_race_rounds_log_ratio_has_the_between_server_spread_of_two_servers(night) -> None:
    setting = _setting(night, sd_within=0.0, drift_per_hour=0.0)
    errors: list[float] = []
    for index in range(40):
        errors += night.Night(setting, night.parse_design("today"), "null", 500 + index).run().round_errors
    assert len(errors) > 300
    # contender and incumbent in two fresh servers: b_1 - b_2, SD sqrt(2) * sd_between
    assert statistics.stdev(errors) == pytest.approx(math.sqrt(2) * 0.08, rel=0.1)
    assert abs(statistics.fmean(errors)) < 3 * math.sqrt(2) * 0.08 / math.sqrt(len(errors))


def test_the_gpu_clock_is_the_sum_of_the_phase_times(night) -> None:
    phases = night.Phases(budget_s=10_000.0, start_s=167.0, ppl_s=20.0, bridge_s=10.0, run_s=131.0)
    machine = night.Machine(night.Noise(sd_between=0.08, sd_within=0.05, drift_per_hour=0.03), phases, seed=4)
    trial = machine.start(0, 0.0, ppl=True)
    machine.run(trial)
    race = [machine.start(1, 0.0), machine.start(0, 0.0)]
    for _ in range(3):
        for server in race:
            machine.run(server)
    by_hand = (167 + 20 + 10 + 131) + 2 * (167 + 10) + 6 * 131
    assert machine.clock == pytest.approx(by_hand)
    assert [len(s.runs) for s in machine.servers] == [1, 3, 3]
    assert machine.server_cost(ppl=True) == 328 and machine.server_cost(runs=3) == 167 + 10 + 393
    assert machine.fits(10_000.0 - by_hand) and not machine.fits(10_000.0 - by_hand + 1)


def test_a_night_spends_no_more_than_its_budget(night) -> None:
    for name in ("today", "repeats-2", "warm-pair", "pooled-base"):
        result = night.Night(night.SETTINGS["h200"], night.parse_design(name), "alt", 3).run()
        assert 0 < result.gpu_s <= 3600.0
        assert result.race_gpu_s <= result.gpu_s


def test_today_claims_faster_on_few_null_nights(night) -> None:
    results = night.simulate(night.SETTINGS["a10g"], night.parse_design("today"), "null", 40, seed=7)
    share = sum(r.claim == "faster" for r in results) / len(results)
    assert share <= 0.15
    assert all(r.confirmed == 0 for r in results)  # nothing is truly faster


def _fixed_race_widths(night, design_name: str, sd_within: float, seeds: range) -> list[float]:
    """The claim interval's width after a race of 4 rounds between two equally fast configurations."""
    setting = _setting(night, sd_within=sd_within, drift_per_hour=0.0)
    widths = []
    for seed in seeds:
        study = night.Night(setting, night.parse_design(design_name), "null", seed)
        study.log_truth[1], study.figures[1] = 0.0, []
        rows: list[tuple[float, ...]] = []
        study.race_rows.append(rows)
        for n in range(1, 5):
            rows.append(study.one_round([1, night.BASE], n))
        widths.append(study.claim_interval(1, races=1).width)
    return widths


def test_repeats_cannot_narrow_the_claim_when_all_the_spread_is_between_servers(night) -> None:
    seeds = range(300)
    today = statistics.fmean(_fixed_race_widths(night, "today", 0.0, seeds))
    repeats = statistics.fmean(_fixed_race_widths(night, "repeats-3", 0.0, range(1000, 1300)))
    assert repeats == pytest.approx(today, rel=0.05)
    # with a within-server part, the mean of 3 runs does narrow it
    today_w = statistics.fmean(_fixed_race_widths(night, "today", 0.08, seeds))
    repeats_w = statistics.fmean(_fixed_race_widths(night, "repeats-3", 0.08, seeds))
    assert repeats_w < 0.95 * today_w


def test_the_statistics_are_the_evaluators(night) -> None:
    races = [[(4.6, 4.7, 4.5), (4.62, 4.8, 4.55), (4.5, 4.71, 4.6)], [(4.0, 4.1), (4.2, 4.15)]]
    squares, df = night.blocked(races)
    expected = blocked_spread([[[math.exp(x) for x in row] for row in r] for r in races], prior=0.1, prior_df=2)
    assert df == expected.measured_df == 5
    assert math.sqrt((squares + 0.1**2 * 2) / (df + 2)) == pytest.approx(expected.relative)
    groups = [[4.6, 4.7, 4.62], [4.0], [4.1, 4.3]]
    squares, df = night.pooled(groups)
    expected = pooled_spread([[math.exp(x) for x in g] for g in groups], prior=0.1, prior_df=2)
    assert df == expected.measured_df == 3
    assert math.sqrt((squares + 0.02) / (df + 2)) == pytest.approx(expected.relative)
    pairs = [(4.6, 4.5), (4.7, 4.65), (4.62, 4.4)]
    mine = night.paired_interval(pairs, night.Spread(0.09, 7.0), 0.9)
    theirs = paired_speedup_interval(
        [(math.exp(a), math.exp(b)) for a, b in pairs],
        spread=EvaluatorSpread(relative=0.09, df=7.0, measured_df=5, method=""),
        confidence=0.9,
    )
    assert (mine.value, mine.low, mine.high) == pytest.approx((theirs.value, theirs.low, theirs.high))


def test_pooled_base_weighs_each_base_server_by_its_use(night) -> None:
    study = night.Night(night.SETTINGS["a10g"], night.parse_design("pooled-base"), "null", 1)
    study.base_series = [
        night.Server(ident=0, level=0.0, runs=[v], times=[t]) for v, t in ((0.0, 1), (0.1, 2), (0.3, 3))
    ]
    study.post[5] = [night.Server(ident=5, level=0.0, runs=[v], times=[t]) for v, t in ((0.2, 1.4), (0.5, 2.6))]
    spread = night.Spread(0.1, 10.0)
    iv = study.versus_base(5, spread, 0.95)
    # 1.4: bases at 1 and 2; 2.6: bases at 3 and 2 -> weights 1/4, 1/2, 1/4
    mean = ((0.2 - 0.05) + (0.5 - 0.2)) / 2
    se = 0.1 * math.sqrt(1 / 2 + 0.25**2 + 0.5**2 + 0.25**2)
    half = night.t_quantile(0.975, 10.0) * se
    assert (iv.value, iv.low, iv.high) == pytest.approx((math.exp(mean), math.exp(mean - half), math.exp(mean + half)))


def test_the_command_prints_itself_and_a_row_per_design(night, capsys) -> None:
    assert night.main(["--quick", "--setting", "h200", "--designs", "today,pooled-base", "--tail-df", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "python benchmarks/night.py --quick --setting h200 --designs today,pooled-base --tail-df 3"
    rows = [line for line in lines if line.startswith("| today") or line.startswith("| pooled-base")]
    assert len(rows) == 2 and "10/10" in rows[0]
    with pytest.raises(ValueError):
        night.parse_design("repeats-x")
