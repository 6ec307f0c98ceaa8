"""What Optuna is told of a finished trial (our table has stored it already).

A complete trial is told with its TPS (and, in pareto mode, its PPL as the
models see it) and the gate's constraint. A refused configuration is told
as a COMPLETE trial that violates the constraint, as an infinite PPL would,
with an imputed TPS, so samplers steer away from it. Any other failure
fails the trial: an interrupted one is queued again, a failed baseline under
a relative cap once more (nothing can be judged without its PPL).
"""

from __future__ import annotations

import logging
import math

import optuna

from storage import TPS_IMPUTED_ATTR, TrialOutcome
from sweeper.serving import FailureKind
from sweeper.study._gate import BOUND_KEY, CONSTRAINT, PplGate, reference_ppl
from sweeper.study._recovery import fail_trial
from sweeper.study._trial_outcome import is_baseline

logger = logging.getLogger(__name__)

REFUSED = FailureKind.REFUSED.value
REFUSED_ATTR = "sweeper:refused"


def tell_outcome(
    study: optuna.Study, trial: optuna.trial.Trial, outcome: TrialOutcome, *, role: str, gate: PplGate
) -> None:
    """Tell Optuna how ``trial`` (of ``role``, judged by ``gate``) ended (module docstring)."""
    if outcome.state == "complete":
        _tell_complete(study, trial, outcome)
    elif outcome.state == REFUSED:
        _tell_refused(study, trial, outcome)
    else:
        if outcome.error_message:
            message = f"{outcome.error_kind}: {outcome.error_message}"
            trial.set_user_attr("error", message[:2000])
        interrupted = outcome.state == "interrupted"
        if interrupted:
            fail_trial(study, frozen_trial(study, trial), requeue=True, count_retry=False)
        elif (
            is_baseline(role)
            and gate.relative
            and reference_ppl(study) is None
            and outcome.error_kind != REFUSED  # refused again if tried again
        ):
            # nothing can be judged without the baseline's PPL: one more try
            if fail_trial(study, frozen_trial(study, trial), requeue=True):
                logger.warning("baseline trial %d failed: queued again once", trial.number)
        else:
            fail_trial(study, frozen_trial(study, trial), requeue=False)


def frozen_trial(study: optuna.Study, trial: optuna.trial.Trial) -> optuna.trial.FrozenTrial:
    """``trial`` as stored."""
    # Optuna has no public read of one trial by id (study.get_trials reads them all)
    return study._storage.get_trial(trial._trial_id)


def _tell_refused(study: optuna.Study, trial: optuna.trial.Trial, outcome: TrialOutcome) -> None:
    """Optuna learns the configuration as infeasible (COMPLETE, constraint violated)."""
    # a refusal is told only with a cap and a stand-in TPS (TrialJudge.refused)
    assert outcome.ppl_cap is not None and outcome.tps is not None
    trial.set_user_attr("feasible", False)
    trial.set_user_attr(TPS_IMPUTED_ATTR, True)
    trial.set_user_attr(REFUSED_ATTR, True)
    trial.set_user_attr("error", f"{outcome.error_kind}: {outcome.error_message}"[:2000])
    trial.set_constraint(CONSTRAINT, PplGate.constraint(math.inf, outcome.ppl_cap))
    ppl = PplGate.model_ppl(math.inf, outcome.ppl_cap)
    values = [outcome.tps] if len(study.directions) == 1 else [outcome.tps, ppl]
    study.tell(trial, values)
    logger.warning(
        "trial %d: the server refused the configuration: told to Optuna as infeasible",
        trial.number,
    )


def _tell_complete(study: optuna.Study, trial: optuna.trial.Trial, outcome: TrialOutcome) -> None:
    """Optuna learns the trial's TPS (and PPL as its models see it) and the gate's constraint."""
    # a complete outcome carries its figures and its cap (TrialJudge.complete)
    assert outcome.tps is not None and outcome.ppl is not None and outcome.ppl_cap is not None
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
    values = [outcome.tps] if len(study.directions) == 1 else [outcome.tps, ppl]
    study.tell(trial, values)
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
