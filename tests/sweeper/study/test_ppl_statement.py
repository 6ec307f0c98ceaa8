"""A PPL as the user reads it (``ppl_statement``): its interval and the chance a re-run passes.

The figures are checked against the formulas written out here with scipy (an independent
computation of Student's t quantiles and tail, on the records' degrees of freedom), for a trial's stored gate figures, for a
verification repeat's (which stores only its standard error) and under a relative cap
(the baseline's record noise added in quadrature, as the gate judges).
"""

from __future__ import annotations

import math

import pytest
from scipy import stats

from evaluators.ppl_uncertainty import PplEstimate
from sweeper.study import PplGate, ppl_statement, probability_text


def expected(ppl: float, se: float, m: int, cap: float, k: int, reference: tuple[float, int] | None = None):
    t = stats.t.ppf(0.975, m - 1)
    sd, df = se * math.sqrt(1 + m / k), m - 1
    if reference is not None:
        sd = math.hypot(sd, reference[0] * math.sqrt(1 + reference[1] / k))
        df = min(m, reference[1]) - 1
    return ppl * math.exp(-t * se), ppl * math.exp(t * se), stats.t.cdf(math.log(cap / ppl) / sd, df)


def test_a_repeat_with_its_standard_error_gets_the_interval_and_the_chance_on_the_records_scored() -> None:
    extras = {"ppl_stderr_records": 0.02, "ppl_records": 16}
    statement = ppl_statement(2.40, extras, 2.42)
    low, high, chance = expected(2.40, 0.02, 16, 2.42, 16)
    assert statement is not None
    assert (statement.low, statement.high) == pytest.approx((low, high), rel=1e-12)
    assert statement.pass_probability == pytest.approx(chance, rel=1e-12)
    assert statement.rerun_records == 16 and statement.within_noise
    assert statement.text() == (
        f"PPL 2.4000 (95 % interval {low:.4f}-{high:.4f} over 16 records); on 16 new records of "
        f"this kind, under 2.4200 with probability {chance:.2f}"
    )
    # the study's gate says how many records its re-run has
    on_64 = ppl_statement(2.40, extras, 2.42, {"ppl_cap": 2.42, "ppl_rerun_records": 64})
    assert on_64 is not None
    assert on_64.pass_probability == pytest.approx(expected(2.40, 0.02, 16, 2.42, 64)[2], rel=1e-12)
    assert on_64.rerun_records == 64


def test_a_trial_shows_the_gates_own_figure_and_a_relative_cap_adds_the_baselines_noise() -> None:
    gate = PplGate(cap_rel=1.05, confidence=0.9, rerun_records=8)
    base = PplEstimate(ppl=2.00, stderr_log_ppl=0.015, records=32)
    verdict = gate.judge_ppl(2.05, 2.10, stderr_log_ppl=0.02, records=32, reference=base)
    settings = {
        "ppl_cap_rel": 1.05,
        "reference_ppl": 2.0,
        "reference_stderr_log_ppl": 0.015,
        "reference_ppl_records": 32,
        "ppl_confidence": 0.9,
        "ppl_rerun_records": 8,
    }
    stored = ppl_statement(2.05, verdict.extras(), 2.10, settings)
    computed = ppl_statement(2.05, {"ppl_stderr_records": 0.02, "ppl_records": 32}, 2.10, settings)
    chance = expected(2.05, 0.02, 32, 2.10, 8, reference=(0.015, 32))[2]
    assert stored is not None and computed is not None
    assert stored.pass_probability == pytest.approx(chance, rel=1e-12)
    assert computed.pass_probability == pytest.approx(chance, rel=1e-12)
    assert stored.text().endswith(
        f"on 8 new records of this kind, under 2.1000 with probability {chance:.2f} "
        "(the baseline's record noise included)"
    )


def test_without_per_record_scores_there_is_no_interval_and_no_promise() -> None:
    statement = ppl_statement(2.1, {}, 2.42)
    assert statement is not None
    assert not statement.known and not statement.within_noise and statement.pass_probability is None
    assert statement.text() == "PPL 2.1000 (no interval: no per-record scores)"
    infinite = ppl_statement(math.inf, {"ppl_stderr_records": 0.1, "ppl_records": 8}, 2.42)
    assert infinite is not None and infinite.text() == "PPL inf (no interval: a non-finite logprob)"
    assert ppl_statement(None, {}, 2.42) is None


def test_a_cap_outside_the_interval_is_not_within_noise_and_certainty_is_not_printed_as_1() -> None:
    far = ppl_statement(2.0, {"ppl_stderr_records": 0.01, "ppl_records": 64}, 2.42)
    assert far is not None
    assert not far.within_noise
    assert "with probability above 0.99" in far.text()
    assert [probability_text(p) for p in (0.9951, 0.5, 0.004)] == ["above 0.99", "0.50", "below 0.01"]
    assert far.to_dict()["within_noise"] is False and far.to_dict()["text"] == far.text()
