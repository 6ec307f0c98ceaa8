"""Confirmation races: a configuration becomes the study's best only once confirmed.

One TPS figure of a fresh server is noisy (10-20 % between servers on two
shared CPU cores, several % on a GPU at demo sizes), so the single fastest
measurement of a study is often a lucky one. Here the study's claim is
settled by re-measurement instead:

* Every gate-passing configuration has one or more TPS figures (its trial,
  and the confirmation trials that re-measured it). Its estimate is their
  geometric mean; the between-server spread is pooled over every
  configuration measured more than once (``evaluators.pooled_spread``, a
  prior figure standing in until repeats exist).
* The **incumbent** starts as the base manifest's own configuration (the
  baseline trial). Contenders are taken in the order they were first
  measured. A contender whose speedup interval over the incumbent
  (``evaluators.speedup_interval`` at ``confidence``) lies above 1 after at
  least one re-measurement takes its place (a single figure, however fast,
  is the one most likely to be lucky: the fastest of many noisy figures);
  one whose interval lies below 1 is slower, confirmed; one whose
  estimate is below the incumbent's by more than ``screen`` standard
  errors of the difference (1 by default) is set aside without a race, as
  in racing for algorithm configuration: a race would cost servers and
  would most likely confirm it slower. Within one standard error it is
  raced, since the incumbent's own figure may be the lucky one (on a noisy
  landscape, tests/sweeper/study/test_confirm.py, screening every contender
  measured below the incumbent found the best in 8 of 12 seeds, no better
  than the single best figure; one standard error found it in 11).
* Otherwise the order is unclear, and the contender is **raced**: a round
  re-measures the contender, the incumbent and the base (while the base
  has fewer figures than the incumbent), in that order, each in a fresh server (A B C A B C: drift hits all of them), as
  confirmation trials of the study (role ``confirm``: stored, resumable and
  shown like any trial). After each round the comparison is made again,
  until the order is clear or ``rounds`` rounds are spent; then the two are
  a **tie**, and a tie goes to the configuration closer to the base
  manifest (fewer parameters changed, then smaller relative changes).

The races are decided one at a time: later contenders wait for the current
race, then meet the incumbent it left. Everything here is a pure function
of the stored trials, so a resumed study or a second worker reaches the same
standing.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from evaluators import Interval, Spread, pooled_spread, speedup_interval, tps_interval
from search_spaces import BASELINE
from storage import TrialRecord, is_answer
from sweeper.errors import UserInputError

logger = logging.getLogger(__name__)

CONFIRM_ROLE = "confirm"
# the study user attribute that marks a race round as queued (one per contender and round)
ROUND_ATTR_PREFIX = "sweeper:race-round:"


class ConfirmSettingsError(UserInputError):
    """A confirmation setting is not valid."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConfirmSettings:
    """How claims are confirmed.

    ``rounds``: re-measurement rounds a race may use before it is a tie (0:
    no races; the figures as measured decide, as plain Optuna's best would).
    ``prior_spread``: the between-server spread (SD of log TPS) assumed
    until repeats measure it, weighted as ``prior_df`` degrees of freedom.
    ``confidence``: of the intervals that decide a race and of the stated
    speedup. ``screen``: a contender measured below the incumbent by more
    than this many standard errors of the difference is not raced (0: only
    contenders measured at least as fast as the incumbent are raced).
    """

    rounds: int = 0
    prior_spread: float = 0.10
    prior_df: float = 2.0
    confidence: float = 0.95
    screen: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.rounds, int) or isinstance(self.rounds, bool) or self.rounds < 0:
            raise ConfirmSettingsError(f"confirm rounds must be a whole number >= 0, not {self.rounds!r}")
        if not 0.0 < self.prior_spread < 1.0:
            raise ConfirmSettingsError(
                f"noise (the prior between-server spread) must be in (0, 1), not {self.prior_spread!r}"
            )
        if not 0.0 <= self.screen <= 3.0:
            raise ConfirmSettingsError(f"screen must be 0-3 standard errors, not {self.screen!r}")
        if self.prior_df < 0:
            raise ConfirmSettingsError(f"prior_df must be >= 0, not {self.prior_df!r}")
        if not 0.5 < self.confidence < 1.0:
            raise ConfirmSettingsError(f"confidence must be in (0.5, 1), not {self.confidence!r}")

    def to_settings(self) -> dict[str, Any]:
        return {
            "confirm_rounds": self.rounds,
            "noise_prior": self.prior_spread,
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
            prior_spread=float(settings.get("noise_prior", default.prior_spread)),
            prior_df=float(settings.get("noise_prior_df", default.prior_df)),
            confidence=float(settings.get("confidence", default.confidence)),
            screen=float(settings.get("confirm_screen", default.screen)),
        )


