"""One trial of a study: ask, evaluate, record, tell.

A trial that fails is recorded with its failure kind (``error_kind``:
``oom-start``, ``crash``, ``timeout``, ``refused``, ... as
``sweeper.serving.classify`` names them). A refused configuration (the
server rejected its settings) is not a failure to Optuna: it is told as a
COMPLETE trial that violates the ``ppl_gate`` constraint (as an infinite
PPL would), with an imputed TPS, so samplers steer away from it; our table
keeps it as state ``refused``. An evaluation that runs past the trial's
wall-clock limit is ended by a ``TrialWatchdog`` (kind ``timeout``). With a
relative cap, a failed baseline is queued again once.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import optuna

from evaluators.intervals import screen_floor
from search_spaces import BASELINE, SearchSpace
from storage import TPS_IMPUTED_ATTR, TrialOutcome, TrialRecord, TrialStore
from sweeper.errors import ERROR_ROOTS, MeasurementError, ServerError, StorageError, StudyError
from sweeper.serving import FailureKind, classify
from sweeper.study._evaluator import Evaluator, Measurement, TrialContext, TrialEvent
from sweeper.study._gate import (
    BOUND_KEY,
    CONSTRAINT,
    PplGate,
    measured_uncertainty,
    paired_stderr,
    record_rows,
    reference_estimate,
    reference_ppl,
    reference_trial,
    set_reference,
    wait_for_reference,
)
from sweeper.study._options import StudyOptions
from sweeper.study._race_replay import standing
from sweeper.study._recovery import RETRIED_ATTR, ROLE_ATTR, fail_trial
from sweeper.study._standing import Standing, is_confirmation
from sweeper.study._watchdog import TrialTimedOut, TrialWatchdog
from sweeper.versions import software_versions

logger = logging.getLogger(__name__)
# how long a trial waits for the baseline's per-record PPL rows to pair its own with
PAIRING_WAIT_S = 30.0

REFUSED = FailureKind.REFUSED.value
REFUSED_ATTR = "sweeper:refused"
# phases of the measuring side: a failure after one of them is not a start failure
_MEASURING_PHASES = frozenset({"ppl", "warmup", "tps", "fidelity", "reference"})


class TrialInterrupted(BaseException):
    """Raised inside evaluate by the SIGINT/SIGTERM handler."""

    def __init__(self, signal_name: str) -> None:
        self.signal_name = signal_name
        super().__init__(f"interrupted by {signal_name}")


def is_baseline(role: str) -> bool:
    return BASELINE in role.split("+")


class _Heartbeat:
    """Refreshes the trial's heartbeat in our table while it runs."""

    def __init__(self, store: TrialStore, study_name: str, number: int, interval_s: float) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(store, study_name, number, interval_s), daemon=True)

    def _beat(self, store: TrialStore, study_name: str, number: int, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                store.beat(study_name, number)
            except ERROR_ROOTS as exc:
                logger.warning("heartbeat of trial %d not recorded: %s", number, exc)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)


