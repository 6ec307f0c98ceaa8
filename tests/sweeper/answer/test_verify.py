"""Verification on synthetic studies: the verdict, what is stored, what the answer becomes."""

from __future__ import annotations

import math

import pytest

from storage import VerificationRun, VerificationStore, study_status
from sweeper.answer import (
    HeldOutDataError,
    VerifySettings,
    VerifySettingsError,
    candidates,
    heldout_sources,
    judge_candidate,
    verify_study,
)
from sweeper.errors import ServerStartError, StudyError, UserInputError
from sweeper.study import StudyRecipe
from sweeper.sweep import demo_data


def run(repeat: int, tps: float | None, ppl: float | None, state: str = "complete") -> VerificationRun:
    return VerificationRun(
        repeat=repeat,
        state=state,
        tps=tps,
        ppl=ppl,
        error_kind=None if state == "complete" else "ServerStartError",
        error_message=None if state == "complete" else "exited with code 1",
    )


# -- the verdict -----------------------------------------------------------------------


def test_judge_verifies_median_within_tolerance() -> None:
    verdict = judge_candidate(
        tuned_tps=100.0,
        ppl_cap=2.42,
        tolerance=0.05,
        repeats=3,
        runs=[run(0, 97.0, 2.39), run(1, 104.0, 2.39), run(2, 96.0, 2.40)],
    )
    assert verdict.status == "verified"
    assert verdict.median_tps == 97.0
    assert verdict.max_ppl == 2.40
    assert "-3.0%" in verdict.reason


@pytest.mark.parametrize(("tps", "word"), [(90.0, "below"), (110.0, "above")])
def test_judge_rejects_a_median_outside_tolerance_either_way(tps: float, word: str) -> None:
    verdict = judge_candidate(
        tuned_tps=100.0,
        ppl_cap=2.42,
        tolerance=0.05,
        repeats=3,
        runs=[run(i, tps, 2.39) for i in range(3)],
    )
    assert verdict.status == "failed"
    assert verdict.reason == (f"median held-out TPS {tps:.2f} is 10.0% {word} the tuned 100.00 (tolerance 5%)")


def test_judge_rejects_ppl_over_the_cap_in_any_repeat() -> None:
    verdict = judge_candidate(
        tuned_tps=100.0,
        ppl_cap=2.42,
        tolerance=0.05,
        repeats=3,
        runs=[run(0, 100.0, 2.39), run(1, 100.0, 2.43)],
    )
    assert verdict.status == "failed"
    assert verdict.reason == "held-out PPL 2.4300 is over the cap 2.4200 in repeat 2"
    infinite = judge_candidate(tuned_tps=100.0, ppl_cap=2.42, tolerance=0.05, repeats=1, runs=[run(0, 100.0, math.inf)])
    assert infinite.status == "failed" and "PPL inf" in infinite.reason


def test_judge_rejects_failed_or_missing_repeats() -> None:
    failed = judge_candidate(
        tuned_tps=100.0,
        ppl_cap=2.42,
        tolerance=0.05,
        repeats=3,
        runs=[run(0, 100.0, 2.3), run(1, None, None, state="failed")],
    )
    assert failed.status == "failed"
    assert failed.reason == "repeat 2 could not be measured (ServerStartError: exited with code 1)"
    short = judge_candidate(tuned_tps=100.0, ppl_cap=2.42, tolerance=0.05, repeats=3, runs=[run(0, 100.0, 2.3)])
    assert short.status == "failed" and short.reason == "only 1 of 3 repeats ran"


@pytest.mark.parametrize(("field", "value"), [("top", 0), ("repeats", -1), ("tolerance", 1.5), ("tolerance", 0)])
def test_verify_settings_name_the_bad_field(field: str, value: float) -> None:
    with pytest.raises(VerifySettingsError, match=f"verify: {field} must be"):
        VerifySettings(**{field: value})


# -- candidates and the stored verification ----------------------------------------------


def test_candidates_are_the_fastest_feasible_configurations(synthetic, tmp_path) -> None:
    study = synthetic.make_study(tmp_path)
    status = study_status(study.url, study.name)
    chosen = candidates(status.trials, 2)
    assert [dict(r.params) for r in chosen] == [synthetic.CONFIGS["C"], synthetic.CONFIGS["B"]]
    assert all(r.feasible for r in chosen)


