"""The guided sampler: a search that uses what is known about serving to need fewer trials.

It rests on three facts: only the quality parameter (the sliding window)
changes the outputs, so its PPL is known once measured, whatever the speed
knobs; it is monotone (the faster direction raises PPL), so the fastest
feasible value sits on the gate's boundary; and the speed knobs barely
interact with it, so every trial says something about them.

``GuidedPlan.propose`` picks a window and the speed settings apart:

* **the window**: the next probe of the boundary (bracket and secant) until
  it is known to the parameter's resolution, then the smallest feasible
  window. Readings of one window are pooled and judged against the reading
  noise at ``READING_CONFIDENCE`` (feasible, infeasible or uncertain); an
  uncertain window is read again up to ``MAX_UNCERTAIN_READINGS`` times.
* **the speed settings**: a small design around each knob's middle, then
  the best untried settings by a ridge-regression surrogate of log TPS,
  within ``TRUST_RADIUS`` of the incumbent; a knob of no measurable effect
  (``DEAD_EFFECT``, ``DEAD_SIGNIFICANCE``, ``DEAD_AFTER``) stops moving.

After ``MAX_PLAN_TRIALS`` searched trials (a race's re-measurements do not
count), or with nothing untried at the window, the
plan returns None and a fallback sampler (GP) takes over with the whole
history. The plan is a pure function of the stored trials, so a resumed
study or a second worker continues it.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from evaluators.intervals import t_quantile
from search_spaces import Parameter, SearchSpace
from sweeper.words import Word

logger = logging.getLogger(__name__)

DESIGN_OFFSET = 0.3  # the design's corners, in a speed knob's [0, 1] coordinate, from 0.5
# a knob does nothing when its fitted effect on log TPS over its range is under
# DEAD_EFFECT and within DEAD_SIGNIFICANCE standard deviations of none
DEAD_EFFECT = 0.05
DEAD_SIGNIFICANCE = 2.0
DEAD_AFTER = 2  # trials after the design before a knob may be found to do nothing
MAX_PLAN_TRIALS = 40  # searched trials; then the fallback sampler (GP) takes over
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
READING_CONFIDENCE = 0.95  # a window is feasible when its pooled gate's upper bound is <= 0
MAX_UNCERTAIN_READINGS = 3  # readings of an uncertain window before it counts as failing
# the surrogate's choice is first made within this share of each speed knob's range
# (its [0, 1] coordinate) of the incumbent: one step either way of a knob of 8 values,
# a factor of 1.7 either way of top-k 16-128 on its log scale
TRUST_RADIUS = 0.25


class WindowState(Word):
    """What the pooled readings of one quality value say of the gate; printed as its word."""

    FEASIBLE = "feasible"  # the one-sided bound of ppl - cap is at most 0
    INFEASIBLE = "infeasible"  # the mean is over the cap by more than the bound's half width
    UNCERTAIN = "uncertain"  # neither yet


@dataclasses.dataclass(frozen=True, kw_only=True)
class WindowReadings:
    """The pooled readings of one quality value: mean ``ppl - cap``, count, and the verdict."""

    value: Any
    mean: float
    count: int
    half_width: float  # of the one-sided bound at READING_CONFIDENCE
    state: WindowState


@dataclasses.dataclass(frozen=True, kw_only=True)
class Observation:
    """A finished trial as the plan sees it: params, TPS, and ``ppl - cap`` (<= 0 passes)."""

    number: int
    params: Mapping[str, Any]
    tps: float | None
    gate: float  # ppl - cap
    searched: bool = True  # False: a race's re-measurement (a confirmation trial), outside the plan's budget


class GuidedPlan:
    """Proposes the next configuration from the observations (see the module docstring)."""

    def __init__(self, space: SearchSpace, *, max_trials: int = MAX_PLAN_TRIALS) -> None:
        self.space = space
        self.max_trials = max_trials
        quality = [p for p in space.parameters if p.is_quality]
        self.boundary: Parameter | None = None
        if len(quality) == 1 and quality[0].is_numeric and quality[0].faster:
            self.boundary = quality[0]
        self.speed = [p for p in space.parameters if not p.is_quality]
        self.applicable = self.boundary is not None and all(
            p.condition is None or p.condition.param is None for p in space.parameters
        )
        if not self.applicable:
            logger.info(
                "guided search needs one numeric quality parameter with 'faster' set and no "
                "parameter-dependent conditions: using the fallback sampler only"
            )
        self._design = _orthogonal_signs(sum(p.is_numeric for p in self.speed))

    # -- the plan -------------------------------------------------------------

    def propose(
        self,
        observations: Sequence[Observation],
        pending: Sequence[Mapping[str, Any]] = (),
        failed: Sequence[Mapping[str, Any]] = (),
        *,
        racing: int = 0,
    ) -> dict[str, Any] | None:
        """The next configuration; ``pending``: running or queued, ``failed``: not to retry.

        ``racing``: how many of ``pending`` are race re-measurements. The plan's
        budget (``max_trials``) counts searched trials only: a race's servers
        answer the race's question, and at 5 % noise a study runs two or three
        of them for every searched trial (docs/study.md, "Where the search dwelt").
        """
        searched = sum(o.searched for o in observations) + len(pending) - racing
        if not self.applicable or searched >= self.max_trials:
            return None
        tried_params = [*(o.params for o in observations), *pending, *failed]
        window = self.next_window(observations, pending)
        if window is None:
            return None
        speed = self._next_speed(observations, pending, window, tried_params)
        if speed is None:
            return None
        return {self.boundary.name: window, **speed}

    def frozen_knobs(self, observations: Sequence[Observation]) -> dict[str, Any]:
        """Speed knobs with no measurable effect, and the value each stays at."""
        return self._fit(observations).frozen

    # -- the window -----------------------------------------------------------

    def next_window(self, observations: Sequence[Observation], pending: Sequence[Mapping[str, Any]] = ()) -> Any | None:
        """The boundary probe, or the boundary once found (the smallest feasible value)."""
        b = self.boundary
        safe = b.snap(b.high if b.faster == "lower" else b.low)
        pooled = self.window_readings(observations)
        passing = [r.value for r in pooled.values() if r.state is WindowState.FEASIBLE]
        if not passing and safe not in {o.params.get(b.name) for o in observations}:
            return safe
        pending_q = [p[b.name] for p in pending if b.name in p]
        again = self._read_again(pooled, pending_q)
        if again is not None:
            return again
        if not passing:
            # nothing passes with margin, but something may: read again the uncertain
            # window most likely to pass (a first noise estimate from one pair of
            # readings can leave even the safe end uncertain)
            uncertain = [r for r in pooled.values() if r.state is WindowState.UNCERTAIN]
            if uncertain:
                return min(uncertain, key=lambda r: r.mean).value
            # the safe end read over the cap while no window was read twice: without
            # a noise estimate that reading cannot tell a failing space from noise
            at_safe = pooled.get(self._oriented(safe))
            if at_safe is not None and at_safe.count < 2 and math.isfinite(at_safe.mean):
                if all(r.count < 2 for r in pooled.values()) and safe not in pending_q:
                    return safe
            return None
        probe = self._boundary_probe(observations, pending_q, b.boundary_resolution())
        if probe is not None:
            return probe
        return min(passing, key=self._oriented)

    def _read_again(self, pooled: Mapping[float, WindowReadings], pending_q: Sequence[Any]) -> Any | None:
        """The fastest uncertain window that reads as passing on average and may be read again.

        Only one faster than every feasible window, and read (or being read)
        fewer than ``MAX_UNCERTAIN_READINGS`` times: a window the readings
        cannot place is read again a few times, so that the noise estimate
        gets degrees of freedom and the window a verdict, instead of the
        plan stepping past it to the next window it cannot place either;
        after that it counts as failing, so a window at the cap costs at most
        that many trials while it is uncertain.
        """
        feasible = [u for u, r in pooled.items() if r.state is WindowState.FEASIBLE]
        hi = min(feasible) if feasible else math.inf
        pending = [self._oriented(q) for q in pending_q]
        candidates = [
            u
            for u, r in pooled.items()
            if r.state is WindowState.UNCERTAIN
            and r.mean <= 0
            and u < hi
            and r.count + sum(abs(q - u) < 1e-12 for q in pending) < MAX_UNCERTAIN_READINGS
        ]
        return pooled[min(candidates)].value if candidates else None

    def _oriented(self, value: float) -> float:
        """Coordinates in which smaller is faster."""
        b = self.boundary
        value = math.log(value) if b.log else float(value)
        return value if b.faster == "lower" else -value

    def _from_oriented(self, u: float) -> Any:
        b = self.boundary
        value = u if b.faster == "lower" else -u
        return b.snap(math.exp(value) if b.log else value)

    def _boundary_probe(
        self, observations: Sequence[Observation], pending_q: Sequence[float], tolerance: float
    ) -> Any | None:
        """The next quality value to try, or None when the boundary is known to ``tolerance``."""
        b = self.boundary
        pooled = self.window_readings(observations)
        # the pooled mean of each window; an uncertain window counts as failing
        gates = {u: r.mean for u, r in pooled.items()}
        feasible_u = [u for u, r in pooled.items() if r.state is WindowState.FEASIBLE]
        if not feasible_u:
            return None  # no value passes with margin: nothing to bracket
        hi = min(feasible_u)
        fast_end = min(self._oriented(b.low), self._oriented(b.high))
        infeasible_below = [u for u, r in pooled.items() if r.state is not WindowState.FEASIBLE and u < hi]
        lo = max(infeasible_below) if infeasible_below else None
        step = self._unit_step()
        if hi <= fast_end + 1e-12:
            return None  # the fastest value passes the gate
        if lo is not None and hi - lo <= tolerance + 1e-9:
            return None
        if lo is None and hi - fast_end <= tolerance + 1e-9:
            return None
        if any((lo if lo is not None else fast_end) < self._oriented(q) < hi for q in pending_q):
            return None  # another worker is probing this bracket
        root = self._root_estimate(gates, hi, lo)
        if root is None:
            # one feasible value and nothing below it: the middle of what is left
            root = (fast_end + hi) / 2 if hi - fast_end > 2 * tolerance else fast_end
        bottom = lo if lo is not None else fast_end - step
        if root >= hi - tolerance:
            u = hi - tolerance  # the root is just below the feasible end: close the bracket
        elif lo is not None and root <= lo + tolerance:
            u = lo + tolerance
        else:
            u = root + tolerance / 2  # aim just past the root on the feasible side
        value = self._from_oriented(min(max(u, bottom + step), hi - step))
        u = self._oriented(value)
        if u >= hi or u <= bottom or u < fast_end - 1e-12:
            return None
        return value

    def window_readings(self, observations: Sequence[Observation]) -> dict[float, WindowReadings]:
        """Every measured quality value (by oriented coordinate), its readings pooled."""
        b = self.boundary
        readings: dict[float, list[float]] = {}
        values: dict[float, Any] = {}
        for o in observations:
            if b.name in o.params and math.isfinite(o.gate):
                u = self._oriented(o.params[b.name])
                readings.setdefault(u, []).append(o.gate)
                values[u] = o.params[b.name]
            elif b.name in o.params:  # an infinite PPL: failing, whatever else was read
                u = self._oriented(o.params[b.name])
                readings.setdefault(u, []).append(math.inf)
                values[u] = o.params[b.name]
        sd, dof = _reading_noise(readings.values())
        quantile = 0.0 if sd == 0 else t_quantile(READING_CONFIDENCE, dof)
        pooled = {}
        for u, gates in readings.items():
            mean = sum(gates) / len(gates)
            half = quantile * sd / math.sqrt(len(gates)) if sd else 0.0
            if not math.isfinite(mean) or mean - half > 0:
                state = WindowState.INFEASIBLE
            elif mean + half <= 0:
                state = WindowState.FEASIBLE
            else:
                state = WindowState.UNCERTAIN
            pooled[u] = WindowReadings(value=values[u], mean=mean, count=len(gates), half_width=half, state=state)
        return pooled

    def _root_estimate(self, gates: Mapping[float, float], hi: float, lo: float | None) -> float | None:
        """Where ``ppl - cap`` is 0, from the measured values nearest the boundary.

        PPL falls toward a floor as the quality parameter goes the safe way, so
        the lines run through ``log(gate - floor)``, straight for a curve that
        decays like an exponential; the floor is a little under the lowest PPL
        measured. On a bent curve the chord of the bracket and a secant through
        two values on one side miss the root on opposite sides: the estimate is
        the midpoint of the chord's root and the secant root nearest it.
        """
        floor = min(gates.values())
        floor -= max(-floor, 1e-9) * 0.1
        target = math.log(-floor)

        def root(u1: float, u2: float) -> float | None:
            t1, t2 = math.log(gates[u1] - floor), math.log(gates[u2] - floor)
            return None if t1 == t2 else u1 + (u2 - u1) * (target - t1) / (t2 - t1)

        above = sorted(u for u, g in gates.items() if u > hi and g <= 0)
        below = sorted((u for u, g in gates.items() if lo is not None and u < lo), reverse=True)
        secants = []
        if above and gates[above[0]] < gates[hi]:
            secants.append(root(hi, above[0]))
        if lo is not None and below and gates[below[0]] > gates[lo]:
            secants.append(root(lo, below[0]))
        secants = [u for u in secants if u is not None]
        chord = root(lo, hi) if lo is not None else None
        if chord is None:
            return max(secants) if secants else None
        if not secants:
            return chord
        nearest = min(secants, key=lambda u: abs(u - chord))
        return (chord + nearest) / 2

    def _unit_step(self) -> float:
        b = self.boundary
        if b.log:
            return math.log(1 + (b.step or 1) / b.high) if b.kind == "int" else 1e-6
        return float(b.step or (1 if b.kind == "int" else 1e-6))

    # -- the speed knobs ----------------------------------------------------------

    def _next_speed(
        self,
        observations: Sequence[Observation],
        pending: Sequence[Mapping[str, Any]],
        window: Any,
        tried_params: Sequence[Mapping[str, Any]],
    ) -> dict[str, Any] | None:
        """Speed settings for ``window``: the design's next row, else the surrogate's best."""
        tried = {self._key(p) for p in tried_params}
        distinct = {self._speed_key(o.params) for o in observations}
        distinct |= {self._speed_key(p) for p in pending}
        fit = self._fit(observations)
        row = len(distinct)
        if row < 1 + len(self._design):
            candidate = self._design_row(row, fit.frozen)
            if self._key({self.boundary.name: window, **candidate}) not in tried:
                return candidate
        scores = fit.scores()
        order = [int(index) for index in np.argsort(-scores, kind="stable")]
        ranked = [fit.candidates[index] for index in order]
        # first within the trust region of the incumbent, among the candidates that
        # may beat it (module docstring); then anywhere
        incumbent, incumbent_mean = fit.incumbent()
        promising = [fit.candidates[i] for i in order if scores[i] >= incumbent_mean]
        region = [c for c in promising if self._near(c, incumbent, fit.frozen)]
        # a candidate that differs from a tried configuration only in knobs whose
        # effect the fit cannot tell from none would measure the same thing again
        # (on a noisy landscape, the knob of no effect looks the least known); the
        # live key is coarser than the full one, so an untried live key is untried
        live = fit.live_knobs()
        tried_live = {self._live_key(params, live) for params in tried_params}
        for group in (region, promising):
            for candidate in group:
                key = self._live_key({self.boundary.name: window, **candidate}, live)
                if key not in tried_live:
                    return candidate
        thawed = self._thawed(fit, window, incumbent, incumbent_mean, live, tried_params)
        if thawed is not None:
            return thawed
        for candidate in ranked:
            key = self._live_key({self.boundary.name: window, **candidate}, live)
            if key not in tried_live:
                return candidate
        for candidate in ranked:
            if self._key({self.boundary.name: window, **candidate}) not in tried:
                return candidate
        return None

    def _thawed(
        self,
        fit: _Surrogate,
        window: Any,
        incumbent: Mapping[str, Any] | None,
        incumbent_mean: float,
        live: set[str],
        tried_params: Sequence[Mapping[str, Any]],
    ) -> dict[str, Any] | None:
        """With nothing left that may beat the incumbent, a frozen knob's other values near it.

        A knob is frozen on few trials when its effect is small next to the
        noise; small is not none (a top-k one step from its best can cost 1 %
        of TPS), and once the knobs still moving have nothing left to offer,
        the frozen ones are the only place a better setting may be. Each is
        freed alone, within the trust region, among the candidates that may
        beat the incumbent; the best score over them all is the proposal.
        """
        best, best_score = None, -math.inf
        for name in sorted(fit.frozen):
            scores = fit.scores(free={name})
            candidates = fit.candidates
            still = {k: v for k, v in fit.frozen.items() if k != name}
            keys = live | {name}
            tried = {self._live_key(params, keys) for params in tried_params}
            for index in np.argsort(-scores, kind="stable"):
                score, candidate = float(scores[int(index)]), candidates[int(index)]
                if score < max(incumbent_mean, best_score):
                    break
                if not self._near(candidate, incumbent, still):
                    continue
                if self._live_key({self.boundary.name: window, **candidate}, keys) not in tried:
                    best, best_score = candidate, score
                    break
        return best

    def _near(
        self,
        candidate: Mapping[str, Any],
        incumbent: Mapping[str, Any] | None,
        frozen: Mapping[str, Any],
    ) -> bool:
        """Whether every numeric speed knob is within ``TRUST_RADIUS`` of the incumbent's."""
        if incumbent is None:
            return True
        for p in self.speed:
            if not p.is_numeric or p.name in frozen or p.name not in incumbent:
                continue
            distance = abs(_to_unit(p, candidate[p.name]) - _to_unit(p, incumbent[p.name]))
            if distance > TRUST_RADIUS + 1e-9:
                return False
        return True

    def _design_row(self, row: int, frozen: Mapping[str, Any]) -> dict[str, Any]:
        """Row 0: every speed knob in the middle; row r: the middle +- ``DESIGN_OFFSET``."""
        signs = self._design[row - 1] if row > 0 else None
        values: dict[str, Any] = {}
        column = 0
        for p in self.speed:
            if not p.is_numeric:
                values[p.name] = frozen.get(p.name, self._base_choice(p))
                continue
            z = 0.5 if signs is None else 0.5 + DESIGN_OFFSET * signs[column]
            column += 1
            values[p.name] = frozen[p.name] if p.name in frozen else _from_unit(p, z)
        return values

    def _base_choice(self, p: Parameter) -> Any:
        return p.coerce(p.default) if p.default is not None else p.choices[0]

    def _fit(self, observations: Sequence[Observation]) -> _Surrogate:
        """The surrogate over every measured trial; a knob once found dead stays so."""
        measured = sorted((o for o in observations if o.tps is not None and o.tps > 0), key=lambda o: o.number)
        frozen: dict[str, Any] = {}
        for count in range(1 + len(self._design) + DEAD_AFTER, len(measured)):
            for name, value in _Surrogate(self, measured[:count], frozen).dead_knobs().items():
                frozen.setdefault(name, value)
        surrogate = _Surrogate(self, measured, frozen)
        for name, value in surrogate.dead_knobs().items():
            frozen.setdefault(name, value)
        return surrogate

    def _key(self, params: Mapping[str, Any]) -> tuple:
        return tuple((name, params.get(name)) for name in self.space.names)

    def _live_key(self, params: Mapping[str, Any], live: set[str]) -> tuple:
        """The window and the knobs whose effect is measurable: what a trial can tell apart."""
        names = [self.boundary.name, *(p.name for p in self.speed if p.name in live)]
        return tuple((name, params.get(name)) for name in names)

    def _speed_key(self, params: Mapping[str, Any]) -> tuple:
        return tuple((p.name, params.get(p.name)) for p in self.speed)


