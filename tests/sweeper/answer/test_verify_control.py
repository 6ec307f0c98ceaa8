"""The control of a verification: the base configuration re-measured beside each candidate.

The verdict rules are checked on recorded runs (no server), with the speedup interval
computed again independently: scipy's two-sample t-interval on log TPS (where the prior
has no weight, the two are the same statistic) and a hand-made pooled interval (with
the prior). The interleaving and the resume are checked with stand-in evaluators that
return the synthetic study's figures and record the order of their calls; what the
stores hold is read back from real SQLite files, an old-schema file among them.
"""

from __future__ import annotations

import dataclasses
import math
import sqlite3
import statistics

import pytest
from scipy import stats

from storage import VerificationRun, VerificationStore, study_status
from sweeper.answer import (
    VerifySettings,
    VerifySettingsError,
    base_configuration,
    heldout_speedup,
    judge_candidate,
    speedup_text,
    verify_study,
)
from sweeper.study import ConfirmSettings, Measurement, PplGate, StudyOptions, run_study, standing


def run(
    repeat: int, tps: float | None, ppl: float | None = 2.3, *, subject: str = "candidate", state: str = "complete"
) -> VerificationRun:
    return VerificationRun(
        repeat=repeat,
        subject=subject,
        state=state,
        tps=tps,
        ppl=ppl,
        error_kind=None if state == "complete" else "ServerStartError",
        error_message=None if state == "complete" else "exited with code 1",
    )


def runs(tpss: list[float], subject: str = "candidate") -> list[VerificationRun]:
    return [run(i, tps, subject=subject) for i, tps in enumerate(tpss)]


def t_interval_on_logs(candidate: list[float], base: list[float]) -> tuple[float, float, float]:
    """The textbook two-sample t-interval (pooled variance) of the mean log TPS, exponentiated."""
    result = stats.ttest_ind([math.log(x) for x in candidate], [math.log(x) for x in base])
    ci = result.confidence_interval(0.95)
    middle = sum(map(math.log, candidate)) / len(candidate) - sum(map(math.log, base)) / len(base)
    return math.exp(middle), math.exp(ci.low), math.exp(ci.high)


def pooled_with_prior(candidate: list[float], base: list[float], prior: float, prior_df: float):
    """The same interval with the prior's weight added to the pooled variance, by hand."""
    logs = [[math.log(x) for x in side] for side in (candidate, base)]
    squares = prior**2 * prior_df + sum(sum((x - sum(g) / len(g)) ** 2 for x in g) for g in logs)
    df = prior_df + sum(len(g) - 1 for g in logs)
    sd = math.sqrt(squares / df)
    middle = sum(logs[0]) / len(logs[0]) - sum(logs[1]) / len(logs[1])
    half = stats.t.ppf(0.975, df) * sd * math.sqrt(1 / len(candidate) + 1 / len(base))
    return math.exp(middle), math.exp(middle - half), math.exp(middle + half)


BASE_PARAMS = {"sliding_window": 32, "centroid_top_k": 8, "num_speculative_tokens": 1}  # the demo manifest's
CANDIDATE = [121.0, 118.0, 124.0]
BASE = [101.0, 99.0, 100.5]


# -- the verdict on recorded runs ---------------------------------------------------------


def test_a_confirmed_speedup_verifies_and_matches_a_two_sample_t_interval() -> None:
    verdict = judge_candidate(
        tuned_tps=120.0,
        ppl_cap=2.42,
        tolerance=0.05,
        repeats=3,
        runs=runs(CANDIDATE),
        base_runs=runs(BASE, "base"),
        noise_df=0.0,
    )
    value, low, high = t_interval_on_logs(CANDIDATE, BASE)
    assert verdict.status == "verified"
    assert verdict.control == "measured" and verdict.claimed_speedup
    assert (verdict.speedup.value, verdict.speedup.low, verdict.speedup.high) == pytest.approx((value, low, high))
    assert verdict.spread.df == 4 and verdict.spread.measured_df == 4
    shown = f"held-out speedup over the base: {(value - 1) * 100:+.1f} % (95 % interval {(low - 1) * 100:+.1f} % to {(high - 1) * 100:+.1f} %)"
    assert verdict.reason.endswith("; " + shown)
    assert shown == "held-out speedup over the base: +20.8 % (95 % interval +15.7 % to +26.1 %)"


