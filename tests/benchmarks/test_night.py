"""The night simulation: its draws, its GPU clock and its statistics agree with computations made here."""

from __future__ import annotations

import dataclasses
import math
import statistics

import pytest

from evaluators import Spread as EvaluatorSpread
from evaluators import blocked_spread, paired_speedup_interval, pooled_spread
from sweeper.measure import starts_warm


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
    assert lines[0] == "python -m benchmarks.night --quick --setting h200 --designs today,pooled-base --tail-df 3"
    rows = [line for line in lines if line.startswith("| today") or line.startswith("| pooled-base")]
    assert len(rows) == 2 and "10/10" in rows[0]
    with pytest.raises(ValueError):
        night.parse_design("repeats-x")


# -- warm starts: the start-time accounting against sums made here --------------------------------------

HAND_FRESH = dict(
    imports=10.0, engine_start=20.0, weights=5.0, compile_hit=1.0, compile_miss=30.0, graphs=4.0, engine_rest=6.0
)


def _start_setting(night, *, rounds: int, share: float, drift: float = 0.0, n_trials: int = 3, budget_s=None):
    """A trial-limited night with round phases: fresh 48 s (hit) / 77 s (cold compile), warm 25 s less;
    PPL 3 s, bridge 2 s, a TPS run 7 s."""
    fresh = night.StartPhases(**HAND_FRESH, api_ready=2.0)
    return dataclasses.replace(
        night.START_SETTINGS["gpu-demo"],
        noise=night.Noise(sd_between=0.12, sd_within=0.07, drift_per_hour=drift),
        confirm=night.ConfirmSettings(rounds=rounds, noise=0.13),
        budget_s=budget_s,
        n_trials=n_trials,
        ppl_s=3.0,
        bridge_s=2.0,
        run_s=7.0,
        fresh=fresh,
        warm=dataclasses.replace(fresh, imports=0.0, engine_start=5.0),
        new_compile_share=share,
        measured=None,
    )


def test_a_start_is_the_sum_of_its_phases(night) -> None:
    fresh = night.StartPhases(**HAND_FRESH, api_ready=2.0)
    assert fresh.seconds(compiled=True) == 10 + 20 + 5 + 1 + 4 + 6 + 2 == 48
    assert fresh.seconds(compiled=False) == 10 + 20 + 5 + 30 + 4 + 6 + 2 == 77
    warm = night.parse_phases(fresh, "imports=0,engine-start=5")
    assert (warm.seconds(compiled=True), warm.seconds(compiled=False)) == (23, 52)
    with pytest.raises(ValueError):
        night.parse_phases(fresh, "imports")
    demo = night.START_SETTINGS["gpu-demo"]
    # the medians of 6 fresh servers on an H100 (warm_start-gpu-h100-caches-2026-12-07.txt)
    assert demo.fresh.seconds(compiled=True) == pytest.approx(22.5 + 21 + 2 + 2 + 2 + 1 + 0.5 + 3.8)  # 54.8 s
    assert demo.fresh.seconds(compiled=False) == pytest.approx(54.8 - 2 + 17)  # a cold compile, 17 s
    # warm: the API imports, the engine start and api ready as the 6 warm servers beside them
    assert demo.warm.seconds(compiled=True) == pytest.approx(54.8 - (22.5 - 2) - (21 - 2) - (3.8 - 1.6))
    a10g = night.START_SETTINGS["a10g-e4b"]
    assert a10g.fresh.seconds(compiled=False) == pytest.approx(23 + 24 + 8 + 45 + 20 + 10 + 8.6)


def test_search_starts_the_searched_trials_warm_and_the_race_servers_fresh(night) -> None:
    warm = night.WarmStarts
    roles = ("baseline", "sampled", "confirm:4:1", "confirm:claim:4:2")
    assert [night.starts_warm(warm.OFF, r) for r in roles] == [False] * 4
    # the base's own trial is a claim's reading too: fresh, as sweeper starts it
    assert [night.starts_warm(warm.SEARCH, r) for r in roles] == [False, True, False, False]
    assert [night.starts_warm(warm.ALL, r) for r in roles] == [True] * 4
    assert night.DEFAULT_WARM_STARTS is warm.SEARCH
    # the rule is sweeper's own: a retried start is fresh in every mode
    assert night.starts_warm is starts_warm
    assert not starts_warm(warm.ALL, "sampled", attempt=2)


