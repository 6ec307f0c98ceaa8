"""Under a relative cap the gate judges PPL / baseline PPL on the records both scored.

The organizers' re-run scores a configuration and the reference on the same
private records, so what the records share cancels in the ratio. The gate's
standard error comes from the per-record differences (``paired_stderr``);
checked here against the formula written out, and through ``run_study`` on a
real SQLite file with a landscape whose records vary a lot together and
little apart.
"""

from __future__ import annotations

import math
import random
import statistics
import sys
from pathlib import Path

import pytest
from scipy import stats

import sweeper
from evaluators.ppl_uncertainty import PplEstimate
from storage import TrialStore
from sweeper.study import Measurement, PplGate, StudyOptions, ppl_statement
from sweeper.study._gate import (
    BOUND_KEY,
    PAIRED_RECORDS_KEY,
    measured_uncertainty,
    paired_stderr,
    record_rows,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import toy  # noqa: E402

RECORDS, TOKENS = 32, 100
SHARED_SD, OWN_SD = 0.2, 0.002  # per record, of the mean log-likelihood per token
CAP_REL, CONFIDENCE = 1.05, 0.9


def _rows(nll_per_token: list[float]) -> list[dict]:
    return [
        {"kind": "ppl", "id": f"r{i}", "nll": TOKENS * value, "tokens": TOKENS} for i, value in enumerate(nll_per_token)
    ]


def test_paired_stderr_is_the_standard_error_of_the_mean_difference() -> None:
    rng = random.Random(1)
    base = [2.0 + rng.gauss(0, SHARED_SD) for _ in range(RECORDS)]
    other = [b + 0.03 + rng.gauss(0, OWN_SD) for b in base]
    paired = paired_stderr(record_rows(_rows(other)), record_rows(_rows(base)))
    assert paired is not None
    stderr, records = paired
    differences = [o - b for o, b in zip(other, base)]  # equal tokens: the plain mean's SE
    assert records == RECORDS
    assert stderr == pytest.approx(statistics.stdev(differences) / math.sqrt(RECORDS))
    # a trial judged against itself: nothing varies
    assert paired_stderr(record_rows(_rows(base)), record_rows(_rows(base))) == (0.0, RECORDS)
    # only records both scored count; other token counts or under 2 common: no figure
    few = paired_stderr(record_rows(_rows(other)[:5]), record_rows(_rows(base)))
    assert few is not None and few[1] == 5
    changed = _rows(other)
    changed[0]["tokens"] = TOKENS + 1
    assert paired_stderr(record_rows(changed), record_rows(_rows(base))) is None
    assert paired_stderr(record_rows(_rows(other)[:1]), record_rows(_rows(base))) is None


def test_the_paired_bound_replaces_the_quadrature_one() -> None:
    gate = PplGate(cap_rel=CAP_REL, confidence=CONFIDENCE)
    base = sweeper.study._gate.PplEstimate(ppl=2.30, stderr_log_ppl=0.03, records=RECORDS)
    cap = CAP_REL * 2.30
    quadrature = gate.judge_ppl(2.40, cap, stderr_log_ppl=0.03, records=RECORDS, reference=base)
    paired = gate.judge_ppl(2.40, cap, stderr_log_ppl=0.03, records=RECORDS, reference=base, paired=(0.001, RECORDS))
    z = stats.t.ppf(CONFIDENCE, RECORDS - 1)  # Student's t on the records' degrees of freedom
    # on as many fresh records as measured: the predictive SD is sqrt(2) times the SE
    assert paired.bound == pytest.approx(2.40 * math.exp(z * 0.001 * math.sqrt(2)))
    assert quadrature.bound == pytest.approx(2.40 * math.exp(z * math.hypot(0.03, 0.03) * math.sqrt(2)))
    assert paired.passes and not quadrature.passes
    # an absolute cap ignores the pairing
    absolute = PplGate(cap=cap, confidence=CONFIDENCE)
    assert absolute.judge_ppl(2.40, cap, stderr_log_ppl=0.03, records=RECORDS, paired=(0.001, RECORDS)).bound == (
        pytest.approx(2.40 * math.exp(z * 0.03 * math.sqrt(2)))
    )


def test_a_relative_confidence_gate_on_shared_records_passes_what_has_margin(tmp_path: Path) -> None:
    """Toy PPL 1 + 1/w; the baseline (w=16) 1.0625, so the cap 1.05 x 1.0625 passes w >= 9.
    Records vary by 0.2 together and 0.002 apart: judged in quadrature not even the
    baseline would pass a 90 % gate (its bound reads 9 % over its own PPL)."""
    rng = random.Random(7)
    shared = [rng.gauss(0, SHARED_SD) for _ in range(RECORDS)]

    def evaluate(params, context) -> Measurement:
        own = random.Random(hash((params["w"], params["k"], context.number)))
        values = [math.log(toy.ppl(params)) + s + own.gauss(0, OWN_SD) for s in shared]
        rows = _rows(values)
        ppl = math.exp(sum(r["nll"] for r in rows) / (RECORDS * TOKENS))
        return Measurement(tps=toy.tps(params), ppl=ppl, requests=rows)

    storage = str(tmp_path / "paired.db")
    sweeper.run_study(
        toy.SPACE,
        evaluate,
        StudyOptions(
            study_name="paired",
            storage=storage,
            n_trials=10,
            gate=PplGate(cap_rel=CAP_REL, confidence=CONFIDENCE),
            sampler="guided",
            seed=0,
            handle_signals=False,
            enqueue=[{"w": 9, "k": 4}, {"w": 8, "k": 4}],
        ),
    )
    records = [r for r in TrialStore(storage).records("paired", details=True) if r.state == "complete"]
    assert {9, 8, 16} <= {r.params["w"] for r in records}
    z = stats.t.ppf(CONFIDENCE, RECORDS - 1)
    baseline = next(r for r in records if r.params == {"w": 16, "k": 1})
    base_nll = {row["id"]: row["nll"] / TOKENS for row in baseline.requests if row.get("kind") == "ppl"}
    for record in records:
        own = {row["id"]: row["nll"] / TOKENS for row in record.requests if row.get("kind") == "ppl"}
        differences = [own[k] - base_nll[k] for k in sorted(own)]
        sd = statistics.stdev(differences) / math.sqrt(RECORDS) * math.sqrt(2)
        assert record.ppl is not None
        assert record.extras[BOUND_KEY] == pytest.approx(record.ppl * math.exp(z * sd), rel=1e-9)
        assert record.feasible == (record.params["w"] >= 9), record.params
    assert baseline.extras[BOUND_KEY] == pytest.approx(baseline.ppl)
    # what the quadrature would have made of the baseline against itself: over the cap
    own_se = statistics.stdev(base_nll.values()) / math.sqrt(RECORDS)
    assert baseline.ppl is not None
    quadrature_bound = baseline.ppl * math.exp(z * own_se * math.sqrt(2) * math.sqrt(2))
    assert quadrature_bound > CAP_REL * baseline.ppl


def test_rows_without_ids_keep_their_standard_error_but_cannot_be_paired(caplog) -> None:
    rng = random.Random(4)
    values = [2.0 + rng.gauss(0, SHARED_SD) for _ in range(RECORDS)]
    anonymous = [{k: v for k, v in row.items() if k != "id"} for row in _rows(values)]
    stderr, records = measured_uncertainty({}, anonymous)
    assert records == RECORDS
    assert stderr == pytest.approx(statistics.stdev(values) / math.sqrt(RECORDS))  # equal tokens
    with caplog.at_level("WARNING"):
        assert record_rows(anonymous) == {}
    assert "cannot be paired" in caplog.text
    twice = _rows(values)
    twice[1]["id"] = twice[0]["id"]
    assert record_rows(twice) == {} and measured_uncertainty({}, twice)[1] == RECORDS


def test_the_paired_interval_decides_within_noise_and_its_records_are_stored() -> None:
    gate = PplGate(cap_rel=CAP_REL, confidence=CONFIDENCE)
    base = PplEstimate(ppl=2.30, stderr_log_ppl=0.03, records=RECORDS)
    settings = {
        "ppl_cap_rel": CAP_REL,
        "reference_ppl": 2.30,
        "reference_stderr_log_ppl": 0.03,
        "reference_ppl_records": RECORDS,
        "ppl_confidence": CONFIDENCE,
    }
    cap = CAP_REL * 2.30
    # the baseline judged against itself: its own interval holds the cap, the paired one is a point
    itself = gate.judge_ppl(2.30, cap, stderr_log_ppl=0.03, records=RECORDS, reference=base, paired=(0.0, RECORDS))
    assert itself.extras()[PAIRED_RECORDS_KEY] == RECORDS
    shown = ppl_statement(2.30, itself.extras(), cap, settings)
    assert shown is not None and shown.low is not None and shown.high is not None
    assert shown.low < cap < shown.high  # 2.30 x exp(+-t 0.03): the records' own noise
    assert not shown.within_noise and shown.pass_probability == 1.0
    # a trial near the cap, paired on 20 of the records: its figures rest on those 20
    near = gate.judge_ppl(2.40, cap, stderr_log_ppl=0.03, records=RECORDS, reference=base, paired=(0.004, 20))
    assert near.extras()[PAIRED_RECORDS_KEY] == 20
    half = stats.t.ppf(0.975, 20 - 1) * 0.004
    assert 2.40 * math.exp(-half) < cap < 2.40 * math.exp(half)
    stored = ppl_statement(2.40, near.extras(), cap, settings)
    assert stored is not None
    assert stored.within_noise
    assert (stored.noise_low, stored.noise_high) == pytest.approx((2.40 * math.exp(-half), 2.40 * math.exp(half)))
    # recomputed (another re-run size) the same way the gate computed it: t on 19 df
    again = ppl_statement(2.40, near.extras(), cap, settings, new_records=10)
    sd = 0.004 * math.sqrt(1 + 20 / 10)
    assert again is not None
    assert again.pass_probability == pytest.approx(stats.t.cdf(math.log(cap / 2.40) / sd, 19), rel=1e-9)
    # a trial judged before the records were stored: the trial's own records stand in
    older = {k: v for k, v in near.extras().items() if k != PAIRED_RECORDS_KEY}
    sd_old = 0.004 * math.sqrt(1 + RECORDS / 10)
    judged_before = ppl_statement(2.40, older, cap, settings, new_records=10)
    assert judged_before is not None
    assert judged_before.pass_probability == pytest.approx(
        stats.t.cdf(math.log(cap / 2.40) / sd_old, RECORDS - 1), rel=1e-9
    )


def test_the_gate_describes_its_level_without_rounding() -> None:
    assert PplGate(cap=2.42, confidence=0.995).describe() == ("PPL <= 2.42 at 99.5 % confidence on as many new records")
    assert PplGate(cap_rel=1.05, confidence=0.9, rerun_records=16).describe() == (
        "PPL <= 1.05 x baseline PPL at 90 % confidence on 16 new records"
    )
