"""Samplers by name, and the guided sampler that wraps ``GuidedPlan`` for Optuna."""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from search_spaces import SearchSpace
from storage import TPS_IMPUTED_ATTR
from sweeper.errors import UserInputError
from sweeper.study._gate import CONSTRAINT
from sweeper.study._guided import GuidedPlan
from sweeper.study._recovery import ROLE_ATTR
from sweeper.study._standing import is_confirmation
from sweeper.study._window_readings import Observation

logger = logging.getLogger(__name__)

SAMPLERS = ("guided", "gp", "tpe", "nsga2", "random", "grid")
DEFAULT_SAMPLER = "guided"  # the benchmark's best in both modes (docs/study.md)
MODES = ("tps", "pareto")


class SamplerError(UserInputError):
    """An unknown sampler or mode name."""


def make_sampler(name: str | None, *, space: SearchSpace, mode: str = "tps", seed: int | None = None) -> BaseSampler:
    """The sampler called ``name`` (None: the default, guided), seeded."""
    if mode not in MODES:
        raise SamplerError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    name = name or DEFAULT_SAMPLER
    if name == "guided":
        return GuidedSampler(space, seed=seed)
    if name == "gp":
        if not gp_available():
            raise SamplerError("the gp sampler needs scipy and torch: pip install scipy torch")
        return optuna.samplers.GPSampler(seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "grid":
        return optuna.samplers.GridSampler(space.grid(), seed=seed)
    raise SamplerError(f"sampler must be one of {', '.join(SAMPLERS)}, not {name!r}")


def gp_available() -> bool:
    """Optuna's GPSampler imports scipy and torch when it first fits."""
    return all(importlib.util.find_spec(name) is not None for name in ("scipy", "torch"))


def observations(trials: Sequence[FrozenTrial]) -> list[Observation]:
    """Completed trials as the guided plan reads them (TPS, and ppl - cap from the constraint)."""
    found = []
    for trial in trials:
        if trial.state != TrialState.COMPLETE or CONSTRAINT not in trial.constraints:
            continue
        imputed = bool(trial.user_attrs.get(TPS_IMPUTED_ATTR))
        found.append(
            Observation(
                number=trial.number,
                params=dict(trial.params),
                tps=None if imputed else float(trial.values[0]),
                gate=float(trial.constraints[CONSTRAINT]),
                searched=not _is_race(trial),
            )
        )
    return found


def _is_race(trial: FrozenTrial) -> bool:
    """A confirmation trial: a race's re-measurement, queued by the study, not proposed by the sampler."""
    return is_confirmation(str(trial.user_attrs.get(ROLE_ATTR, "")))


REDRAWS = 100  # random draws for an untried configuration before a repeat is accepted


def _config_key(params: dict[str, Any], search_space: dict[str, BaseDistribution]) -> tuple:
    return tuple((name, params.get(name)) for name in search_space)


def _params_of(trial: FrozenTrial) -> dict[str, Any]:
    return dict(trial.system_attrs.get("fixed_params", trial.params))


class GuidedSampler(BaseSampler):
    """``GuidedPlan`` first; when it has nothing to propose, the fallback (GP) takes over."""

    def __init__(self, space: SearchSpace, *, seed: int | None = None, fallback: BaseSampler | None = None) -> None:
        self._space = space
        self._plan = GuidedPlan(space)
        if fallback is None and not gp_available():
            logger.warning("scipy or torch missing: the guided search falls back to TPE, not GP")
            fallback = optuna.samplers.TPESampler(seed=seed)
        self._fallback = fallback or optuna.samplers.GPSampler(seed=seed)
        # draws an untried configuration when the fallback proposes a tried one
        self._redraw = optuna.samplers.RandomSampler(seed=seed)

    def reseed_rng(self) -> None:
        self._fallback.reseed_rng()
        self._redraw.reseed_rng()

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self._space.distributions()

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if not search_space:
            return {}
        # get_trials reads the storage, never the trial cache of an optimize loop: other workers add trials
        trials = study.get_trials(deepcopy=False)
        others = [t for t in trials if t.number != trial.number]
        waiting = [t for t in others if t.state in (TrialState.RUNNING, TrialState.WAITING)]
        pending = [_params_of(t) for t in waiting]
        # a configuration that failed (and is not queued again) is not proposed again
        failed = [_params_of(t) for t in others if t.state == TrialState.FAIL]
        racing = sum(_is_race(t) for t in waiting)
        proposal = self._plan.propose(observations(others), pending, failed, racing=racing)
        if proposal is None:
            measured = [_params_of(t) for t in others if t.state == TrialState.COMPLETE]
            return self._untried(study, trial, search_space, [*measured, *pending, *failed])
        logger.debug("guided proposal for trial %d: %s", trial.number, proposal)
        return {name: value for name, value in proposal.items() if name in search_space}

    def _untried(
        self,
        study: Study,
        trial: FrozenTrial,
        search_space: dict[str, BaseDistribution],
        tried: Sequence[dict[str, Any]],
    ) -> dict[str, Any]:
        """The fallback's proposal, unless it was tried already: then a random untried one.

        A GP fitted to the history can come back to a configuration it has
        seen; re-measuring it overnight would cost a server start for nothing
        (races re-measure on purpose, as confirmation trials). After
        ``REDRAWS`` random draws that were all tried, the fallback's proposal
        stands (a small space may be used up).
        """
        proposal = dict(self._fallback.sample_relative(study, trial, search_space))
        for name, distribution in search_space.items():
            if name not in proposal:  # what Optuna would ask the fallback one by one (a GP's start-up)
                proposal[name] = self._fallback.sample_independent(study, trial, name, distribution)
        seen = {_config_key(params, search_space) for params in tried}
        if _config_key(proposal, search_space) not in seen:
            return proposal
        for _ in range(REDRAWS):
            drawn = {
                name: self._redraw.sample_independent(study, trial, name, distribution)
                for name, distribution in search_space.items()
            }
            if _config_key(drawn, search_space) not in seen:
                logger.debug("trial %d: the fallback proposed a tried configuration; drew %s", trial.number, drawn)
                return drawn
        return proposal

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self._fallback.before_trial(study, trial)

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self._fallback.after_trial(study, trial, state, values)
