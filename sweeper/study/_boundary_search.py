"""The gate's boundary on the quality parameter (the window): bracket and secant.

The gate is monotone in the window, so the fastest feasible window sits on
the boundary. ``BoundarySearch.next_window`` probes it (bracket and secant
on the pooled readings of ``_window_readings.py``) until it is known to the
parameter's resolution, then answers the smallest feasible window. An
uncertain window is read again up to ``MAX_UNCERTAIN_READINGS`` times; once
the boundary is found, the uncertain window just past it is read again now
and then while the search dwells at the boundary (``_edge_again``), so that
one unlucky reading cannot hold the answer a resolution too safe.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from search_spaces import Parameter
from sweeper.study._window_readings import (
    Observation,
    WindowReadings,
    WindowState,
    from_oriented,
    oriented,
    pool_window_readings,
)

logger = logging.getLogger(__name__)

MAX_UNCERTAIN_READINGS = 3  # readings of an uncertain window before it counts as failing
# once the boundary is found: one more reading of the uncertain window just past it (while its
# mean is at most a standard error over the cap) for every EDGE_DWELL searched trials at the
# boundary's window, up to MAX_EDGE_READINGS readings in all
EDGE_DWELL = 6
MAX_EDGE_READINGS = 12


class BoundarySearch:
    """Where the gate's boundary on ``boundary`` lies, and which window to read next."""

    def __init__(self, boundary: Parameter) -> None:
        self.boundary = boundary

    def window_readings(self, observations: Sequence[Observation]) -> dict[float, WindowReadings]:
        """Every measured window (by oriented coordinate), its readings pooled."""
        return pool_window_readings(self.boundary, observations)

    def next_window(self, observations: Sequence[Observation], pending: Sequence[Mapping[str, Any]] = ()) -> Any | None:
        """The boundary probe, or the boundary once found (the smallest feasible value)."""
        b = self.boundary
        low, high = b.bounds
        safe = b.snap(high if b.faster == "lower" else low)
        pooled = self.window_readings(observations)
        passing = [r.value for r in pooled.values() if r.state is WindowState.FEASIBLE]
        if not passing and safe not in {o.params.get(b.name) for o in observations}:
            return safe
        pending_q = [p[b.name] for p in pending if b.name in p]
        again = self._read_again(pooled, pending_q)
        if again is not None:
            return again
        if not passing:
            return self._nothing_passes(pooled, safe, pending_q)
        probe = self._probe(pooled, pending_q, b.boundary_resolution())
        if probe is not None:
            return probe
        edge = self._edge_again(observations, pooled, pending_q)
        if edge is not None:
            return edge
        return min(passing, key=self._oriented)

    def _edge_again(
        self, observations: Sequence[Observation], pooled: Mapping[float, WindowReadings], pending_q: Sequence[Any]
    ) -> Any | None:
        """The uncertain window just past the boundary, read again as the boundary's window is searched.

        A bracket closed by a reading just over the cap (or by a few readings
        whose mean sits within noise of it) may sit a resolution too safe, and
        then every later trial is spent where nothing faster can be found.
        While the window past the boundary is uncertain (not shown failing)
        and its readings' mean is at most one standard error over the cap, it
        gets one more reading for every ``EDGE_DWELL`` searched trials at the
        boundary's window since its last one, up to ``MAX_EDGE_READINGS``:
        the speed search goes on at the boundary, and the boundary's question
        is asked again at a rate that cannot starve it.
        """
        feasible = [u for u, r in pooled.items() if r.state is WindowState.FEASIBLE]
        hi = min(feasible)
        below = [u for u in pooled if u < hi]
        if not below:
            return None
        lo_u = max(below)
        lo = pooled[lo_u]
        if lo.state is not WindowState.UNCERTAIN:
            return None
        pending = [self._oriented(q) for q in pending_q]
        if any(_same_window(q, lo_u) for q in pending):
            return None
        # only while the readings leave it a fair chance of passing: their mean at most one
        # standard error over the cap (a window truly 1.3 reading SDs under it, what 1 % of TPS
        # is worth near the boundary, reads worse than that once in 90 after one reading)
        if lo.count >= MAX_EDGE_READINGS or lo.mean > lo.standard_error:
            return None
        name = self.boundary.name
        at = [(o, self._oriented(o.params[name])) for o in observations if name in o.params]
        last = max(o.number for o, u in at if _same_window(u, lo_u))
        since = sum(1 for o, u in at if o.searched and o.number > last and _same_window(u, hi))
        since += sum(_same_window(q, hi) for q in pending)
        return lo.value if since >= EDGE_DWELL else None

    def _nothing_passes(
        self, pooled: Mapping[float, WindowReadings], safe: Any, pending_q: Sequence[Any]
    ) -> Any | None:
        """With no window feasible yet: the one to read again, or None (the space fails)."""
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
            and r.count + sum(_same_window(q, u) for q in pending) < MAX_UNCERTAIN_READINGS
        ]
        return pooled[min(candidates)].value if candidates else None

    def _oriented(self, value: float) -> float:
        """Coordinates in which smaller is faster."""
        return oriented(self.boundary, value)

    def _probe(
        self, pooled: Mapping[float, WindowReadings], pending_q: Sequence[float], tolerance: float
    ) -> Any | None:
        """The next quality value to try, or None when the boundary is known to ``tolerance``."""
        # the pooled mean of each window; an uncertain window counts as failing
        gates = {u: r.mean for u, r in pooled.items()}
        feasible_u = [u for u, r in pooled.items() if r.state is WindowState.FEASIBLE]
        if not feasible_u:
            return None  # no value passes with margin: nothing to bracket
        hi = min(feasible_u)
        low, high = self.boundary.bounds
        fast_end = min(self._oriented(low), self._oriented(high))
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
        root = _root_estimate(gates, hi, lo)
        if root is None and lo is not None:
            root = (lo + hi) / 2  # no line to draw (an infinite PPL at the bracket's end): bisect it
        elif root is None:
            # one feasible value and nothing below it: the middle of what is left
            root = (fast_end + hi) / 2 if hi - fast_end > 2 * tolerance else fast_end
        bottom = lo if lo is not None else fast_end - step
        if root >= hi - tolerance:
            u = hi - tolerance  # the root is just below the feasible end: close the bracket
        elif lo is not None and root <= lo + tolerance:
            u = lo + tolerance
        else:
            u = root + tolerance / 2  # aim just past the root on the feasible side
        value = from_oriented(self.boundary, min(max(u, bottom + step), hi - step))
        u = self._oriented(value)
        if u >= hi or u <= bottom or u < fast_end - 1e-12:
            return None
        return value

    def _unit_step(self) -> float:
        """One step of the parameter's grid in oriented coordinates (a tiny one when it has none)."""
        b = self.boundary
        if b.log:
            _, high = b.bounds
            return math.log(1 + (b.step or 1) / high) if b.kind == "int" else 1e-6
        return float(b.step or (1 if b.kind == "int" else 1e-6))


