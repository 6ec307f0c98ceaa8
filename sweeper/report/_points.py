"""A trial and a gate-passing configuration as the report draws them, with the categories,
colours and names every figure and table shares."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from storage import VerificationStatus
from sweeper.answer import tps_text

# a trial's category on the plots: FAILED_TRIAL is a trial that measured nothing (not a failed verification)
FEASIBLE, INFEASIBLE, FAILED_TRIAL, RUNNING = "feasible", "infeasible", "failed", "running"
CATEGORIES = (FEASIBLE, INFEASIBLE, FAILED_TRIAL, RUNNING)
COLORS = {
    FEASIBLE: "#2a9d8f",
    INFEASIBLE: "#e76f51",
    FAILED_TRIAL: "#8d99ae",
    RUNNING: "#f4a261",
    "verified": "#1d3557",
    "verify-failed": "#9d0208",
    "cap": "#d62828",
    "winner": "#ffb703",
    "front": "#264653",
    "base": "#457b9d",
}
LABELS = {
    FEASIBLE: "feasible (PPL under the cap)",
    INFEASIBLE: "infeasible (PPL over the cap)",
    FAILED_TRIAL: "failed (no measurement; drawn at TPS 0)",
    RUNNING: "running",
}
IMPUTED = "TPS imputed, not measured"  # appended to a category's label for its imputed points


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrialPoint:
    """One trial as the plots draw it."""

    number: int
    state: str
    category: str
    role: str
    tps: float | None
    ppl: float | None
    params: Mapping[str, Any]
    verification: VerificationStatus | None
    tps_imputed: bool = False
    early_stopped: bool = False
    error: str | None = None
    seconds: float = 0.0

    def hover(self) -> str:
        lines = [f"trial #{self.number} ({self.role}): {self.category}"]
        if self.tps is not None:
            lines.append(f"TPS {self.tps:.2f}" + (f" ({IMPUTED})" if self.tps_imputed else ""))
        if self.ppl is not None:
            lines.append(f"PPL {self.ppl:.4f}" if math.isfinite(self.ppl) else "PPL inf")
        lines += [f"{k} = {v}" for k, v in self.params.items()]
        if self.verification:
            lines.append(f"verification: {self.verification}")
        if self.error:
            lines.append(f"error: {self.error[:120]}")
        return "<br>".join(lines)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConfigurationPoint:
    """One gate-passing configuration as the plots draw it: at its TPS estimate, with its interval.

    ``tps``, ``low`` and ``high`` are ``Standing.tps_interval`` (the figure the
    study's claim rests on), never one server's reading; ``readings`` holds
    every server's (trial number, TPS), in trial order, for the faint dots.
    """

    first: int
    numbers: tuple[int, ...]
    ppl: float
    params: Mapping[str, Any]
    readings: tuple[tuple[int, float], ...]
    tps: float
    low: float
    high: float
    confidence: float
    method: str
    is_base: bool
    is_answer: bool
    # the trials whose readings the estimate is made of (the figures after selection when
    # there are any); a reading not counted is the one that picked the configuration for a race
    counted: tuple[int, ...] = ()

    @property
    def counted_readings(self) -> tuple[tuple[int, float], ...]:
        return tuple((n, v) for n, v in self.readings if n in self.counted)

    @property
    def uncounted_readings(self) -> tuple[tuple[int, float], ...]:
        return tuple((n, v) for n, v in self.readings if n not in self.counted)

    @property
    def level(self) -> str:
        return f"{self.confidence * 100:.0f} %"

    def interval_text(self) -> str:
        return f"{self.level} interval {self.low:.1f}-{self.high:.1f}"

    def tps_text(self) -> str:
        return tps_text(self.tps)

    def hover(self) -> str:
        role = " = the answer" if self.is_answer else ""
        role += " (the base manifest)" if self.is_base else ""
        lines = [
            f"configuration of trial #{self.first}{role}",
            f"TPS {self.tps:.2f} ({self.interval_text()})",
            f"{len(self.readings)} server(s): " + ", ".join(f"#{n} {v:.1f}" for n, v in self.readings),
            f"PPL {self.ppl:.4f}",
        ]
        lines += [f"{k} = {v}" for k, v in self.params.items()]
        return "<br>".join(lines)


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnvChange:
    key: str
    base: str | None  # None: not set in the base manifest
    answer: str
