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
  uncertain window is read again up to ``MAX_UNCERTAIN_READINGS`` times, and
  the one just past the boundary again now and then while the speed search
  dwells there (``EDGE_DWELL``).
* **the speed settings**: a small design around each knob's middle, then
  the best untried settings by a surrogate of log TPS (a ridge regression,
  and a Gaussian process on what it leaves over), within ``TRUST_RADIUS`` of
  the incumbent; a knob whose effect is shown small
  (``DEAD_EFFECT``, ``DEAD_SIGNIFICANCE``, ``DEAD_AFTER``) stops moving.

After ``MAX_PLAN_TRIALS`` searched trials (a race's re-measurements do not
count), or with nothing untried at the window, the
plan returns None and a fallback sampler (GP) takes over with the whole
history. The plan is a pure function of the stored trials, so a resumed
study or a second worker continues it.

The window's readings are pooled in ``_window_readings.py``, the boundary is
searched in ``_boundary_search.py``, the surrogate is ``_speed_surrogate.py``;
this module plans the speed settings and puts the two halves together.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from search_spaces import Parameter, SearchSpace
from sweeper.study._boundary_search import BoundarySearch
from sweeper.study._speed_surrogate import DEAD_AFTER, SpeedSurrogate, from_unit, to_unit
from sweeper.study._window_readings import READING_CONFIDENCE, Observation, WindowReadings, WindowState

logger = logging.getLogger(__name__)

# besides the plan: the readings' types and the confidence their verdicts are drawn at
__all__ = [
    "MAX_PLAN_TRIALS",
    "READING_CONFIDENCE",
    "GuidedPlan",
    "Observation",
    "WindowReadings",
    "WindowState",
]

DESIGN_OFFSET = 0.3  # the design's corners, in a speed knob's [0, 1] coordinate, from 0.5
MAX_PLAN_TRIALS = 40  # searched trials; then the fallback sampler (GP) takes over
# the surrogate's choice is first made within this share of each speed knob's range
# (its [0, 1] coordinate) of the incumbent: one step either way of a knob of 8 values,
# a factor of 1.7 either way of top-k 16-128 on its log scale
TRUST_RADIUS = 0.25

SettingKey = tuple[tuple[str, Any], ...]  # (name, value) pairs: what tells two settings apart


