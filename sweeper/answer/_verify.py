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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

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
    CandidateVerdict,
    candidates,
    judge_candidate,
    study_answer,
)
from sweeper.answer._verify_repeat import measure_repeat
from sweeper.answer._verify_result import VerifyEvent, VerifyResult
from sweeper.answer._verify_settings import (
    DEFAULT_RUN_ROOT,
    BaseConfiguration,
    VerifySettings,
    VerifySettingsError,
    base_configuration,
)
from sweeper.errors import StudyError
from sweeper.study import (
    Claim,
    ConfirmSettings,
    Evaluator,
    Standing,
    recipe_from_settings,
    standing,
)

logger = logging.getLogger(__name__)


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
    verification_id, runs, base_runs = _open_verification(
        store, study_name, record, plan, settings, data_info, resumable
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
        _emit(progress, VerifyEvent(kind="repeat-started", trial_number=record.number, repeat=repeat, subject=subject))
        run = measure_repeat(
            evaluate,
            study_name,
            record,
            repeat,
            cap if subject == CANDIDATE else None,
            subject=subject,
            base=plan.base,
        )
        store.add_run(verification_id, run)
        _emit(
            progress,
            VerifyEvent(kind="repeat-finished", trial_number=record.number, repeat=repeat, subject=subject, run=run),
        )
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
    verdict = _judge(plan, cap, runs, base_runs, settings, noise_df)
    _finish(store, verification_id, verdict)
    logger.info("trial %d %s: %s", record.number, verdict.status.upper(), verdict.reason)
    done = next(v for v in store.records(study_name) if v.id == verification_id)
    _emit(progress, VerifyEvent(kind="verdict", trial_number=record.number, verification=done))
    return done


def _open_verification(
    store: VerificationStore,
    study_name: str,
    record: TrialRecord,
    plan: _CandidatePlan,
    settings: VerifySettings,
    data_info: Mapping[str, Any],
    resumable: VerificationRecord | None,
) -> tuple[int, dict[int, VerificationRun], dict[int, VerificationRun]]:
    """The verification's id and the candidate's and base's repeats kept, by repeat: an
    unfinished one taken up (``_can_resume``), else a new one started with none."""
    if resumable is not None and _can_resume(resumable, record, plan, data_info):
        store.resume(
            resumable.id,
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
        return resumable.id, runs, base_runs
    assert record.ppl is not None and record.ppl_cap is not None  # a candidate passed the cap
    verification_id = store.start(
        study_name=study_name,
        trial_number=record.number,
        params=record.params,
        tuned_tps=plan.tuned_tps,
        tuned_ppl=record.ppl,
        ppl_cap=record.ppl_cap,
        tolerance=settings.tolerance,
        repeats=settings.repeats,
        data=data_info,
        control=plan.control,
        claimed_speedup=plan.claimed_speedup,
        base_params=plan.base.params,
        base_trial=plan.base.trial_number,
        noise=settings.noise,
    )
    return verification_id, {}, {}


def _judge(
    plan: _CandidatePlan,
    cap: float,
    runs: Mapping[int, VerificationRun],
    base_runs: Mapping[int, VerificationRun],
    settings: VerifySettings,
    noise_df: float,
) -> CandidateVerdict:
    """The candidate's verdict on its repeats (and the base's, when measured), in repeat order."""
    assert settings.noise is not None
    return judge_candidate(
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


def _emit(progress: Callable[[VerifyEvent], None] | None, event: VerifyEvent) -> None:
    if progress is None:
        return
    try:
        progress(event)
    except Exception:  # noqa: BLE001 - a display problem must not cost a verification
        logger.exception("verify progress callback failed")
