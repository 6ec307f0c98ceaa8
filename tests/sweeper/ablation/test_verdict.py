"""The ablation's figures and verdicts, against computations made here."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from evaluators import Divergence, FidelityResult, Interval, PairedPpl
from sweeper.ablation import (
    AblationMode,
    OutputCheck,
    PplCheck,
    SlotFigure,
    Speed,
    Switch,
    SwitchVerdict,
    export_value,
    judge_switch,
    output_check,
    ppl_check,
    report_switches,
    schedule,
    speed_of,
    study_level,
    tps_effects,
)

FLAGS = tuple(Switch(key=f"F{i}", subject="1", reference="0", manifest_value="1") for i in range(3))


def _figures(table: dict[tuple[int, int | None], float | None], *, block_size: int = 3) -> list[SlotFigure]:
    rounds = max(r for r, _ in table)
    return [
        SlotFigure(
            slot=slot, tps=table[(slot.round, slot.arm)], failure=None if table[(slot.round, slot.arm)] else "oom"
        )
        for slot in schedule(3, rounds=rounds, block_size=block_size)
    ]


# one round a row, so each arm's column reads down the rounds (hence fmt: skip)
TABLE = {
    (1, None): 100.0, (1, 0): 90.0, (1, 1): 104.0, (1, 2): 101.0,
    (2, None): 110.0, (2, 0): 97.0, (2, 1): 108.0, (2, 2): 112.0,
    (3, None): 95.0, (3, 0): 88.0, (3, 1): 99.0, (3, 2): 93.0,
}  # fmt: skip


def test_effects_are_paired_t_intervals_on_the_rounds_two_way_spread() -> None:
    effects = tps_effects(_figures(TABLE), FLAGS, AblationMode.LEAVE_ONE_OUT, block_size=3, prior=0.10, prior_df=2.0)
    logs = np.log([[TABLE[(r, a)] for a in (None, 0, 1, 2)] for r in (1, 2, 3)])
    residual = logs - logs.mean(axis=1, keepdims=True) - logs.mean(axis=0, keepdims=True) + logs.mean()
    df = 3 * 2 + 2.0
    sigma = math.sqrt(((residual**2).sum() + 0.10**2 * 2.0) / df)
    assert effects.spread.relative == pytest.approx(sigma)
    assert effects.spread.df == pytest.approx(df)
    level = 1 - 0.05 / 3
    assert effects.level == pytest.approx(level) == study_level(0.95, 3)
    t = stats.t.ppf(0.5 + level / 2, df)
    for arm in range(3):
        # leave-one-out from a manifest with the flag on: the effect is base / arm (1 over 0)
        d = (logs[:, 0] - logs[:, arm + 1]).mean()
        half = t * sigma * math.sqrt(2 / 3)
        interval = effects.effects[arm]
        assert interval.value == pytest.approx(math.exp(d))
        assert interval.low == pytest.approx(math.exp(d - half))
        assert interval.high == pytest.approx(math.exp(d + half))
        assert effects.pairs[arm] == 3
    assert effects.effects[0].value > 1.05  # F0 off reads about 9 % slower: F0 helps


def test_a_switch_that_never_started_fails_and_leaves_the_spread_to_the_others() -> None:
    table = {**TABLE, (1, 2): None, (2, 2): None, (3, 2): None}
    effects = tps_effects(_figures(table), FLAGS, AblationMode.LEAVE_ONE_OUT, block_size=3)
    assert effects.effects[2] is None and effects.pairs[2] == 0
    assert effects.failures[2] == ("oom", "oom", "oom")
    assert effects.spread.measured_df == 2 * 2  # base and two switches over three rounds
    reports = report_switches(effects, FLAGS, ppl={}, fidelity={}, control=None)
    assert reports[2].verdict is SwitchVerdict.FAILS_TO_START and reports[2].failures == ("oom", "oom", "oom")


def test_one_round_uses_the_prior_alone() -> None:
    table = {key: value for key, value in TABLE.items() if key[0] == 1}
    effects = tps_effects(_figures(table), FLAGS, AblationMode.ADD_ONE_IN, block_size=3, prior=0.1, prior_df=2.0)
    assert effects.spread.relative == pytest.approx(0.1) and effects.spread.measured_df == 0
    # add-one-in: the arm holds the subject, so the effect is arm / base
    assert effects.effects[0].value == pytest.approx(0.9)


def _interval(low: float, high: float) -> Interval:
    return Interval(value=math.sqrt(low * high), low=low, high=high, confidence=0.95, method="test", samples=2)


def test_speed_reads_the_interval_against_one() -> None:
    assert speed_of(_interval(1.01, 1.2)) is Speed.FASTER
    assert speed_of(_interval(0.8, 0.99)) is Speed.SLOWER
    assert speed_of(_interval(0.9, 1.1)) is Speed.NO_EFFECT
    assert speed_of(None) is Speed.UNMEASURED


def test_ppl_check_uses_the_paired_interval_and_a_floor_for_rounding() -> None:
    assert ppl_check(None, 0.95) == (PplCheck.NOT_MEASURED, None)
    higher = PairedPpl(log_ratio=0.02, stderr=0.005, records=16)
    state, interval = ppl_check(higher, 0.95)
    half = stats.t.ppf(0.975, 15) * 0.005
    assert state is PplCheck.HIGHER
    assert (interval.low, interval.high) == pytest.approx((math.exp(0.02 - half), math.exp(0.02 + half)))
    assert ppl_check(PairedPpl(log_ratio=-0.02, stderr=0.005, records=16), 0.95)[0] is PplCheck.LOWER
    assert ppl_check(PairedPpl(log_ratio=0.02, stderr=0.02, records=16), 0.95)[0] is PplCheck.SAME
    # a rounding-size change with a tiny standard error is the same PPL
    assert ppl_check(PairedPpl(log_ratio=1e-5, stderr=1e-7, records=16), 0.95)[0] is PplCheck.SAME


def _fidelity(identical: int, compared: int = 4) -> FidelityResult:
    return FidelityResult(compared=compared, identical=identical, divergences=(), duration_s=1.0)


def test_output_check_reads_the_base_s_own_control() -> None:
    assert output_check(_fidelity(4), _fidelity(4)) is OutputCheck.SAME
    assert output_check(_fidelity(3), _fidelity(4)) is OutputCheck.CHANGED
    assert output_check(_fidelity(3), None) is OutputCheck.CHANGED
    assert output_check(_fidelity(3), _fidelity(2)) is OutputCheck.NOT_DETERMINISTIC
    assert output_check(None, _fidelity(4)) is OutputCheck.NOT_MEASURED


@pytest.mark.parametrize(
    ("speed", "outputs", "ppl", "verdict"),
    [
        (Speed.FASTER, OutputCheck.SAME, PplCheck.SAME, SwitchVerdict.HELPS),
        (Speed.FASTER, OutputCheck.NOT_DETERMINISTIC, PplCheck.SAME, SwitchVerdict.HELPS),
        (Speed.FASTER, OutputCheck.CHANGED, PplCheck.SAME, SwitchVerdict.HELPS_CHANGES_OUTPUT),
        (Speed.FASTER, OutputCheck.SAME, PplCheck.HIGHER, SwitchVerdict.HELPS_CHANGES_OUTPUT),
        (Speed.FASTER, OutputCheck.SAME, PplCheck.LOWER, SwitchVerdict.HELPS_CHANGES_OUTPUT),
        (Speed.NO_EFFECT, OutputCheck.CHANGED, PplCheck.SAME, SwitchVerdict.NO_EFFECT),
        (Speed.SLOWER, OutputCheck.SAME, PplCheck.SAME, SwitchVerdict.HURTS),
        (Speed.UNMEASURED, OutputCheck.NOT_MEASURED, PplCheck.NOT_MEASURED, SwitchVerdict.FAILS_TO_START),
    ],
)
def test_judge_switch(speed, outputs, ppl, verdict) -> None:
    assert judge_switch(speed, outputs, ppl) is verdict


def test_export_sets_helps_on_and_hurts_off_and_leaves_no_effect_as_it_was() -> None:
    flag = Switch(key="F", subject="1", reference="0", manifest_value="0")
    assert export_value(flag, SwitchVerdict.HELPS) == "1"
    assert export_value(flag, SwitchVerdict.HELPS_CHANGES_OUTPUT) == "0"
    assert export_value(flag, SwitchVerdict.HELPS_CHANGES_OUTPUT, allow_output_change=True) == "1"
    assert export_value(flag, SwitchVerdict.HURTS) == "0"
    assert export_value(flag, SwitchVerdict.FAILS_TO_START) == "0"
    assert export_value(flag, SwitchVerdict.NO_EFFECT) == "0"
    absent = Switch(key="G", subject="1", reference="0", manifest_value=None)
    assert export_value(absent, SwitchVerdict.NO_EFFECT) is None


def test_a_stored_fidelity_result_reads_back_as_it_was_written() -> None:
    result = FidelityResult(
        compared=3,
        identical=1,
        divergences=(
            Divergence(id="p1", position=4, expected=17, actual=9),
            Divergence(id="p2", position=0, expected=3, actual=None),
        ),
        duration_s=0.75,
    )
    assert FidelityResult.from_dict(result.to_dict()) == result
