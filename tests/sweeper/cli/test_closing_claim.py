"""The claim line of ``sweeper run``'s closing block, one case of the standing's claim each: no
base measured, the base itself the answer, a speedup confirmed in paired rounds or read from
unraced servers, one not distinguishable from the base, and a race still open. The figures are
the geometric means of the readings, computed here by hand."""

from __future__ import annotations

import datetime
import math

import pytest

from storage import TrialRecord
from storage.testing import trial_record
from sweeper.cli._run_summary import claim_line
from sweeper.study import Claim, ConfirmSettings, confirmation_role, standing

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
BASE = {"c": 0}
RACED = ConfirmSettings(rounds=2, noise=0.10, prior_df=50.0)
UNRACED = ConfirmSettings(rounds=0, noise=0.10)


def record(number: int, params: dict, tps: float, *, role: str = "sampled") -> TrialRecord:
    return trial_record(number, role=role, params=params, tps=tps, started_at=NOW, heartbeat_at=NOW, finished_at=NOW)


def with_rounds(first: float, pairs: list[tuple[float, float]]) -> list[TrialRecord]:
    """The base (100), a contender read at ``first``, then its race rounds (contender, base)."""
    records = [record(0, BASE, 100.0, role="baseline"), record(1, {"c": 1}, first)]
    for n, (contender, base) in enumerate(pairs, start=1):
        role = confirmation_role(1, n)
        records += [record(2 * n, {"c": 1}, contender, role=role), record(2 * n + 1, BASE, base, role=role)]
    return records


def percent(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f} %"


def geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


@pytest.mark.parametrize("settings", [RACED, UNRACED], ids=["raced", "unraced"])
def test_no_base_measured_and_the_base_as_the_answer_claim_nothing(settings: ConfirmSettings) -> None:
    alone = standing([record(0, {"c": 1}, 120.0)], settings)
    assert alone.claim is Claim.NONE
    assert claim_line(alone) == "claim: none - the base manifest was not measured, so no speedup can be stated"
    base_best = standing([record(0, BASE, 100.0, role="baseline"), record(1, {"c": 1}, 60.0)], settings)
    assert base_best.claim is Claim.BASE
    assert claim_line(base_best) == "claim: none - no configuration was confirmed faster than the base manifest"


def test_a_speedup_confirmed_in_paired_rounds_is_their_geometric_mean_at_the_study_wise_level() -> None:
    now = standing(with_rounds(160.0, [(131.0, 100.0), (129.0, 99.0)]), RACED)
    assert now.claim is Claim.FASTER
    claim = geometric_mean([131.0 / 100.0, 129.0 / 99.0])  # the selecting reading (160) left out
    assert claim_line(now).startswith(f"claim: {percent(claim)} faster than the base (study-wise 95 % interval ")


def test_unraced_figures_claim_over_every_reading_and_say_when_the_interval_holds_one() -> None:
    faster = standing(with_rounds(160.0, [(131.0, 100.0), (129.0, 99.0)]), UNRACED)
    claim = geometric_mean([160.0, 131.0, 129.0]) / geometric_mean([100.0, 100.0, 99.0])
    assert faster.claim is Claim.FASTER
    assert claim_line(faster).startswith(f"claim: {percent(claim)} faster than the base (95 % interval ")
    close = standing([record(0, BASE, 100.0, role="baseline"), record(1, {"c": 1}, 104.0)], UNRACED)
    assert close.claim is Claim.INDISTINCT
    assert claim_line(close).startswith(f"claim: none - {percent(1.04)} is not distinguishable from the base (95 % ")


def test_an_open_race_is_said() -> None:
    now = standing([record(0, BASE, 100.0, role="baseline"), record(1, {"c": 1}, 104.0)], RACED)
    assert not now.confirmed
    assert claim_line(now) == (
        "claim: none - no configuration was confirmed faster than the base manifest; a race is still open"
    )
