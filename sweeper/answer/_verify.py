"""Verification: does a tuned number reproduce on data the study never tuned on?

``verify_study`` re-measures the study's best feasible trials on the
held-out prompts and PPL records, ``repeats`` times each, every time in a
fresh server (the study's own ``ServerEvaluator``, fed held-out data), and
beside each candidate the study's base configuration (the base manifest as
it is: no overrides), the control. The two alternate, candidate then base
in each repeat, so that whatever drifts over the run (the machine's load,
its clocks) reaches both alike.

A candidate is VERIFIED when its held-out PPL is under the cap in force in
every repeat, the median held-out TPS is within ``tolerance`` of the tuned
TPS (either way: a number that does not match is not the number the study
reported) and, when the study claims it is faster than the base, the
held-out speedup over the base is confirmed (``judge_candidate``). A candidate repeat
that fails, or a PPL over the cap, settles the verdict at once and the
remaining repeats are skipped.

Every repeat is stored as it ends; a verification that was interrupted is
taken up again by the next verify of the same candidate on the same data,
which runs only the repeats still missing.

The verdicts feed the study's answer (``sweeper.answer.study_answer``): the
fastest verified trial; while none is verified, the fastest feasible one,
flagged as unverified.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from search_spaces import BASELINE
from storage import (
    BASE,
    CANDIDATE,
    Control,
    StudyStatus,
    TrialRecord,
    VerificationRecord,
    VerificationRun,
    VerificationStatus,
    VerificationStore,
    study_status,
)
from sweeper.answer._candidates import (
    NOISE_PRIOR_DF,
    Answer,
    CandidateVerdict,
    candidates,
    judge_candidate,
    study_answer,
)
from sweeper.answer._figure import answer_figure
from sweeper.errors import ERROR_ROOTS, USER_INPUT_ERRORS, MeasurementError, StudyError, UserInputError
from sweeper.manifest import Manifest
from sweeper.study import (
    Claim,
    ConfirmSettings,
    DataDefaults,
    Evaluator,
    Measurement,
    PplStatement,
    Standing,
    StudyRecipe,
    TimedPhases,
    ppl_statement,
    recipe_from_settings,
    standing,
    uncertainty_extras,
)

logger = logging.getLogger(__name__)

DEFAULT_RUN_ROOT = Path("sweeper-runs")


class VerifySettingsError(UserInputError):
    """A verify option is not valid."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerifySettings:
    """``top`` candidates, ``repeats`` fresh servers each, TPS ``tolerance`` (0.05 = 5 %).

    ``redo``: verify again the candidates that already have a verdict.
    ``control``: measure the base configuration beside each candidate (as
    many repeats, alternating), to confirm the speedup the study claims.
    ``noise``: the between-server spread of TPS (SD of log TPS, 0.10 =
    10 %) assumed until the repeats show their own; it widens the speedup
    interval when there are few repeats. None: the study's own (its
    ``sweeper run --noise``, stored with it), as the study's claim was made.

    ``claimed_speedup``: whether the study claims each candidate is faster
    than the base (one answer for all, or by trial number); None: it does
    when the candidate is not the base configuration, unless the study found
    the base over the cap or measured it at least as fast (the candidate's
    point is then the cap, not its speed). ``tuned_tps``: the figure each
    candidate's held-out median must match, by trial number (None: the
    configuration's estimate after selection, else its trial's TPS).

    ``evaluate(params, context)`` measures one repeat; None: a
    ``ServerEvaluator`` on ``base_manifest`` (None: the study's own) with the
    study's TPS settings (``recipe``, None: the stored one) and the held-out
    ``prompts`` / ``ppl_data`` (given here, else the study's recipe, else the
    held-out sets of ``data_defaults`` when the study tuned on their tuning
    sets: ``sweeper verify`` and ``sweeper run`` pass the bundled demo's); its
    servers' files go under ``run_dir`` (None:
    ``sweeper-runs/<study>/verify``). ``progress`` is told each repeat and verdict.
    """

    top: int = 3
    repeats: int = 3
    tolerance: float = 0.05
    redo: bool = False
    control: bool = True
    noise: float | None = None
    claimed_speedup: bool | Mapping[int, bool] | None = None
    tuned_tps: Mapping[int, float] | None = None
    evaluate: Evaluator | None = None
    base_manifest: Manifest | None = None
    recipe: StudyRecipe | None = None
    prompts: str | None = None
    ppl_data: str | None = None
    data_defaults: DataDefaults | None = None
    run_dir: str | Path | None = None
    progress: Callable[[VerifyEvent], None] | None = None

    def __post_init__(self) -> None:
        for name in ("top", "repeats"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise VerifySettingsError(f"verify: {name} must be a positive integer, not {value!r}")
        if (
            isinstance(self.tolerance, bool)
            or not isinstance(self.tolerance, (int, float))
            or not 0 < self.tolerance < 1
        ):
            raise VerifySettingsError(
                f"verify: tolerance must be a fraction between 0 and 1 (0.05 = 5 %), not {self.tolerance!r}"
            )
        if not isinstance(self.control, bool):
            raise VerifySettingsError(f"verify: control must be true or false, not {self.control!r}")
        prior = self.noise
        if prior is not None and (isinstance(prior, bool) or not isinstance(prior, (int, float)) or not 0 < prior < 1):
            raise VerifySettingsError(f"verify: noise must be a fraction between 0 and 1 (0.10 = 10 %), not {prior!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class BaseConfiguration:
    """The study's base configuration: the base manifest as it is (no env overrides).

    ``params``: its parameter values, as the study's trial of it recorded them
    (None when the study has no such trial: the control still runs, the
    manifest needs no values to start); ``trial_number``, ``tuned_tps`` and
    ``feasible``: that trial, its measured TPS and whether it passed the cap,
    when it has them.
    """

    params: Mapping[str, Any] | None = None
    trial_number: int | None = None
    tuned_tps: float | None = None
    feasible: bool | None = None

    def is_candidate(self, record: TrialRecord) -> bool:
        """Is this trial the base configuration itself (same params, or no overrides)?"""
        if not record.overrides:
            return True
        return self.params is not None and dict(self.params) == dict(record.params)


def base_configuration(trials: Sequence[TrialRecord]) -> BaseConfiguration:
    """The base configuration of a study, from its trial without overrides (the baseline,
    or the imported manifest's own values): a measured one first, the earliest first."""
    own = [t for t in trials if not t.overrides]
    if not own:
        return BaseConfiguration()

    def rank(t: TrialRecord) -> tuple[bool, bool, int]:
        measured = t.state == "complete" and t.tps is not None and not t.tps_imputed
        roles = t.role.split("+")
        named = BASELINE in roles or any(role.startswith("imported:") for role in roles)
        return (not measured, not named, t.number)

    best = min(own, key=rank)
    measured = best.state == "complete" and best.tps is not None and not best.tps_imputed
    return BaseConfiguration(
        params=dict(best.params),
        trial_number=best.number,
        tuned_tps=best.tps if measured else None,
        feasible=best.feasible,
    )


# -- running ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerifyEvent:
    """Told to the progress callback: a candidate or one of its repeats starts or ends."""

    kind: str  # candidate | repeat-started | repeat-finished | verdict | skipped
    trial_number: int
    repeat: int | None = None
    subject: str = CANDIDATE  # whose repeat: the candidate's, or the base's (the control)
    run: VerificationRun | None = None
    verification: VerificationRecord | None = None
    message: str = ""


def heldout_statement(verification: VerificationRecord, settings: Mapping[str, Any]) -> PplStatement | None:
    """The held-out PPL with its interval and the chance that a re-run passes the cap.

    The highest held-out PPL of the candidate's repeats (the one the verdict
    judges) with the standard error of its records; the re-run is on the
    study's ``ppl_rerun_records`` new records (else as many as were scored),
    under a relative cap with the baseline's record noise, as the gate
    judges. ``within_noise``: the cap lies inside the held-out 95 %
    interval, so a pass is no promise. None: no PPL measured.
    """
    runs = [r for r in verification.runs if r.state == "complete" and r.ppl is not None]
    if not runs:
        return None
    run = max(runs, key=lambda r: r.ppl)
    return ppl_statement(run.ppl, run.extras, verification.ppl_cap, settings)


def heldout_text(statement: PplStatement) -> str:
    """``held-out PPL 2.1600 (95 % interval ...); on 16 new records ...[; WITHIN NOISE ...]``."""
    text = f"held-out {statement.text()}"
    if statement.within_noise and statement.cap is not None:
        over = statement.cap < statement.ppl
        text += f"; WITHIN NOISE of the cap: {statement.cap:.4f} is inside the held-out interval, so " + (
            "new records may well pass it" if over else "new records may put it over the cap"
        )
    return text


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerifyResult:
    study_name: str
    verifications: tuple[VerificationRecord, ...]  # made by this call
    skipped: tuple[tuple[int, str], ...]  # (trial number, why) not verified again
    answer: Answer
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # the study's
    # the standing verification of each candidate skipped (already verified or failed)
    previous: tuple[VerificationRecord, ...] = ()

    def heldout_ppl(self, verification: VerificationRecord) -> PplStatement | None:
        return heldout_statement(verification, self.settings)

    def to_dict(self) -> dict[str, Any]:
        answer = self.answer

        def with_ppl(v: VerificationRecord) -> dict[str, Any]:
            statement = self.heldout_ppl(v)
            return {**v.to_dict(), "heldout_ppl": statement.to_dict() if statement else None}

        return {
            "study": self.study_name,
            "verifications": [with_ppl(v) for v in self.verifications],
            "skipped": [{"trial": n, "reason": why} for n, why in self.skipped],
            "previous": [with_ppl(v) for v in self.previous],
            "answer": {
                "trial": answer.record.number if answer.record else None,
                "status": answer.status,
                "tps": answer_figure(answer),
                "ppl": answer.record.ppl if answer.record else None,
            },
        }


class VerificationContext(TimedPhases):
    """What an evaluator sees of a verification repeat (the TrialContext interface).

    Nothing is written to the trial tables: phases, the server token, the
    manifest and the log tail are kept here and stored with the repeat.
    For the base's repeat (``subject`` "base") the params are the base's,
    there are no overrides and no cap: its PPL is measured in full (the same
    steps as the candidate's, so that its TPS is measured alike) and shown,
    not judged.
    """

    def __init__(
        self,
        *,
        study_name: str,
        record: TrialRecord,
        repeat: int,
        ppl_cap: float | None,
        subject: str = CANDIDATE,
        base: BaseConfiguration | None = None,
    ) -> None:
        self.study_name = study_name
        self.number = repeat
        self.trial_number = record.number
        self.subject = subject
        if subject == BASE:
            self.params = dict(base.params or {}) if base else {}
            self.overrides: dict[str, str] = {}
            self.role = f"verify #{record.number} base"
        else:
            self.params = dict(record.params)
            self.overrides = dict(record.overrides)
            self.role = f"verify #{record.number}"
        self.ppl_cap = ppl_cap
        self.known_ppl: float | None = None
        self.known_ppl_trial: int | None = None
        self.stop_requested = False
        self.phases: dict[str, float] = {}
        self.server_token: str | None = None
        self.manifest: Mapping[str, Any] | None = None
        self.log_tail = ""

    def record_phase(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + float(seconds)

    def notify_phase(self, name: str, done: int | None = None, total: int | None = None) -> None:
        """Phases of a repeat are not shown one by one (verify reports whole repeats)."""

    def notify_progress(self, name: str, done: int, total: int) -> None:
        """Not shown either."""

    def set_server_token(self, token: str) -> None:
        self.server_token = token

    def set_manifest(self, manifest: Mapping[str, Any]) -> None:
        self.manifest = dict(manifest)

    def set_log_tail(self, text: str) -> None:
        self.log_tail = text

    def set_device(self, device: Mapping[str, str]) -> None:
        self.device = dict(device)


def verify_study(
    settings: VerifySettings | None = None,
    *,
    storage: str | None,
    study_name: str | None = None,
) -> VerifyResult:
    """Verify the study's ``settings.top`` best feasible trials on held-out data.

    ``settings``: every choice of this verify (``VerifySettings``; None: its
    defaults). ``storage`` and ``study_name`` name the study (``study_name``
    None: the storage's only study).

    Raises StudyError for an unknown or empty study, or one with no feasible
    trial; UserInputError when the held-out data is missing.
    """
    settings = settings or VerifySettings()
    progress = settings.progress
    status = study_status(storage, study_name)
    study_name = status.study_name
    confirm = ConfirmSettings.from_settings(status.settings)
    # the held-out speedup is judged on the study's own noise prior unless told otherwise
    settings = dataclasses.replace(settings, noise=confirm.noise if settings.noise is None else settings.noise)
    recipe = settings.recipe if settings.recipe is not None else recipe_from_settings(status.settings)
    base = base_configuration(status.trials)
    store = VerificationStore(storage)
    try:
        latest = store.latest(study_name)
        newest = {v.trial_number: v for v in store.records(study_name)}  # oldest first: the newest wins
        chosen = _choose(status, latest, settings)
        todo = [record for record, why in chosen if why is None]
        skipped = tuple((record.number, why) for record, why in chosen if why is not None)
        for number, why in skipped:
            _emit(progress, VerifyEvent(kind="skipped", trial_number=number, message=why))
        made: list[VerificationRecord] = []
        if todo:
            data_info: dict[str, Any] = {}
            evaluate = settings.evaluate
            if evaluate is None:
                from sweeper.answer._heldout import heldout_evaluator

                run_root = Path(settings.run_dir) if settings.run_dir else DEFAULT_RUN_ROOT / study_name / "verify"
                evaluate, data_info = heldout_evaluator(
                    recipe,
                    base_manifest=settings.base_manifest,
                    prompts=settings.prompts,
                    ppl_data=settings.ppl_data,
                    defaults=settings.data_defaults,
                    run_dir=run_root,
                )
            now = standing(status.trials, confirm)
            for record in todo:
                claimed = settings.claimed_speedup
                given = claimed.get(record.number) if isinstance(claimed, Mapping) else claimed
                plan = _plan(record, base, settings, now, given, settings.tuned_tps)
                made.append(
                    _verify_one(
                        store,
                        study_name,
                        record,
                        plan,
                        settings,
                        evaluate,
                        data_info,
                        progress,
                        resumable=newest.get(record.number),
                        noise_df=confirm.prior_df,
                    )
                )
        latest = store.latest(study_name)
    finally:
        store.close()
    return VerifyResult(
        study_name=study_name,
        verifications=tuple(made),
        skipped=skipped,
        answer=study_answer(status.trials, latest, confirm),
        settings=dict(status.settings),
        previous=tuple(latest[number] for number, _ in skipped if number in latest),
    )


def _study_figure(now: Standing, record: TrialRecord, given: Mapping[int, float] | None) -> Mapping[int, float] | None:
    """The tuned figure to reproduce: the configuration's estimate after selection, the figure
    every command states for it (``Standing.tps_interval``: the reading that picked it left out)."""
    if given and record.number in given:
        return given
    config = now.configuration_of(record.number)
    return {**(given or {}), record.number: now.tps_interval(config).value} if config is not None else given


@dataclasses.dataclass(frozen=True, kw_only=True)
class _CandidatePlan:
    """How one candidate is verified: against what figure, with which control, claiming what."""

    tuned_tps: float
    control: Control
    claimed_speedup: bool
    base: BaseConfiguration


def _plan(
    record: TrialRecord,
    base: BaseConfiguration,
    settings: VerifySettings,
    now: Standing,
    claimed: bool | None,
    tuned: Mapping[int, float] | None,
) -> _CandidatePlan:
    """``claimed``: the caller's word on the speedup (None: the standing's claim decides).
    ``tuned``: the caller's figures to reproduce, by trial number (else the standing's estimate)."""
    assert record.tps is not None
    tuned = _study_figure(now, record, tuned)
    figure = float(tuned[record.number]) if tuned and record.number in tuned else float(record.tps)
    if not figure > 0 or not math.isfinite(figure):
        raise VerifySettingsError(f"verify: tuned_tps[{record.number}] must be a positive number, not {figure!r}")
    is_base = base.is_candidate(record)
    if is_base:
        control, claim = Control.IS_BASE, False
    else:
        control = Control.MEASURED if settings.control else Control.OFF
        claim = bool(claimed) if claimed is not None else now.claim_of(record.number) is Claim.FASTER
    return _CandidatePlan(tuned_tps=figure, control=control, claimed_speedup=claim, base=base)


def _choose(
    status: StudyStatus, latest: Mapping[int, VerificationRecord], settings: VerifySettings
) -> list[tuple[TrialRecord, str | None]]:
    if not status.trials:
        raise StudyError(f"study {status.study_name!r} has no trials yet: run 'sweeper run' first, then verify")
    chosen = candidates(status.trials, settings.top, ConfirmSettings.from_settings(status.settings))
    if not chosen:
        raise StudyError(
            f"study {status.study_name!r} has no feasible trial to verify (none of its "
            f"{len(status.trials)} trials passed the PPL cap): nothing to verify"
        )
    result: list[tuple[TrialRecord, str | None]] = []
    for record in chosen:
        found = latest.get(record.number)
        if found is not None and found.finished and not settings.redo:
            result.append((record, f"already {found.status} (use --redo to verify again)"))
        else:
            result.append((record, None))
    return result


def _can_resume(
    found: VerificationRecord | None, record: TrialRecord, plan: _CandidatePlan, data: Mapping[str, Any]
) -> bool:
    """An unfinished verification of the same candidate, cap, data and base: its repeats count."""
    if found is None or found.finished:
        return False

    def same(a: Any, b: Any) -> bool:
        return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)

    def measured_on(info: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in info.items() if k != "run_dir"}  # where the logs go is no matter

    base_params = None if plan.base.params is None else dict(plan.base.params)
    return (
        same(dict(found.params), dict(record.params))
        and found.ppl_cap == record.ppl_cap
        and same(measured_on(found.data), measured_on(data))
        and (not found.base_runs or same(found.base_params, base_params))
    )


def _verify_one(
    store: VerificationStore,
    study_name: str,
    record: TrialRecord,
    plan: _CandidatePlan,
    settings: VerifySettings,
    evaluate: Evaluator,
    data_info: Mapping[str, Any],
    progress: Callable[[VerifyEvent], None] | None,
    *,
    resumable: VerificationRecord | None = None,
    noise_df: float = NOISE_PRIOR_DF,
) -> VerificationRecord:
    """One candidate's repeats, stored as they end, then its verdict; ``settings.noise`` is
    the prior it is judged with (``verify_study`` has made it the study's where none was given)."""
    assert settings.noise is not None
    cap = record.ppl_cap
    assert record.tps is not None and record.ppl is not None and cap is not None
    runs: dict[int, VerificationRun] = {}
    base_runs: dict[int, VerificationRun] = {}
    if resumable is not None and _can_resume(resumable, record, plan, data_info):
        verification_id = resumable.id
        store.resume(
            verification_id,
            tuned_tps=plan.tuned_tps,
            tolerance=settings.tolerance,
            repeats=settings.repeats,
            control=plan.control,
            claimed_speedup=plan.claimed_speedup,
            noise=settings.noise,
        )
        runs = {r.repeat: r for r in resumable.runs if r.repeat < settings.repeats}
        base_runs = {r.repeat: r for r in resumable.base_runs if r.repeat < settings.repeats}
        logger.info(
            "taking up the unfinished verification of trial %d: %d candidate and %d base repeats kept",
            record.number,
            len(runs),
            len(base_runs),
        )
    else:
        verification_id = store.start(
            study_name=study_name,
            trial_number=record.number,
            params=record.params,
            tuned_tps=plan.tuned_tps,
            tuned_ppl=record.ppl,
            ppl_cap=cap,
            tolerance=settings.tolerance,
            repeats=settings.repeats,
            data=data_info,
            control=plan.control,
            claimed_speedup=plan.claimed_speedup,
            base_params=plan.base.params,
            base_trial=plan.base.trial_number,
            noise=settings.noise,
        )
    logger.info(
        "verifying trial %d (TPS %.2f, PPL %.4f): %d repeats on held-out data, control %s",
        record.number,
        plan.tuned_tps,
        record.ppl,
        settings.repeats,
        plan.control,
    )
    _emit(progress, VerifyEvent(kind="candidate", trial_number=record.number, message=_control_note(plan)))

    def repeat_of(subject: str, repeat: int) -> VerificationRun:
        event = {"trial_number": record.number, "repeat": repeat, "subject": subject}
        _emit(progress, VerifyEvent(kind="repeat-started", **event))
        run = _measure(
            evaluate,
            study_name,
            record,
            repeat,
            cap if subject == CANDIDATE else None,
            subject=subject,
            base=plan.base,
        )
        store.add_run(verification_id, run)
        _emit(progress, VerifyEvent(kind="repeat-finished", run=run, **event))
        return run

    try:
        # candidate, base, candidate, base ...: drift over the run reaches both alike
        for repeat in range(settings.repeats):
            if repeat not in runs:
                runs[repeat] = repeat_of(CANDIDATE, repeat)
            run = runs[repeat]
            if run.state != "complete" or run.ppl is None or not run.ppl <= cap:
                break  # the verdict is settled: spare the remaining servers
            if plan.control is Control.MEASURED and repeat not in base_runs:
                base_runs[repeat] = repeat_of(BASE, repeat)
    except BaseException:
        store.finish(
            verification_id,
            status=VerificationStatus.INTERRUPTED,
            reason="interrupted",
            median_tps=None,
            max_ppl=None,
        )
        raise
    verdict = judge_candidate(
        tuned_tps=plan.tuned_tps,
        ppl_cap=cap,
        runs=[runs[r] for r in sorted(runs)],
        tolerance=settings.tolerance,
        repeats=settings.repeats,
        base_runs=[base_runs[r] for r in sorted(base_runs)] if plan.control is Control.MEASURED else None,
        is_base=plan.control is Control.IS_BASE,
        claimed_speedup=plan.claimed_speedup,
        noise=settings.noise,
        noise_df=noise_df,
    )
    _finish(store, verification_id, verdict)
    logger.info("trial %d %s: %s", record.number, verdict.status.upper(), verdict.reason)
    done = next(v for v in store.records(study_name) if v.id == verification_id)
    _emit(progress, VerifyEvent(kind="verdict", trial_number=record.number, verification=done))
    return done


def _finish(store: VerificationStore, verification_id: int, verdict: CandidateVerdict) -> None:
    speedup = verdict.speedup
    store.finish(
        verification_id,
        status=verdict.status,
        reason=verdict.reason,
        median_tps=verdict.median_tps,
        max_ppl=verdict.max_ppl,
        spread=verdict.spread.relative if verdict.spread else None,
        speedup=(speedup.value, speedup.low, speedup.high) if speedup else None,
        speedup_confidence=speedup.confidence if speedup else None,
    )


def _control_note(plan: _CandidatePlan) -> str:
    if plan.control is Control.IS_BASE:
        return "the candidate is the base configuration: no control"
    if plan.control is Control.OFF:
        return "no control (switched off)"
    claim = "claimed faster than the base" if plan.claimed_speedup else "no speedup over the base claimed"
    return f"alternating with the base configuration ({claim})"


def _measure(
    evaluate: Evaluator,
    study_name: str,
    record: TrialRecord,
    repeat: int,
    cap: float | None,
    *,
    subject: str = CANDIDATE,
    base: BaseConfiguration | None = None,
) -> VerificationRun:
    context = VerificationContext(
        study_name=study_name, record=record, repeat=repeat, ppl_cap=cap, subject=subject, base=base
    )
    whose = f"trial {record.number}" if subject == CANDIDATE else f"the base beside trial {record.number}"
    began = time.monotonic()
    try:
        measurement = evaluate(dict(context.params), context)
        if not isinstance(measurement, Measurement):
            raise MeasurementError(f"the evaluator returned {type(measurement).__name__}, not a Measurement")
    except (*ERROR_ROOTS, OSError) as exc:
        if isinstance(exc, USER_INPUT_ERRORS):
            raise
        logger.warning("verification of %s, repeat %d failed: %s", whose, repeat + 1, exc)
        return VerificationRun(
            repeat=repeat,
            subject=subject,
            state="failed",
            error_kind=type(exc).__name__,
            error_message=str(exc),
            phases=dict(context.phases),
            log_tail=getattr(exc, "log_tail", "") or context.log_tail or None,
            seconds=time.monotonic() - began,
        )
    # the evaluator's own timings, and those it reported through the context (start, teardown)
    phases = {**{k: float(v) for k, v in measurement.phases.items()}, **context.phases}
    # the held-out PPL's standard error (records as the sampling unit), from its per-record rows
    extras = {**measurement.extras, **uncertainty_extras(measurement.extras, measurement.requests)}
    return VerificationRun(
        repeat=repeat,
        subject=subject,
        state="complete",
        tps=measurement.tps,
        ppl=math.inf if measurement.extras.get("ppl_infinite") else measurement.ppl,
        early_stopped=measurement.early_stopped,
        phases=phases,
        extras=extras,
        log_tail=measurement.log_tail or context.log_tail or None,
        seconds=time.monotonic() - began,
    )


def _emit(progress: Callable[[VerifyEvent], None] | None, event: VerifyEvent) -> None:
    if progress is None:
        return
    try:
        progress(event)
    except Exception:  # noqa: BLE001 - a display problem must not cost a verification
        logger.exception("verify progress callback failed")