def params_key(params: Mapping[str, Any]) -> str:
    return json.dumps(dict(params), sort_keys=True, default=str)


def is_confirmation(role: str) -> bool:
    return role == CONFIRM_ROLE


@dataclasses.dataclass(frozen=True, kw_only=True)
class Configuration:
    """One configuration's gate-passing measurements."""

    key: str
    params: Mapping[str, Any]
    numbers: tuple[int, ...]  # its trials, first the one that found it
    tps: tuple[float, ...]
    ppl: float
    ppl_cap: float
    is_base: bool
    # the figures measured after the configuration was picked for a race (its
    # confirmation trials); the base's own trial counts too (it is measured
    # whatever it reads, so it is not picked for reading high)
    confirmed_tps: tuple[float, ...] = ()

    @property
    def first(self) -> int:
        return self.numbers[0]

    @property
    def estimate(self) -> float:
        """The geometric mean of its TPS figures (one figure: that figure, exactly)."""
        if len(self.tps) == 1:
            return self.tps[0]
        return math.exp(sum(math.log(v) for v in self.tps) / len(self.tps))

    def describe(self) -> str:
        return f"trial {self.first} ({len(self.tps)} figure{'s' if len(self.tps) != 1 else ''})"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Decision:
    """How a contender's race against the incumbent ended (or stands)."""

    contender: int  # the contender's first trial
    incumbent: int
    outcome: str  # faster | slower | screened | tie-kept | tie-won | racing | unconfirmed
    interval: Interval
    rounds: int

    def describe(self) -> str:
        iv = self.interval
        text = (
            f"trial {self.contender} against trial {self.incumbent}: "
            f"{_percent(iv.value)} ({_level(iv.confidence)} interval {_percent(iv.low)} to {_percent(iv.high)}), "
            f"{self.rounds} round{'s' if self.rounds != 1 else ''}"
        )
        return f"{text}: {_OUTCOME_WORDS[self.outcome]}"


