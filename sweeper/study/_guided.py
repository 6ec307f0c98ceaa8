"""The guided search: what is known about the problem, used to need fewer trials.

Three facts make the serving problem easier than a black box:

1. Only the quality parameters change the outputs (and so the PPL); a speed
   knob never moves a configuration across the gate.
2. The quality parameter that trades PPL for speed is monotone: the faster
   direction raises PPL (``faster: lower`` on the sliding window). The
   fastest feasible value is therefore on the gate's boundary, and the
   measured PPL (a smooth function of that one parameter) says where the
   boundary is: interpolating ``ppl - cap`` finds it in a few probes.
3. Known good configurations are enqueued first, so the search starts next
   to the answer.

``GuidedPlan.propose`` turns the trials so far into the next configuration:

* **boundary**: probe the quality parameter where the PPL curve, as
  measured, crosses the cap, with the speed knobs of the best feasible
  trial, until the feasible/infeasible gap is ``coarse`` times the
  parameter's resolution (the root lies between the chord of the bracket
  and the secant through the two feasible values nearest it: the probe is
  their midpoint);
* **speed**: a pattern search over the speed knobs at that boundary value
  (one knob moved one step at a time, the last good direction first, steps
  halved when no neighbour is better);
* **refine**: the boundary again, down to the resolution;

and returns None when it has nothing left to propose; the sampler then
hands over to a fallback sampler (GP) with the whole history.
The plan is a pure function of the stored trials, so a resumed study or a
second worker continues it (pending trials' values are not proposed again).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from search_spaces import Parameter, SearchSpace

logger = logging.getLogger(__name__)

COARSE_FACTOR = 4  # boundary gap (in resolutions) at which the speed search starts
MAX_HALVINGS = 2  # pattern-search step halvings (finer than this chases 1 % noise)
SPEED_STEPS = 8  # initial pattern step: the range divided by this (log range for log knobs)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Observation:
    """A finished trial as the plan sees it: params, TPS, and ``ppl - cap`` (<= 0 passes)."""

    number: int
    params: Mapping[str, Any]
    tps: float | None
    gate: float  # ppl - cap


class GuidedPlan:
    """Proposes the next configuration from the observations (see the module docstring)."""

    def __init__(self, space: SearchSpace, *, coarse_factor: float = COARSE_FACTOR) -> None:
        self.space = space
        self.coarse_factor = coarse_factor
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

    # -- the plan -------------------------------------------------------------

    def propose(
        self,
        observations: Sequence[Observation],
        pending: Sequence[Mapping[str, Any]] = (),
        failed: Sequence[Mapping[str, Any]] = (),
    ) -> dict[str, Any] | None:
        """The next configuration; ``pending``: running or queued, ``failed``: not to retry."""
        if not self.applicable or not observations:
            return None
        tried = {self._key(p) for p in [*(o.params for o in observations), *pending, *failed]}
        feasible = [o for o in observations if o.gate <= 0 and o.tps is not None]
        if not feasible:
            return self._toward_safety(observations, tried)
        # speed knobs never change PPL, so a gate-failing trial's speed settings count too
        measured = [o for o in observations if o.tps is not None]
        incumbent = max(measured, key=lambda o: (o.tps, -o.number))
        b = self.boundary
        pending_q = [p[b.name] for p in pending if b.name in p]
        resolution = b.boundary_resolution()
        for tolerance in (self.coarse_factor * resolution, resolution):
            probe = self._boundary_probe(observations, pending_q, tolerance)
            if probe is not None:
                candidate = {**incumbent.params, b.name: probe}
                if self._key(candidate) not in tried:
                    return candidate
            if tolerance == resolution:
                break
            speed_move = self._speed_move(observations, tried)
            if speed_move is not None:
                return speed_move
        return self._speed_move(observations, tried)

    # -- boundary ---------------------------------------------------------------

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
        gates: dict[float, float] = {}
        for o in observations:
            if b.name in o.params:
                u = self._oriented(o.params[b.name])
                gates[u] = max(gates.get(u, -math.inf), o.gate)
        feasible_u = [u for u, g in gates.items() if g <= 0]
        if not feasible_u:
            return None  # every passing value also failed once (PPL noise): nothing to bisect
        hi = min(feasible_u)
        fast_end = min(self._oriented(b.low), self._oriented(b.high))
        infeasible_below = [u for u, g in gates.items() if g > 0 and u < hi]
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
        secant = self._secant_root(gates, feasible_u, hi)
        if lo is not None:
            # a convex PPL curve puts the root between the chord's root (feasible side)
            # and the feasible secant's (infeasible side); a concave one the other way
            g_lo, g_hi = gates[lo], gates[hi]
            chord = lo + (hi - lo) * g_lo / (g_lo - g_hi)
            if secant is not None:
                near, far = sorted((chord, secant))
                u = (max(near, lo) + min(far, hi)) / 2
            else:
                u = min(max(chord, lo + (hi - lo) / 4), hi - (hi - lo) / 4)
        else:
            u = max(secant, fast_end) if secant is not None else fast_end
        value = self._from_oriented(u)
        if lo is not None and self._oriented(value) <= lo:
            value = self._from_oriented(lo + step)  # the root is just past the failing value
        if self._oriented(value) >= hi:
            value = self._from_oriented(hi - step)  # the estimates agree: check one step faster
        u = self._oriented(value)
        if u >= hi or (lo is not None and u <= lo) or u < fast_end - 1e-12:
            return None
        return value

    def _secant_root(
        self, gates: Mapping[float, float], feasible_u: Sequence[float], hi: float
    ) -> float | None:
        """Where the line through the two feasible values nearest the boundary meets the cap."""
        above = sorted(u for u in feasible_u if u > hi)
        if not above or gates[above[0]] >= gates[hi]:
            return None  # PPL not rising toward the fast end: no slope to follow
        u2, g1, g2 = above[0], gates[hi], gates[above[0]]
        return hi - g1 * (u2 - hi) / (g2 - g1)

    def _unit_step(self) -> float:
        b = self.boundary
        if b.log:
            return math.log(1 + (b.step or 1) / b.high) if b.kind == "int" else 1e-6
        return float(b.step or (1 if b.kind == "int" else 1e-6))

    def _toward_safety(self, observations: Sequence[Observation], tried: set) -> dict | None:
        """Nothing passed the gate yet: try the safe end of the quality parameter."""
        b = self.boundary
        safe = b.high if b.faster == "lower" else b.low
        latest = max(observations, key=lambda o: o.number)
        candidate = {**latest.params, b.name: b.snap(safe)}
        return None if self._key(candidate) in tried else candidate

    # -- speed --------------------------------------------------------------------

    def _speed_move(self, observations: Sequence[Observation], tried: set) -> dict | None:
        """The next untried neighbour of the best trial at the current boundary value."""
        b = self.boundary
        feasible = [o for o in observations if o.gate <= 0 and o.tps is not None]
        hi = min(feasible, key=lambda o: self._oriented(o.params[b.name])).params[b.name]
        at_hi = [o for o in feasible if o.params[b.name] == hi]
        base = max(at_hi, key=lambda o: (o.tps, -o.number))
        moves = self._directions(base, observations)
        for level in range(MAX_HALVINGS + 1):
            for parameter, sign in moves:
                value = self._neighbour(parameter, base.params.get(parameter.name), sign, level)
                if value is None:
                    continue
                candidate = {**base.params, parameter.name: value}
                if self._key(candidate) not in tried:
                    return candidate
        return None

    def _directions(
        self, base: Observation, observations: Sequence[Observation]
    ) -> list[tuple[Parameter, int]]:
        """(parameter, +1/-1) pairs, the move that led to ``base`` first (momentum)."""
        moves = [(p, s) for p in self.speed for s in (1, -1)]
        q = self.boundary.name
        for o in sorted(observations, key=lambda o: -o.number):
            if o.number >= base.number or o.params.get(q) != base.params.get(q):
                continue
            diff = [p for p in self.speed if o.params.get(p.name) != base.params.get(p.name)]
            if len(diff) == 1 and diff[0].is_numeric:
                p = diff[0]
                sign = 1 if base.params[p.name] > o.params[p.name] else -1
                moves.remove((p, sign))
                moves.insert(0, (p, sign))
                break
        return moves

    def _neighbour(self, p: Parameter, value: Any, sign: int, level: int) -> Any | None:
        if value is None:
            return None
        if not p.is_numeric:
            if level > 0:
                return None
            index = p.choices.index(value) if value in p.choices else 0
            target = index + sign
            return p.choices[target] if 0 <= target < len(p.choices) else None
        if p.log:
            step = math.log(p.high / p.low) / SPEED_STEPS / (2**level)
            moved = p.snap(math.exp(math.log(value) + sign * step))
        else:
            grain = p.step or (1 if p.kind == "int" else 0)
            step = max(grain, (p.high - p.low) / SPEED_STEPS / (2**level))
            moved = p.snap(value + sign * step)
        if moved == value or not p.contains(moved):
            return None
        return moved

    def _key(self, params: Mapping[str, Any]) -> tuple:
        return tuple((name, params.get(name)) for name in self.space.names)
