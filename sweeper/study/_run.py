"""run_study: the quality-gated search loop over a pluggable evaluate callable.

Each trial: the sampler proposes params, the search space turns them into
env overrides, ``evaluate`` measures TPS and PPL, our tables keep every
detail, and Optuna is told the objective(s) with the PPL gate as a
constraint. The loop survives failed trials, stops cleanly on Ctrl-C or
SIGTERM, and a second run of the same command resumes the same study.

Claims are confirmed (``sweeper.study._race_decision``): after each trial the
study's standing is replayed from the stored trials, and a contender that
measured faster than the incumbent, but not clearly so, gets a round of
confirmation trials (contender, incumbent, base; role ``confirm``) queued
ahead of the sampler. Those do not count against ``n_trials``, and a race
still open when ``n_trials`` is reached is run to its end.

What ends a run early: ``max_consecutive_failures`` failed trials in a row
(a refused configuration neither counts nor breaks the run of failures: it
is an answer about that configuration, not about the night), and, under a
relative cap, a baseline that failed twice (no trial could be judged).
Before the first trial and after each one, servers that a dead worker left
behind are stopped through their tokens. The study is opened (created, or
resumed) by ``open_study`` (``_study_open.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

import optuna

from search_spaces import SearchSpace
from storage import (
    STUDY_ATTR_PREFIX,
    StudyStatus,
    TrialRecord,
    TrialStore,
    normalize_url,
    redact,
    study_status,
)
from sweeper import invocation
from sweeper.errors import ServerStopError, StudyError
from sweeper.serving import stop_servers_with_token
from sweeper.study._evaluator import Evaluator
from sweeper.study._gate import PplGate, reference_ppl
from sweeper.study._options import StudyOptions, StudyOptionsError
from sweeper.study._race_replay import standing
from sweeper.study._recovery import RETRIED_ATTR, ROLE_ATTR, recover_stale_trials
from sweeper.study._standing import ROUND_ATTR_PREFIX, is_confirmation
from sweeper.study._study_open import ENQUEUED_ATTR, open_study
from sweeper.study._trial import TrialRunner
from sweeper.study._trial_outcome import is_baseline
from sweeper.study._trial_tell import REFUSED

logger = logging.getLogger(__name__)

# study attributes that mark how far the runs got (queued races, the first enqueue done), not
# how the study measures: they are not among its settings as shown
PROGRESS_MARKS = (ENQUEUED_ATTR, ROUND_ATTR_PREFIX)


def public_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A study's stored settings as ``status --json`` and ``run --json`` show them.

    The marks of progress (``PROGRESS_MARKS``) are left out, the noise prior is
    ``noise`` (its one name, in older studies too), and ``ppl_cap`` is the
    cap in force: under a relative cap, the baseline's PPL times ``ppl_cap_rel``
    once the baseline is measured (None until then).
    """
    marks = tuple(mark[len(STUDY_ATTR_PREFIX) :] for mark in PROGRESS_MARKS)
    shown = {key: value for key, value in settings.items() if not key.startswith(marks)}
    if "noise_prior" in shown:  # the name a study stored its --noise under before it had one name
        shown.setdefault("noise", shown.pop("noise_prior"))
    if shown.get("ppl_cap") is None and shown.get("ppl_cap_rel") is not None:
        shown["ppl_cap"] = PplGate.from_settings(shown).cap_for(shown.get("reference_ppl"))
    return shown


@dataclasses.dataclass(frozen=True, kw_only=True)
class StudyResult:
    """How a run_study call ended, and the study as it stands."""

    study_name: str
    storage: str
    stop_reason: str  # n_trials | timeout | interrupted | terminated | stopped
    trials_run: int
    status: StudyStatus

    @property
    def best(self) -> TrialRecord | None:
        return self.status.best

    @property
    def pareto(self) -> tuple[TrialRecord, ...]:
        return self.status.pareto


