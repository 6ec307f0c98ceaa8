"""Which parameters mattered: PED-ANOVA importance for TPS and for PPL, on measured trials only."""

from __future__ import annotations

import json
import logging
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from storage import TPS_IMPUTED_ATTR, optuna_storage

logger = logging.getLogger(__name__)

# below this many measured trials an importance estimate is noise, and is not shown
MIN_IMPORTANCE_TRIALS = 5


def confounded(configurations: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The pairs of settings that changed together in every configuration: each takes more
    than one value and each one's value fixes the other's, both ways. No importance can
    tell such settings' effects apart: every configuration changed both or neither."""
    distinct = list({json.dumps(dict(c), sort_keys=True, default=str): dict(c) for c in configurations}.values())
    names = sorted({name for config in distinct for name in config})
    varying = [n for n in names if len({repr(c.get(n)) for c in distinct}) > 1]
    pairs = []
    for index, a in enumerate(varying):
        for b in varying[index + 1 :]:
            both = {(repr(c.get(a)), repr(c.get(b))) for c in distinct}
            if len(both) == len({x for x, _ in both}) == len({y for _, y in both}):
                pairs.append((a, b))
    return pairs


def confounded_text(pairs: Sequence[tuple[str, str]], configurations: int) -> str:
    """Why importance is not drawn for ``pairs`` (``confounded``) over ``configurations``."""
    named = "; ".join(f"{a} and {b}" for a, b in pairs)
    return (
        f"not drawn: {named} changed together in all {configurations} configurations measured, "
        "so none of them separates their effects"
    )


def importance(url: str, study_name: str) -> tuple[dict[str, dict[str, float]], str]:
    """Importance of each parameter for reaching the best quarter of TPS, and of PPL.

    Optuna's PED-ANOVA evaluator (no scikit-learn needed), on measured values
    only: a trial whose TPS is a stand-in (stopped early or refused: the
    slowest TPS seen, told to the sampler) or that has no figure is left out
    of that target, so a stand-in cannot make a parameter look important.
    Nothing is computed where two settings changed together in every
    configuration measured (``confounded``): importance would split between
    them what no configuration can tell apart; the note says which.
    """
    import optuna

    storage = optuna_storage(url)
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
        complete = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE]
        result: dict[str, dict[str, float]] = {}
        counted: dict[str, int] = {}
        for target in ("tps", "ppl"):
            usable = [t for t in complete if _measured(t, target)]
            counted[target] = len(usable)
            if len(usable) < MIN_IMPORTANCE_TRIALS:
                continue
            pairs = confounded([t.params for t in usable])
            if pairs:
                configurations = len({json.dumps(t.params, sort_keys=True, default=str) for t in usable})
                return {}, confounded_text(pairs, configurations)
            sign = -1.0 if target == "tps" else 1.0  # PED-ANOVA ranks low values as good
            scratch = optuna.create_study(direction="minimize")  # in memory: the measured values only
            scratch.add_trials(
                optuna.trial.create_trial(
                    params=t.params, distributions=t.distributions, value=sign * float(t.user_attrs[target])
                )
                for t in usable
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                values = optuna.importance.get_param_importances(
                    scratch, evaluator=optuna.importance.PedAnovaImportanceEvaluator(target_quantile=0.25)
                )
            result[target] = {name: float(value) for name, value in values.items()}
        if not result and max(counted.values(), default=0) < MIN_IMPORTANCE_TRIALS:
            return {}, f"needs at least {MIN_IMPORTANCE_TRIALS} measured trials ({counted.get('tps', 0)} so far)"
        note = "" if result else "no parameter varied across the measured trials"
        return result, note
    except (RuntimeError, ValueError, ZeroDivisionError) as exc:
        logger.info("parameter importance not computed: %s", exc)
        return {}, f"not computed ({exc})"
    finally:
        storage.remove_session()


def _measured(trial: Any, target: str) -> bool:
    """Does the Optuna trial carry a measured, finite figure for ``target`` (not a stand-in)?"""
    value = trial.user_attrs.get(target)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    return not (target == "tps" and trial.user_attrs.get(TPS_IMPUTED_ATTR))
