"""`sweeper run --noise 0.02 --verify-top 1`: verify judges the held-out speedup with the
study's own noise prior, not verify's default.

The CLI runs as a user types it (real prepare on the demo's manifest and data, real
SQLite and Optuna); only the servers are scripted: the study's evaluator and the
held-out one read 8 % faster for the tuned configuration than for the base, with a
spread of 0.5 % between "servers". With the prior at 0.02 the held-out speedup is
confirmed; at verify's old default of 0.10 (as 2 degrees of freedom) it would not be.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Mapping
from typing import Any

from scipy import stats

from storage import VerificationStore, study_status
from sweeper.answer import _heldout, judge_candidate
from sweeper.cli import main, run_cmd
from sweeper.study import Measurement

BASE_PARAMS = {"sliding_window": 32, "centroid_top_k": 8, "num_speculative_tokens": 1}  # the demo manifest's
TUNED = {"sliding_window": 32, "centroid_top_k": 8, "num_speculative_tokens": 3}
WOBBLE = (1.0, 1.005, 0.995, 1.003, 0.997, 1.004, 0.996)  # one server's reading against the next


class Servers:
    """The scripted servers: the base reads 100 tok/s, any other configuration 108."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, params: Mapping[str, Any], context: Any) -> Measurement:
        factor = WOBBLE[self.calls % len(WOBBLE)]
        self.calls += 1
        tps = (100.0 if dict(params) == BASE_PARAMS else 108.0) * factor
        return Measurement(tps=tps, ppl=2.15, phases={"tps": 1.0})


def interval_with_prior(candidate: list[float], base: list[float], prior: float, prior_df: float):
    """The held-out speedup's 95 % interval, by hand: the log TPS of both sides pooled with
    the prior's weight, a two-sample t-interval, exponentiated."""
    logs = [[math.log(x) for x in side] for side in (candidate, base)]
    squares = prior**2 * prior_df + sum(sum((x - sum(g) / len(g)) ** 2 for x in g) for g in logs)
    df = prior_df + sum(len(g) - 1 for g in logs)
    middle = sum(logs[0]) / len(logs[0]) - sum(logs[1]) / len(logs[1])
    half = stats.t.ppf(0.975, df) * math.sqrt(squares / df) * math.sqrt(1 / len(candidate) + 1 / len(base))
    return math.exp(middle), math.exp(middle - half), math.exp(middle + half)


def test_run_verify_top_judges_the_heldout_speedup_with_the_studys_noise(monkeypatch, capsys, tmp_path) -> None:
    servers = Servers()
    real_prepare = run_cmd.prepare
    monkeypatch.setattr(run_cmd, "prepare", lambda plan: dataclasses.replace(real_prepare(plan), evaluator=servers))
    monkeypatch.setattr(_heldout, "heldout_evaluator", lambda recipe, **_: (servers, {}))
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    args = ["sweeper", "run", "--storage", url, "--run-dir", str(tmp_path / "runs"), "--n-trials", "2"]
    args += ["--noise", "0.02", "--verify-top", "1", "--plain", "--json"]
    args += ["--enqueue", ",".join(f"{k}={v}" for k, v in TUNED.items())]
    monkeypatch.setattr(sys, "argv", args)
    main()
    out = json.loads(capsys.readouterr().out)
    assert out["settings"]["noise"] == 0.02  # stored under its one name
    status = study_status(url)
    with VerificationStore(url) as store:
        (verification,) = store.records(status.study_name)
    assert dict(verification.params) == TUNED and verification.noise == 0.02
    candidate = [r.tps for r in verification.runs]
    base = [r.tps for r in verification.base_runs]
    assert len(candidate) == len(base) == 3
    value, low, high = interval_with_prior(candidate, base, 0.02, 2.0)
    assert math.isclose(verification.speedup, value, rel_tol=1e-9)
    assert math.isclose(verification.speedup_low, low, rel_tol=1e-9)
    assert math.isclose(verification.speedup_high, high, rel_tol=1e-9)
    assert verification.status == "verified" and low > 1.0
    # the verdict turns on the prior: verify's old default would not have confirmed it
    assert interval_with_prior(candidate, base, 0.10, 2.0)[1] < 1.0
    wide = judge_candidate(
        tuned_tps=verification.tuned_tps,
        ppl_cap=verification.ppl_cap,
        runs=verification.runs,
        base_runs=verification.base_runs,
        tolerance=verification.tolerance,
        repeats=verification.repeats,
        claimed_speedup=True,
    )
    assert wide.status == "failed" and "held-out speedup over the base" in wide.reason