def run_study(space: SearchSpace, evaluate: Evaluator, options: StudyOptions) -> StudyResult:
    """Search ``space`` with ``evaluate(params[, context]) -> Measurement``.

    ``options``: every setting of the run as one ``StudyOptions`` (what
    ``sweeper run``'s plan hands down). ``options.storage`` is a SQLAlchemy URL
    or a path (default: ./sweeper-study.db); an existing study of that name
    is resumed. ``n_trials`` counts the study's trials, not this call's.
    ``mode`` "tps" maximizes TPS under the gate, "pareto" maximizes TPS and
    minimizes PPL. ``sampler``: guided (the default), gp, tpe, nsga2, random
    or grid, seeded by ``seed``. ``enqueue``: configs tried first, after the
    space's own (the baseline first when the cap is relative).
    ``reuse_quality``: a configuration whose quality parameters were
    measured before gets that PPL as ``context.known_ppl`` and may return
    ``ppl=None``. ``confirm``: the races that confirm the best (default:
    none, the best as measured wins; ``sweeper run`` races with
    ``ConfirmSettings(rounds=6)``, 4 on the demo). ``enqueue_base``: the base
    manifest's configuration is the first trial (the control every stated
    speedup is measured against; always so under a relative cap).
    ``stop_event``: set it (from a progress callback or another thread) to
    end after the running trial. ``trial_timeout_s``: one trial's wall-clock
    limit (default: ``evaluate.trial_timeout_s`` if it has one). ``gate``: the
    PPL cap (``PplGate``: absolute or relative; with ``confidence``, a
    configuration passes only when its PPL's upper bound at that level, on
    ``rerun_records`` fresh records, is under the cap); None: the gate
    stored in the study.
    """
    if not isinstance(options, StudyOptions):
        raise StudyOptionsError(f"run_study: options must be StudyOptions, not {type(options).__name__}")
    return Sweep(space, evaluate, options).run()


def _stop_left_behind(token: str) -> list[int]:
    """Stop a dead worker's server; one that survives SIGKILL is logged, not fatal."""
    try:
        return stop_servers_with_token(token)
    except ServerStopError as exc:
        logger.error("a server left behind could not be stopped: %s", exc)
        return exc.pids


