"""How a study confirms its best: ``ConfirmSettings`` (rounds, the noise prior, the level, the screen).

``sweeper run`` builds them from its options and stores them with the study
(``to_settings``); the races are replayed from the stored settings
(``from_settings``), so a resumed study or a second worker decides with the
same ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from evaluators import DEFAULT_CONFIDENCE, PRIOR_SPREAD
from sweeper.errors import UserInputError

# the between-server spread (SD of log TPS, ``--noise``) assumed until repeats measure it, by a
# study and by a verification alike: the same configuration moved 10-20 % between fresh servers
# on 2 shared CPU cores (docs/measurement.md)
DEFAULT_NOISE = PRIOR_SPREAD


class ConfirmSettingsError(UserInputError):
    """A confirmation setting is not valid; ``field``: the setting's name (``rounds``, ``noise``, ...)."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConfirmSettings:
    """How claims are confirmed.

    ``rounds``: re-measurement rounds a race may use before it is a tie (0:
    no races; the figures as measured decide, as plain Optuna's best would).
    ``noise``: the between-server spread (SD of log TPS) assumed until
    repeats measure it (``--noise``, stored as ``noise``), weighted as
    ``prior_df`` degrees of freedom.
    ``confidence``: of the intervals that decide a race and of the stated
    speedup. ``screen``: a contender measured below the incumbent by more
    than this many standard errors of the difference is not raced (0: only
    contenders measured at least as fast as the incumbent are raced).
    """

    rounds: int = 0
    noise: float = DEFAULT_NOISE
    prior_df: float = 2.0
    confidence: float = DEFAULT_CONFIDENCE
    screen: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.rounds, int) or isinstance(self.rounds, bool) or self.rounds < 0:
            raise ConfirmSettingsError(
                f"confirm rounds must be a whole number >= 0, not {self.rounds!r}", field="rounds"
            )
        if not 0.0 < self.noise < 1.0:
            raise ConfirmSettingsError(
                f"noise (the prior between-server spread) must be in (0, 1), not {self.noise!r}",
                field="noise",
            )
        if not 0.0 <= self.screen <= 3.0:
            raise ConfirmSettingsError(f"screen must be 0-3 standard errors, not {self.screen!r}", field="screen")
        if self.prior_df < 0:
            raise ConfirmSettingsError(f"prior_df must be >= 0, not {self.prior_df!r}", field="prior_df")
        if not 0.5 < self.confidence < 1.0:
            raise ConfirmSettingsError(f"confidence must be in (0.5, 1), not {self.confidence!r}", field="confidence")

    def to_settings(self) -> dict[str, Any]:
        return {
            "confirm_rounds": self.rounds,
            "noise": self.noise,
            "noise_prior_df": self.prior_df,
            "confidence": self.confidence,
            "confirm_screen": self.screen,
        }

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> ConfirmSettings:
        """The settings a study stored (the defaults for a study made before races existed)."""
        default = cls()
        return cls(
            rounds=int(settings.get("confirm_rounds", default.rounds)),
            # "noise_prior": the name studies stored it under before it had one name
            noise=float(settings.get("noise", settings.get("noise_prior", default.noise))),
            prior_df=float(settings.get("noise_prior_df", default.prior_df)),
            confidence=float(settings.get("confidence", default.confidence)),
            screen=float(settings.get("confirm_screen", default.screen)),
        )
