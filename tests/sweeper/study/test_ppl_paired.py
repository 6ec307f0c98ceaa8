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

import sweeper
from storage import TrialStore
from sweeper.study import Measurement, PplGate
from sweeper.study._gate import BOUND_KEY, paired_stderr, record_rows

sys.path.insert(0, str(Path(__file__).resolve().parent))
import toy  # noqa: E402

RECORDS, TOKENS = 32, 100
SHARED_SD, OWN_SD = 0.2, 0.002  # per record, of the mean log-likelihood per token
CAP_REL, CONFIDENCE = 1.05, 0.9


def _rows(nll_per_token: list[float]) -> list[dict]:
    return [
        {"kind": "ppl", "id": f"r{i}", "nll": TOKENS * value, "tokens": TOKENS}
        for i, value in enumerate(nll_per_token)
    ]


def test_paired_stderr_is_the_standard_error_of_the_mean_difference() -> None:
    rng = random.Random(1)
    base = [2.0 + rng.gauss(0, SHARED_SD) for _ in range(RECORDS)]
    other = [b + 0.03 + rng.gauss(0, OWN_SD) for b in base]
    stderr, records = paired_stderr(record_rows(_rows(other)), record_rows(_rows(base)))
    differences = [o - b for o, b in zip(other, base)]  # equal tokens: the plain mean's SE
    assert records == RECORDS
    assert stderr == pytest.approx(statistics.stdev(differences) / math.sqrt(RECORDS))
    # a trial judged against itself: nothing varies
    assert paired_stderr(record_rows(_rows(base)), record_rows(_rows(base))) == (0.0, RECORDS)
    # only records both scored count; other token counts or under 2 common: no figure
    assert paired_stderr(record_rows(_rows(other)[:5]), record_rows(_rows(base)))[1] == 5
    changed = _rows(other)
    changed[0]["tokens"] = TOKENS + 1
    assert paired_stderr(record_rows(changed), record_rows(_rows(base))) is None
    assert paired_stderr(record_rows(_rows(other)[:1]), record_rows(_rows(base))) is None


def test_the_paired_bound_replaces_the_quadrature_one() -> None:
    gate = PplGate(cap_rel=CAP_REL, confidence=CONFIDENCE)
    base = sweeper.study._gate.PplEstimate(ppl=2.30, stderr_log_ppl=0.03, records=RECORDS)
    cap = CAP_REL * 2.30
    quadrature = gate.judge(2.40, cap, stderr_log_ppl=0.03, records=RECORDS, reference=base)
    paired = gate.judge(
        2.40, cap, stderr_log_ppl=0.03, records=RECORDS, reference=base, paired=(0.001, RECORDS)
    )
    z = statistics.NormalDist().inv_cdf(CONFIDENCE)
    # on as many fresh records as measured: the predictive SD is sqrt(2) times the SE
    assert paired.bound == pytest.approx(2.40 * math.exp(z * 0.001 * math.sqrt(2)))
    assert quadrature.bound == pytest.approx(2.40 * math.exp(z * math.hypot(0.03, 0.03) * math.sqrt(2)))
    assert paired.passes and not quadrature.passes
    # an absolute cap ignores the pairing
    absolute = PplGate(cap=cap, confidence=CONFIDENCE)
    assert absolute.judge(2.40, cap, stderr_log_ppl=0.03, records=RECORDS, paired=(0.001, RECORDS)).bound == (
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
        toy.SPACE, evaluate, study_name="paired", storage=storage, n_trials=10,
        ppl_cap_rel=CAP_REL, ppl_confidence=CONFIDENCE, sampler="guided", seed=0,
        handle_signals=False, enqueue=[{"w": 9, "k": 4}, {"w": 8, "k": 4}],
    )  # fmt: skip
    records = [r for r in TrialStore(storage).records("paired", details=True) if r.state == "complete"]
    assert {9, 8, 16} <= {r.params["w"] for r in records}
    z = statistics.NormalDist().inv_cdf(CONFIDENCE)
    baseline = next(r for r in records if r.params == {"w": 16, "k": 1})
    base_nll = {row["id"]: row["nll"] / TOKENS for row in baseline.requests if row.get("kind") == "ppl"}
    for record in records:
        own = {row["id"]: row["nll"] / TOKENS for row in record.requests if row.get("kind") == "ppl"}
        differences = [own[k] - base_nll[k] for k in sorted(own)]
        sd = statistics.stdev(differences) / math.sqrt(RECORDS) * math.sqrt(2)
        assert record.extras[BOUND_KEY] == pytest.approx(record.ppl * math.exp(z * sd), rel=1e-9)
        assert record.feasible == (record.params["w"] >= 9), record.params
    assert baseline.extras[BOUND_KEY] == pytest.approx(baseline.ppl)
    # what the quadrature would have made of the baseline against itself: over the cap
    own_se = statistics.stdev(base_nll.values()) / math.sqrt(RECORDS)
    quadrature_bound = baseline.ppl * math.exp(z * own_se * math.sqrt(2) * math.sqrt(2))
    assert quadrature_bound > CAP_REL * baseline.ppl
