"""The ablation simulation: its error rate against an exact computation, its two stages, its input."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pytest
from scipy import integrate, stats


@pytest.fixture(scope="module")
def sim(load_benchmark):
    return load_benchmark("ablation_error")


def test_one_switch_s_false_faster_rate_matches_the_exact_probability(sim) -> None:
    # one switch, a base of its own, 3 rounds, between-server SD equal to the prior (0.10), no
    # within-server noise, no drift: the log effect's error is N(0, 0.1^2 * 2/3), and the spread
    # is sqrt((0.1^2 chi2_2 + 0.1^2 * 2) / 4) on 4 df, independent of it
    machine = sim.Machine(sd_between=0.10, sd_within=0.0, drift_per_hour=0.0)
    design = sim.Design(rounds=3, block_size=1)
    studies = 1500
    faster = sum(
        sim.simulate_study(machine, design, switch_count=1, true_switch=None, alt_effect=1.1, seed=seed).speeds[0]
        is sim.Speed.FASTER
        for seed in range(studies)
    )
    t = stats.t.ppf(0.975, 4)

    def tail(chi: float) -> float:
        return stats.norm.sf(t * math.sqrt((chi + 2.0) / 4.0)) * stats.chi2.pdf(chi, 2)

    exact, _ = integrate.quad(tail, 0, np.inf)
    assert 0.005 < exact < 0.012  # below 2.5 %: the prior steadies the spread more than t on 4 df assumes
    assert faster / studies == pytest.approx(exact, abs=3 * math.sqrt(exact * (1 - exact) / studies))


def test_a_large_effect_is_found_and_named_alone(sim) -> None:
    machine = sim.Machine(sd_between=0.03, sd_within=0.02, drift_per_hour=0.0)
    design = sim.Design(rounds=3, block_size=4)
    outcomes = [
        sim.simulate_study(machine, design, switch_count=12, true_switch=5, alt_effect=1.5, seed=seed)
        for seed in range(20)
    ]
    assert all(o.found for o in outcomes)
    assert sum(o.false_faster for o in outcomes) <= 2


def test_the_second_stage_judges_only_the_switches_it_kept(sim) -> None:
    machine = sim.Machine(sd_between=0.05, sd_within=0.0, drift_per_hour=0.0)
    design = sim.Design(rounds=2, block_size=4, keep=2, rounds2=4)
    outcome = sim.simulate_study(machine, design, switch_count=10, true_switch=3, alt_effect=1.5, seed=1)
    assert outcome.found  # a 50 % switch is among the two kept and confirmed
    # servers: 2 rounds of 10 switches and 3 bases, then 4 rounds of 2 switches and 1 base
    assert outcome.servers == 2 * 13 + 4 * 3
    per_server = machine.start_s + machine.bridge_s + machine.run_s
    assert outcome.gpu_s == pytest.approx(outcome.servers * per_server + 13 * machine.ppl_s)


def test_designs_parse_and_bad_ones_are_errors(sim) -> None:
    assert sim.parse_designs("3x4,2x4+6/3") == [
        sim.Design(rounds=3, block_size=4),
        sim.Design(rounds=2, block_size=4, keep=3, rounds2=6),
    ]
    for bad in ("3", "0x4", "2x4+6", "2x4+0/2"):
        with pytest.raises(argparse.ArgumentTypeError):
            sim.parse_designs(bad)