class _Surrogate:
    """Ridge regression of log TPS on the window and each speed knob (module docstring)."""

    def __init__(self, plan: GuidedPlan, measured: Sequence[Observation], frozen: dict[str, Any]) -> None:
        self.plan = plan
        speed = plan.speed
        self.columns = self._columns(speed)
        x = np.array([self._features(o.params) for o in measured], dtype=float)
        x = x.reshape(len(measured), len(self.columns))
        y = np.log([o.tps for o in measured])
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
        self.frozen = frozen  # the plan's: knobs found dead, added to as they are found

    # -- features ------------------------------------------------------------

    def _columns(self, speed: Sequence[Parameter]) -> list[tuple[str, str, Any]]:
        columns = [("", "intercept", None), ("", "window", None)]
        for p in speed:
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

    def _features(self, params: Mapping[str, Any], window_coordinate: float | None = 0) -> list:
        b = self.plan.boundary
        row = []
        for name, kind, choice in self.columns:
            if kind == "intercept":
                row.append(1.0)
            elif kind == "window":
                if window_coordinate is None:
                    row.append(0.0)  # candidates are compared at one window: the slope cancels
                else:
                    row.append(_to_unit(b, params[b.name]) - 0.5)
            elif kind == "choice":
                row.append(1.0 if params.get(name) == choice else 0.0)
            else:
                p = self.plan.space.parameter(name)
                u = _to_unit(p, params.get(name, _from_unit(p, 0.5))) - 0.5
                row.append(u if kind == "linear" else u * u)
        return row

    # -- what the fit says -------------------------------------------------------

    def dead_knobs(self) -> dict[str, Any]:
        """Knobs measured at three values or more whose fitted effect is not measurable."""
        if len(self.measured) < 1 + len(self.plan._design) + DEAD_AFTER:
            return {}
        frozen = {}
        for p in self.plan.speed:
            if p.name in self.frozen or len({o.params.get(p.name) for o in self.measured}) < 3:
                continue
            spread, sd, best = self._effect(p)
            if spread < DEAD_EFFECT and spread < DEAD_SIGNIFICANCE * sd:
                frozen[p.name] = best
        return frozen

    def live_knobs(self) -> set[str]:
        """Speed knobs not frozen whose fitted effect stands out from the noise, or not yet known.

        A knob measured at fewer than three values counts as live: the fit cannot
        yet say what it does.
        """
        live = set()
        for p in self.plan.speed:
            if p.name in self.frozen:
                continue
            if len({o.params.get(p.name) for o in self.measured}) < 3:
                live.add(p.name)
                continue
            spread, sd, _ = self._effect(p)
            if spread >= DEAD_SIGNIFICANCE * sd:
                live.add(p.name)
        return live

    def _effect(self, p: Parameter) -> tuple[float, float, Any]:
        """A knob's fitted effect on log TPS over its values (the flat prior's fit).

        Returns the spread between its best and worst value, the standard
        deviation of that contrast, and the best value.
        """
        idx = [i for i, (name, _, _) in enumerate(self.columns) if name == p.name]
        values = _values_of(p)
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
        for p in self.plan.speed:
            fixed = p.name in self.frozen and p.name not in free
            axes.append([self.frozen[p.name]] if fixed else _values_of(p))
        names = [p.name for p in self.plan.speed]
        return [dict(zip(names, combo)) for combo in itertools.product(*axes)]

    def incumbent(self) -> tuple[dict[str, Any] | None, float]:
        """The measured speed settings with the best fitted log TPS, and that value.

        Fitted, not read: the mean of the posterior averages a lucky reading
        with its neighbours. Compared with the window's slope left out, as
        the candidates are (fact 3 of the module docstring).
        """
        best, best_mean = None, -math.inf
        for o in self.measured:
            mean = float(np.array(self._features(o.params, window_coordinate=None)) @ self.mean)
            if mean > best_mean:
                best, best_mean = dict(o.params), mean
        return best, best_mean

    def scores(self, free: Collection[str] = ()) -> np.ndarray:
        """Posterior mean plus ``EXPLORATION`` standard deviations, per candidate
        (``self.candidates``; frozen knobs named in ``free`` take all their values)."""
        self.candidates = self._candidates(free)
        x = np.array([self._features(c, window_coordinate=None) for c in self.candidates])
        mean = x @ self.mean
        sd = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", x, self.cov, x), 0))
        return mean + EXPLORATION * sd


