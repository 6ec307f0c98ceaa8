"""Confirmation races: the standing replayed from trials, the tie rule, and races in a noisy study."""

from __future__ import annotations

import datetime
import math
import random
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import sweeper
from search_spaces import space_from_dict
from storage import TrialRecord
from storage.testing import trial_record
from sweeper.study import (
    CONFIRM_ROLE,
    Claim,
    ConfirmSettings,
    Measurement,
    Outcome,
    PplGate,
    StudyOptions,
    confirmation_role,
    distance_to_base,
    standing,
)
from sweeper.study._race_decision import claim_confidence, race_confidence
from sweeper.study._race_settings import ConfirmSettingsError
from sweeper.sweep._plan import CONFIRM_ROUNDS

NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)


def record(
    number: int, params: Mapping[str, Any], tps: float | None, *, role: str = "sampled", ppl: float = 1.1
) -> TrialRecord:
    return trial_record(number, role=role, params=params, tps=tps, ppl=ppl, feasible=ppl <= 1.2)


BASE = {"c": 0}
RACING = ConfirmSettings(rounds=2, noise=0.10, prior_df=2.0)
# a prior measured on many servers: one figure a side can then tell 1.3 from 1
FIRM = ConfirmSettings(rounds=2, noise=0.10, prior_df=50.0)


def test_a_contender_measured_faster_within_the_noise_is_raced_against_incumbent_and_base() -> None:
    records = [record(0, BASE, 100.0, role="baseline"), record(1, {"c": 1}, 108.0)]
    now = standing(records, RACING)
    assert now.incumbent is not None
    assert now.incumbent.first == 0  # not yet confirmed: the base stays the answer
    assert now.race is not None and now.race.round == 1
    assert [c.first for c in now.race.lineup()] == [1, 0]  # the incumbent is the base: measured once
    assert now.decisions[-1].outcome == "racing"
    assert now.claim == "base" and not now.confirmed


def tagged(contender: int, round_number: int, *, claim: bool = False) -> str:
    return confirmation_role(contender, round_number, claim=claim)


def test_a_contender_far_below_is_screened_and_one_far_above_is_confirmed_on_its_rounds_alone() -> None:
    records = [
        record(0, BASE, 100.0, role="baseline"),
        record(1, {"c": 1}, 80.0),  # more than one standard error (14 %) below: not raced
        record(2, {"c": 2}, 250.0),  # fast in its first figure: raced, never claimed on it
    ]
    first = standing(records, RACING)
    assert [d.outcome for d in first.decisions] == ["screened", "racing"]
    assert first.incumbent is not None
    assert first.incumbent.first == 0  # a single figure, however fast, is not yet a claim
    records += [record(3, {"c": 2}, 250.0, role=tagged(2, 1)), record(4, BASE, 100.0, role=tagged(2, 1))]
    one_round = standing(records, RACING)
    assert one_round.race is not None and one_round.race.round == 2  # the first look comes after 2 rounds
    records += [record(5, {"c": 2}, 250.0, role=tagged(2, 2)), record(6, BASE, 100.0, role=tagged(2, 2))]
    now = standing(records, RACING)
    assert [d.outcome for d in now.decisions] == ["screened", "faster"]
    assert now.incumbent is not None
    assert now.incumbent.first == 2 and now.race is None
    # written out: every figure of a configuration agrees, so the spread of all servers is
    # the prior's alone, 0.10 as 2 df over 2 + 2 + 0 repeat df; the interleaved rounds show
    # the prior over 2 + 1 df: the larger (never below what all servers show) is used
    from scipy.stats import t

    pooled = math.sqrt(0.10**2 * 2.0 / (2.0 + 2 + 2))  # base 3 figures, contender 3, the screened one 1
    blocked = math.sqrt(0.10**2 * 2.0 / 3.0)
    assert now.spread.relative == pytest.approx(max(pooled, blocked))
    assert now.spread.df == pytest.approx(6.0)
    # the claim: the two rounds' pairs only (trial 2's own figure selected it), at 95 % for one race
    half = t.ppf(0.975, 6.0) * blocked * math.sqrt(2.0 / 2)
    assert now.basis is not None and now.speedup is not None
    assert now.basis.answer_trials == (3, 5) and now.basis.base_trials == (4, 6)
    assert now.basis.excluded == (2,) and now.basis.races == 1
    assert now.speedup.value == pytest.approx(2.5)
    assert now.speedup.low == pytest.approx(2.5 * math.exp(-half))
    assert now.speedup.high == pytest.approx(2.5 * math.exp(half))
    assert now.claim == "faster"
    assert "+150.0 % faster than the base manifest (study-wise 95 % interval" in now.describe()