@pytest.mark.parametrize(
    ("share", "fresh_s", "warm_s"),
    [
        # every searched configuration compiles cold: 3 x (77 + 3 + 2 + 7), warm the base fresh then 2 x (52 + 12)
        (1.0, 3 * 89.0, 89.0 + 2 * 64.0),
        # only the base's: 89 + 2 x (48 + 12) fresh, 89 + 2 x (23 + 12) warm
        (0.0, 89.0 + 2 * 60.0, 89.0 + 2 * 35.0),
    ],
)
def test_a_night_without_races_costs_its_servers_by_hand(night, share, fresh_s, warm_s) -> None:
    setting = _start_setting(night, rounds=0, share=share)
    for mode, expected in ((night.WarmStarts.OFF, fresh_s), (night.WarmStarts.SEARCH, warm_s)):
        result = night.StartNight(setting, mode, "alt", 11).run()
        assert (result.searched, result.race_servers, result.stopped) == (3, 0, "n_trials")
        assert result.gpu_s == pytest.approx(expected)
        assert result.compile_misses == (3 if share == 1.0 else 1)
        assert result.start_s == pytest.approx(expected - 3 * 12.0)


def test_warm_starts_save_their_phases_on_the_same_night(night) -> None:
    """With no drift, every mode reads the same figures, so the same races run: the night is shorter by
    the 25 s a warm start saves, once per searched trial but the base's (SEARCH) or per server (ALL)."""
    setting = _start_setting(night, rounds=4, share=1.0)
    raced = 0
    for seed in range(12):
        off, search, every = (night.StartNight(setting, m, "alt", seed).run() for m in night.MODES)
        assert off.servers == search.servers == every.servers
        assert off.claim == search.claim == every.claim and off.regret == every.regret
        assert (off.warm, search.warm, every.warm) == (0, off.searched - 1, off.servers)
        assert off.gpu_s - search.gpu_s == pytest.approx(25.0 * (off.searched - 1))
        assert off.gpu_s - every.gpu_s == pytest.approx(25.0 * off.servers)
        raced += off.race_servers > 0
    assert raced >= 6  # most of these nights race


def test_a_night_with_races_costs_its_servers_by_hand(night) -> None:
    """Fresh: 77 s a cold compile, 48 s from the cache, PPL once a configuration, 2 + 7 s for every server."""
    setting = _start_setting(night, rounds=4, share=1.0)
    for seed in range(6):
        study = night.StartNight(setting, night.WarmStarts.OFF, "alt", seed)
        result = study.run()
        configurations = len(study.ppl_known)
        assert result.compile_misses == configurations <= result.searched  # race servers re-measure
        by_hand = 77.0 * configurations + 48.0 * (result.servers - configurations)
        by_hand += 3.0 * configurations + 9.0 * result.servers
        assert result.gpu_s == pytest.approx(by_hand)
        assert result.start_s == pytest.approx(77.0 * configurations + 48.0 * (result.servers - configurations))


def test_the_measured_gpu_demo_night_by_hand(night) -> None:
    demo = night.START_SETTINGS["gpu-demo"]
    # 3 searched trials (a cold start 69.8 s, PPL 3, bridge 2, a run 1.5) and 4 race servers (54.8 s, no PPL)
    fresh = 3 * (69.8 + 6.5) + 4 * (54.8 + 3.5)
    assert night.composition_seconds(demo, night.WarmStarts.OFF, 3, 4) == pytest.approx(fresh)
    saved = (22.5 - 2) + (21 - 2) + (3.8 - 1.6)  # a warm start's imports, engine start and api ready
    # SEARCH: the two sampled trials warm, the base's and the race servers fresh; ALL: all 7
    assert night.composition_seconds(demo, night.WarmStarts.SEARCH, 3, 4) == pytest.approx(fresh - 2 * saved)
    assert night.composition_seconds(demo, night.WarmStarts.ALL, 3, 4) == pytest.approx(fresh - 7 * saved)
    assert demo.measured is not None and demo.measured[:3] == (night.WarmStarts.SEARCH, 3, 4)


def test_a_budgeted_night_keeps_to_its_budget_and_states_its_regret(night) -> None:
    setting = dataclasses.replace(night.START_SETTINGS["a10g-e4b"], budget_s=2 * 3600.0)
    for mode in night.MODES:
        result = night.StartNight(setting, mode, "alt", 5).run()
        assert 2 * 3600.0 - 600.0 < result.gpu_s <= 2 * 3600.0
        assert result.stopped == "budget"
        assert result.answer_ratio in (1.0, night.FAST, night.FASTER)
        assert result.regret == pytest.approx(1.0 - result.answer_ratio / night.FASTER)


def test_the_starts_command_prints_a_row_per_mode(night, capsys) -> None:
    assert night.main(["--starts", "gpu-demo", "--studies", "4", "--warm-phases", "engine_start=10"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "python -m benchmarks.night --starts gpu-demo --studies 4 --warm-phases engine_start=10"
    rows = [line for line in lines if line.startswith(("| fresh (", "| SEARCH", "| ALL"))]
    assert len(rows) == 3 and all("| 4 |" in row for row in rows)
    assert "| warm | 2 | 10 |" in "\n".join(lines)