def test_the_prior_widens_the_interval_as_pooled_by_hand() -> None:
    verdict = judge_candidate(
        tuned_tps=120.0, ppl_cap=2.42, tolerance=0.05, repeats=3, runs=runs(CANDIDATE), base_runs=runs(BASE, "base")
    )  # default prior 0.10 weighted as 2 df
    value, low, high = pooled_with_prior(CANDIDATE, BASE, 0.10, 2.0)
    assert (verdict.speedup.value, verdict.speedup.low, verdict.speedup.high) == pytest.approx((value, low, high))
    assert verdict.spread.df == 6
    narrow = t_interval_on_logs(CANDIDATE, BASE)
    assert low < narrow[1] and high > narrow[2]  # a 10 % prior is wider than these quiet repeats
    assert verdict.status == "verified"


def test_an_unconfirmed_speedup_fails_with_the_interval_in_the_reason() -> None:
    candidate, base = [104.0, 97.0, 109.0], [100.0, 103.0, 96.0]
    verdict = judge_candidate(
        tuned_tps=103.0,
        ppl_cap=2.42,
        tolerance=0.05,
        repeats=3,
        runs=runs(candidate),
        base_runs=runs(base, "base"),
        noise_df=0.0,
    )
    value, low, high = t_interval_on_logs(candidate, base)
    assert low < 1.0 < high
    assert verdict.status == "failed"
    assert verdict.speedup.low == pytest.approx(low)
    assert verdict.reason == (
        f"{speedup_text(verdict.speedup)}: its low end is not above +0.0 %, so the claimed speedup "
        "over the base is not confirmed on held-out data"
    )


def test_a_candidate_that_is_the_base_needs_no_control() -> None:
    verdict = judge_candidate(tuned_tps=100.0, ppl_cap=2.42, tolerance=0.05, repeats=3, runs=runs(BASE), is_base=True)
    assert verdict.status == "verified"
    assert verdict.control == "is-base" and not verdict.claimed_speedup and verdict.speedup is None
    assert verdict.reason.endswith(
        "; the candidate is the base configuration: no control ran and there is no speedup over the base to confirm"
    )


def test_without_a_claim_the_speedup_is_shown_not_required() -> None:
    # the base is faster on held-out data too: no claim, so PPL and the tolerance decide
    verdict = judge_candidate(
        tuned_tps=100.0,
        ppl_cap=2.42,
        tolerance=0.05,
        repeats=3,
        runs=runs(BASE),
        base_runs=runs(CANDIDATE, "base"),
        claimed_speedup=False,
    )
    value, low, high = pooled_with_prior(BASE, CANDIDATE, 0.10, 2.0)
    assert high < 1.0 and verdict.speedup.high == pytest.approx(high)
    assert verdict.status == "verified" and not verdict.claimed_speedup
    assert verdict.reason.endswith(
        f"; the study claims no speedup over the base, so none is required ({speedup_text(verdict.speedup)})"
    )


def test_no_control_and_a_control_that_never_measured() -> None:
    off = judge_candidate(
        tuned_tps=120.0, ppl_cap=2.42, tolerance=0.05, repeats=3, runs=runs(CANDIDATE), base_runs=None
    )
    assert off.status == "verified" and off.control == "off"
    assert off.reason.endswith("; no control ran (switched off): the speedup over the base is not checked")
    broken = [run(i, None, None, subject="base", state="failed") for i in range(3)]
    failed = judge_candidate(
        tuned_tps=120.0, ppl_cap=2.42, tolerance=0.05, repeats=3, runs=runs(CANDIDATE), base_runs=broken
    )
    assert failed.status == "failed" and failed.speedup is None
    assert failed.reason == (
        "the control (the base configuration) measured no TPS in 3 repeats "
        "(ServerStartError: exited with code 1): the claimed speedup over the base is not confirmed"
    )
    # the base's own PPL is not judged: a base over the cap still serves as the control
    over = [run(i, tps, 9.9, subject="base") for i, tps in enumerate(BASE)]
    assert (
        judge_candidate(
            tuned_tps=120.0, ppl_cap=2.42, tolerance=0.05, repeats=3, runs=runs(CANDIDATE), base_runs=over
        ).status
        == "verified"
    )