def test_verify_stores_every_repeat_and_the_verdict(synthetic, tmp_path) -> None:
    study = synthetic.make_study(tmp_path)
    factors = {0: 0.98, 1: 1.03, 2: 1.01}  # repeat -> TPS factor: median 1.01
    result = verify_study(
        VerifySettings(
            top=2,
            repeats=3,
            tolerance=0.05,
            evaluate=synthetic.synthetic_evaluator(tps_factor=lambda r: factors[r], ppl_shift=0.001),
        ),
        storage=study.url,
        study_name=study.name,
    )
    best = study.number(synthetic.CONFIGS["C"])
    second = study.number(synthetic.CONFIGS["B"])
    assert [v.trial_number for v in result.verifications] == [best, second]
    assert all(v.status == "verified" for v in result.verifications)
    first = result.verifications[0]
    assert [round(r.tps, 4) for r in first.runs] == [round(174.0 * f, 4) for f in (0.98, 1.03, 1.01)]
    assert synthetic.isclose(first.median_tps, 174.0 * 1.01)
    assert synthetic.isclose(first.max_ppl, 2.28 + 0.001)
    assert first.ppl_cap == synthetic.CAP and first.tuned_tps == 174.0
    assert first.runs[0].phases["start"] >= 0.0
    assert result.answer.verified and result.answer.record.number == best

    # stored: a fresh reader sees the same, and status shows it
    with VerificationStore(study.url) as store:
        stored = store.records(study.name)
    assert [(v.trial_number, v.status, len(v.runs)) for v in stored] == [(best, "verified", 3), (second, "verified", 3)]
    status = study_status(study.url, study.name)
    assert status.verifications[best].verified
    assert status.to_dict()["verifications"][str(best)]["status"] == "verified"


def test_a_candidate_that_fails_stops_early_and_the_answer_moves_on(synthetic, tmp_path) -> None:
    study = synthetic.make_study(tmp_path)
    best = study.number(synthetic.CONFIGS["C"])

    def evaluate(params, context):
        # the best candidate's PPL is over the cap on held-out data (window 36: 2.28 + 0.03)
        shift = 0.03 if params["sliding_window"] == 36 else 0.0
        return synthetic.synthetic_evaluator(ppl_shift=shift)(params, context)

    result = verify_study(VerifySettings(top=2, repeats=3, evaluate=evaluate), storage=study.url, study_name=study.name)
    failed, verified = result.verifications
    assert failed.trial_number == best and failed.status == "failed"
    assert len(failed.runs) == 1  # settled by the first repeat: no more servers spent
    assert failed.reason == "held-out PPL 2.3100 is over the cap 2.3000 in repeat 1"
    assert verified.status == "verified"
    assert result.answer.record.number == study.number(synthetic.CONFIGS["B"])
    assert result.answer.verified


def test_verified_candidates_are_skipped_unless_redo(synthetic, tmp_path) -> None:
    study = synthetic.make_study(tmp_path)
    evaluate = synthetic.synthetic_evaluator()
    verify_study(VerifySettings(top=1, repeats=1, evaluate=evaluate), storage=study.url, study_name=study.name)
    again = verify_study(VerifySettings(top=1, repeats=1, evaluate=evaluate), storage=study.url, study_name=study.name)
    assert again.verifications == ()
    assert again.skipped == ((study.number(synthetic.CONFIGS["C"]), "already verified (use --redo to verify again)"),)
    redone = verify_study(
        VerifySettings(top=1, repeats=1, redo=True, evaluate=evaluate),
        storage=study.url,
        study_name=study.name,
    )
    assert len(redone.verifications) == 1


def test_a_failing_server_fails_the_candidate_not_the_command(synthetic, tmp_path) -> None:
    study = synthetic.make_study(tmp_path)

    def evaluate(params, context):
        raise ServerStartError("server exited with code 1 during start-up", log_tail="CUDA out of memory")

    result = verify_study(VerifySettings(top=1, repeats=3, evaluate=evaluate), storage=study.url, study_name=study.name)
    (verification,) = result.verifications
    assert verification.status == "failed"
    assert verification.runs[0].log_tail == "CUDA out of memory"
    assert "could not be measured (ServerStartError" in verification.reason
    assert result.answer.status == "unverified"  # the next-best trial was never tried


def test_an_interrupted_verification_is_marked(synthetic, tmp_path) -> None:
    study = synthetic.make_study(tmp_path)

    def evaluate(params, context):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        verify_study(VerifySettings(top=1, repeats=2, evaluate=evaluate), storage=study.url, study_name=study.name)
    with VerificationStore(study.url) as store:
        (record,) = store.records(study.name)
    assert record.status == "interrupted" and record.runs == ()


def test_verify_explains_an_empty_study_and_one_with_no_feasible_trial(synthetic, tmp_path) -> None:
    empty = synthetic.make_empty_study(tmp_path)
    with pytest.raises(StudyError, match="has no trials yet: run 'sweeper run' first"):
        verify_study(VerifySettings(evaluate=synthetic.synthetic_evaluator()), storage=empty.url, study_name=empty.name)
    hopeless = synthetic.make_study(tmp_path, name="hopeless", configs=list(synthetic.INFEASIBLE_CONFIGS.values()))
    with pytest.raises(StudyError, match=r"no feasible trial to verify \(none of its 3 trials passed"):
        verify_study(
            VerifySettings(evaluate=synthetic.synthetic_evaluator()), storage=hopeless.url, study_name=hopeless.name
        )