class TrialRunner:
    def __init__(
        self,
        *,
        study: optuna.Study,
        store: TrialStore,
        space: SearchSpace,
        gate: PplGate,
        evaluate: Evaluator,
        options: StudyOptions,
        host: str,
        stop_event: threading.Event,
    ) -> None:
        self.study = study
        self.store = store
        self.space = space
        self.gate = gate
        self.evaluate = evaluate
        self.options = options
        self.host = host
        self.stop_event = stop_event
        self._in_evaluate = False

    def interrupt(self, signal_name: str) -> None:
        """Called from the signal handler: abort evaluate (its cleanup runs), else just stop."""
        if self._in_evaluate:
            raise TrialInterrupted(signal_name)

    def _emit(self, event: TrialEvent) -> None:
        if self.options.progress is None:
            return
        try:
            self.options.progress(event)
        except Exception:  # noqa: BLE001 - a display problem must not cost a trial
            logger.exception("progress callback failed")

    def _known_ppl(self, params: Mapping[str, Any], role: str) -> tuple[float | None, int | None]:
        """A PPL measured before with the same quality parameters (always reused by a re-measurement)."""
        if not self.options.reuse_quality and not is_confirmation(role):
            return None, None
        key = self.space.quality_key(params)
        for record in self.store.records(self.study.study_name, states=["complete"]):
            if (
                record.ppl is not None
                and record.ppl_reused_from is None
                and not record.early_stopped
                and self.space.quality_key(record.params) == key
            ):
                return record.ppl, record.number
        return None, None

    def _incumbent_screens(self) -> tuple[Standing, list[tuple[float, float]]]:
        """The standing, and (full TPS, screen TPS) of each incumbent trial that ran a screen."""
        records = self.store.records(self.study.study_name)
        now = standing(records, self.options.confirm)
        if now.incumbent is None:
            return now, []
        by_number = {r.number: r for r in records}
        pairs = []
        for number in now.incumbent.numbers:
            record = by_number.get(number)
            screen = record.extras.get("tps_screen") if record is not None else None
            if record is not None and record.tps and isinstance(screen, (int, float)) and screen > 0:
                pairs.append((float(record.tps), float(screen)))
        return now, pairs

    def _from_screen(self, screen_tps: float) -> float:
        """A screened-out trial's full TPS as the incumbent's full/screen ratio predicts it.

        Stored as imputed (never an answer) but told to the samplers as a speed
        figure: it is measured, at a lower fidelity, and the search needs it.
        """
        _, pairs = self._incumbent_screens()
        if not pairs:
            return screen_tps
        return screen_tps * math.exp(sum(math.log(full / screen) for full, screen in pairs) / len(pairs))

    def _screen_floor(self, role: str) -> float | None:
        """The screen TPS below which a new configuration cannot beat the study's best.

        The incumbent's screen figures (geometric mean), less two standard
        errors of a difference of single figures at the study's spread: a
        contender that reads below that in the screen is very unlikely to
        read above the incumbent in full. 0.0 (screen, but measure in full):
        the baseline, and while the incumbent has no screen figure; None (no
        screen at all): re-measurements, whose full figure is what they are for.
        """
        if is_confirmation(role):
            return None
        if is_baseline(role):
            return 0.0
        now, pairs = self._incumbent_screens()
        if not pairs:
            return 0.0
        return screen_floor([screen for _, screen in pairs], spread=now.spread.relative)

    def _paired_with_reference(self, number: int, rows: Sequence[Mapping[str, Any]]) -> tuple[float, int] | None:
        """log(PPL / baseline PPL)'s standard error from the two trials' per-record rows.

        The baseline sets the reference PPL before its own record is stored, so another
        worker may get here first: it waits up to ``PAIRING_WAIT_S`` for the baseline's
        rows. Without them (or without common records) the gate adds the two standard
        errors in quadrature, and says so.
        """
        reference = reference_trial(self.study)
        if reference is None:
            return None
        own = record_rows(rows)
        if not own:  # no per-record rows of its own: nothing to pair (the gate says why)
            return None
        baseline_rows = rows if reference == number else self._baseline_ppl_rows(reference)
        paired = paired_stderr(own, record_rows(baseline_rows))
        if paired is None:
            logger.warning(
                "trial %d: no per-record PPL rows in common with the baseline (trial %d): the "
                "relative cap adds the two standard errors in quadrature",
                number,
                reference,
            )
        return paired

    def _baseline_ppl_rows(self, reference: int) -> Sequence[Mapping[str, Any]]:
        deadline = time.monotonic() + PAIRING_WAIT_S
        while True:
            try:
                record = self.store.record(self.study.study_name, reference, details=True)
            except StorageError:  # not recorded yet
                record = None
            if record is not None and (
                record.state != "running" or any(r.get("kind") == "ppl" for r in record.requests)
            ):
                return record.requests
            if time.monotonic() >= deadline or self.stop_event.is_set():
                return record.requests if record is not None else []
            time.sleep(1.0)

    def _cap(
        self,
        role: str,
        ppl: float | None,
        number: int,
        uncertainty: tuple[float | None, int | None] = (None, None),
    ) -> float | None:
        """The cap in force; with a relative gate the baseline sets it, others may wait for it."""
        if not self.gate.relative:
            return self.gate.cap
        reference = reference_ppl(self.study)
        if reference is None and ppl is not None and is_baseline(role):
            stderr, records = uncertainty
            set_reference(self.study, ppl, number, stderr_log_ppl=stderr, records=records)
            reference = ppl
        if reference is None and ppl is not None:
            reference = wait_for_reference(self.study, self._baseline_finished, should_stop=self.stop_event.is_set)
        return self.gate.cap_for(reference)

    def _baseline_finished(self) -> bool:
        """A baseline trial ended and will not be tried again (a queued retry still may)."""
        return any(
            t.state.is_finished()
            and is_baseline(str(t.user_attrs.get(ROLE_ATTR, "")))
            and not t.user_attrs.get(RETRIED_ATTR)
            for t in self.study.get_trials(deepcopy=False)
        )

    def trial_limit(self) -> float | None:
        """The wall-clock limit of one evaluation: the option, else the evaluator's own."""
        if self.options.trial_timeout_s is not None:
            return self.options.trial_timeout_s
        own = getattr(self.evaluate, "trial_timeout_s", None)
        return float(own) if isinstance(own, (int, float)) and own > 0 else None

    # -- one trial ------------------------------------------------------------------

    def run_one(self) -> TrialRecord:
        """Ask, evaluate, record and tell one trial; returns its record."""
        trial = self.study.ask()
        role = str(trial.user_attrs.get(ROLE_ATTR, "sampled"))
        try:
            params = self.space.suggest(trial)
            overrides = self.space.overrides(params)
        except BaseException:
            fail_trial(self.study, self._frozen(trial), requeue=False)
            raise
        context = self._start(trial, role, params, overrides)
        start = time.monotonic()
        with _Heartbeat(self.store, context.study_name, trial.number, self.options.stale_after_s / 4):
            outcome, error = self._evaluate(trial, context)
        if outcome.state == REFUSED:
            outcome = self._refused_outcome(trial, context, outcome)
        self.store.finish_trial(context.study_name, trial.number, outcome)
        if outcome.state == "complete":
            self._tell_complete(trial, outcome)
        elif outcome.state == REFUSED:
            self._tell_refused(trial, outcome)
        else:
            if outcome.error_message:
                message = f"{outcome.error_kind}: {outcome.error_message}"
                trial.set_user_attr("error", message[:2000])
            interrupted = outcome.state == "interrupted"
            if interrupted:
                fail_trial(self.study, self._frozen(trial), requeue=True, count_retry=False)
            elif (
                is_baseline(role)
                and self.gate.relative
                and reference_ppl(self.study) is None
                and outcome.error_kind != REFUSED  # refused again if tried again
            ):
                # nothing can be judged without the baseline's PPL: one more try
                if fail_trial(self.study, self._frozen(trial), requeue=True):
                    logger.warning("baseline trial %d failed: queued again once", trial.number)
            else:
                fail_trial(self.study, self._frozen(trial), requeue=False)
        if error is not None:
            raise error
        record = self.store.record(context.study_name, trial.number, details=False)
        if self.options.progress is not None:
            now = standing(self.store.records(context.study_name), self.options.confirm)
            best = now.incumbent
            self._emit(
                self._event(
                    context,
                    "finished",
                    state=record.state,
                    tps=None if record.tps_imputed else record.tps,  # a stand-in is not a reading
                    ppl=record.ppl,
                    feasible=record.feasible,
                    error=record.error_message,
                    best_number=best.first if best else None,
                    best_tps=now.tps_interval(best).value if best else None,
                    claim=now.describe(),
                    elapsed_s=time.monotonic() - start,
                )
            )
        return record

    @staticmethod
    def _event(context: TrialContext, kind: str, **fields: Any) -> TrialEvent:
        return TrialEvent(
            kind=kind,
            study_name=context.study_name,
            number=context.number,
            params=context.params,
            role=context.role,
            **fields,
        )

    def _start(
        self,
        trial: optuna.trial.Trial,
        role: str,
        params: dict[str, Any],
        overrides: dict[str, str],
    ) -> TrialContext:
        """Record the trial as running and build its context."""
        study_name = self.study.study_name
        cap = self._cap(role, None, trial.number)
        self.store.start_trial(
            study_name=study_name,
            number=trial.number,
            optuna_trial_id=trial._trial_id,  # Optuna exposes the storage id of a trial only privately
            params=params,
            overrides=overrides,
            role=role,
            host=self.host,
            pid=os.getpid(),
            ppl_cap=cap,
        )
        known_ppl, known_trial = self._known_ppl(params, role)
        floor = self._screen_floor(role)
        event = functools.partial(TrialEvent, study_name=study_name, number=trial.number, params=params, role=role)
        context = TrialContext(
            study_name=study_name,
            number=trial.number,
            params=params,
            overrides=overrides,
            role=role,
            ppl_cap=cap,
            known_ppl=known_ppl,
            known_ppl_trial=known_trial,
            screen_floor=floor,
            store=self.store,
            stop_event=self.stop_event,
            on_phase=lambda name, done, total: self._emit(event(kind="phase", phase=name, done=done, total=total)),
            on_progress=lambda name, done, total: self._emit(
                event(kind="progress", phase=name, done=done, total=total)
            ),
        )
        self._emit(self._event(context, "started"))
        logger.info("trial %d (%s): %s", trial.number, role, params)
        return context

    def _evaluate(self, trial: optuna.trial.Trial, context: TrialContext) -> tuple[TrialOutcome, BaseException | None]:
        """The trial's outcome, and an error to raise once it is recorded (a bug, not a failure)."""
        params = context.params
        limit = self.trial_limit()
        watchdog = TrialWatchdog(limit, token=lambda: context.server_token) if limit is not None else None
        try:
            try:
                self._in_evaluate = True
                if watchdog is not None:
                    with watchdog:
                        measurement = self.evaluate(params, context)
                else:
                    measurement = self.evaluate(params, context)
            finally:
                self._in_evaluate = False
            if not isinstance(measurement, Measurement):
                raise MeasurementError(f"the evaluator returned {type(measurement).__name__}, not a Measurement")
            return self._complete(trial, context.role, measurement, context), None
        except (TrialInterrupted, KeyboardInterrupt) as exc:
            self.stop_event.set()
            why = f"interrupted by {getattr(exc, 'signal_name', 'SIGINT')}"
            return self._failed(context, "interrupted", "Interrupted", why), None
        except (ServerError, MeasurementError, TrialTimedOut) as exc:
            log_tail = getattr(exc, "log_tail", "") or context.log_tail
            if watchdog is not None and watchdog.expired:
                why = (
                    f"the trial ran past its {watchdog.limit_s:.0f} s limit; its server was "
                    f"stopped ({len(watchdog.stopped_pids)} process(es)); the evaluator then "
                    f"ended with {type(exc).__name__}: {exc}"
                )
                return self._failed(context, "failed", FailureKind.TIMEOUT.value, why, log_tail), None
            kind = self._kind(exc, context, log_tail)
            state = REFUSED if kind.infeasible else "failed"
            return self._failed(context, state, kind.value, str(exc), log_tail), None
        except BaseException as exc:
            return self._failed(context, "failed", type(exc).__name__, str(exc)), exc

    @staticmethod
    def _kind(exc: BaseException, context: TrialContext, log_tail: str) -> FailureKind:
        """The failure's kind: the evaluator's, else classified here from what is known."""
        measured = {name for name, _ in context.recorded_phases} & _MEASURING_PHASES
        return classify(log_tail, exc, during_start=isinstance(exc, ServerError) and not measured)

    def _frozen(self, trial: optuna.trial.Trial) -> optuna.trial.FrozenTrial:
        # Optuna has no public read of one trial by id (study.get_trials reads them all)
        return self.study._storage.get_trial(trial._trial_id)

    def _failed(self, context: TrialContext, state: str, kind: str, message: str, log_tail: str = "") -> TrialOutcome:
        logger.warning("trial %d %s: %s: %s", context.number, state, kind, message)
        return TrialOutcome(
            state=state,
            error_kind=kind,
            error_message=message,
            log_tail=log_tail or context.log_tail or None,
            server_token=context.server_token,
            versions=software_versions(),
        )

    def _complete(
        self,
        trial: optuna.trial.Trial,
        role: str,
        measurement: Measurement,
        context: TrialContext,
    ) -> TrialOutcome:
        ppl, reused_from = measurement.ppl, None
        if ppl is None:
            if context.known_ppl is None:
                raise MeasurementError("evaluate returned no PPL, and none could be reused")
            ppl, reused_from = context.known_ppl, context.known_ppl_trial
        uncertainty = measured_uncertainty(measurement.extras, measurement.requests)
        rows: Sequence[Mapping[str, Any]] = measurement.requests
        if reused_from is not None:  # the PPL's figures are the measuring trial's
            measured = self.store.record(self.study.study_name, reused_from, details=self.gate.relative)
            uncertainty = measured_uncertainty(measured.extras)
            rows = measured.requests
        cap = self._cap(role, ppl, trial.number, uncertainty)
        verdict = self.gate.judge_ppl(
            float(ppl),
            cap,
            stderr_log_ppl=uncertainty[0],
            records=uncertainty[1],
            reference=reference_estimate(self.study) if self.gate.relative else None,
            paired=self._paired_with_reference(trial.number, rows) if self.gate.relative else None,
        )
        tps, imputed = measurement.tps, False
        if tps is None and measurement.screened:  # the screen's figure, scaled, stands in
            tps, imputed = self._from_screen(float(measurement.extras["tps_screen"])), True
        elif tps is None:  # stopped early over the cap: the slowest TPS seen stands in
            tps, imputed = self._slowest_tps(), True
        return TrialOutcome(
            state="complete",
            tps=float(tps),
            ppl=float(ppl),
            ppl_cap=cap,
            feasible=verdict.passes,
            ppl_reused_from=reused_from,
            early_stopped=measurement.early_stopped,
            tps_imputed=imputed,
            extras={
                **measurement.extras,
                **verdict.extras(),
                **({"screened": True} if measurement.screened else {}),
            },
            versions={**software_versions(), **measurement.versions},
            # phases already stored through the context are not stored twice
            phases=[
                (name, seconds)
                for name, seconds in measurement.phases.items()
                if name not in {recorded for recorded, _ in context.recorded_phases}
            ],
            requests=list(measurement.requests),
            manifest=measurement.manifest or context.manifest,
            log_tail=measurement.log_tail or context.log_tail or None,
            server_token=measurement.server_token or context.server_token,
        )

    def _refused_outcome(self, trial: optuna.trial.Trial, context: TrialContext, outcome: TrialOutcome) -> TrialOutcome:
        """A refusal as stored: infeasible, the cap in force, the slowest TPS seen standing in."""
        if self.gate.relative and reference_ppl(self.study) is None and is_baseline(context.role):
            cap = None  # the baseline itself was refused: nothing can be judged
        elif self.gate.relative and reference_ppl(self.study) is None:
            try:  # another worker runs the baseline
                reference = wait_for_reference(self.study, self._baseline_finished, should_stop=self.stop_event.is_set)
            except StudyError as exc:  # no cap will ever come: recorded as a failure
                logger.warning("trial %d: refused, and no cap to judge it by: %s", trial.number, exc)
                return dataclasses.replace(outcome, state="failed")
            cap = self.gate.cap_for(reference)
        else:
            cap = self._cap(context.role, None, trial.number)
        if cap is None:  # told to Optuna as a failure: see run_one
            return dataclasses.replace(outcome, state="failed")
        return dataclasses.replace(outcome, ppl_cap=cap, feasible=False, tps=self._slowest_tps(), tps_imputed=True)

    def _slowest_tps(self) -> float:
        measured = [
            r.tps
            for r in self.store.records(self.study.study_name, states=["complete"])
            if r.tps is not None and not r.tps_imputed
        ]
        return min(measured) if measured else 0.0

    def _tell_refused(self, trial: optuna.trial.Trial, outcome: TrialOutcome) -> None:
        """Optuna learns the configuration as infeasible (COMPLETE, constraint violated)."""
        assert outcome.ppl_cap is not None and outcome.tps is not None
        trial.set_user_attr("feasible", False)
        trial.set_user_attr(TPS_IMPUTED_ATTR, True)
        trial.set_user_attr(REFUSED_ATTR, True)
        trial.set_user_attr("error", f"{outcome.error_kind}: {outcome.error_message}"[:2000])
        trial.set_constraint(CONSTRAINT, PplGate.constraint(math.inf, outcome.ppl_cap))
        ppl = PplGate.model_ppl(math.inf, outcome.ppl_cap)
        values = [outcome.tps] if len(self.study.directions) == 1 else [outcome.tps, ppl]
        self.study.tell(trial, values)
        logger.warning(
            "trial %d: the server refused the configuration: told to Optuna as infeasible",
            trial.number,
        )

    def _tell_complete(self, trial: optuna.trial.Trial, outcome: TrialOutcome) -> None:
        trial.set_user_attr("tps", outcome.tps)
        trial.set_user_attr("ppl", outcome.ppl)
        trial.set_user_attr("feasible", outcome.feasible)
        if outcome.ppl_reused_from is not None:
            trial.set_user_attr("ppl_reused_from", outcome.ppl_reused_from)
        if outcome.tps_imputed and not outcome.extras.get("screened"):
            trial.set_user_attr(TPS_IMPUTED_ATTR, True)  # a screened trial's figure is a measurement
        # Optuna's models see an infinite PPL as twice the cap (our table keeps the real value)
        ppl = PplGate.model_ppl(outcome.ppl, outcome.ppl_cap)
        # the gate's PPL: the point estimate, or its upper bound under a confidence gate
        judged = float(outcome.extras.get(BOUND_KEY, outcome.ppl))
        trial.set_constraint(CONSTRAINT, PplGate.constraint(judged, outcome.ppl_cap))
        values = [outcome.tps] if len(self.study.directions) == 1 else [outcome.tps, ppl]
        self.study.tell(trial, values)
        # an imputed figure (the slowest seen, for the samplers) is no reading: the log says so
        speed = f"TPS imputed {outcome.tps:.2f} (not measured)" if outcome.tps_imputed else f"TPS {outcome.tps:.2f}"
        logger.info(
            "trial %d: %s, PPL %.4f (cap %.4f) %s",
            trial.number,
            speed,
            outcome.ppl,
            outcome.ppl_cap,
            "passes" if outcome.feasible else "FAILS the gate",
        )
