"""Verification: does a tuned number reproduce on data the study never tuned on?

``verify_study`` re-measures the study's best feasible trials on the
held-out prompts and PPL records, ``repeats`` times each, every time in a
fresh server (the study's own ``ServerEvaluator``, fed held-out data). A
candidate is VERIFIED when its held-out PPL is under the cap in force in
every repeat and the median held-out TPS is within ``tolerance`` of the
tuned TPS (either way: a number that does not match is not the number the
study reported). A repeat that fails, or a PPL over the cap, settles the
verdict at once and the remaining repeats are skipped.

The verdicts feed the study's answer (``sweeper.answer.study_answer``): the
fastest verified trial; while none is verified, the fastest feasible one,
flagged as unverified.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from storage import (
    StudyStatus,
    TrialRecord,
    VerificationRecord,
    VerificationRun,
    VerificationStore,
    study_status,
)
from storage import INTERRUPTED
from sweeper.answer._candidates import Answer, candidates, judge, study_answer
from sweeper.errors import MeasurementError, SweeperError, UserInputError
from sweeper.manifest import Manifest
from sweeper.study import Evaluator, Measurement, StudyRecipe, recipe_from_settings

logger = logging.getLogger(__name__)

DEFAULT_RUN_ROOT = Path("sweeper-runs")


class VerifySettingsError(UserInputError):
    """A verify option is not valid."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerifySettings:
    """``top`` candidates, ``repeats`` fresh servers each, TPS ``tolerance`` (0.05 = 5 %).

    ``redo``: verify again the candidates that already have a verdict.
    """

    top: int = 3
    repeats: int = 3
    tolerance: float = 0.05
    redo: bool = False

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


# -- running ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerifyEvent:
    """Told to the progress callback: a candidate or one of its repeats starts or ends."""

    kind: str  # candidate | repeat-started | repeat-finished | verdict | skipped
    trial_number: int
    repeat: int | None = None
    run: VerificationRun | None = None
    verification: VerificationRecord | None = None
    message: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerifyResult:
    study_name: str
    verifications: tuple[VerificationRecord, ...]  # made by this call
    skipped: tuple[tuple[int, str], ...]  # (trial number, why) not verified again
    answer: Answer

    def to_dict(self) -> dict[str, Any]:
        answer = self.answer
        return {
            "study": self.study_name,
            "verifications": [v.to_dict() for v in self.verifications],
            "skipped": [{"trial": n, "reason": why} for n, why in self.skipped],
            "answer": {
                "trial": answer.record.number if answer.record else None,
                "status": answer.status,
                "tps": answer.record.tps if answer.record else None,
                "ppl": answer.record.ppl if answer.record else None,
            },
        }


class VerificationContext:
    """What an evaluator sees of a verification repeat (the TrialContext interface).

    Nothing is written to the trial tables: phases, the server token, the
    manifest and the log tail are kept here and stored with the repeat.
    """

    def __init__(
        self, *, study_name: str, record: TrialRecord, repeat: int, ppl_cap: float
    ) -> None:
        self.study_name = study_name
        self.number = repeat
        self.trial_number = record.number
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

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        began = time.monotonic()
        try:
            yield
        finally:
            self.record_phase(name, time.monotonic() - began)

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
    *,
    storage: str | None,
    study_name: str | None = None,
    settings: VerifySettings | None = None,
    top: int | None = None,
    repeats: int | None = None,
    tolerance: float | None = None,
    evaluate: Evaluator | None = None,
    base_manifest: Manifest | None = None,
    recipe: StudyRecipe | None = None,
    prompts: str | None = None,
    ppl_data: str | None = None,
    run_dir: str | Path | None = None,
    progress: Callable[[VerifyEvent], None] | None = None,
) -> VerifyResult:
    """Verify the study's ``settings.top`` best feasible trials on held-out data.

    ``evaluate(params, context)`` measures one repeat; by default a
    ``ServerEvaluator`` on the base manifest with the study's TPS settings
    and the held-out ``prompts`` / ``ppl_data`` (given here, else the
    study's recipe, else the bundled demo's held-out sets when the study
    tuned on the demo's). ``top``/``repeats``/``tolerance`` replace those of
    ``settings``. Raises StudyError for an unknown or empty study, or one
    with no feasible trial; UserInputError when the held-out data is missing.
    """
    settings = settings or VerifySettings()
    changes = {"top": top, "repeats": repeats, "tolerance": tolerance}
    settings = dataclasses.replace(settings, **{k: v for k, v in changes.items() if v is not None})
    status = study_status(storage, study_name)
    study_name = status.study_name
    recipe = recipe if recipe is not None else recipe_from_settings(status.settings)
    store = VerificationStore(storage)
    try:
        latest = store.latest(study_name)
        chosen = _choose(status, latest, settings)
        todo = [record for record, why in chosen if why is None]
        skipped = tuple((record.number, why) for record, why in chosen if why is not None)
        for number, why in skipped:
            _emit(progress, VerifyEvent(kind="skipped", trial_number=number, message=why))
        made: list[VerificationRecord] = []
        if todo:
            data_info: dict[str, Any] = {}
            if evaluate is None:
                from sweeper.answer._heldout import heldout_evaluator

                run_root = Path(run_dir) if run_dir else DEFAULT_RUN_ROOT / study_name / "verify"
                evaluate, data_info = heldout_evaluator(
                    recipe, base_manifest=base_manifest, prompts=prompts, ppl_data=ppl_data,
                    run_dir=run_root,
                )  # fmt: skip
            for record in todo:
                made.append(
                    _verify_one(store, study_name, record, settings, evaluate, data_info, progress)
                )
        latest = store.latest(study_name)
    finally:
        store.close()
    return VerifyResult(
        study_name=study_name,
        verifications=tuple(made),
        skipped=skipped,
        answer=study_answer(status.trials, latest),
    )


