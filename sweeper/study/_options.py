"""The settings of one ``run_study`` call, validated in one place."""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sweeper.errors import UserInputError
from sweeper.study._evaluator import TrialEvent
from sweeper.study._gate import PplGate
from sweeper.study._race_settings import ConfirmSettings
from sweeper.study._sampling import MODES, SAMPLERS

logger = logging.getLogger(__name__)

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([dhms]?)", re.IGNORECASE)
_UNIT_S = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "": 1.0}


class StudyOptionsError(UserInputError):
    """A run_study option is not valid."""


def parse_duration(value: float | int | str | None) -> float | None:
    """Seconds from ``8h``, ``90m``, ``1h30m``, ``45s``, ``3600`` or a number."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().replace(" ", "")
        parts = _DURATION.findall(text)
        if not parts or "".join(n + u for n, u in parts).lower() != text.lower():
            raise StudyOptionsError(f"timeout: cannot read {value!r} (examples: 8h, 90m, 1h30m)")
        seconds = sum(float(number) * _UNIT_S[unit.lower()] for number, unit in parts)
    else:
        raise StudyOptionsError(f"timeout must be seconds or text like '8h', not {value!r}")
    if seconds <= 0:
        raise StudyOptionsError(f"timeout must be positive, not {value!r}")
    return seconds


@dataclasses.dataclass(frozen=True, kw_only=True)
class StudyOptions:
    """Everything ``run_study`` takes besides the space and the evaluate callable.

    ``gate`` None means "the gate stored in the study" (resuming without
    repeating the cap). ``trial_timeout_s``: the wall-clock limit of one
    trial's evaluation (None: the evaluator's own ``trial_timeout_s``, which
    ``ServerEvaluator`` derives from the sizes, else no limit); a trial over
    it is failed with kind ``timeout`` and its server stopped.
    ``confirm``: how the study confirms its best (races; ``sweeper.study._race_decision``).
    ``enqueue_base``: measure the base manifest's own configuration first
    (the control every claimed speedup is stated against).
    """

    study_name: str
    storage: str | None = None
    n_trials: int | None = None
    timeout_s: float | None = None
    trial_timeout_s: float | None = None
    gate: PplGate | None = None
    mode: str = "tps"
    sampler: str | None = None
    seed: int | None = None
    enqueue: Sequence[Mapping[str, Any]] = ()
    enqueue_space_configs: bool = True
    max_consecutive_failures: int = 3
    reuse_quality: bool = False
    confirm: ConfirmSettings = ConfirmSettings()
    enqueue_base: bool = False
    progress: Callable[[TrialEvent], None] | None = None
    stale_after_s: float = 120.0
    handle_signals: bool = True
    # set from outside (another thread, a progress callback) to end the run after this trial
    stop_event: threading.Event | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.study_name, str) or not self.study_name.strip():
            raise StudyOptionsError("study_name must be a non-empty string")
        if self.mode not in MODES:
            raise StudyOptionsError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.sampler is not None and self.sampler not in SAMPLERS:
            raise StudyOptionsError(f"sampler must be one of {', '.join(SAMPLERS)}, not {self.sampler!r}")
        if self.n_trials is not None and (
            isinstance(self.n_trials, bool) or not isinstance(self.n_trials, int) or self.n_trials < 1
        ):
            raise StudyOptionsError(f"n_trials must be a positive integer, not {self.n_trials!r}")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise StudyOptionsError(f"timeout must be positive, not {self.timeout_s!r}")
        if self.trial_timeout_s is not None and (
            isinstance(self.trial_timeout_s, bool)
            or not isinstance(self.trial_timeout_s, (int, float))
            or not self.trial_timeout_s > 0
        ):
            raise StudyOptionsError(
                f"trial_timeout_s must be a positive number of seconds, not {self.trial_timeout_s!r}"
            )
        if (
            isinstance(self.max_consecutive_failures, bool)
            or not isinstance(self.max_consecutive_failures, int)
            or self.max_consecutive_failures < 1
        ):
            raise StudyOptionsError(
                f"max_consecutive_failures must be a positive integer, not {self.max_consecutive_failures!r}"
            )
        if not isinstance(self.confirm, ConfirmSettings):
            raise StudyOptionsError(f"confirm must be ConfirmSettings, not {type(self.confirm).__name__}")
        if not self.stale_after_s > 0:
            raise StudyOptionsError(f"stale_after_s must be positive, not {self.stale_after_s!r}")
        for index, config in enumerate(self.enqueue):
            if not isinstance(config, Mapping) or not config:
                raise StudyOptionsError(f"enqueue[{index}] must be a non-empty mapping of params")