class GuidedPlan:
    """Proposes the next configuration from the observations (see the module docstring)."""

    def __init__(self, space: SearchSpace, *, max_trials: int = MAX_PLAN_TRIALS) -> None:
        self.space = space
        self.max_trials = max_trials
        quality = [p for p in space.parameters if p.is_quality]
        self.boundary: Parameter | None = None
        if len(quality) == 1 and quality[0].is_numeric and quality[0].faster:
            self.boundary = quality[0]
        self._search = BoundarySearch(self.boundary) if self.boundary is not None else None
        self.speed = [p for p in space.parameters if not p.is_quality]
        self.applicable = self.boundary is not None and all(
            p.condition is None or p.condition.param is None for p in space.parameters
        )
        if not self.applicable:
            logger.info(
                "guided search needs one numeric quality parameter with 'faster' set and no "
                "parameter-dependent conditions: using the fallback sampler only"
            )
        self._design = _design_signs(sum(p.is_numeric for p in self.speed))

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
        return {self._window.name: window, **speed}

    def frozen_knobs(self, observations: Sequence[Observation]) -> dict[str, Any]:
        """Speed knobs whose effect is shown small, and the value each stays at."""
        return self._fit(observations).frozen

    # -- the window -----------------------------------------------------------

    def next_window(self, observations: Sequence[Observation], pending: Sequence[Mapping[str, Any]] = ()) -> Any | None:
        """The boundary probe, or the boundary once found (the smallest feasible value)."""
        return self._boundary_search.next_window(observations, pending)

    def window_readings(self, observations: Sequence[Observation]) -> dict[float, WindowReadings]:
        """Every measured quality value (by oriented coordinate), its readings pooled."""
        return self._boundary_search.window_readings(observations)

    @property
    def _window(self) -> Parameter:
        """The quality parameter whose boundary is searched."""
        if self.boundary is None:
            raise ValueError("the guided plan needs one numeric quality parameter with 'faster' set")
        return self.boundary

    @property
    def _boundary_search(self) -> BoundarySearch:
        if self._search is None:
            raise ValueError("the guided plan needs one numeric quality parameter with 'faster' set")
        return self._search

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
        if not distinct:
            candidate = self._design_row(0, fit.frozen)
            if self._key({self._window.name: window, **candidate}) not in tried:
                return candidate
        # the corner rows each once, whatever else was measured first (the base, enqueued
        # configurations): the first trial, whatever it is, stands for the middle
        for row in range(1, 1 + len(self._design)):
            candidate = self._design_row(row, fit.frozen)
            if self._speed_key(candidate) in distinct:
                continue
            if self._key({self._window.name: window, **candidate}) not in tried:
                return candidate
            break
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
        live = fit.live_knobs(incumbent)
        tried_live = {self._live_key(params, live) for params in tried_params}
        for group in (region, promising):
            for candidate in group:
                key = self._live_key({self._window.name: window, **candidate}, live)
                if key not in tried_live:
                    return candidate
        thawed = self._thawed(fit, window, incumbent, incumbent_mean, live, tried_params)
        if thawed is not None:
            return thawed
        for candidate in ranked:
            key = self._live_key({self._window.name: window, **candidate}, live)
            if key not in tried_live:
                return candidate
        for candidate in ranked:
            if self._key({self._window.name: window, **candidate}) not in tried:
                return candidate
        return None

    def _thawed(
        self,
        fit: SpeedSurrogate,
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
                if self._live_key({self._window.name: window, **candidate}, keys) not in tried:
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
            distance = abs(to_unit(p, candidate[p.name]) - to_unit(p, incumbent[p.name]))
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
            values[p.name] = frozen[p.name] if p.name in frozen else from_unit(p, z)
        return values

    def _base_choice(self, p: Parameter) -> Any:
        return p.coerce(p.default) if p.default is not None else p.choices[0]

    def _fit(self, observations: Sequence[Observation]) -> SpeedSurrogate:
        """The surrogate over every measured trial; a knob once found dead stays so."""
        measured = sorted((o for o in observations if o.tps is not None and o.tps > 0), key=lambda o: o.number)
        frozen: dict[str, Any] = {}
        for count in range(1 + len(self._design) + DEAD_AFTER, len(measured)):
            for name, value in self._surrogate(measured[:count], frozen).dead_knobs().items():
                frozen.setdefault(name, value)
        surrogate = self._surrogate(measured, frozen)
        for name, value in surrogate.dead_knobs().items():
            frozen.setdefault(name, value)
        return surrogate

    def _surrogate(self, measured: Sequence[Observation], frozen: dict[str, Any]) -> SpeedSurrogate:
        return SpeedSurrogate(self.space, self._window, measured, frozen, design_runs=len(self._design))

    def _key(self, params: Mapping[str, Any]) -> SettingKey:
        return tuple((name, params.get(name)) for name in self.space.names)

    def _live_key(self, params: Mapping[str, Any], live: set[str]) -> SettingKey:
        """The window and the knobs whose effect is measurable: what a trial can tell apart."""
        names = [self._window.name, *(p.name for p in self.speed if p.name in live)]
        return tuple((name, params.get(name)) for name in names)

    def _speed_key(self, params: Mapping[str, Any]) -> SettingKey:
        return tuple((p.name, params.get(p.name)) for p in self.speed)


def _design_signs(columns: int) -> list[list[int]]:
    """The design's corner rows: ``columns + 1`` rows of a two-level orthogonal array
    (Walsh functions), the fewest that tell every knob's slope from the others' and from
    the middle. A knob added costs one trial, not a doubled array: with four speed knobs
    the whole array has 8 rows, and its first 5 tell the slopes apart as well as any 5
    of them (``test_guided.py`` checks that up to 7 knobs)."""
    return [
        [1 - 2 * (bin(row & (column + 1)).count("1") % 2) for column in range(columns)] for row in range(columns + 1)
    ]