def test_the_ppl_and_tolerance_rules_come_first() -> None:
    verdict = judge_candidate(
        tuned_tps=150.0, ppl_cap=2.42, tolerance=0.05, repeats=3, runs=runs(CANDIDATE), base_runs=runs(BASE, "base")
    )
    assert verdict.status == "failed" and verdict.reason.startswith("median held-out TPS 121.00 is 19.3% below")
    assert verdict.speedup is not None  # still computed, and stored, for the record


@pytest.mark.parametrize("value", [0, 1.0, -0.1, True])
def test_the_noise_prior_is_checked(value) -> None:
    with pytest.raises(VerifySettingsError, match="verify: noise must be a fraction between 0 and 1"):
        VerifySettings(noise=value)
    assert VerifySettings().noise is None  # the study's own, unless told


# -- running the control --------------------------------------------------------------------


class RecordingEvaluator:
    """A stand-in for the server evaluator: the synthetic study's figures, and a list of
    (candidate trial, subject, repeat, overrides, cap) in the order of the calls.

    ``base_factor`` multiplies the base's TPS (the candidate's stays the synthetic figure);
    ``stop_at`` raises KeyboardInterrupt on that call (1-based), like Ctrl-C mid-verify.
    """

    def __init__(self, synthetic, *, base_factor: float = 1.0, stop_at: int | None = None) -> None:
        self.synthetic = synthetic
        self.base_factor = base_factor
        self.stop_at = stop_at
        self.calls: list[tuple[int, str, int, dict, float | None]] = []

    def __call__(self, params, context) -> Measurement:
        self.calls.append(
            (context.trial_number, context.subject, context.number, dict(context.overrides), context.ppl_cap)
        )
        if self.stop_at is not None and len(self.calls) == self.stop_at:
            raise KeyboardInterrupt
        tps = self.synthetic.synthetic_tps(params)
        if context.subject == "base":
            tps *= self.base_factor
        jitter = (1.0, 1.01, 0.99)[context.number % 3]
        return Measurement(tps=tps * jitter, ppl=self.synthetic.synthetic_ppl(params), phases={"tps": 1.0})


def test_the_base_alternates_with_the_candidate_in_fresh_calls(synthetic, tmp_path) -> None:
    study = synthetic.make_study(tmp_path)
    best = study.number(synthetic.CONFIGS["C"])
    evaluate = RecordingEvaluator(synthetic, base_factor=0.7)
    result = verify_study(
        VerifySettings(top=1, repeats=3, evaluate=evaluate, claimed_speedup=True),
        storage=study.url,
        study_name=study.name,
    )
    assert [(n, who, r) for n, who, r, _, _ in evaluate.calls] == [
        (best, "candidate", 0),
        (best, "base", 0),
        (best, "candidate", 1),
        (best, "base", 1),
        (best, "candidate", 2),
        (best, "base", 2),
    ]
    # the base is the manifest as it is (no overrides) and is measured without a cap
    assert all(o == {} and cap is None for _, who, _, o, cap in evaluate.calls if who == "base")
    assert all(o and cap == synthetic.CAP for _, who, _, o, cap in evaluate.calls if who == "candidate")

    (verification,) = result.verifications
    assert verification.status == "verified", verification.reason
    assert verification.control == "measured" and verification.claimed_speedup
    assert dict(verification.base_params) == BASE_PARAMS and verification.base_trial == 0
    base_tps = synthetic.synthetic_tps(dict(verification.base_params)) * 0.7
    assert [r.tps for r in verification.base_runs] == pytest.approx([base_tps * j for j in (1.0, 1.01, 0.99)])
    value, low, high = pooled_with_prior(
        [r.tps for r in verification.runs], [r.tps for r in verification.base_runs], 0.10, 2.0
    )
    stored = heldout_speedup(verification)
    assert (stored.value, stored.low, stored.high) == pytest.approx((value, low, high))
    assert stored.value == pytest.approx(174.0 / (169.0 * 0.7))
    assert speedup_text(stored) in verification.reason