def _choose(
    status: StudyStatus, latest: Mapping[int, VerificationRecord], settings: VerifySettings
) -> list[tuple[TrialRecord, str | None]]:
    from sweeper.errors import StudyError

    if not status.trials:
        raise StudyError(
            f"study {status.study_name!r} has no trials yet: run 'sweeper run' first, then verify"
        )
    chosen = candidates(status.trials, settings.top)
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


def _verify_one(
    store: VerificationStore,
    study_name: str,
    record: TrialRecord,
    settings: VerifySettings,
    evaluate: Evaluator,
    data_info: Mapping[str, Any],
    progress: Callable[[VerifyEvent], None] | None,
) -> VerificationRecord:
    cap = record.ppl_cap
    assert record.tps is not None and record.ppl is not None and cap is not None
    verification_id = store.start(
        study_name=study_name,
        trial_number=record.number,
        params=record.params,
        tuned_tps=record.tps,
        tuned_ppl=record.ppl,
        ppl_cap=cap,
        tolerance=settings.tolerance,
        repeats=settings.repeats,
        data=data_info,
    )
    logger.info(
        "verifying trial %d (TPS %.2f, PPL %.4f): %d repeats on held-out data",
        record.number, record.tps, record.ppl, settings.repeats,
    )  # fmt: skip
    _emit(progress, VerifyEvent(kind="candidate", trial_number=record.number))
    runs: list[VerificationRun] = []
    try:
        for repeat in range(settings.repeats):
            _emit(progress, VerifyEvent(kind="repeat-started", trial_number=record.number, repeat=repeat))
            run = _measure(evaluate, study_name, record, repeat, cap)
            store.add_run(verification_id, run)
            runs.append(run)
            _emit(
                progress,
                VerifyEvent(kind="repeat-finished", trial_number=record.number, repeat=repeat, run=run),
            )
            if run.state != "complete" or run.ppl is None or not run.ppl <= cap:
                break  # the verdict is settled: spare the remaining servers
    except BaseException:
        store.finish(verification_id, status=INTERRUPTED, reason="interrupted", median_tps=None, max_ppl=None)
        raise
    verdict = judge(
        tuned_tps=record.tps, ppl_cap=cap, runs=runs, tolerance=settings.tolerance,
        repeats=settings.repeats,
    )  # fmt: skip
    store.finish(
        verification_id,
        status=verdict.status,
        reason=verdict.reason,
        median_tps=verdict.median_tps,
        max_ppl=verdict.max_ppl,
    )
    logger.info("trial %d %s: %s", record.number, verdict.status.upper(), verdict.reason)
    done = next(v for v in store.records(study_name) if v.id == verification_id)
    _emit(progress, VerifyEvent(kind="verdict", trial_number=record.number, verification=done))
    return done


def _measure(
    evaluate: Evaluator, study_name: str, record: TrialRecord, repeat: int, cap: float
) -> VerificationRun:
    context = VerificationContext(study_name=study_name, record=record, repeat=repeat, ppl_cap=cap)
    began = time.monotonic()
    try:
        measurement = evaluate(dict(record.params), context)
        if not isinstance(measurement, Measurement):
            raise MeasurementError(
                f"the evaluator returned {type(measurement).__name__}, not a Measurement"
            )
    except (SweeperError, OSError) as exc:
        if isinstance(exc, UserInputError):
            raise
        logger.warning("verification of trial %d, repeat %d failed: %s", record.number, repeat + 1, exc)
        return VerificationRun(
            repeat=repeat,
            state="failed",
            error_kind=type(exc).__name__,
            error_message=str(exc),
            phases=dict(context.phases),
            log_tail=getattr(exc, "log_tail", "") or context.log_tail or None,
            seconds=time.monotonic() - began,
        )
    # the evaluator's own timings, and those it reported through the context (start, teardown)
    phases = {**{k: float(v) for k, v in measurement.phases.items()}, **context.phases}
    return VerificationRun(
        repeat=repeat,
        state="complete",
        tps=measurement.tps,
        ppl=math.inf if measurement.extras.get("ppl_infinite") else measurement.ppl,
        early_stopped=measurement.early_stopped,
        phases=phases,
        extras=dict(measurement.extras),
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
