"""What verify takes the study to claim of each candidate: the standing decides it, for the
confirmed best and for the runners-up alike (``Standing.claim_of``)."""

from __future__ import annotations

import datetime
import math

import pytest

from storage import TrialRecord
from storage.testing import trial_record
from sweeper.answer import VerifySettings
from sweeper.answer._verify import _plan
from sweeper.answer._verify_settings import base_configuration
from sweeper.study import Claim, ConfirmSettings, confirmation_role, standing

NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)
BASE = {"c": 0}
PLAIN = ConfirmSettings(rounds=0)
RACING = ConfirmSettings(rounds=2, noise=0.10, prior_df=2.0)


def record(
    number: int, params: dict, tps: float | None, *, role: str = "sampled", ppl: float = 1.1, state: str = "complete"
) -> TrialRecord:
    complete = state == "complete"
    return trial_record(
        number,
        state=state,
        role=role,
        params=params,
        overrides={} if params == BASE else {"C": str(params["c"])},
        tps=tps,
        ppl=ppl if complete else None,
        feasible=(ppl <= 1.2) if complete else None,
    )


def claimed(records: list[TrialRecord], settings: ConfirmSettings) -> dict[int, bool]:
    """verify's claim for each gate-passing configuration's first trial, as it plans it."""
    now = standing(records, settings)
    base = base_configuration(records)
    by_number = {r.number: r for r in records}
    return {
        config.first: _plan(by_number[config.first], base, VerifySettings(), now, None, None).claimed_speedup
        for config in now.configurations
    }


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def test_runners_up_are_claimed_faster_when_they_measured_above_the_base_s_own_first_figure() -> None:
    records = [
        record(0, BASE, 100.0, role="baseline"),
        record(1, {"c": 1}, 112.0),
        record(2, {"c": 2}, 104.0),
        record(3, {"c": 3}, 96.0),
    ]
    # races off: trial 1 is the incumbent, +12 % on one figure a side is not distinguishable
    # from the base (the standing's claim), so no speedup is claimed for it; the others
    # are claimed faster exactly when their figure is above the base's 100
    assert standing(records, PLAIN).claim is Claim.INDISTINCT
    assert claimed(records, PLAIN) == {0: False, 1: False, 2: True, 3: False}


def test_a_runner_up_is_compared_with_the_base_s_first_figure_not_its_re_measurements() -> None:
    role = confirmation_role(1, 1)
    records = [
        record(0, BASE, 100.0, role="baseline"),
        record(1, {"c": 1}, 150.0),
        record(2, {"c": 2}, 97.0),
        record(3, {"c": 2}, 98.0),
        record(4, {"c": 1}, 150.0, role=role),
        record(5, BASE, 80.0, role=role),
    ]
    # trial 2's configuration reads 97.5 over two servers: above the base's geometric mean
    # (89.4) but not above its own first figure (100), which is what verify compares with
    assert geomean([100.0, 80.0]) < geomean([97.0, 98.0]) < 100.0
    assert claimed(records, RACING)[2] is False


def test_nothing_is_claimed_against_a_base_over_the_cap_and_everything_against_an_unmeasured_one() -> None:
    over = [record(0, BASE, 100.0, role="baseline", ppl=1.3), record(1, {"c": 1}, 150.0), record(2, {"c": 2}, 90.0)]
    assert claimed(over, PLAIN) == {1: False, 2: False}
    assert claimed(over, RACING) == {1: False, 2: False}
    failed = [record(0, BASE, None, role="baseline", state="failed"), record(1, {"c": 1}, 150.0)]
    failed.append(record(2, {"c": 2}, 90.0))
    # no figure of the base to compare with: the study puts its configurations forward as
    # faster, and only the control measured beside them on held-out data can tell
    assert claimed(failed, PLAIN) == {1: True, 2: True}


@pytest.mark.parametrize("settings", [PLAIN, RACING])
def test_the_confirmed_best_carries_the_standing_s_claim(settings: ConfirmSettings) -> None:
    records = [record(0, BASE, 100.0, role="baseline"), record(1, {"c": 1}, 300.0)]
    role = confirmation_role(1, 1)
    records += [record(2, {"c": 1}, 300.0, role=role), record(3, BASE, 100.0, role=role)]
    role = confirmation_role(1, 2)
    records += [record(4, BASE, 101.0, role=role), record(5, {"c": 1}, 299.0, role=role)]
    now = standing(records, settings)
    assert now.incumbent is not None and now.incumbent.first == 1
    # 3x on four servers a side (or three rounds of pairs) is clearly faster
    assert now.claim is Claim.FASTER
    assert claimed(records, settings) == {0: False, 1: True}
    assert now.claim_of(1) is Claim.FASTER and now.claim_of(0) is Claim.BASE
