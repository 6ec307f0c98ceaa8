"""PPL on records not seen: the standard error, the pass probability and its coverage."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from scipy import stats

from evaluators import (
    PplEstimate,
    PplResult,
    PplSettings,
    RecordScore,
    bootstrap_pass_probability,
    load_ppl_records,
    paired_log_ppl,
    pass_probability,
    record_stderr,
)


def _scores(seed: int, count: int) -> list[RecordScore]:
    rng = random.Random(seed)
    scores = []
    for i in range(count):
        tokens = rng.randint(80, 400)
        scores.append(RecordScore(id=str(i), nll=tokens * rng.gauss(0.9, 0.12), tokens=tokens))
    return scores


def test_stderr_is_the_ratio_estimators_without_the_file_correction():
    scores = [RecordScore(id="a", nll=10.0, tokens=10), RecordScore(id="b", nll=90.0, tokens=30)]
    mean = 100.0 / 40.0
    residuals = [10.0 - mean * 10, 90.0 - mean * 30]
    expected = math.sqrt(sum(r * r for r in residuals) / 1 / 2) / 20.0
    assert record_stderr(scores) == pytest.approx(expected)
    assert record_stderr(scores[:1]) == math.inf
    assert record_stderr([*scores, RecordScore(id="c", nll=math.inf, tokens=3)]) == math.inf


def test_a_complete_result_keeps_a_stderr_for_new_records():
    scores = tuple(_scores(1, 32))
    running_nll = sum(s.nll for s in scores)
    tokens = sum(s.tokens for s in scores)
    result = PplResult(
        settings=PplSettings(),
        ppl=math.exp(running_nll / tokens),
        nll=running_nll,
        tokens=tokens,
        records_scored=32,
        records_total=32,
        stopped_early=False,
        ppl_low=0.0,
        ppl_high=0.0,
        stderr_log_ppl=0.0,
        scores=scores,
        duration_s=0.0,
    )
    assert result.stderr_log_ppl == 0.0  # the file's own PPL is known exactly
    assert result.stderr_log_ppl_records == pytest.approx(record_stderr(scores))
    assert result.to_dict()["stderr_log_ppl_records"] == pytest.approx(record_stderr(scores))


def test_pass_probability_values():
    # at the cap one half; the new set's scatter adds sqrt(1 + m/k)
    assert pass_probability(2.42, 0.01, 32, 2.42, 16) == pytest.approx(0.5)
    sd = 0.01 * math.sqrt(1 + 32 / 16)
    # Student's t on the 32 records' 31 degrees of freedom
    expected = stats.t.cdf(math.log(2.42 / 2.401) / sd, 31)
    assert pass_probability(2.401, 0.01, 32, 2.42, 16) == pytest.approx(expected)
    assert pass_probability(2.401, 0.01, 32, 2.42) == pytest.approx(stats.t.cdf(math.log(2.42 / 2.401) / 0.01, 31))
    assert expected < statistics.NormalDist().cdf(math.log(2.42 / 2.401) / sd)  # t is the more cautious
    assert pass_probability(math.inf, 0.01, 32, 2.42, 16) == 0.0
    assert pass_probability(2.40, 0.0, 32, 2.42, 16) == 1.0
    assert pass_probability(2.44, 0.0, 32, 2.42, 16) == 0.0
    estimate = PplEstimate(ppl=2.401, stderr_log_ppl=0.004, records=16)
    assert estimate.describe(2.42, 16) == (
        "PPL 2.4010; on 16 new records of this kind, under 2.42 with probability "
        f"{estimate.pass_probability(2.42, 16):.2f}"
    )
    upper = estimate.upper(0.9, 16)
    assert estimate.pass_probability(upper, 16) == pytest.approx(0.9)


@pytest.mark.parametrize("cap_sds", [-1.0, 0.0, 0.5, 1.0, 2.0])
def test_the_formula_agrees_with_a_bootstrap(cap_sds: float):
    scores = _scores(7, 40)
    estimate = PplEstimate.from_scores(scores)
    cap = estimate.ppl * math.exp(cap_sds * estimate.sd(20))
    formula = estimate.pass_probability(cap, 20)
    bootstrap = bootstrap_pass_probability(scores, cap, 20, draws=4000, seed=3)
    assert bootstrap == pytest.approx(formula, abs=0.03)


@pytest.fixture(scope="module")
def demo_scores(demo, transformers_nll) -> list[RecordScore]:
    """The demo model's real per-record scores over its 48 PPL records (transformers, CPU)."""
    records = [*load_ppl_records(str(demo.ppl_tuning)), *load_ppl_records(str(demo.ppl_heldout))]
    nll = transformers_nll(demo.model, records)
    return [RecordScore(id=r.id, nll=nll[r.id], tokens=r.scored_tokens) for r in records]


@pytest.mark.parametrize("confidence", [0.8, 0.9, 0.95])
def test_the_bound_covers_held_out_records_at_its_level(demo_scores, confidence):
    """Split the real records 3000 ways into 32 tuning and 16 held-out records: the
    tuning records' upper bound for 16 new records holds on the held-out ones as
    often as its level says (binomial SD at 3000 splits: under 0.8 %)."""
    rng = random.Random(18)
    held = 0
    splits = 3000
    for _ in range(splits):
        order = rng.sample(demo_scores, len(demo_scores))
        tuning, heldout = order[:32], order[32:]
        estimate = PplEstimate.from_scores(tuning)
        bound = estimate.upper(confidence, len(heldout))
        assert bound == pytest.approx(estimate.ppl * math.exp(stats.t.ppf(confidence, 31) * estimate.sd(len(heldout))))
        held += PplEstimate.from_scores(heldout).ppl <= bound
    assert held / splits == pytest.approx(confidence, abs=0.035)


def test_paired_log_ppl_is_the_log_ratio_over_common_records_with_the_differences_stderr():
    base = {s.id: s for s in _scores(3, 12)}
    rng = random.Random(9)
    other = {
        k: RecordScore(id=k, nll=s.nll + s.tokens * rng.gauss(0.02, 0.01), tokens=s.tokens) for k, s in base.items()
    }
    other["extra"] = RecordScore(id="extra", nll=5.0, tokens=5)
    paired = paired_log_ppl(other, base)
    common = sorted(base)
    tokens = sum(base[k].tokens for k in common)
    expected = sum(other[k].nll for k in common) / tokens - sum(base[k].nll for k in common) / tokens
    assert paired.records == 12
    assert paired.log_ratio == pytest.approx(expected)
    diffs = [RecordScore(id=k, nll=other[k].nll - base[k].nll, tokens=base[k].tokens) for k in common]
    assert paired.stderr == pytest.approx(record_stderr(diffs))
    interval = paired.interval(0.9)
    half = stats.t.ppf(0.95, 11) * paired.stderr
    assert (interval.low, interval.value, interval.high) == pytest.approx(
        (math.exp(expected - half), math.exp(expected), math.exp(expected + half))
    )
    assert paired_log_ppl(base, base).stderr == 0.0
    assert paired_log_ppl({"a": base[common[0]]}, base) is None  # one common record
    shifted = {**other, common[0]: RecordScore(id=common[0], nll=1.0, tokens=base[common[0]].tokens + 1)}
    assert paired_log_ppl(shifted, base) is None  # a record scored over other tokens
