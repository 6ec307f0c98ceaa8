"""The quality gate: PPL must not exceed a cap, absolute or relative to a measured baseline.

The gate is an Optuna constraint (``trial.set_constraint("ppl_gate", ppl - cap)``),
so samplers learn where it fails and a gate-failing trial is never the best
one. A relative cap (``--ppl-cap-rel 1.05``: the challenge's "reference + 5 %")
is resolved from the baseline trial, which the study runs first.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import optuna

from storage import STUDY_ATTR_PREFIX
from sweeper.errors import StudyError, UserInputError

logger = logging.getLogger(__name__)

CONSTRAINT = "ppl_gate"
REFERENCE_ATTR = f"{STUDY_ATTR_PREFIX}reference_ppl"
REFERENCE_TRIAL_ATTR = f"{STUDY_ATTR_PREFIX}reference_trial"


class GateError(UserInputError):
    """The gate settings are not valid."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class PplGate:
    """``cap``: PPL <= cap. ``cap_rel``: PPL <= cap_rel x the baseline trial's PPL."""

    cap: float | None = None
    cap_rel: float | None = None

    def __post_init__(self) -> None:
        if (self.cap is None) == (self.cap_rel is None):
            raise GateError("give exactly one of ppl_cap (absolute) and ppl_cap_rel (x baseline)")
        for name in ("cap", "cap_rel"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value)
            ):
                raise GateError(f"ppl_{name} must be a positive number, not {value!r}")
        if self.cap_rel is not None and self.cap_rel < 1.0:
            raise GateError(
                "ppl_cap_rel must be at least 1.0 (the baseline itself must pass), "
                f"not {self.cap_rel}"
            )

    @property
    def relative(self) -> bool:
        return self.cap_rel is not None

    def describe(self) -> str:
        if self.relative:
            return f"PPL <= {self.cap_rel:g} x baseline PPL"
        return f"PPL <= {self.cap:g}"

    def to_settings(self) -> dict[str, Any]:
        return {"ppl_cap": self.cap, "ppl_cap_rel": self.cap_rel}

    def cap_for(self, reference_ppl: float | None) -> float | None:
        """The cap in force: None while a relative cap waits for its baseline."""
        if not self.relative:
            return self.cap
        return None if reference_ppl is None else self.cap_rel * reference_ppl

    @staticmethod
    def model_ppl(ppl: float, cap: float) -> float:
        """The PPL Optuna's models see: an infinite or huge one counts as twice the cap."""
        return min(ppl, 2 * cap)

    @classmethod
    def constraint(cls, ppl: float, cap: float) -> float:
        """Optuna's constraint value: <= 0 passes."""
        return cls.model_ppl(ppl, cap) - cap


def reference_ppl(study: optuna.Study) -> float | None:
    value = study._storage.get_study_user_attrs(study._study_id).get(REFERENCE_ATTR)
    return float(value) if value is not None else None


def set_reference(study: optuna.Study, ppl: float, trial_number: int) -> None:
    study.set_user_attr(REFERENCE_ATTR, ppl)
    study.set_user_attr(REFERENCE_TRIAL_ATTR, trial_number)
    logger.info("baseline PPL %.4f measured by trial %d", ppl, trial_number)


def wait_for_reference(
    study: optuna.Study,
    baseline_done: Callable[[], bool],
    *,
    poll_s: float = 2.0,
    should_stop: Callable[[], bool] = lambda: False,
) -> float:
    """Block until another worker's baseline trial has set the reference PPL."""
    while True:
        value = reference_ppl(study)
        if value is not None:
            return value
        if baseline_done():
            raise StudyError(
                "the baseline trial ended without a PPL, so the relative cap cannot be "
                "computed: look at the baseline trial with 'sweeper status --trial N'"
            )
        if should_stop():
            raise StudyError("stopped while waiting for the baseline trial's PPL")
        time.sleep(poll_s)