def test_the_claim_rests_on_figures_after_selection_not_on_the_lucky_first_one() -> None:
    records = [
        record(0, BASE, 100.0, role="baseline"),
        record(1, {"c": 1}, 160.0),  # a lucky first figure ...
        record(2, {"c": 1}, 121.0, role=tagged(1, 1)),
        record(3, BASE, 99.0, role=tagged(1, 1)),
        record(4, {"c": 1}, 119.0, role=tagged(1, 2)),
        record(5, BASE, 101.0, role=tagged(1, 2)),
        record(6, {"c": 1}, 120.0, role=tagged(1, 3)),
        record(7, BASE, 100.0, role=tagged(1, 3)),
    ]
    now = standing(records, FIRM)
    assert now.incumbent is not None and now.speedup is not None
    assert now.incumbent.first == 1 and now.claim == "faster"
    expected = math.exp(statistics.fmean(math.log(a / b) for a, b in ((121, 99), (119, 101), (120, 100))))
    assert now.speedup.value == pytest.approx(expected)  # about +20 %, not the +33 % of all figures
    assert now.incumbent.estimate > 1.3 * 100.0 * 0.99  # the plain geometric mean keeps the lucky one
    assert now.tps_interval(now.incumbent).value == pytest.approx(statistics.geometric_mean([121.0, 119.0, 120.0]))


def test_a_contender_that_reads_no_faster_once_re_measured_is_not_raced_further() -> None:
    records = [
        record(0, BASE, 100.0, role="baseline"),
        record(1, {"c": 1}, 118.0),
        record(2, {"c": 1}, 97.0, role=tagged(1, 1)),
        record(3, BASE, 101.0, role=tagged(1, 1)),
    ]
    now = standing(records, RACING)
    assert now.decisions[-1].outcome == "behind" and now.decisions[-1].pairs == 1
    assert now.incumbent is not None
    assert now.incumbent.first == 0 and now.race is None and now.claim == "base"


def test_races_decide_on_a_one_sided_bound_and_the_claim_pays_for_every_race() -> None:
    assert race_confidence(RACING) == pytest.approx(0.90)  # its lower bound: one-sided 95 %
    assert claim_confidence(RACING, 1) == pytest.approx(0.95)
    assert claim_confidence(RACING, 4) == pytest.approx(1 - 0.05 / 4)


def test_a_claim_still_unclear_gets_claim_rounds_beside_the_base_until_it_is_clear() -> None:
    records = [record(0, BASE, 100.0, role="baseline"), record(1, {"c": 1}, 130.0)]
    records += [record(2, {"c": 1}, 128.0, role=tagged(1, 1)), record(3, BASE, 100.0, role=tagged(1, 1))]
    records += [record(4, {"c": 1}, 131.0, role=tagged(1, 2)), record(5, BASE, 100.0, role=tagged(1, 2))]
    won = standing(records, FIRM)
    assert won.decisions[-1].outcome == "faster" and won.claim == "faster" and won.race is None
    records += [record(6, {"c": 2}, 140.0)]  # a second race: the claim now pays for two
    two = standing(records, FIRM)
    assert two.race is not None and [c.first for c in two.race.lineup()] == [6, 1, 0]
    assert two.race.role == tagged(6, 1)
    records += [
        record(7, {"c": 2}, 120.0, role=tagged(6, 1)),
        record(8, {"c": 1}, 129.0, role=tagged(6, 1)),
        record(9, BASE, 100.0, role=tagged(6, 1)),
    ]
    after = standing(records, FIRM)
    assert after.decisions[-1].outcome == "behind"
    assert after.basis is not None
    assert after.basis.races == 2 and after.basis.confidence == pytest.approx(0.975)
    assert after.basis.answer_trials == (2, 4, 8) and after.basis.base_trials == (3, 5, 9)