def test_the_default_claim_and_the_candidate_that_is_the_base(synthetic, tmp_path) -> None:
    study = synthetic.make_study(tmp_path)
    status = study_status(study.url, study.name)
    base = base_configuration(status.trials)
    assert base.trial_number == 0 and base.tuned_tps == 169.0 and base.feasible is False  # PPL 2.32 > 2.30
    assert dict(base.params) == BASE_PARAMS

    # the study found its base over the cap, so no speedup is claimed
    evaluate = RecordingEvaluator(synthetic)
    (plain,) = verify_study(
        VerifySettings(top=1, repeats=2, evaluate=evaluate), storage=study.url, study_name=study.name
    ).verifications
    assert plain.status == "verified" and plain.claimed_speedup is False and len(plain.base_runs) == 2
    assert (
        "the study claims no speedup over the base, so none is required (held-out speedup over the base: +3.0 %"
        in plain.reason
    )

    # a caller's claim wins over the default, and fails here; its tuned figure is the one matched
    again = verify_study(
        VerifySettings(
            top=1,
            repeats=2,
            redo=True,
            tolerance=0.1,
            evaluate=evaluate,
            tuned_tps={plain.trial_number: 180.0},
            claimed_speedup={plain.trial_number: True},
        ),
        storage=study.url,
        study_name=study.name,
    )
    (claimed,) = again.verifications
    assert claimed.tuned_tps == 180.0 and claimed.claimed_speedup is True
    assert claimed.status == "failed" and "the claimed speedup over the base is not confirmed" in claimed.reason

    # with a looser cap the base (169 tok/s, PPL 2.32) passes; 5 speculative tokens on the same
    # window read faster (189 tok/s, same PPL), but from one server a side the study states
    # it as not distinguishable from the base (sweeper.study.standing), so verify claims no
    # speedup by default and still measures it; the base, the second candidate, is verified
    # without a control
    hopeful = RecordingEvaluator(synthetic, base_factor=0.7)
    relaxed = _study_with_cap(synthetic, tmp_path, cap=2.35, configs=[FASTER_THAN_BASE, synthetic.CONFIGS["A"]])
    faster, itself = verify_study(
        VerifySettings(top=2, repeats=2, evaluate=hopeful), storage=relaxed.url, study_name=relaxed.name
    ).verifications
    assert dict(faster.params) == FASTER_THAN_BASE and faster.tuned_tps == pytest.approx(189.0)
    assert faster.claimed_speedup is False and faster.control == "measured"
    assert faster.status == "verified" and faster.speedup == pytest.approx(189.0 / (169.0 * 0.7))
    assert itself.trial_number == 0 and itself.control == "is-base" and itself.claimed_speedup is False
    assert [(n, who) for n, who, _, _, _ in hopeful.calls] == [
        (faster.trial_number, "candidate"),
        (faster.trial_number, "base"),
        (faster.trial_number, "candidate"),
        (faster.trial_number, "base"),
        (0, "candidate"),
        (0, "candidate"),
    ]
    assert itself.base_runs == () and itself.speedup is None
    assert "the candidate is the base configuration: no control ran" in itself.reason


FASTER_THAN_BASE = {"sliding_window": 32, "centroid_top_k": 8, "num_speculative_tokens": 5}  # 189, 2.32


def _study_with_cap(synthetic, folder, *, cap: float, configs):
    from search_spaces import load_preset
    from sweeper.demo import demo_paths
    from sweeper.manifest import Manifest

    url = f"sqlite:///{folder / 'loose.db'}"
    space = load_preset("tiny-cpu").bind(Manifest.load(demo_paths().manifest).env)
    run_study(
        space,
        synthetic.synthetic_evaluator(),
        StudyOptions(
            study_name="loose",
            storage=url,
            n_trials=len(configs) + 1,
            gate=PplGate(cap=cap),
            sampler="random",
            seed=0,
            enqueue=list(configs),
            handle_signals=False,
        ),
    )
    return synthetic.SyntheticStudy(url=url, name="loose", db=folder / "loose.db")