_OUTCOME_WORDS = {
    "faster": "faster, confirmed: the new incumbent",
    "slower": "slower, confirmed",
    "screened": "slower as measured: not raced further",
    "tie-kept": "a tie; the incumbent is closer to the base manifest and stays",
    "tie-won": "a tie; the contender is closer to the base manifest and takes over",
    "racing": "not clear yet: re-measuring",
    "unconfirmed": "faster as measured; races are off, so it takes over unconfirmed",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Race:
    """A race that needs another round: who is measured, in this order."""

    contender: Configuration
    incumbent: Configuration
    base: Configuration | None
    round: int  # the round to run next, from 1

    def lineup(self) -> list[Configuration]:
        """Contender, incumbent, base: each once, in that order.

        The base is left out once it has as many figures as the incumbent:
        it is there to keep the stated speedup honest, and a base measured
        as often as the answer already does that.
        """
        seen: set[str] = set()
        lineup = []
        base = self.base
        if base is not None and base.key != self.incumbent.key and len(base.tps) >= len(self.incumbent.tps):
            base = None
        for config in (self.contender, self.incumbent, base):
            if config is not None and config.key not in seen:
                seen.add(config.key)
                lineup.append(config)
        return lineup


@dataclasses.dataclass(frozen=True, kw_only=True)
class Standing:
    """The study's claim as its trials stand."""

    settings: ConfirmSettings
    configurations: tuple[Configuration, ...]
    spread: Spread
    base: Configuration | None
    incumbent: Configuration | None
    decisions: tuple[Decision, ...]
    race: Race | None  # the race that wants another round, if any

    @property
    def speedup(self) -> Interval | None:
        """The incumbent's TPS over the base's (None: no base, or the incumbent is the base)."""
        if self.base is None or self.incumbent is None or self.incumbent.key == self.base.key:
            return None
        return speedup_interval(
            self.incumbent.tps, self.base.tps, spread=self.spread, confidence=self.settings.confidence
        )

    @property
    def claim(self) -> str:
        """faster | indistinct (not distinguishable from the base) | base | slower | none."""
        if self.incumbent is None:
            return "none"
        if self.base is not None and self.incumbent.key == self.base.key:
            return "base"
        speedup = self.speedup
        if speedup is None:
            return "none"
        if speedup.low > 1.0:
            return "faster"
        if speedup.high < 1.0:
            return "slower"
        return "indistinct"

    @property
    def confirmed(self) -> bool:
        """No race is waiting for a round: the incumbent is the study's settled answer."""
        return self.race is None

    def ranked(self) -> list[Configuration]:
        """The incumbent first, then the other configurations by estimate."""
        rest = sorted(
            (c for c in self.configurations if self.incumbent is None or c.key != self.incumbent.key),
            key=lambda c: (-c.estimate, c.first),
        )
        return ([self.incumbent] if self.incumbent is not None else []) + rest

    def tps_interval(self, config: Configuration) -> Interval:
        """The configuration's TPS (tok/s) with its interval at the study's confidence.

        Made from the figures measured after selection (``confirmed_tps``)
        when there are any, else from all its figures; the interval is a
        t-interval of the mean log TPS on the study's between-server spread.
        """
        figures = config.confirmed_tps or config.tps
        return tps_interval(figures, spread=self.spread, confidence=self.settings.confidence)

    def configuration_of(self, number: int) -> Configuration | None:
        for config in self.configurations:
            if number in config.numbers:
                return config
        return None

    def describe(self) -> str:
        """One sentence: the speedup over the base with its interval, and the PPL."""
        inc = self.incumbent
        if inc is None:
            return "no configuration has passed the gate yet"
        ppl = f"PPL {inc.ppl:.4f} under the cap {inc.ppl_cap:.4f}"
        pending = "" if self.confirmed else " (a confirmation race is still open)"
        if self.base is None:
            return (
                f"trial {inc.first}: {inc.estimate:.2f} tok/s, {ppl}; the base manifest was not "
                f"measured, so no speedup can be stated{pending}"
            )
        if inc.key == self.base.key:
            return (
                f"the base manifest itself (trial {inc.first}, {inc.estimate:.2f} tok/s), {ppl}: "
                f"no configuration was confirmed faster than it{pending}"
            )
        iv = self.speedup
        assert iv is not None
        span = f"{_level(iv.confidence)} interval {_percent(iv.low)} to {_percent(iv.high)}"
        if self.claim == "faster":
            head = f"{_percent(iv.value)} faster than the base manifest ({span})"
        elif self.claim == "slower":
            head = f"{_percent(iv.value)} against the base manifest ({span}): slower"
        else:
            head = (
                f"not distinguishable from the base manifest: {_percent(iv.value)} "
                f"({span}, which includes 0 %)"
            )
        return f"{head}, {ppl}; trial {inc.first}, {inc.estimate:.2f} tok/s over {len(inc.tps)} server(s){pending}"

    def to_dict(self) -> dict[str, Any]:
        speedup = self.speedup
        return {
            "claim": self.claim,
            "confirmed": self.confirmed,
            "statement": self.describe(),
            "incumbent": _config_dict(self.incumbent),
            "base": _config_dict(self.base),
            "speedup": speedup.to_dict() if speedup is not None else None,
            "spread": self.spread.to_dict(),
            "settings": self.settings.to_settings(),
            "decisions": [
                {**dataclasses.asdict(d), "interval": d.interval.to_dict(), "text": d.describe()}
                for d in self.decisions
            ],
            "race": None
            if self.race is None
            else {
                "contender": self.race.contender.first,
                "incumbent": self.race.incumbent.first,
                "base": self.race.base.first if self.race.base is not None else None,
                "round": self.race.round,
            },
        }


def _config_dict(config: Configuration | None) -> dict[str, Any] | None:
    if config is None:
        return None
    return {
        "trial": config.first,
        "trials": list(config.numbers),
        "params": dict(config.params),
        "tps": list(config.tps),
        "estimate": config.estimate,
        "ppl": config.ppl,
        "ppl_cap": config.ppl_cap,
    }


def _level(confidence: float) -> str:
    return f"{confidence * 100:.0f} %"


def _percent(ratio: float) -> str:
    return f"{(ratio - 1.0) * 100.0:+.1f} %"


def distance_to_base(params: Mapping[str, Any], base: Mapping[str, Any]) -> tuple[int, float]:
    """(parameters changed, sum of relative changes): smaller is closer to the base manifest."""
    changed, relative = 0, 0.0
    for name in sorted(set(params) | set(base)):
        value, reference = params.get(name), base.get(name)
        if value == reference:
            continue
        changed += 1
        if isinstance(value, (int, float)) and isinstance(reference, (int, float)):
            relative += abs(float(value) - float(reference)) / max(abs(float(reference)), 1.0)
        else:
            relative += 1.0
    return changed, relative


def configurations(records: Iterable[TrialRecord]) -> list[Configuration]:
    """The gate-passing configurations, by first measurement, each with all its TPS figures."""
    grouped: dict[str, list[TrialRecord]] = {}
    for record in sorted(records, key=lambda r: r.number):
        if is_answer(record) and record.tps > 0:
            grouped.setdefault(params_key(record.params), []).append(record)
    found = []
    for key, group in grouped.items():
        first = next((r for r in group if not is_confirmation(r.role)), group[0])
        found.append(
            Configuration(
                key=key,
                params=dict(first.params),
                numbers=tuple(r.number for r in group),
                tps=tuple(float(r.tps) for r in group),
                ppl=float(first.ppl),
                ppl_cap=float(first.ppl_cap if first.ppl_cap is not None else first.ppl),
                is_base=any(BASELINE in r.role.split("+") for r in group),
                confirmed_tps=tuple(
                    float(r.tps)
                    for r in group
                    if is_confirmation(r.role) or BASELINE in r.role.split("+")
                ),
            )
        )
    return sorted(found, key=lambda c: c.first)


def rounds_run(records: Sequence[TrialRecord], key: str) -> int:
    """Confirmation trials that re-measured configuration ``key`` and ended (in any state)."""
    return sum(
        1
        for r in records
        if is_confirmation(r.role)
        and params_key(r.params) == key
        and r.state not in ("running", "interrupted")
    )


def base_params(records: Iterable[TrialRecord]) -> Mapping[str, Any] | None:
    for record in sorted(records, key=lambda r: r.number):
        if BASELINE in record.role.split("+"):
            return dict(record.params)
    return None


def _standard_error(spread: Spread, a: Configuration, b: Configuration) -> float:
    """The standard error of the difference of two configurations' mean log TPS."""
    return spread.relative * math.sqrt(1.0 / len(a.tps) + 1.0 / len(b.tps))


def standing(records: Iterable[TrialRecord], settings: ConfirmSettings) -> Standing:
    """Replay the races over the stored trials (see the module docstring)."""
    records = list(records)
    configs = configurations(records)
    spread = pooled_spread(
        [c.tps for c in configs], prior=settings.prior_spread, prior_df=settings.prior_df
    )
    base = next((c for c in configs if c.is_base), None)
    base_values = base.params if base is not None else base_params(records)
    incumbent = base
    decisions: list[Decision] = []
    race: Race | None = None
    for contender in configs:
        if incumbent is None:
            incumbent = contender  # no base measured: the first gate-passing one starts
            continue
        if contender.key == incumbent.key or contender.is_base:
            continue
        interval = speedup_interval(
            contender.tps, incumbent.tps, spread=spread, confidence=settings.confidence
        )
        rounds = rounds_run(records, contender.key)
        if interval.low > 1.0 and (rounds > 0 or settings.rounds == 0):
            outcome = "faster"
        elif interval.low > 1.0:
            outcome = "racing"  # clearly faster in one figure: confirmed by one re-measurement first
        elif interval.high < 1.0:
            outcome = "slower"
        elif settings.rounds == 0 and interval.value <= 1.0:
            outcome = "screened"
        elif math.log(interval.value) < -settings.screen * _standard_error(spread, contender, incumbent) or (
            settings.screen == 0.0 and interval.value < 1.0
        ):
            outcome = "screened"
        elif settings.rounds == 0:
            outcome = "unconfirmed"  # races are off: the faster figure wins, as plain Optuna's would
        elif rounds < settings.rounds:
            outcome = "racing"
        elif base_values is not None and distance_to_base(contender.params, base_values) < distance_to_base(
            incumbent.params, base_values
        ):
            outcome = "tie-won"
        else:
            outcome = "tie-kept"
        decisions.append(
            Decision(
                contender=contender.first,
                incumbent=incumbent.first,
                outcome=outcome,
                interval=interval,
                rounds=rounds,
            )
        )
        if outcome == "racing":
            race = Race(contender=contender, incumbent=incumbent, base=base, round=rounds + 1)
            break
        if outcome in ("faster", "tie-won", "unconfirmed"):
            incumbent = contender
    return Standing(
        settings=settings,
        configurations=tuple(configs),
        spread=spread,
        base=base,
        incumbent=incumbent,
        decisions=tuple(decisions),
        race=race,
    )
