"""SearchSpace: the parameters of a study and how they become manifest env overrides."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from typing import Any

from optuna.distributions import BaseDistribution

from search_spaces._parameter import Parameter
from search_spaces._target import MISSING
from search_spaces.errors import BaseValueError, SearchSpaceError

logger = logging.getLogger(__name__)

BASELINE = "baseline"


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnqueuedConfig:
    """A configuration tried before the sampler's own: ``params=None`` is the base manifest."""

    name: str
    params: Mapping[str, Any] | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchSpace:
    """An ordered set of parameters (a condition may only name an earlier one).

    A space read from a file is *unbound*; ``bind(base_env)`` checks it
    against a base manifest's env, drops the parameters whose ``env_set``
    condition that manifest does not meet, and remembers the env so that
    ``overrides`` and ``base_values`` need no argument.
    """

    name: str
    parameters: tuple[Parameter, ...]
    description: str = ""
    enqueue: tuple[EnqueuedConfig, ...] = ()
    base_env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    bound: bool = False
    source: str = "<search space>"

    # -- lookup -------------------------------------------------------------

    def parameter(self, name: str) -> Parameter:
        for parameter in self.parameters:
            if parameter.name == name:
                return parameter
        raise SearchSpaceError(f"{self.source}: no parameter {name!r} (known: {', '.join(self.names)})")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)

    @property
    def quality_names(self) -> tuple[str, ...]:
        """Parameters that can change the model's outputs (and so its PPL)."""
        return tuple(p.name for p in self.parameters if p.is_quality)

    @property
    def speed_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters if not p.is_quality)

    def quality_key(self, params: Mapping[str, Any]) -> str:
        """Identifies the model's outputs: equal keys mean equal PPL (speed knobs ignored)."""
        return json.dumps({n: params.get(n) for n in self.quality_names}, sort_keys=True)

    def distributions(self) -> dict[str, BaseDistribution]:
        """Distributions of the parameters whose presence does not depend on another's value."""
        return {p.name: p.distribution() for p in self.parameters if p.condition is None or p.condition.param is None}

    def grid(self, max_points: int = 8) -> dict[str, list[Any]]:
        return {p.name: p.grid_values(max_points) for p in self.parameters}

    # -- binding to a base manifest ---------------------------------------

    def bind(self, base_env: Mapping[str, str]) -> SearchSpace:
        """This space checked against a base manifest's env (SearchSpaceError if it cannot)."""
        base_env = dict(base_env)
        kept: list[Parameter] = []
        for parameter in self.parameters:
            condition = parameter.condition
            if condition is not None and condition.env_set and not base_env.get(condition.env_set):
                logger.info(
                    "parameter %s is not searched: it applies only when %s",
                    parameter.name,
                    condition.describe(),
                )
                continue
            if condition is not None and condition.param and condition.param not in {p.name for p in kept}:
                logger.info("parameter %s is not searched: %s is not", parameter.name, condition.param)
                continue
            for target in parameter.targets:
                problem = target.check_base(base_env, f"parameter {parameter.name!r}")
                if problem:
                    raise SearchSpaceError(f"{self.source}: {problem}")
                value = target.read(base_env)  # typed before any use: "abc" is no window size
                problem = None if value is MISSING else parameter.type_problem(value)
                if problem:
                    raise BaseValueError(
                        source=self.source,
                        parameter=parameter.name,
                        field=target.describe(),
                        value=value,
                        problem=problem,
                    )
            kept.append(parameter)
        bound = dataclasses.replace(self, parameters=tuple(kept), base_env=base_env, bound=True)
        for config in bound.enqueue:
            if config.params is not None:
                bound.check_params(config.params, f"enqueued config {config.name!r}")
        return bound

    def _env(self, base_env: Mapping[str, str] | None) -> Mapping[str, str]:
        return self.base_env if base_env is None else base_env

    # -- values -------------------------------------------------------------

    def is_active(self, parameter: Parameter, params: Mapping[str, Any], base_env=None) -> bool:
        if parameter.condition is None:
            return True
        return parameter.condition.holds(self._env(base_env), params)

    def suggest(self, trial: Any) -> dict[str, Any]:
        """Ask an Optuna trial for every active parameter, in order."""
        params: dict[str, Any] = {}
        for parameter in self.parameters:
            if self.is_active(parameter, params):
                params[parameter.name] = parameter.suggest(trial)
        return params

    def check_params(self, params: Mapping[str, Any], where: str) -> dict[str, Any]:
        """Known names, values of the right type; out-of-range values are allowed with a warning."""
        known = set(self.names)
        unknown = sorted(set(params) - known)
        if unknown:
            raise SearchSpaceError(
                f"{self.source}: {where} names unknown parameter(s) {unknown} (known: {', '.join(self.names)})"
            )
        checked: dict[str, Any] = {}
        for parameter in self.parameters:
            if parameter.name not in params:
                continue
            value = parameter.coerce(params[parameter.name])
            if parameter.kind == "categorical" and value not in parameter.choices:
                raise SearchSpaceError(
                    f"{self.source}: {where}: {parameter.name}={value!r} is not one of {list(parameter.choices)}"
                )
            if parameter.is_numeric and not isinstance(value, (int, float)):
                raise SearchSpaceError(f"{self.source}: {where}: {parameter.name}={value!r} is not a number")
            if not parameter.contains(value):
                logger.warning(
                    "%s: %s=%r is outside the searched range %s..%s",
                    where,
                    parameter.name,
                    value,
                    parameter.low,
                    parameter.high,
                )
            checked[parameter.name] = value
        return checked

    def base_values(self, base_env: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The values in force in the base manifest itself (its own, else each default)."""
        env = self._env(base_env)
        values: dict[str, Any] = {}
        for parameter in self.parameters:
            if not self.is_active(parameter, values, env):
                continue
            value = self._base_value(parameter, env)
            if value is None:
                raise SearchSpaceError(
                    f"{self.source}: parameter {parameter.name!r} has no value in the base "
                    f"manifest and no 'default' (the value the server uses when it is not set)"
                )
            values[parameter.name] = value
        return values

    @staticmethod
    def _base_value(parameter: Parameter, env: Mapping[str, str]) -> Any:
        """The parameter's value in ``env``: its first readable target, else its default."""
        for target in parameter.targets:
            value = target.read(env)
            if value is not MISSING:
                return parameter.coerce(value)
        return parameter.coerce(parameter.default) if parameter.default is not None else None

    def enqueued_params(self, base_env: Mapping[str, str] | None = None) -> list[tuple[str, dict]]:
        """(name, params) of each enqueued config, the baseline resolved from the base manifest."""
        resolved = []
        for config in self.enqueue:
            if config.params is None:
                resolved.append((config.name, self.base_values(base_env)))
            else:
                resolved.append((config.name, self.check_params(config.params, config.name)))
        return resolved

    def overrides(self, params: Mapping[str, Any], base_env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The env overrides that turn the base manifest into the one for ``params``.

        Only variables whose value changes are returned, so the base
        manifest's own values give no overrides at all.
        """
        base = self._env(base_env)
        env = dict(base)
        for parameter in self.parameters:
            if parameter.name not in params or not self.is_active(parameter, params, base):
                continue
            value = params[parameter.name]
            if value == self._base_value(parameter, base):
                continue  # already in force in the base manifest
            for target in parameter.targets:
                try:
                    target.apply(env, base, value, params)
                except (ValueError, KeyError, TypeError, AttributeError) as exc:
                    raise SearchSpaceError(
                        f"{self.source}: parameter {parameter.name!r} cannot write {target.describe()} ({exc})"
                    ) from None
        return {key: value for key, value in env.items() if base.get(key) != value}

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "parameters": [p.to_dict() for p in self.parameters],
            "enqueue": [{"name": c.name, "params": c.params} for c in self.enqueue],
        }