class Sweep:
    """One worker's run over a study (several may share it through PostgreSQL)."""

    def __init__(self, space: SearchSpace, evaluate: Evaluator, options: StudyOptions) -> None:
        self.space = space if space.bound else space.bind({})
        self.options = options
        self.url = normalize_url(options.storage)
        self.store = TrialStore(self.url)
        self.host = socket.gethostname()
        self.stop_event = options.stop_event or threading.Event()
        self.stop_reason: str | None = None
        self.study, self.gate = open_study(self.space, options, url=self.url, recover=self._recover)
        self.runner = TrialRunner(
            study=self.study,
            store=self.store,
            space=self.space,
            gate=self.gate,
            evaluate=evaluate,
            options=options,
            host=self.host,
            stop_event=self.stop_event,
        )

    def _recover(self, study: optuna.Study) -> None:
        recover_stale_trials(
            study,
            self.store,
            host=self.host,
            stale_after_s=self.options.stale_after_s,
            kill_server=_stop_left_behind,
        )

    # -- the loop -----------------------------------------------------------------

    def _counted_trials(self) -> int:
        """Trials that use the budget: measured, failed and running ones.

        Interrupted trials and those of dead workers are queued again, so
        they do not count; nor do confirmation trials (races have their own
        budget: ``confirm.rounds``).
        """
        return sum(
            1
            for record in self.store.records(self.options.study_name)
            if record.state in ("complete", "failed", "running", REFUSED) and not is_confirmation(record.role)
        )

    def _queue_race(self) -> bool:
        """Queue the next round of an open race; True while confirmation trials wait to run."""
        records = self.store.records(self.options.study_name)
        race = standing(records, self.options.confirm).race
        if race is not None and not self._confirmations_pending():  # a round at a time
            marker = race.marker
            if not self.study.user_attrs.get(marker):
                self.study.set_user_attr(marker, True)
                lineup = race.lineup()
                for config in lineup:
                    self.study.enqueue_trial(
                        dict(config.params),
                        user_attrs={ROLE_ATTR: race.role},
                    )
                logger.info(
                    "%s, round %d: trial %d (%.2f tok/s as measured) against %s, trial %d (%.2f): re-measuring %s",
                    "claim rounds" if race.claim else "confirmation race",
                    race.round,
                    race.contender.first,
                    race.contender.estimate,
                    "the base" if race.claim else "the incumbent",
                    race.incumbent.first,
                    race.incumbent.estimate,
                    ", ".join(f"trial {c.first}" for c in lineup),
                )
        return self._confirmations_pending(waiting_only=True)

    def _confirmations_pending(self, *, waiting_only: bool = False) -> bool:
        """Are confirmation trials queued (or, unless ``waiting_only``, running)?"""
        states = (optuna.trial.TrialState.WAITING,) + (() if waiting_only else (optuna.trial.TrialState.RUNNING,))
        return any(
            t.state in states and is_confirmation(str(t.user_attrs.get(ROLE_ATTR, "")))
            for t in self.study.get_trials(deepcopy=False)
        )

    def _budget_left(self, started: float) -> bool:
        opts = self.options
        if self.stop_event.is_set():
            self.stop_reason = self.stop_reason or "stopped"
            return False
        races_waiting = self._queue_race()
        if opts.n_trials is not None and self._counted_trials() >= opts.n_trials:
            if races_waiting:  # the budget is spent, but the claim is not settled yet
                return self._time_left(started)
            self.stop_reason = "n_trials"
            return False
        return self._time_left(started)

    def _time_left(self, started: float) -> bool:
        timeout_s = self.options.timeout_s
        if timeout_s is not None and time.monotonic() - started >= timeout_s:
            self.stop_reason = "timeout"
            logger.info("timeout reached: no new trial is started")
            return False
        return True

    def run(self) -> StudyResult:
        started = time.monotonic()
        trials_run = 0
        consecutive: list[TrialRecord] = []
        previous = self._install_signals()
        try:
            while self._budget_left(started):
                record = self.runner.run_one()
                self._recover(self.study)  # another worker's dead trial must not block this one
                trials_run += 1
                if record.state == "interrupted":
                    self.stop_reason = self.stop_reason or "interrupted"
                    break
                self._check_baseline(record)
                if record.state == "failed":
                    consecutive = consecutive + [record]
                elif record.state != REFUSED:  # a refusal neither counts nor breaks the run
                    consecutive = []
                if len(consecutive) >= self.options.max_consecutive_failures:
                    raise StudyError(self._failure_message(consecutive))
        finally:
            self._restore_signals(previous)
            self.store.close()
        return StudyResult(
            study_name=self.options.study_name,
            storage=redact(self.url),
            stop_reason=self.stop_reason or "interrupted",
            trials_run=trials_run,
            status=study_status(self.url, self.options.study_name),
        )

    def _check_baseline(self, record: TrialRecord) -> None:
        """Under a relative cap, stop at once when the baseline failed and is not tried again."""
        if (
            not self.gate.relative
            or record.state == "complete"
            or not is_baseline(record.role)
            or reference_ppl(self.study) is not None
        ):
            return
        trial = next(t for t in self.study.get_trials(deepcopy=False) if t.number == record.number)
        if trial.user_attrs.get(RETRIED_ATTR):
            return  # queued again: the next trial is its retry
        attempts = [
            r for r in self.store.records(self.options.study_name) if is_baseline(r.role) and r.state != "complete"
        ]
        tail = (record.log_tail or "").strip().splitlines()
        hint = f" Last server log line: {tail[-1]!r}." if tail else ""
        raise StudyError(
            f"the baseline failed {len(attempts)} time(s) "
            f"({', '.join(f'#{r.number}: {r.error_kind}' for r in attempts)}), so the relative "
            f"cap ({self.gate.describe()}) has no reference and no trial can be judged: "
            f"stopping now. The last attempt, trial {record.number} with {dict(record.params)}, "
            f"failed with {record.error_kind}: {record.error_message}.{hint} Fix the base "
            f"manifest (it must serve as is), or give an absolute cap with --ppl-cap; see "
            f"'{invocation.command('status')} --study {self.options.study_name} --storage {redact(self.url)} "
            f"--trial {record.number}'."
        )

    def _failure_message(self, failed: list[TrialRecord]) -> str:
        last = failed[-1]
        tail = (last.log_tail or "").strip().splitlines()
        hint = f" Last server log line: {tail[-1]!r}." if tail else ""
        kinds = sorted({r.error_kind or "error" for r in failed})
        return (
            f"stopped after {len(failed)} consecutive failed trials "
            f"({', '.join(f'#{r.number}' for r in failed)}: {', '.join(kinds)}). "
            f"The last one, trial {last.number} with {dict(last.params)}, failed with "
            f"{last.error_kind}: {last.error_message}.{hint} Look at its error and server log "
            f"with '{invocation.command('status')} --study {self.options.study_name} --storage "
            f"{redact(self.url)} --trial {last.number}'; a server that cannot start at all "
            f"usually means a bad base manifest or a busy port, one that crashes on some "
            f"settings means the search space reaches values the server cannot take."
        )

    # -- signals ------------------------------------------------------------------

    def _install_signals(self) -> dict[int, Any]:
        if not self.options.handle_signals or threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[int, Any] = {}
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, self._on_signal)
        return previous

    def _restore_signals(self, previous: dict[int, Any]) -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        first = not self.stop_event.is_set()
        self.stop_event.set()
        self.stop_reason = self.stop_reason or ("terminated" if signum == signal.SIGTERM else "interrupted")
        if first:
            logger.warning("%s: stopping after marking the running trial", name)
            self.runner.interrupt(name)
        else:
            logger.warning("%s again: already stopping", name)
