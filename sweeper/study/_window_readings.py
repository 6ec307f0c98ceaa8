"""What the stored trials say of the gate at each value of the quality parameter (the window).

Readings of one window are pooled and judged against the reading noise at
``READING_CONFIDENCE``: feasible, infeasible or uncertain. The noise is the
spread of repeated readings of one window, pooled over every window read
more than once. The guided plan (``_guided.py``) searches the boundary on
these verdicts (``_boundary_search.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from evaluators.intervals import t_quantile
from search_spaces import Parameter
from sweeper.words import Word

logger = logging.getLogger(__name__)

READING_CONFIDENCE = 0.95  # a window is feasible when its pooled gate's upper bound is <= 0


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
    standard_error: float  # of the mean: the pooled reading noise over the square root of count
    state: WindowState


@dataclasses.dataclass(frozen=True, kw_only=True)
class Observation:
    """A finished trial as the plan sees it: params, TPS, and ``ppl - cap`` (<= 0 passes)."""

    number: int
    params: Mapping[str, Any]
    tps: float | None
    gate: float  # ppl - cap
    searched: bool = True  # False: a race's re-measurement (a confirmation trial), outside the plan's budget


def oriented(boundary: Parameter, value: float) -> float:
    """``boundary``'s value in coordinates in which smaller is faster (log for a log knob)."""
    coordinate = math.log(value) if boundary.log else float(value)
    return coordinate if boundary.faster == "lower" else -coordinate


def from_oriented(boundary: Parameter, u: float) -> Any:
    """The value of ``boundary`` nearest the oriented coordinate ``u`` (see ``oriented``)."""
    value = u if boundary.faster == "lower" else -u
    return boundary.snap(math.exp(value) if boundary.log else value)


def pool_window_readings(boundary: Parameter, observations: Sequence[Observation]) -> dict[float, WindowReadings]:
    """Every measured value of ``boundary`` (by oriented coordinate), its readings pooled."""
    readings: dict[float, list[float]] = {}
    values: dict[float, Any] = {}
    for o in observations:
        if boundary.name not in o.params:
            continue
        u = oriented(boundary, o.params[boundary.name])
        # an infinite PPL: failing, whatever else was read
        readings.setdefault(u, []).append(o.gate if math.isfinite(o.gate) else math.inf)
        values[u] = o.params[boundary.name]
    sd, dof = _reading_noise(readings.values())
    quantile = 0.0 if sd == 0 else t_quantile(READING_CONFIDENCE, dof)
    pooled = {}
    for u, gates in readings.items():
        mean = sum(gates) / len(gates)
        standard_error = sd / math.sqrt(len(gates))
        half = quantile * standard_error if sd else 0.0
        if not math.isfinite(mean) or mean - half > 0:
            state = WindowState.INFEASIBLE
        elif mean + half <= 0:
            state = WindowState.FEASIBLE
        else:
            state = WindowState.UNCERTAIN
        pooled[u] = WindowReadings(
            value=values[u], mean=mean, count=len(gates), half_width=half, standard_error=standard_error, state=state
        )
    return pooled


def _reading_noise(readings: Iterable[Sequence[float]]) -> tuple[float, int]:
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