def test_a_study_that_confirmed_a_speedup_claims_it_by_default(synthetic, tmp_path) -> None:
    from search_spaces import load_preset
    from sweeper.demo import demo_paths
    from sweeper.manifest import Manifest

    plain = synthetic.synthetic_evaluator()
    jitter = iter([1.0, 1.02, 0.98, 1.01, 0.99, 1.0, 1.02, 0.98] * 4)

    def boosted(params, context) -> Measurement:
        """The synthetic figures, with 5 speculative tokens 1.6 times as fast, and a little noise."""
        measured = plain(params, context)
        factor = 1.6 if dict(params) == FASTER_THAN_BASE else 1.0
        return dataclasses.replace(measured, tps=measured.tps * factor * next(jitter))

    url = f"sqlite:///{tmp_path / 'confirmed.db'}"
    space = load_preset("tiny-cpu").bind(Manifest.load(demo_paths().manifest).env)
    confirm = ConfirmSettings(rounds=2)
    run_study(
        space,
        boosted,
        StudyOptions(
            study_name="confirmed",
            storage=url,
            n_trials=2,
            gate=PplGate(cap=2.35),
            sampler="random",
            seed=0,
            enqueue=[FASTER_THAN_BASE],
            enqueue_space_configs=False,
            confirm=confirm,
            enqueue_base=True,
            handle_signals=False,
        ),
    )
    status = study_status(url, "confirmed")
    now = standing(status.trials, confirm)
    assert now.claim == "faster" and dict(now.incumbent.params) == FASTER_THAN_BASE
    assert len(now.incumbent.numbers) >= 2  # re-measured before it was believed

    # verify takes the claim from the standing, and the tuned figure from the configuration's
    # estimate after selection: the geometric mean of its servers after the one that picked it
    result = verify_study(VerifySettings(top=1, repeats=2, evaluate=boosted), storage=url, study_name="confirmed")
    (verification,) = result.verifications
    assert verification.trial_number in now.incumbent.numbers
    assert verification.claimed_speedup is True and verification.control == "measured"
    after = [r.tps for r in status.trials if r.number in now.incumbent.numbers and r.role.startswith("confirm")]
    assert after and verification.tuned_tps == pytest.approx(math.exp(statistics.fmean(map(math.log, after))))
    assert verification.status == "verified", verification.reason
    assert heldout_speedup(verification).low > 1.0


def test_no_control_runs_half_the_servers(synthetic, tmp_path) -> None:
    study = synthetic.make_study(tmp_path)
    evaluate = RecordingEvaluator(synthetic, base_factor=0.7)
    (verification,) = verify_study(
        VerifySettings(top=1, repeats=2, control=False, evaluate=evaluate), storage=study.url, study_name=study.name
    ).verifications
    assert [who for _, who, _, _, _ in evaluate.calls] == ["candidate", "candidate"]
    assert verification.control == "off" and verification.base_runs == ()
    assert verification.status == "verified"
    assert verification.reason.endswith("no control ran (switched off): the speedup over the base is not checked")


def test_an_interrupted_verify_goes_on_where_it_stopped(synthetic, tmp_path) -> None:
    study = synthetic.make_study(tmp_path)
    best = study.number(synthetic.CONFIGS["C"])
    first = RecordingEvaluator(synthetic, base_factor=0.7, stop_at=4)  # Ctrl-C in the base's repeat 2
    with pytest.raises(KeyboardInterrupt):
        verify_study(
            VerifySettings(top=1, repeats=3, evaluate=first, claimed_speedup=True),
            storage=study.url,
            study_name=study.name,
        )
    with VerificationStore(study.url) as store:
        (stopped,) = store.records(study.name)
    assert stopped.status == "interrupted"
    assert [r.repeat for r in stopped.runs] == [0, 1] and [r.repeat for r in stopped.base_runs] == [0]

    second = RecordingEvaluator(synthetic, base_factor=0.7)
    result = verify_study(
        VerifySettings(top=1, repeats=3, evaluate=second, claimed_speedup=True),
        storage=study.url,
        study_name=study.name,
    )
    # only what was missing ran: the base's repeat 2, then repeat 3 of both
    assert [(who, r) for _, who, r, _, _ in second.calls] == [("base", 1), ("candidate", 2), ("base", 2)]
    (verification,) = result.verifications
    assert verification.id == stopped.id and verification.trial_number == best
    assert verification.status == "verified"
    assert [r.repeat for r in verification.runs] == [0, 1, 2]
    assert [r.repeat for r in verification.base_runs] == [0, 1, 2]
    with VerificationStore(study.url) as store:
        assert len(store.records(study.name)) == 1