def _same_window(u: float, v: float) -> bool:
    """Whether two oriented coordinates are one window (a pending value and a measured one
    reach them by different arithmetic)."""
    return abs(u - v) < 1e-12


def _root_estimate(gates: Mapping[float, float], hi: float, lo: float | None) -> float | None:
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
        if not (math.isfinite(gates[u1]) and math.isfinite(gates[u2])):
            return None  # a line through an infinite PPL says nothing of where the cap is crossed
        t1, t2 = math.log(gates[u1] - floor), math.log(gates[u2] - floor)
        return None if t1 == t2 else u1 + (u2 - u1) * (target - t1) / (t2 - t1)

    above = sorted(u for u, g in gates.items() if u > hi and g <= 0)
    below = sorted((u for u, g in gates.items() if lo is not None and u < lo), reverse=True)
    secant_roots = []
    if above and gates[above[0]] < gates[hi]:
        secant_roots.append(root(hi, above[0]))
    if lo is not None and below and gates[below[0]] > gates[lo]:
        secant_roots.append(root(lo, below[0]))
    secants = [u for u in secant_roots if u is not None]
    chord = root(lo, hi) if lo is not None else None
    if chord is None:
        return max(secants) if secants else None
    if not secants:
        return chord
    nearest = min(secants, key=lambda u: abs(u - chord))
    return (chord + nearest) / 2
