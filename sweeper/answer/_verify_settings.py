"""What a verify is told: ``VerifySettings`` (checked as made), and the study's base configuration.

``BaseConfiguration`` is the control that each candidate is measured beside:
the base manifest as it is, with the parameter values, TPS and feasibility
of the study's trial of it (``base_configuration``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from search_spaces import BASELINE
from storage import (
    TrialRecord,
)
from sweeper.answer._verify_result import VerifyEvent
from sweeper.errors import UserInputError
from sweeper.manifest import Manifest
from sweeper.study import (
    DataDefaults,
    Evaluator,
    StudyRecipe,
)

logger = logging.getLogger(__name__)


DEFAULT_RUN_ROOT = Path("sweeper-runs")


class VerifySettingsError(UserInputError):
    """A verify option is not valid."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerifySettings:
    """``top`` candidates, ``repeats`` fresh servers each, TPS ``tolerance`` (0.05 = 5 %).

    ``redo``: verify again the candidates that already have a verdict.
    ``control``: measure the base configuration beside each candidate (as
    many repeats, alternating), to confirm the speedup the study claims.
    ``noise``: the between-server spread of TPS (SD of log TPS, 0.10 =
    10 %) assumed until the repeats show their own; it widens the speedup
    interval when there are few repeats. None: the study's own (its
    ``sweeper run --noise``, stored with it), as the study's claim was made.

    ``claimed_speedup``: whether the study claims each candidate is faster
    than the base (one answer for all, or by trial number); None: it does
    when the candidate is not the base configuration, unless the study found
    the base over the cap or measured it at least as fast (the candidate's
    point is then the cap, not its speed). ``tuned_tps``: the figure each
    candidate's held-out median must match, by trial number (None: the
    configuration's estimate after selection, else its trial's TPS).

    ``evaluate(params, context)`` measures one repeat; None: a
    ``ServerEvaluator`` on ``base_manifest`` (None: the study's own) with the
    study's TPS settings (``recipe``, None: the stored one) and the held-out
    ``prompts`` / ``ppl_data`` (given here, else the study's recipe, else the
    held-out sets of ``data_defaults`` when the study tuned on their tuning
    sets: ``sweeper verify`` and ``sweeper run`` pass the bundled demo's); its
    servers' files go under ``run_dir`` (None:
    ``sweeper-runs/<study>/verify``). ``progress`` is told each repeat and verdict.
    """

    top: int = 3
    repeats: int = 3
    tolerance: float = 0.05
    redo: bool = False
    control: bool = True
    noise: float | None = None
    claimed_speedup: bool | Mapping[int, bool] | None = None
    tuned_tps: Mapping[int, float] | None = None
    evaluate: Evaluator | None = None
    base_manifest: Manifest | None = None
    recipe: StudyRecipe | None = None
    prompts: str | None = None
    ppl_data: str | None = None
    data_defaults: DataDefaults | None = None
    run_dir: str | Path | None = None
    progress: Callable[[VerifyEvent], None] | None = None

    def __post_init__(self) -> None:
        for name in ("top", "repeats"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise VerifySettingsError(f"verify: {name} must be a positive integer, not {value!r}")
        if (
            isinstance(self.tolerance, bool)
            or not isinstance(self.tolerance, (int, float))
            or not 0 < self.tolerance < 1
        ):
            raise VerifySettingsError(
                f"verify: tolerance must be a fraction between 0 and 1 (0.05 = 5 %), not {self.tolerance!r}"
            )
        if not isinstance(self.control, bool):
            raise VerifySettingsError(f"verify: control must be true or false, not {self.control!r}")
        prior = self.noise
        if prior is not None and (isinstance(prior, bool) or not isinstance(prior, (int, float)) or not 0 < prior < 1):
            raise VerifySettingsError(f"verify: noise must be a fraction between 0 and 1 (0.10 = 10 %), not {prior!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class BaseConfiguration:
    """The study's base configuration: the base manifest as it is (no env overrides).

    ``params``: its parameter values, as the study's trial of it recorded them
    (None when the study has no such trial: the control still runs, the
    manifest needs no values to start); ``trial_number``, ``tuned_tps`` and
    ``feasible``: that trial, its measured TPS and whether it passed the cap,
    when it has them.
    """

    params: Mapping[str, Any] | None = None
    trial_number: int | None = None
    tuned_tps: float | None = None
    feasible: bool | None = None

    def is_candidate(self, record: TrialRecord) -> bool:
        """Is this trial the base configuration itself (same params, or no overrides)?"""
        if not record.overrides:
            return True
        return self.params is not None and dict(self.params) == dict(record.params)


def base_configuration(trials: Sequence[TrialRecord]) -> BaseConfiguration:
    """The base configuration of a study, from its trial without overrides (the baseline,
    or the imported manifest's own values): a measured one first, the earliest first."""
    own = [t for t in trials if not t.overrides]
    if not own:
        return BaseConfiguration()

    def rank(t: TrialRecord) -> tuple[bool, bool, int]:
        measured = t.state == "complete" and t.tps is not None and not t.tps_imputed
        roles = t.role.split("+")
        named = BASELINE in roles or any(role.startswith("imported:") for role in roles)
        return (not measured, not named, t.number)

    best = min(own, key=rank)
    measured = best.state == "complete" and best.tps is not None and not best.tps_imputed
    return BaseConfiguration(
        params=dict(best.params),
        trial_number=best.number,
        tuned_tps=best.tps if measured else None,
        feasible=best.feasible,
    )