def test_untagged_rounds_of_older_studies_are_grouped_by_order() -> None:
    records = [record(0, BASE, 100.0, role="baseline"), record(1, {"c": 1}, 130.0)]
    records += [record(2, {"c": 1}, 131.0, role=CONFIRM_ROLE), record(3, BASE, 100.0, role=CONFIRM_ROLE)]
    records += [record(4, {"c": 1}, 129.0, role=CONFIRM_ROLE), record(5, BASE, 99.0, role=CONFIRM_ROLE)]
    now = standing(records, FIRM)
    assert now.decisions[-1].rounds == 2 and now.decisions[-1].outcome == "faster"
    assert now.basis is not None
    assert now.basis.answer_trials == (2, 4)


def test_a_race_that_stays_unclear_is_a_tie_and_goes_to_the_configuration_closer_to_the_base() -> None:
    near, far = {"c": 1, "d": 0}, {"c": 3, "d": 2}
    base = {"c": 0, "d": 0}
    assert distance_to_base(near, base) < distance_to_base(far, base)
    records = [
        record(0, base, 100.0, role="baseline"),
        record(1, far, 140.0),  # clearly faster than the base ...
        record(2, far, 138.0, role=tagged(1, 1)),  # ... and confirmed over two rounds: the incumbent
        record(3, base, 99.0, role=tagged(1, 1)),
        record(4, far, 141.0, role=tagged(1, 2)),
        record(5, base, 100.0, role=tagged(1, 2)),
        record(6, near, 141.0),  # then a contender that reads as fast
    ]
    settled = standing(records[:6], FIRM)
    assert settled.incumbent is not None
    assert settled.incumbent.first == 1 and settled.decisions[-1].outcome == "faster"
    now = standing(records, FIRM)
    assert now.incumbent is not None and now.race is not None
    assert now.incumbent.first == 1 and now.race.contender.first == 6
    # contender, incumbent and the base, in every round
    assert [c.first for c in now.race.lineup()] == [6, 1, 0]
    # two rounds that do not separate them
    for round_number, start, (a, b) in ((1, 7, (140.0, 137.0)), (2, 10, (138.0, 140.0))):
        records += [
            record(start, near, a, role=tagged(6, round_number)),
            record(start + 1, far, b, role=tagged(6, round_number)),
            record(start + 2, base, 101.0, role=tagged(6, round_number)),
        ]
    now = standing(records, FIRM)
    assert now.decisions[-1].outcome == "tie-won" and now.decisions[-1].rounds == 2
    assert now.incumbent is not None and now.basis is not None
    assert now.incumbent.first == 6 and now.race is None
    # the claim of the new incumbent: its own rounds beside the base's figures of those rounds
    assert now.basis.answer_trials == (7, 10) and now.basis.base_trials == (9, 12)
    # the other way round: the incumbent is the nearer one and keeps its place
    swapped = [
        record(r.number, near if r.params == far else far if r.params == near else r.params, r.tps, role=r.role)
        for r in records
    ]
    assert standing(swapped, FIRM).decisions[-1].outcome == "tie-kept"


def test_a_best_that_the_base_matches_is_stated_as_not_distinguishable() -> None:
    records = [record(0, BASE, 100.0, role="baseline"), record(1, {"c": 1}, 112.0)]
    plain = standing(records, ConfirmSettings(rounds=0))
    assert plain.incumbent is not None
    assert plain.incumbent.first == 1 and plain.decisions[-1].outcome == "unconfirmed"
    assert plain.claim == "indistinct"
    assert plain.describe().startswith("not distinguishable from the base manifest: +12.0 %")


def test_decisions_are_enum_members_that_store_and_print_as_their_words() -> None:
    import json

    records = [record(0, BASE, 100.0, role="baseline"), record(1, {"c": 1}, 300.0), record(2, {"c": 2}, 50.0)]
    now = standing(records, ConfirmSettings(rounds=0, prior_df=50.0))
    assert now.claim is Claim.FASTER and [d.outcome for d in now.decisions] == [Outcome.FASTER, Outcome.SLOWER]
    data = json.loads(json.dumps(now.to_dict()))
    assert data["claim"] == "faster" and [d["outcome"] for d in data["decisions"]] == ["faster", "slower"]
    assert (f"{now.claim}", str(Outcome.TIE_KEPT), Claim("indistinct")) == ("faster", "tie-kept", Claim.INDISTINCT)
    assert now.describe().startswith("+200.0 % faster than the base manifest")