def _reading_noise(readings: Any) -> tuple[float, int]:
    """The SD of one gate reading, pooled over the windows read more than once, and its dof.

    Infinite readings are left out. (0, 0) until some window was read twice.
    """
    squares, dof = 0.0, 0
    for gates in readings:
        finite = [g for g in gates if math.isfinite(g)]
        if len(finite) < 2:
            continue
        mean = sum(finite) / len(finite)
        squares += sum((g - mean) ** 2 for g in finite)
        dof += len(finite) - 1
    if dof == 0:
        return 0.0, 0
    return math.sqrt(squares / dof), dof


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


def _to_unit(p: Parameter, value: Any) -> float:
    """A numeric parameter's value in [0, 1] over its range (log scale for log knobs)."""
    if p.log:
        return math.log(float(value) / p.low) / math.log(p.high / p.low)
    return (float(value) - p.low) / (p.high - p.low)


def _from_unit(p: Parameter, z: float) -> Any:
    z = min(max(z, 0.0), 1.0)
    if p.log:
        return p.snap(p.low * math.exp(z * math.log(p.high / p.low)))
    return p.snap(p.low + z * (p.high - p.low))


def _values_of(p: Parameter) -> list[Any]:
    """Every value of a small range, else ``GRID_POINTS`` spread over it."""
    if not p.is_numeric:
        return list(p.choices)
    if p.kind == "int":
        step = int(p.step or 1)
        count = (int(p.high) - int(p.low)) // step + 1
        if count <= GRID_POINTS:
            return list(range(int(p.low), int(p.high) + 1, step))
    return sorted({_from_unit(p, i / (GRID_POINTS - 1)) for i in range(GRID_POINTS)})


def _orthogonal_signs(columns: int) -> list[list[int]]:
    """Rows of a two-level orthogonal array with ``columns`` columns (Walsh functions)."""
    if columns == 0:
        return []
    runs = 1
    while runs <= columns:
        runs *= 2
    return [[1 - 2 * (bin(row & (column + 1)).count("1") % 2) for column in range(columns)] for row in range(runs)]
