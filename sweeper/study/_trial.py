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

``TrialRunner`` runs the trial (ask, start, evaluate under the watchdog and
the heartbeat); ``TrialJudge`` (``_trial_outcome.py``) turns its measurement
into the outcome stored; ``tell_outcome`` (``_trial_tell.py``) tells Optuna.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from typing import Any

import optuna

from search_spaces import SearchSpace
from storage import TrialOutcome, TrialRecord, TrialStore
from sweeper.errors import ERROR_ROOTS, MeasurementError, ServerError
from sweeper.serving import FailureKind, classify
from sweeper.study._evaluator import Evaluator, Measurement, TrialContext, TrialEvent
from sweeper.study._gate import PplGate
from sweeper.study._options import StudyOptions
from sweeper.study._race_replay import standing
from sweeper.study._recovery import ROLE_ATTR, fail_trial
from sweeper.study._trial_outcome import TrialJudge
from sweeper.study._trial_tell import REFUSED, frozen_trial, tell_outcome
from sweeper.study._watchdog import TrialTimedOut, TrialWatchdog
from sweeper.versions import software_versions

logger = logging.getLogger(__name__)

# phases of the measuring side: a failure after one of them is not a start failure
_MEASURING_PHASES = frozenset({"ppl", "warmup", "tps", "fidelity", "reference"})


class TrialInterrupted(BaseException):
    """Raised inside evaluate by the SIGINT/SIGTERM handler."""

    def __init__(self, signal_name: str) -> None:
        self.signal_name = signal_name
        super().__init__(f"interrupted by {signal_name}")


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
        self.judge = TrialJudge(
            study=study, store=store, space=space, gate=gate, options=options, stop_event=stop_event
        )
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
            fail_trial(self.study, frozen_trial(self.study, trial), requeue=False)
            raise
        context = self._start(trial, role, params, overrides)
        start = time.monotonic()
        with _Heartbeat(self.store, context.study_name, trial.number, self.options.stale_after_s / 4):
            outcome, error = self._evaluate(trial, context)
        if outcome.state == REFUSED:
            outcome = self.judge.refused(trial, context, outcome)
        self.store.finish_trial(context.study_name, trial.number, outcome)
        tell_outcome(self.study, trial, outcome, role=role, gate=self.gate)
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
        cap = self.judge.cap(role, None, trial.number)
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
        known_ppl, known_trial = self.judge.known_ppl(params, role)
        floor = self.judge.screen_floor(role)
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
            return self.judge.complete(trial, context.role, measurement, context), None
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
