"""One searched parameter: its values, what it affects, and where it goes."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping
from typing import Any, Literal

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from search_spaces._target import EnvTarget

logger = logging.getLogger(__name__)

Kind = Literal["int", "float", "categorical"]
Affects = Literal["quality", "speed"]
Direction = Literal["lower", "higher"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Condition:
    """When a parameter is searched at all.

    ``env_set``: the base manifest sets that variable (speculative decoding is
    on when ``SPECULATIVE_CONFIG`` is set). ``param`` with ``values`` or
    ``minimum``/``maximum``: an earlier parameter's value is one of / within.
    """

    env_set: str | None = None
    param: str | None = None
    values: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None

    def holds(self, base_env: Mapping[str, str], params: Mapping[str, Any]) -> bool:
        if self.env_set is not None and not base_env.get(self.env_set):
            return False
        if self.param is not None:
            if self.param not in params:
                return False
            value = params[self.param]
            if self.values is not None and value not in self.values:
                return False
            if self.minimum is not None and value < self.minimum:
                return False
            if self.maximum is not None and value > self.maximum:
                return False
        return True

    def describe(self) -> str:
        if self.env_set is not None:
            return f"the base manifest sets {self.env_set}"
        parts = []
        if self.values is not None:
            parts.append(f"in {list(self.values)}")
        if self.minimum is not None:
            parts.append(f">= {self.minimum}")
        if self.maximum is not None:
            parts.append(f"<= {self.maximum}")
        return f"{self.param} {' and '.join(parts)}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Parameter:
    """A searched knob. ``affects='quality'`` means it can change the model's outputs."""

    name: str
    kind: Kind
    affects: Affects
    targets: tuple[EnvTarget, ...]
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()
    # which direction makes the server faster; on a quality parameter it also
    # says the other direction is the safe one (the gate is monotone in it)
    faster: Direction | None = None
    # the value in force when the base manifest does not set it (the model's own)
    default: Any = None
    # boundary search stops when the feasible/infeasible gap is this small
    resolution: float | None = None
    condition: Condition | None = None

    @property
    def is_quality(self) -> bool:
        return self.affects == "quality"

    @property
    def is_numeric(self) -> bool:
        return self.kind in ("int", "float")

    @property
    def bounds(self) -> tuple[float, float]:
        """``low`` and ``high`` of a numeric parameter (the loader requires both)."""
        if self.low is None or self.high is None:
            raise ValueError(f"parameter {self.name!r} ({self.kind}) has no low/high range")
        return self.low, self.high

    def distribution(self) -> BaseDistribution:
        if not self.is_numeric:
            return CategoricalDistribution(self.choices)
        low, high = self.bounds
        if self.kind == "int":
            return IntDistribution(int(low), int(high), log=self.log, step=int(self.step or 1))
        return FloatDistribution(low, high, log=self.log, step=self.step)

    def suggest(self, trial: Any) -> Any:
        """Ask an Optuna trial for this parameter's value."""
        if not self.is_numeric:
            return trial.suggest_categorical(self.name, list(self.choices))
        low, high = self.bounds
        if self.kind == "int":
            return trial.suggest_int(self.name, int(low), int(high), step=int(self.step or 1), log=self.log)
        return trial.suggest_float(self.name, low, high, step=self.step, log=self.log)

    def contains(self, value: Any) -> bool:
        if not self.is_numeric:
            return value in self.choices
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.kind == "int" and not float(value).is_integer():
            return False
        low, high = self.bounds
        return low <= value <= high

    def coerce(self, value: Any) -> Any:
        """A user-written value (YAML, the base manifest's string) in this parameter's type."""
        if self.kind == "categorical":
            for choice in self.choices:
                if value == choice or str(value) == str(choice):
                    return choice
            return value
        try:
            number = float(value)
        except (TypeError, ValueError):
            return value
        return int(number) if self.kind == "int" and number.is_integer() else number

    def type_problem(self, value: Any) -> str | None:
        """Why a user-written value (a manifest's env string, a JSON value) is not of this
        parameter's type: None when it is. A categorical takes any value (one outside its
        choices is out of range, not of another type)."""
        if not self.is_numeric:
            return None
        number = self.coerce(value)
        kind = "an integer" if self.kind == "int" else "a number"
        if isinstance(value, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
            return f"is not {kind}"
        if self.kind == "int" and not float(number).is_integer():
            return f"is not {kind}"
        return None

    def snap(self, value: float) -> Any:
        """The nearest value Optuna can produce (on the step grid, within the range)."""
        low, high = self.bounds
        value = min(max(value, low), high)
        if self.step:
            value = low + round((value - low) / self.step) * self.step
            value = min(value, high - (high - low) % self.step)
        if self.kind == "int":
            return int(round(value))
        return float(value)

    def midpoint(self, a: float, b: float) -> Any:
        """The point halfway between ``a`` and ``b`` in the parameter's own scale."""
        if self.log and a > 0 and b > 0:
            return self.snap(math.sqrt(a * b))
        return self.snap((a + b) / 2)

    def boundary_resolution(self) -> float:
        if self.resolution is not None:
            return self.resolution
        low, high = self.bounds
        if self.log:
            return math.log(high / low) / 32
        return max(float(self.step or (1 if self.kind == "int" else 0)), (high - low) / 32)

    def gap(self, a: float, b: float) -> float:
        """Distance between two values, in the unit ``boundary_resolution`` uses."""
        if self.log and a > 0 and b > 0:
            return abs(math.log(b / a))
        return abs(b - a)

    def grid_values(self, max_points: int = 8) -> list[Any]:
        """A grid over the range for GridSampler: at most ``max_points`` values."""
        if not self.is_numeric:
            return list(self.choices)
        low, high = self.bounds
        if self.kind == "int":
            step = int(self.step or 1)
            count = (int(high) - int(low)) // step + 1
            if count <= max_points:
                return list(range(int(low), int(high) + 1, step))
        points = []
        for i in range(max_points):
            t = i / (max_points - 1)
            raw = math.exp(math.log(low) + t * math.log(high / low)) if self.log else low + t * (high - low)
            points.append(self.snap(raw))
        return sorted(set(points))

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["targets"] = [dataclasses.asdict(t) for t in self.targets]
        return data