# -- held-out data -------------------------------------------------------------------------


def test_held_out_data_defaults_to_the_given_default_sets_and_must_differ_from_tuning(demo, tmp_path) -> None:
    defaults = demo_data()  # what 'sweeper verify' and 'sweeper run' hand down: the demo's sets
    prompts, ppl = heldout_sources(StudyRecipe(), defaults=defaults)
    assert (prompts, ppl) == (str(demo.prompts_heldout), str(demo.ppl_heldout))
    # a study that tuned on the default sets, named by path, still gets their held-out sets
    by_path = StudyRecipe(prompts=str(demo.prompts_tuning), ppl_data=str(demo.ppl_tuning))
    assert heldout_sources(by_path, defaults=defaults) == (str(demo.prompts_heldout), str(demo.ppl_heldout))
    with pytest.raises(HeldOutDataError, match="is the set the study tuned on"):
        heldout_sources(StudyRecipe(), prompts=str(demo.prompts_tuning), defaults=defaults)
    own = StudyRecipe(prompts=str(tmp_path / "mine.json"), ppl_data=str(tmp_path / "mine.jsonl"))
    with pytest.raises(HeldOutDataError, match="give the held-out data with --prompts and --ppl-data"):
        heldout_sources(own, defaults=defaults)
    # with no defaults handed down, a recipe without held-out data has none
    assert not by_path.tunes_on(None) and by_path.tunes_on(defaults) and StudyRecipe().tunes_on(defaults)
    for recipe in (StudyRecipe(), by_path):
        with pytest.raises(HeldOutDataError, match="give the held-out data with --prompts and --ppl-data"):
            heldout_sources(recipe)
    assert issubclass(HeldOutDataError, UserInputError)


def test_a_held_out_ppl_within_the_noise_of_the_cap_is_flagged_even_when_it_passes(synthetic, tmp_path) -> None:
    """The repeats' per-record rows give the held-out standard error; the statement's figures
    are those of the formulas written out here (records as the sampling unit)."""
    import dataclasses

    from click.testing import CliRunner
    from scipy import stats

    from sweeper.cli import app

    study = synthetic.make_study(tmp_path)
    plain = synthetic.synthetic_evaluator(ppl_shift=0.001)  # C: 2.281 held out, the cap 2.30
    spread, m, tokens = 0.05, 8, 100  # each record's log PPL off the whole by +-spread

    def with_records(params, context):
        measured = plain(params, context)
        log_ppl = math.log(measured.ppl)
        rows = [
            {"kind": "ppl", "id": f"r{i}", "nll": tokens * (log_ppl + (spread if i % 2 else -spread)), "tokens": tokens}
            for i in range(m)
        ]
        return dataclasses.replace(measured, requests=rows)

    result = verify_study(
        VerifySettings(top=1, repeats=1, evaluate=with_records), storage=study.url, study_name=study.name
    )
    (verification,) = result.verifications
    assert verification.verified  # 2.281 is under the cap 2.30 ...
    se = spread * math.sqrt(m / (m - 1)) / math.sqrt(m)  # sqrt(sum r^2 / (m - 1) / m) / mean tokens
    ppl, cap = verification.max_ppl, synthetic.CAP
    t = stats.t.ppf(0.975, m - 1)  # Student's t on the records' degrees of freedom
    low, high = ppl * math.exp(-t * se), ppl * math.exp(t * se)
    chance = stats.t.cdf(math.log(cap / ppl) / (se * math.sqrt(2)), m - 1)  # on as many (8) new records
    statement = result.heldout_ppl(verification)
    assert (statement.low, statement.high) == pytest.approx((low, high), rel=1e-9)
    assert statement.pass_probability == pytest.approx(chance, rel=1e-9)
    assert low < cap < high and statement.within_noise  # ... but not clearly
    expected = (
        f"trial #{verification.trial_number}: held-out PPL {ppl:.4f} (95 % interval {low:.4f}-{high:.4f} "
        f"over 8 records); on 8 new records of this kind, under {cap:.4f} with probability {chance:.2f}; "
        f"WITHIN NOISE of the cap: {cap:.4f} is inside the held-out interval, so new records may put it "
        "over the cap"
    )
    shown = CliRunner().invoke(app, ["status", "--storage", study.url, "--study", study.name])
    assert shown.exit_code == 0, shown.output
    assert expected in shown.output.splitlines()
    assert result.to_dict()["verifications"][0]["heldout_ppl"]["within_noise"] is True
