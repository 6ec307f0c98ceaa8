"""The guided plan's model of the speed knobs: a ridge regression of log TPS, and a
Gaussian process on what it leaves over.

The regression: one column for the window's slope, and per speed knob a
linear and a quadratic term in its [0, 1] coordinate (a categorical knob:
one column per choice after the first), under a Gaussian prior that leans to
a TPS unimodal in each knob. It alone finds the knobs shown to have no
effect worth a trial (``DEAD_EFFECT``, ``DEAD_SIGNIFICANCE``, ``DEAD_AFTER``),
which the plan then stops moving, and those whose effect stands out.

The residuals' process (``ResidualProcess``) adds what the regression cannot
bend to: an interaction, a sharp peak. Regression and process together score
every speed setting (mean plus ``EXPLORATION`` standard deviations) and name
the incumbent.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from search_spaces import Parameter, SearchSpace
from sweeper.study._window_readings import Observation

logger = logging.getLogger(__name__)

# a knob does nothing when its fitted effect on log TPS over its range, plus
# DEAD_SIGNIFICANCE standard deviations, is under DEAD_EFFECT: shown small, not
# merely not yet told from the noise (at 5 % TPS noise a knob worth 20 % was frozen so)
DEAD_EFFECT = 0.05
DEAD_SIGNIFICANCE = 2.0
LIVE_GAIN = 0.01  # a knob the fit says gains this much (log TPS) off the incumbent's value is live
DEAD_AFTER = 2  # trials after the design before a knob may be found to do nothing
GRID_POINTS = 24  # candidate values per speed knob with more than this many values
EXPLORATION = 0.5  # surrogate: mean + this many standard deviations
# prior standard deviations of the surrogate's coefficients (log TPS units)
PRIOR_WINDOW = 0.3
PRIOR_LINEAR = 0.5
PRIOR_QUADRATIC = 0.5  # one SD: 0.125 in log TPS (about 13 %) from the middle of a range to an end
PRIOR_QUADRATIC_MEAN = -0.5  # TPS is unimodal in each speed knob
PRIOR_CHOICE = 0.3
NOISE_FLOOR = 0.02  # relative TPS noise assumed at least
NOISE_DEFAULT = 0.03  # before there are residuals to estimate it from
POSTERIOR_CHUNK = 4096  # settings scored at once
REPLICATE_DOF = 3  # repeated readings that estimate one reading's noise for the residuals' process
# what the additive quadratic misses (``ResidualProcess``): the prior SD of a residual
# in log TPS, and the distance in the speed knobs' [0, 1] coordinates over which
# residuals stay alike (one step of K in 1-8 keeps 85 % of the covariance)
RESIDUAL_SD = 0.05
RESIDUAL_LENGTH = 0.25

Column = tuple[str, str, Any]  # (knob name, term kind, the choice of a categorical knob)


class SpeedSurrogate:
    """Ridge regression of log TPS on the window and each speed knob (module docstring).

    ``measured``: trials with a TPS over 0. ``design_runs``: the rows of the
    plan's design; a knob may be found dead only ``DEAD_AFTER`` trials after
    them. ``frozen``: the plan's knobs found dead, at their values.
    """

    def __init__(
        self,
        space: SearchSpace,
        window: Parameter,
        measured: Sequence[Observation],
        frozen: dict[str, Any],
        *,
        design_runs: int,
    ) -> None:
        self.space = space
        self.window = window
        self.speed = [p for p in space.parameters if not p.is_quality]
        self.design_runs = design_runs
        self.columns = self._columns()
        x = np.array([self._features(o.params) for o in measured], dtype=float)
        x = x.reshape(len(measured), len(self.columns))
        y = np.log([_measured_tps(o) for o in measured])
        prior_mean, prior_sd = self._prior()
        if len(measured) >= 1:
            prior_mean = prior_mean.copy()
            prior_mean[0] = float(np.mean(y))
        noise = NOISE_DEFAULT
        for _ in range(2):
            mean, cov = _ridge(x, y, prior_mean, prior_sd, noise)
            dof = len(measured) - 3
            if dof > 0:
                rss = float(np.sum((y - x @ mean) ** 2))
                noise = max(NOISE_FLOOR, math.sqrt(rss / dof))
        self.mean, self.cov, self.noise = mean, cov, noise
        # whether a knob does anything is judged without the prior's leaning to concave
        flat_prior = np.where(prior_mean == PRIOR_QUADRATIC_MEAN, 0.0, prior_mean)
        self.flat_mean, _ = _ridge(x, y, flat_prior, prior_sd, noise)
        self.measured = measured
        self._xy = (x, y)
        self._residual_process: ResidualProcess | None = None  # built when first asked (``posterior``)
        self.frozen = frozen  # the plan's: knobs found dead, added to as they are found
        self.candidates: list[dict[str, Any]] = []  # of the last ``scores``

    # -- the residuals' process ----------------------------------------------------

    def _settings_points(self, settings: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """Each setting as a point of the residuals' process (``_coordinates``)."""
        dimensions = sum(1 if p.is_numeric else len(p.choices) for p in self.speed)
        return np.array([self._coordinates(c) for c in settings], dtype=float).reshape(len(settings), dimensions)

    def _coordinates(self, params: Mapping[str, Any]) -> list[float]:
        """A speed setting's coordinates: each numeric knob's [0, 1] value, and per
        categorical knob one coordinate per choice, set to ``1 / sqrt(2)`` for the one
        taken (two choices lie 1 apart, a whole range)."""
        point: list[float] = []
        for p in self.speed:
            if p.is_numeric:
                point.append(to_unit(p, params.get(p.name, from_unit(p, 0.5))))
            else:
                point += [math.sqrt(0.5) if params.get(p.name) == c else 0.0 for c in p.choices]
        return point

    @functools.cached_property
    def reading_noise(self) -> float:
        """One reading's noise: from repeated readings of one configuration where there are
        enough (a race's), since the regression's residuals also hold what it cannot fit."""
        return _replicate_noise(self.measured, self._xy[1]) or self.noise

    def _residuals(self) -> ResidualProcess:
        if self._residual_process is None:
            x, y = self._xy
            points = self._settings_points([o.params for o in self.measured])
            self._residual_process = ResidualProcess(points, y - x @ self.mean, self.reading_noise)
        return self._residual_process

    def posterior(self, settings: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation of log TPS at each speed setting, the window's slope
        left out (candidates are compared at one window): the regression's, plus the
        residuals' process."""
        means, sds = [np.zeros(0)], [np.zeros(0)]
        for start in range(0, len(settings), POSTERIOR_CHUNK):  # memory: a chunk times the readings
            chunk = settings[start : start + POSTERIOR_CHUNK]
            x = np.array([self._features(c, window_coordinate=None) for c in chunk], dtype=float)
            x = x.reshape(len(chunk), len(self.columns))
            residual_mean, residual_var = self._residuals().predict(self._settings_points(chunk))
            means.append(x @ self.mean + residual_mean)
            var = ((x @ self.cov) * x).sum(axis=1) + residual_var
            sds.append(np.sqrt(np.maximum(var, 0.0)))
        return np.concatenate(means), np.concatenate(sds)

    # -- features ------------------------------------------------------------

    def _columns(self) -> list[Column]:
        columns: list[Column] = [("", "intercept", None), ("", "window", None)]
        for p in self.speed:
            if p.is_numeric:
                columns += [(p.name, "linear", None), (p.name, "quadratic", None)]
            else:
                columns += [(p.name, "choice", c) for c in p.choices[1:]]
        return columns

    def _prior(self) -> tuple[np.ndarray, np.ndarray]:
        sd = {"intercept": 10.0, "window": PRIOR_WINDOW, "linear": PRIOR_LINEAR}
        sd |= {"quadratic": PRIOR_QUADRATIC, "choice": PRIOR_CHOICE}
        means = [PRIOR_QUADRATIC_MEAN if kind == "quadratic" else 0.0 for _, kind, _ in self.columns]
        return np.array(means), np.array([sd[kind] for _, kind, _ in self.columns])

    def _features(self, params: Mapping[str, Any], window_coordinate: float | None = 0) -> list[float]:
        w = self.window
        row = []
        for name, kind, choice in self.columns:
            if kind == "intercept":
                row.append(1.0)
            elif kind == "window":
                if window_coordinate is None:
                    row.append(0.0)  # candidates are compared at one window: the slope cancels
                else:
                    row.append(to_unit(w, params[w.name]) - 0.5)
            elif kind == "choice":
                row.append(1.0 if params.get(name) == choice else 0.0)
            else:
                p = self.space.parameter(name)
                u = to_unit(p, params.get(name, from_unit(p, 0.5))) - 0.5
                row.append(u if kind == "linear" else u * u)
        return row

    # -- what the fit says -------------------------------------------------------

    def dead_knobs(self) -> dict[str, Any]:
        """Knobs measured at three values or more whose fitted effect is shown under ``DEAD_EFFECT``."""
        if len(self.measured) < 1 + self.design_runs + DEAD_AFTER:
            return {}
        frozen = {}
        for p in self.speed:
            if p.name in self.frozen or len({o.params.get(p.name) for o in self.measured}) < 3:
                continue
            spread, sd, best = self._effect(p)
            if spread + DEAD_SIGNIFICANCE * sd < DEAD_EFFECT:
                frozen[p.name] = best
        return frozen

    def live_knobs(self, incumbent: Mapping[str, Any] | None = None) -> set[str]:
        """Speed knobs not frozen whose fitted effect stands out from the noise, or not yet known.

        A knob measured at fewer than three values counts as live: the fit cannot
        yet say what it does. So does one whose fitted best value is not the
        incumbent's, by a fitted gain of ``LIVE_GAIN`` or more: the fit points
        where nothing was measured yet, and a measurement there can change the
        answer even while the knob's effect is not yet told from the noise.
        """
        live = set()
        for p in self.speed:
            if p.name in self.frozen:
                continue
            if len({o.params.get(p.name) for o in self.measured}) < 3:
                live.add(p.name)
                continue
            spread, sd, _ = self._effect(p)
            if spread >= DEAD_SIGNIFICANCE * sd or self._gain_over(p, incumbent) >= LIVE_GAIN:
                live.add(p.name)
        return live

    def _gain_over(self, p: Parameter, incumbent: Mapping[str, Any] | None) -> float:
        """The fitted log TPS gained by moving knob ``p`` alone from the incumbent's value to its best."""
        if incumbent is None or p.name not in incumbent:
            return 0.0
        base = self._features(incumbent, window_coordinate=None)
        best = -math.inf
        for value in values_of(p):
            row = self._features({**incumbent, p.name: value}, window_coordinate=None)
            best = max(best, float((np.array(row) - np.array(base)) @ self.mean))
        return best

    def _effect(self, p: Parameter) -> tuple[float, float, Any]:
        """A knob's fitted effect on log TPS over its values (the flat prior's fit).

        Returns the spread between its best and worst value, the standard
        deviation of that contrast, and the best value.
        """
        idx = [i for i, (name, _, _) in enumerate(self.columns) if name == p.name]
        values = values_of(p)
        rows = np.zeros((len(values), len(self.columns)))
        for r, value in enumerate(values):
            feats = self._features({p.name: value}, window_coordinate=None)
            rows[r, idx] = [feats[i] for i in idx]
        effect = rows @ self.flat_mean
        spread = float(effect.max() - effect.min())
        contrast = rows[int(np.argmax(effect))] - rows[int(np.argmin(effect))]
        sd = math.sqrt(max(float(contrast @ self.cov @ contrast), 0.0))
        return spread, sd, values[int(np.argmax(effect))]

    def _candidates(self, free: Collection[str] = ()) -> list[dict[str, Any]]:
        """Every speed setting, frozen knobs at their value unless named in ``free``."""
        axes = []
        for p in self.speed:
            fixed = p.name in self.frozen and p.name not in free
            axes.append([self.frozen[p.name]] if fixed else values_of(p))
        names = [p.name for p in self.speed]
        return [dict(zip(names, combo)) for combo in itertools.product(*axes)]

    def incumbent(self) -> tuple[dict[str, Any] | None, float]:
        """The measured speed settings with the best fitted log TPS, and that value.

        Fitted, not read: the mean of the posterior averages a lucky reading
        with its neighbours. Compared with the window's slope left out, as
        the candidates are (fact 3 of ``_guided.py``'s docstring).
        """
        best, best_mean = None, -math.inf
        if not self.measured:
            return best, best_mean
        means, _ = self.posterior([o.params for o in self.measured])
        for o, mean in zip(self.measured, means):
            if mean > best_mean:
                best, best_mean = dict(o.params), float(mean)
        return best, best_mean

    def scores(self, free: Collection[str] = ()) -> np.ndarray:
        """Posterior mean plus ``EXPLORATION`` standard deviations, per candidate
        (``self.candidates``; frozen knobs named in ``free`` take all their values)."""
        self.candidates = self._candidates(free)
        mean, sd = self.posterior(self.candidates)
        return mean + EXPLORATION * sd


class ResidualProcess:
    """A Gaussian process on what the regression leaves over, at the measured settings.

    The additive quadratic cannot bend where serving does: the drafter's K and
    top-k interact, and a peak can be sharper than a parabola. Read alone, it
    was sure of its shape where it was wrong (at 5 % noise it put K = 4 at
    -1.4 % +- 1.3 % against K = 3; the truth was +2.2 %). The residuals, with a
    squared-exponential kernel of ``RESIDUAL_SD`` and ``RESIDUAL_LENGTH`` over
    the speed coordinates and one reading's noise on the diagonal, put back what
    was measured near a setting, and the uncertainty the quadratic left out
    far from any measurement. A two-stage fit: the regression's coefficients
    are taken as they are.
    """

    def __init__(self, points: np.ndarray, residuals: np.ndarray, noise: float) -> None:
        self.points = points
        if len(residuals):
            gram = self.kernel(points, points) + noise**2 * np.eye(len(residuals))
            self.gram_inverse = np.linalg.inv(gram)
        else:
            self.gram_inverse = np.zeros((0, 0))
        self.weights = self.gram_inverse @ residuals

    @staticmethod
    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Covariance of the residuals at points ``a`` and ``b`` (rows)."""
        squared = (a**2).sum(axis=1)[:, None] + (b**2).sum(axis=1)[None, :] - 2 * a @ b.T
        return RESIDUAL_SD**2 * np.exp(-squared / (2 * RESIDUAL_LENGTH**2))

    def predict(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The residual's posterior mean and variance at each point."""
        cross = self.kernel(points, self.points)
        mean = cross @ self.weights
        var = RESIDUAL_SD**2 - ((cross @ self.gram_inverse) * cross).sum(axis=1)
        return mean, np.maximum(var, 0.0)


def _replicate_noise(measured: Sequence[Observation], log_tps: np.ndarray) -> float | None:
    """The pooled SD of log TPS between readings of one configuration (all its parameters),
    at least ``NOISE_FLOOR``; None with fewer than ``REPLICATE_DOF`` degrees of freedom."""
    groups: dict[tuple[tuple[str, Any], ...], list[float]] = {}
    for observation, value in zip(measured, log_tps):
        groups.setdefault(tuple(sorted(observation.params.items())), []).append(float(value))
    squares = sum(float(np.sum((np.array(v) - np.mean(v)) ** 2)) for v in groups.values())
    dof = sum(len(v) - 1 for v in groups.values())
    if dof < REPLICATE_DOF:
        return None
    return max(NOISE_FLOOR, math.sqrt(squares / dof))


def _measured_tps(observation: Observation) -> float:
    """A fitted trial's TPS; the plan fits only trials with a TPS over 0."""
    if observation.tps is None:
        raise ValueError(f"trial {observation.number} has no TPS to fit")
    return observation.tps


def _ridge(
    x: np.ndarray, y: np.ndarray, prior_mean: np.ndarray, prior_sd: np.ndarray, noise: float
) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mean and covariance of a linear model with Gaussian prior and noise."""
    precision = np.diag(1.0 / prior_sd**2)
    rhs = precision @ prior_mean
    if len(y):
        precision = precision + x.T @ x / noise**2
        rhs = rhs + x.T @ y / noise**2
    cov = np.linalg.inv(precision)
    return cov @ rhs, cov


def to_unit(p: Parameter, value: Any) -> float:
    """A numeric parameter's value in [0, 1] over its range (log scale for log knobs)."""
    low, high = p.bounds
    if p.log:
        return math.log(float(value) / low) / math.log(high / low)
    return (float(value) - low) / (high - low)


def from_unit(p: Parameter, z: float) -> Any:
    """The value of a numeric parameter at ``z`` in [0, 1] over its range (see ``to_unit``)."""
    low, high = p.bounds
    z = min(max(z, 0.0), 1.0)
    if p.log:
        return p.snap(low * math.exp(z * math.log(high / low)))
    return p.snap(low + z * (high - low))


def values_of(p: Parameter) -> list[Any]:
    """Every value of a small range, else ``GRID_POINTS`` spread over it."""
    if not p.is_numeric:
        return list(p.choices)
    low, high = p.bounds
    if p.kind == "int":
        step = int(p.step or 1)
        count = (int(high) - int(low)) // step + 1
        if count <= GRID_POINTS:
            return list(range(int(low), int(high) + 1, step))
    return sorted({from_unit(p, i / (GRID_POINTS - 1)) for i in range(GRID_POINTS)})