def test_confirm_settings_refuse_nonsense_with_the_field_named() -> None:
    with pytest.raises(ConfirmSettingsError, match="rounds") as rounds:
        ConfirmSettings(rounds=-1)
    with pytest.raises(ConfirmSettingsError, match="noise") as noise:
        ConfirmSettings(noise=0.0)
    assert (rounds.value.field, noise.value.field) == ("rounds", "noise")  # the name as data
    assert ConfirmSettings.from_settings(ConfirmSettings(rounds=3).to_settings()) == ConfirmSettings(rounds=3)


# -- a noisy study: races against picking the single best figure ----------------------

# eleven configurations: the base at 100, a crowd at 112-115, one clearly best at 135
TRUE_TPS = {
    0: 100.0,
    1: 112.0,
    2: 113.0,
    3: 114.0,
    4: 115.0,
    5: 112.0,
    6: 114.0,
    7: 113.0,
    8: 135.0,
    9: 115.0,
    10: 114.0,
}
NOISE = 0.10  # between-server spread of one figure, as on 2 shared CPU cores
NOISY_SPACE = space_from_dict(
    {
        "name": "noisy",
        "parameters": [
            {"name": "c", "type": "int", "low": 0, "high": 10, "affects": "speed", "default": 0, "env": "C"}
        ],
    },
    source="noisy.yaml",
).bind({})


def noisy_study(tmp_path: Path, seed: int, rounds: int) -> tuple[float, int]:
    """The true TPS of the study's answer, and how many trials it took."""
    rng = random.Random(seed)

    def evaluate(params, context) -> Measurement:
        return Measurement(tps=TRUE_TPS[params["c"]] * math.exp(rng.gauss(0.0, NOISE)), ppl=1.1)

    order = list(range(1, 11))
    random.Random(seed + 1000).shuffle(order)
    result = sweeper.run_study(
        NOISY_SPACE,
        evaluate,
        StudyOptions(
            study_name="noisy",
            storage=str(tmp_path / f"noisy-{seed}-{rounds}.db"),
            n_trials=11,
            gate=PplGate(cap=1.2),
            enqueue=[{"c": c} for c in order],
            enqueue_base=True,
            confirm=ConfirmSettings(rounds=rounds, noise=NOISE),
            handle_signals=False,
        ),
    )
    now = standing(result.status.trials, ConfirmSettings(rounds=rounds, noise=NOISE))
    assert now.confirmed  # every race was run to its end, past n_trials
    assert now.incumbent is not None
    return TRUE_TPS[now.incumbent.params["c"]], len(result.status.trials)


def test_races_find_the_truly_best_where_the_single_best_figure_is_often_a_lucky_one(tmp_path: Path) -> None:
    seeds = range(12)
    raced = [noisy_study(tmp_path, seed, rounds=CONFIRM_ROUNDS) for seed in seeds]
    plain = [noisy_study(tmp_path, seed, rounds=0) for seed in seeds]
    best = max(TRUE_TPS.values())
    raced_hits = sum(tps >= 0.99 * best for tps, _ in raced)
    plain_hits = sum(tps >= 0.99 * best for tps, _ in plain)
    assert all(trials == 11 for _, trials in plain)  # no race: the budget only
    assert all(trials > 11 for _, trials in raced)  # the races' trials come on top
    # measured: 9 of 12 seeds with races (6 rounds, the claims on figures after selection
    # only), 8 of 12 from the single best figure
    assert raced_hits >= 9, raced
    assert plain_hits <= 9, plain
    assert raced_hits > plain_hits


