"""Trials left RUNNING by a worker that died (SIGKILL, power loss, a lost machine).

On start-up every worker looks at the study's RUNNING trials. A trial is
stale when its worker is gone: on this host, the process that ran it no
longer exists (or is another process with the same pid); elsewhere, its
heartbeat in our table is older than ``stale_after_s``. A stale trial:

* whose result was already recorded in our table (the worker died between
  recording and telling Optuna) is completed with that result, so no
  measured trial is lost;
* otherwise is marked failed, the server it may have left behind is stopped
  (by its server token, on this host), and its configuration is
  queued again once (a second death means the configuration itself may be
  the cause, so it is not queued a third time).

Whichever worker wins Optuna's state change does this; the others skip it.
"""

from __future__ import annotations

import datetime
import logging
import os
from collections.abc import Callable
from pathlib import Path

import optuna
from optuna.trial import TrialState

from storage import TPS_IMPUTED_ATTR, TrialOutcome, TrialRecord, TrialStore
from sweeper.errors import StudyError
from sweeper.study._gate import CONSTRAINT, PplGate

logger = logging.getLogger(__name__)

ROLE_ATTR = "sweeper:role"
RETRIES_ATTR = "sweeper:retries"
RETRIED_ATTR = "sweeper:retried"
RETRY_OF_ATTR = "sweeper:retry_of"
MAX_RETRIES = 1


def process_started_after(pid: int, moment: datetime.datetime) -> bool | None:
    """Did process ``pid`` start after ``moment``? None when /proc cannot tell."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = next(
            int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime ")
        )
    except (OSError, StopIteration, ValueError):
        return None
    ticks = int(stat[stat.rfind(")") + 2 :].split()[19])
    started = boot + ticks / os.sysconf("SC_CLK_TCK")
    return started > moment.timestamp() + 1.0


def owner_alive(record: TrialRecord, host: str) -> bool | None:
    """Is the worker that ran ``record`` alive? None when it ran on another host."""
    if record.host != host:
        return None
    if record.pid == os.getpid():
        return False  # a new process that got the dead one's pid
    try:
        os.kill(record.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return not process_started_after(record.pid, record.started_at)


def fail_trial(
    study: optuna.Study,
    trial: optuna.trial.FrozenTrial,
    *,
    requeue: bool,
    count_retry: bool = True,
) -> bool:
    """Tell Optuna the trial failed, queueing its configuration again if asked and allowed.

    ``count_retry=False`` (an interruption: not the configuration's fault)
    queues it again whatever its retries. False when the trial was already
    finished (by another worker).
    """
    retries = int(trial.user_attrs.get(RETRIES_ATTR, 0))
    params = dict(trial.params or trial.system_attrs.get("fixed_params", {}))
    requeue = requeue and bool(params) and (not count_retry or retries < MAX_RETRIES)
    if count_retry:
        retries += 1
    try:
        if requeue:  # marked before the state change: a finished trial takes no attributes
            # Optuna has no public setter for a trial known only by its FrozenTrial
            study._storage.set_trial_user_attr(trial._trial_id, RETRIED_ATTR, True)
        study.tell(trial.number, state=TrialState.FAIL)
    except (ValueError, RuntimeError) as exc:
        logger.debug("trial %d was already finished: %s", trial.number, exc)
        return False
    if requeue:
        role = str(trial.user_attrs.get(ROLE_ATTR, "sampled"))
        study.enqueue_trial(
            params,
            user_attrs={ROLE_ATTR: role, RETRY_OF_ATTR: trial.number, RETRIES_ATTR: retries},
        )
        logger.info("trial %d's configuration is queued again", trial.number)
    return True


def recover_stale_trials(
    study: optuna.Study,
    store: TrialStore,
    *,
    host: str,
    stale_after_s: float,
    kill_server: Callable[[str], object],
) -> list[int]:
    """Finish or fail every stale RUNNING trial; returns their numbers.

    Cheap when nothing is stale (only RUNNING trials are read), so a worker
    calls it before each trial: a dead worker's trial never blocks the others.
    """
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    if not running:
        return []
    numbers = [t.number for t in running]
    records = {r.number: r for r in store.records(study.study_name, numbers=numbers)}
    now = datetime.datetime.now(datetime.timezone.utc)
    recovered = []
    for trial in running:
        record = records.get(trial.number)
        if record is None:
            started = trial.datetime_start
            age = (datetime.datetime.now() - started).total_seconds() if started else 0.0
            if age > stale_after_s:
                _fail(study, trial, None, store, "no record: the worker died as the trial began")
                recovered.append(trial.number)
            continue
        alive = owner_alive(record, host)
        heartbeat_age = (now - record.heartbeat_at).total_seconds()
        if alive is True or (alive is None and heartbeat_age <= stale_after_s):
            continue
        recovered.append(trial.number)
        if record.state == "complete":
            _complete_from_record(study, trial, record)
            continue
        if record.server_token and record.host == host:
            if kill_server(record.server_token):
                logger.warning("stopped the server left behind by trial %d", trial.number)
        why = (
            f"worker pid {record.pid} on {record.host} died while trial {trial.number} ran"
            if alive is False
            else f"worker on {record.host} silent for {heartbeat_age:.0f} s"
        )
        _fail(study, trial, record, store, why)
    return recovered


def _complete_from_record(study: optuna.Study, trial: optuna.trial.FrozenTrial, record: TrialRecord) -> None:
    """The result was recorded but Optuna never heard of it: tell it now."""
    if record.tps is None or record.ppl is None or record.ppl_cap is None:
        raise StudyError(f"trial {record.number} is stored complete without its TPS, PPL and cap")
    ppl = PplGate.model_ppl(record.ppl, record.ppl_cap)
    values = [record.tps] if len(study.directions) == 1 else [record.tps, ppl]
    live = optuna.trial.Trial(study, trial._trial_id)  # no public way to reopen a FrozenTrial
    for key, value in (("tps", record.tps), ("ppl", record.ppl), ("feasible", record.feasible)):
        live.set_user_attr(key, value)
    if record.tps_imputed:
        live.set_user_attr(TPS_IMPUTED_ATTR, True)
    live.set_constraint(CONSTRAINT, PplGate.constraint(record.ppl, record.ppl_cap))
    try:
        study.tell(trial.number, values)
    except (ValueError, RuntimeError) as exc:  # another worker finished it first
        logger.debug("trial %d already finished elsewhere: %s", trial.number, exc)
        return
    logger.warning("trial %d: recorded result told to Optuna after its worker died", trial.number)


def _fail(
    study: optuna.Study,
    trial: optuna.trial.FrozenTrial,
    record: TrialRecord | None,
    store: TrialStore,
    why: str,
) -> None:
    if not fail_trial(study, trial, requeue=True):
        return
    logger.warning("trial %d marked failed: %s", trial.number, why)
    if record is not None:
        store.finish_trial(
            study.study_name,
            trial.number,
            TrialOutcome(state="stale", error_kind="WorkerDied", error_message=why),
        )