# -- storage ----------------------------------------------------------------------------------


def test_the_control_is_stored_and_read_back(tmp_path, start_verification) -> None:
    url = f"sqlite:///{tmp_path / 'v.db'}"
    with VerificationStore(url) as store:
        vid = start_verification(
            store,
            trial_number=3,
            tuned_tps=120.0,
            repeats=2,
            control="measured",
            claimed_speedup=True,
            base_params={"k": 3},
            base_trial=0,
            noise=0.1,
        )
        for repeat, (c, b) in enumerate([(121.0, 100.0), (119.0, 101.0)]):
            store.add_run(vid, run(repeat, c))
            store.add_run(vid, run(repeat, b, 2.5, subject="base"))
        store.finish(
            vid,
            status="verified",
            reason="ok",
            median_tps=120.0,
            max_ppl=2.3,
            spread=0.07,
            speedup=(1.2, 1.1, 1.3),
            speedup_confidence=0.95,
        )
    with VerificationStore(url) as store:
        (record,) = store.records("s")
    assert [(r.subject, r.tps) for r in record.runs] == [("candidate", 121.0), ("candidate", 119.0)]
    assert [(r.subject, r.tps, r.ppl) for r in record.base_runs] == [("base", 100.0, 2.5), ("base", 101.0, 2.5)]
    assert (record.control, record.claimed_speedup, dict(record.base_params), record.base_trial) == (
        "measured",
        True,
        {"k": 3},
        0,
    )
    assert (record.noise, record.spread) == (0.1, 0.07)
    assert record.to_dict()["noise"] == 0.1
    interval = heldout_speedup(record)
    assert (interval.value, interval.low, interval.high, interval.confidence) == (1.2, 1.1, 1.3, 0.95)
    data = record.to_dict()
    assert [r["subject"] for r in data["base_runs"]] == ["base", "base"]
    assert data["speedup_low"] == 1.1


OLD_SCHEMA = """
CREATE TABLE sweeper_verifications (
    id INTEGER NOT NULL, study_name VARCHAR(512) NOT NULL, trial_number INTEGER NOT NULL,
    status VARCHAR(16) NOT NULL, reason TEXT NOT NULL, params JSON NOT NULL, tuned_tps FLOAT NOT NULL,
    tuned_ppl FLOAT NOT NULL, ppl_cap FLOAT NOT NULL, tolerance FLOAT NOT NULL, repeats INTEGER NOT NULL,
    median_tps FLOAT, max_ppl FLOAT, data JSON NOT NULL, started_at DATETIME NOT NULL, finished_at DATETIME,
    PRIMARY KEY (id));
CREATE INDEX ix_sweeper_verifications_study_name ON sweeper_verifications (study_name);
CREATE TABLE sweeper_verification_runs (
    id INTEGER NOT NULL, verification_id INTEGER NOT NULL, repeat INTEGER NOT NULL, state VARCHAR(16) NOT NULL,
    tps FLOAT, ppl FLOAT, ppl_infinite BOOLEAN NOT NULL, early_stopped BOOLEAN NOT NULL,
    error_kind VARCHAR(128), error_message TEXT, phases JSON NOT NULL, extras JSON NOT NULL, log_tail TEXT,
    seconds FLOAT NOT NULL, PRIMARY KEY (id),
    FOREIGN KEY(verification_id) REFERENCES sweeper_verifications (id) ON DELETE CASCADE);
CREATE INDEX ix_sweeper_verification_runs_verification_id ON sweeper_verification_runs (verification_id);
"""