def test_a_race_in_a_study_interleaves_contender_and_base_one_round_at_a_time(tmp_path: Path) -> None:
    figures = {0: [100.0, 104.0, 97.0], 1: [109.0, 110.0, 106.0]}  # each config's figures in turn

    def evaluate(params, context) -> Measurement:  # measures PPL only when none is known
        return Measurement(tps=figures[params["c"]].pop(0), ppl=None if context.known_ppl else 1.1)

    result = sweeper.run_study(
        NOISY_SPACE,
        evaluate,
        StudyOptions(
            study_name="rounds",
            storage=str(tmp_path / "rounds.db"),
            n_trials=2,
            gate=PplGate(cap=1.2),
            enqueue=[{"c": 1}],
            enqueue_base=True,
            confirm=RACING,
            handle_signals=False,
        ),
    )
    trials = result.status.trials
    assert [(t.role, t.params["c"]) for t in trials] == [
        ("baseline", 0),
        ("enqueued-0", 1),
        (tagged(1, 1), 1),
        (tagged(1, 1), 0),  # round 1: contender, then the base (the incumbent)
        (tagged(1, 2), 0),
        (tagged(1, 2), 1),  # round 2, queued only once round 1 had run: turned
    ]
    # re-measurements are handed the PPL measured before for the same quality parameters
    # (none in this space: the base's), though reuse_quality is off here
    assert [t.ppl_reused_from for t in trials] == [None, None, 0, 0, 0, 0]
    assert result.stop_reason == "n_trials" and result.trials_run == 6
    now = standing(trials, RACING)
    assert now.decisions[-1].outcome in ("tie-kept", "faster") and now.confirmed


# -- screening (multi-fidelity): the study's side of the protocol ----------------------


def test_a_screen_below_the_floor_skips_the_full_run_and_is_never_the_answer(tmp_path: Path) -> None:
    true_tps = {0: 100.0, 1: 60.0, 2: 98.0}
    floors: dict[int, float | None] = {}

    def evaluate(params, context) -> Measurement:  # a screen reads 0.9 of the full figure
        floors[context.number] = context.screen_floor
        screen = 0.9 * true_tps[params["c"]]
        if context.screen_floor is not None and screen < context.screen_floor:
            return Measurement(tps=None, ppl=1.1, screened=True, extras={"tps_screen": screen})
        return Measurement(tps=true_tps[params["c"]], ppl=1.1, extras={"tps_screen": screen})

    result = sweeper.run_study(
        NOISY_SPACE,
        evaluate,
        StudyOptions(
            study_name="screen",
            storage=str(tmp_path / "screen.db"),
            n_trials=3,
            gate=PplGate(cap=1.2),
            enqueue=[{"c": 1}, {"c": 2}],
            enqueue_base=True,
            confirm=RACING,
            handle_signals=False,
        ),
    )
    base, slow, close = result.status.trials[:3]
    assert floors[0] == 0.0  # the base (trial 0): screened, but always measured in full
    # the floor: the incumbent's screen (90) less two standard errors of a difference at 10 %
    assert floors[1] == pytest.approx(90.0 * math.exp(-2 * 0.10 * math.sqrt(2)))
    assert all(floors[number] is None for number in floors if number >= 3)  # races: no screen
    assert slow.extras["screened"] and slow.tps_imputed
    assert slow.tps == pytest.approx(54.0 * 100.0 / 90.0)  # scaled by the incumbent's full/screen
    assert not close.tps_imputed and close.tps == 98.0  # above the floor: measured in full
    now = standing(result.status.trials, RACING)
    assert all(c.params["c"] != 1 for c in now.configurations)  # a screened trial is no answer


def test_the_front_places_configurations_at_their_figures_after_selection() -> None:
    """The trade-off table: a raced configuration at the geometric mean of its rounds
    (not the reading that selected it), the others at their own figures, by PPL."""
    records = [
        record(0, BASE, 100.0, role="baseline", ppl=1.10),
        record(1, {"c": 1}, 300.0, ppl=1.15),  # selected on a lucky reading
        record(2, {"c": 1}, 150.0, role=tagged(1, 1), ppl=1.15),
        record(3, BASE, 100.0, role=tagged(1, 1), ppl=1.10),
        record(4, {"c": 1}, 160.0, role=tagged(1, 2), ppl=1.15),
        record(5, BASE, 104.0, role=tagged(1, 2), ppl=1.10),
        record(6, {"c": 2}, 90.0, ppl=1.12),  # slower than the base at a higher PPL: off the front
    ]
    now = standing(records, RACING)
    front = now.front()
    assert [c.first for c, _ in front] == [0, 1]
    (base, base_tps), (raced, raced_tps) = front
    assert raced_tps.value == pytest.approx(math.sqrt(150.0 * 160.0))
    assert base_tps.value == pytest.approx((100.0 * 100.0 * 104.0) ** (1 / 3))
    assert raced_tps.low < raced_tps.value < raced_tps.high