def test_a_study_file_from_before_the_control_still_opens(synthetic, tmp_path) -> None:
    """The verification tables as the version before the control created them (no control
    columns, no run subject), holding a verdict that version wrote."""
    study = synthetic.make_study(tmp_path)
    best = study.number(synthetic.CONFIGS["C"])
    with sqlite3.connect(study.db) as db:
        db.executescript("DROP TABLE IF EXISTS sweeper_verification_runs; DROP TABLE IF EXISTS sweeper_verifications;")
        db.executescript(OLD_SCHEMA)
        db.execute(
            "INSERT INTO sweeper_verifications VALUES (1, ?, ?, 'verified', 'old verdict', '{}', 174.0, 2.28, 2.3,"
            " 0.05, 2, 175.0, 2.28, '{}', '2026-11-30 10:00:00.000000', '2026-11-30 10:05:00.000000')",
            (study.name, best),
        )
        for repeat, tps in enumerate([174.0, 176.0]):
            db.execute(
                "INSERT INTO sweeper_verification_runs VALUES (?, 1, ?, 'complete', ?, 2.28, 0, 0, NULL, NULL,"
                " '{}', '{}', NULL, 50.0)",
                (repeat + 1, repeat, tps),
            )

    status = study_status(study.url, study.name)  # opens the store: the columns are added
    old = status.verifications[best]
    assert old.verified and old.reason == "old verdict" and old.median_tps == 175.0
    assert [r.tps for r in old.runs] == [174.0, 176.0] and all(r.subject == "candidate" for r in old.runs)
    assert old.base_runs == () and old.control is None and heldout_speedup(old) is None
    with sqlite3.connect(study.db) as db:
        columns = {row[1] for row in db.execute("PRAGMA table_info(sweeper_verification_runs)")}
        assert "subject" in columns
        columns = {row[1] for row in db.execute("PRAGMA table_info(sweeper_verifications)")}
        assert {"control", "claimed_speedup", "base_params", "speedup", "speedup_low", "speedup_high"} <= columns

    # and the old file takes a new verification with its control
    result = verify_study(
        VerifySettings(
            top=1, repeats=2, redo=True, evaluate=RecordingEvaluator(synthetic, base_factor=0.7), claimed_speedup=True
        ),
        storage=study.url,
        study_name=study.name,
    )
    (new,) = result.verifications
    assert new.id == 2 and new.status == "verified" and len(new.base_runs) == 2
    with VerificationStore(study.url) as store:
        assert [(v.id, v.control) for v in store.records(study.name)] == [(1, None), (2, "measured")]


# -- the command's side ----------------------------------------------------------------------


def test_verify_shows_the_speedup_and_checks_the_prior(synthetic, tmp_path, monkeypatch, capsys) -> None:
    import sys

    from rich.console import Console

    from sweeper.cli import main
    from sweeper.cli.verify_cmd import control_lines, verification_table

    study = synthetic.make_study(tmp_path)
    result = verify_study(
        VerifySettings(top=1, repeats=2, claimed_speedup=True, evaluate=RecordingEvaluator(synthetic, base_factor=0.7)),
        storage=study.url,
        study_name=study.name,
    )
    (verification,) = result.verifications
    assert control_lines([verification]) == [
        f"trial #{verification.trial_number}: {speedup_text(heldout_speedup(verification))}"
    ]
    console = Console(width=120, record=True)
    console.print(verification_table([verification], title="t"))
    row = next(line for line in console.export_text().splitlines() if f"#{verification.trial_number} " in line)
    assert f"{(heldout_speedup(verification).value - 1) * 100:+.1f}%" in row

    monkeypatch.setattr(sys, "argv", ["sweeper", "verify", "--storage", study.url, "--no-control", "--noise", "2"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "error: verify: noise must be a fraction between 0 and 1 (0.10 = 10 %), not 2.0\n"
    # the old name still works, once warned
    monkeypatch.setattr(
        sys, "argv", ["sweeper", "verify", "--storage", study.url, "--no-control", "--spread-prior", "2"]
    )
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        "warning: --spread-prior is deprecated: use --noise (the same prior, by its one name)\n"
        "error: verify: noise must be a fraction between 0 and 1 (0.10 = 10 %), not 2.0\n"
    )
