"""The study's standing as its trials stand: the configurations, the races' decisions, the claim.

``Standing`` is what ``standing`` (``_race_replay``) gives: each gate-passing
``Configuration`` with its figures, the ``Decision`` of each contender's
turn, the ``Race`` that wants another round, and what the claim over the
base rests on (``ClaimBasis``). Its figures (``speedup``, ``tps_interval``,
``counted``, ``front``) are the ones every command shows; its text
(``describe``, ``to_dict``) is worded with ``_standing_words``. A race's
trials are named here too: their role (``confirmation_role``) and the study
attribute that marks a round as queued (``Race.marker``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any

from evaluators import Interval, PriorCheck, Spread, speedup_interval, tps_interval
from sweeper._text import level_text, percent_text
from sweeper.study._race_decision import Claim, Outcome, claim_from
from sweeper.study._race_settings import ConfirmSettings
from sweeper.study._standing_words import OUTCOME_WORDS

CONFIRM_ROLE = "confirm"
# the study user attribute that marks a race round as queued (one per contender and round)
ROUND_ATTR_PREFIX = "sweeper:race-round:"


def params_key(params: Mapping[str, Any]) -> str:
    """A configuration's identity: its parameters as JSON, keys sorted."""
    return json.dumps(dict(params), sort_keys=True, default=str)


def is_confirmation(role: str) -> bool:
    """A re-measurement of a race (``confirm``, or ``confirm:<contender>:<round>``)."""
    return role == CONFIRM_ROLE or role.startswith(CONFIRM_ROLE + ":")


def confirmation_role(contender: int, round_number: int, *, claim: bool = False) -> str:
    """The role of a confirmation trial: ``contender``'s race (or, ``claim``, the
    incumbent's claim rounds beside the base), round ``round_number``."""
    kind = "claim:" if claim else ""
    return f"{CONFIRM_ROLE}:{kind}{contender}:{round_number}"


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
    # the trials measured after the configuration was picked for a race (its
    # confirmation trials); the base's own trial counts too (it is measured
    # whatever it reads, so it is not picked for reading high)
    confirmed: tuple[int, ...] = ()

    @property
    def first(self) -> int:
        return self.numbers[0]

    @property
    def readings(self) -> tuple[tuple[int, float], ...]:
        """(trial, TPS) of each of its servers, in trial order."""
        return tuple(zip(self.numbers, self.tps))

    @property
    def confirmed_tps(self) -> tuple[float, ...]:
        """The figures of ``confirmed``, in trial order."""
        return tuple(v for n, v in self.readings if n in self.confirmed)

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
    outcome: Outcome
    interval: Interval  # on the rounds' pairs once raced; on the first figures when screened
    rounds: int
    race: int = 0  # the race's number in the study (0: never raced)
    pairs: int = 0  # contender/incumbent pairs of its rounds the interval rests on

    def describe(self) -> str:
        iv = self.interval
        basis = f"{self.pairs} pair{'s' if self.pairs != 1 else ''} after selection" if self.pairs else "first figures"
        text = (
            f"trial {self.contender} against trial {self.incumbent}: "
            f"{percent_text(iv.value)} ({level_text(iv.confidence)} interval {percent_text(iv.low)} to {percent_text(iv.high)}, "
            f"{basis}), {self.rounds} round{'s' if self.rounds != 1 else ''}"
        )
        return f"{text}: {OUTCOME_WORDS[self.outcome]}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Race:
    """A race that needs another round: who is measured, in this order."""

    contender: Configuration
    incumbent: Configuration
    base: Configuration | None
    round: int  # the round to run next, from 1
    # a claim round: the incumbent, already chosen, re-measured beside the base
    # until its claim over the base is clear (contender: the incumbent; incumbent: the base)
    claim: bool = False

    @property
    def marker(self) -> str:
        """The study attribute that marks this round as queued."""
        kind = "claim:" if self.claim else ""
        return f"{ROUND_ATTR_PREFIX}{kind}{self.contender.first}:{self.round}"

    @property
    def role(self) -> str:
        """The role of this round's confirmation trials."""
        return confirmation_role(self.contender.first, self.round, claim=self.claim)

    def lineup(self) -> list[Configuration]:
        """Contender, incumbent, base: each once, in adjacent fresh servers; in that
        order in odd rounds and the reverse in even ones (A B, B A, ...).

        The base is in every round while the incumbent is another
        configuration: a claim over the base rests on the contender's
        figures paired with the base's of the same rounds. The order turns
        round by round, as ``sweeper rerun`` turns its pairs, so a server
        that reads slower for following another (a teardown, a machine
        warming up) weighs on both sides of the pairs alike.
        """
        seen: set[str] = set()
        lineup = []
        for config in (self.contender, self.incumbent, self.base):
            if config is not None and config.key not in seen:
                seen.add(config.key)
                lineup.append(config)
        return lineup if self.round % 2 == 1 else lineup[::-1]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClaimBasis:
    """What the claim over the base rests on: figures measured after selection, paired with the base's."""

    answer_trials: tuple[int, ...]  # the answer's re-measurements the claim uses
    base_trials: tuple[int, ...]  # the base's figure of the same rounds
    excluded: tuple[int, ...]  # the answer's own trial(s) that selected it: they screen, never claim
    race: int  # the race that made it the incumbent
    races: int  # the races the study ran: the claim pays for each of them
    confidence: float  # the interval's level: 1 - (1 - study_confidence) / races
    study_confidence: float  # 1 - the study-wise error of a "faster" claim
    spread: Spread
    interval: Interval

    def describe(self) -> str:
        pairs = ", ".join(f"{a}/{b}" for a, b in zip(self.answer_trials, self.base_trials))
        return (
            f"{len(self.answer_trials)} round(s) after selection, answer/base trials {pairs} "
            f"(trial(s) {', '.join(map(str, self.excluded))} selected it and are not counted); "
            f"{self.interval.method}; at {self.confidence * 100:.2f} %: the study-wise "
            f"{self.study_confidence * 100:.0f} % shared over its {self.races} race(s) "
            f"(it became the incumbent in race {self.race})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer_trials": list(self.answer_trials),
            "base_trials": list(self.base_trials),
            "excluded": list(self.excluded),
            "race": self.race,
            "races": self.races,
            "confidence": self.confidence,
            "study_confidence": self.study_confidence,
            "spread": self.spread.to_dict(),
            "interval": self.interval.to_dict(),
            "text": self.describe(),
        }


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
    basis: ClaimBasis | None = None  # what the claim over the base rests on (races on)
    # the base manifest's own trial was measured over the PPL cap (so ``base`` is None)
    base_over_cap: bool = False
    # the study's repeats against the prior spread it was given (None: nothing measured twice)
    prior_check: PriorCheck | None = None

    @property
    def prior_text(self) -> str:
        """What the study's repeats say of its --noise prior ('' when they fit it, or there are none)."""
        return self.prior_check.describe() if self.prior_check is not None else ""

    @property
    def speedup(self) -> Interval | None:
        """The incumbent's TPS over the base's (None: no base, or the incumbent is the base).

        With races, from the rounds after the incumbent's selection, paired
        with the base's figures of the same rounds, at its race's share of
        the study-wise error (``basis``); with races off, from every figure
        as measured (no correction for selection: the form plain Optuna's
        best would be stated in).
        """
        if self.base is None or self.incumbent is None or self.incumbent.key == self.base.key:
            return None
        if self.basis is not None:
            return self.basis.interval
        return speedup_interval(
            self.incumbent.tps, self.base.tps, spread=self.spread, confidence=self.settings.confidence
        )

    @property
    def claim(self) -> Claim:
        """What the study claims of its incumbent against the base (``Claim``)."""
        if self.incumbent is None:
            return Claim.NONE
        if self.base is not None and self.incumbent.key == self.base.key:
            return Claim.BASE
        speedup = self.speedup
        if speedup is None:
            return Claim.NONE
        return claim_from(speedup)

    def claim_of(self, number: int) -> Claim:
        """What the study claims of the configuration trial ``number`` belongs to.

        Its incumbent carries the standing's ``claim``; the base is ``base``.
        Another configuration is put forward as faster when its estimate
        reads above the base's first figure (its own trial's, before any
        race), and as faster when the base has no figure to compare with; a
        study whose base was over the PPL cap claims no speedup (its point is
        the cap, not the speed). Verify checks a ``faster`` claim against the
        base measured beside the candidate on held-out data.
        """
        config = self.configuration_of(number)
        if config is None:
            return Claim.NONE
        if self.base is None:
            return Claim.NONE if self.base_over_cap else Claim.FASTER
        if config.key == self.base.key:
            return Claim.BASE
        if self.incumbent is not None and config.key == self.incumbent.key:
            return self.claim
        return Claim.FASTER if config.estimate > self.base.tps[0] else Claim.NONE

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

    def counted(self, config: Configuration) -> tuple[int, ...]:
        """The trials whose figures make the configuration's one TPS figure (``tps_interval``).

        With a claim over the base (``basis``), the answer's and the base's are
        the pairs the claim rests on, so that the answer's figure over the
        base's is the claim; else the figures measured after selection
        (``confirmed``), else all of them. The reading that picked a
        configuration for a race is never among them.
        """
        if self.basis is not None and self.incumbent is not None and self.base is not None:
            if config.key == self.incumbent.key:
                return self.basis.answer_trials
            if config.key == self.base.key:
                return self.basis.base_trials
        return config.confirmed or config.numbers

    def counted_readings(self, config: Configuration) -> tuple[tuple[int, float], ...]:
        """(trial, TPS) of ``counted``, in trial order."""
        counted = set(self.counted(config))
        return tuple((n, v) for n, v in config.readings if n in counted)

    def tps_interval(self, config: Configuration) -> Interval:
        """The configuration's TPS (tok/s) with its interval at the study's confidence: its one
        figure wherever it is shown.

        Made from the figures of ``counted`` (after selection; for the answer and
        the base, those of the claim's pairs); the interval is a t-interval of
        the mean log TPS on the study's between-server spread.
        """
        figures = [v for _, v in self.counted_readings(config)]
        return tps_interval(figures, spread=self.spread, confidence=self.settings.confidence)

    def front(self) -> list[tuple[Configuration, Interval]]:
        """The configurations no other beats on both TPS estimate (up) and PPL (down),
        by PPL, each with ``tps_interval``: what a trade-off table shows, never the
        reading that selected a configuration where figures after selection exist."""
        estimated = [(c, self.tps_interval(c)) for c in self.configurations]
        front = [
            (c, i)
            for c, i in estimated
            if not any(
                oi.value >= i.value and o.ppl <= c.ppl and (oi.value > i.value or o.ppl < c.ppl) for o, oi in estimated
            )
        ]
        return sorted(front, key=lambda pair: (pair[0].ppl, -pair[1].value))

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
                f"trial {inc.first}: {self.tps_interval(inc).value:.1f} tok/s, {ppl}; the base manifest was not "
                f"measured, so no speedup can be stated{pending}"
            )
        if inc.key == self.base.key:
            return (
                f"the base manifest itself (trial {inc.first}, {self.tps_interval(inc).value:.1f} tok/s), {ppl}: "
                f"no configuration was confirmed faster than it{pending}"
            )
        iv = self.speedup
        assert iv is not None
        if self.basis is not None:
            span = (
                f"study-wise {level_text(self.settings.confidence)} interval {percent_text(iv.low)} to "
                f"{percent_text(iv.high)}, from {len(self.basis.answer_trials)} round(s) after selection"
            )
        else:
            span = f"{level_text(iv.confidence)} interval {percent_text(iv.low)} to {percent_text(iv.high)}"
        if self.claim is Claim.FASTER:
            head = f"{percent_text(iv.value)} faster than the base manifest ({span})"
        elif self.claim is Claim.SLOWER:
            head = f"{percent_text(iv.value)} against the base manifest ({span}): slower"
        else:
            head = f"not distinguishable from the base manifest: {percent_text(iv.value)} ({span}, which includes 0 %)"
        estimate = self.tps_interval(inc).value
        servers = len(self.counted(inc))
        return f"{head}, {ppl}; trial {inc.first}, {estimate:.1f} tok/s over {servers} server(s){pending}"

    def _config_dict(self, config: Configuration | None) -> dict[str, Any] | None:
        """A configuration as data; its ``tps`` (and ``estimate``) is its one figure (``tps_interval``),
        of the trials ``counted``; ``readings`` every server's, ``estimate_all`` the geometric
        mean of every reading, the one that selected it included."""
        if config is None:
            return None
        interval = self.tps_interval(config)
        return {
            "trial": config.first,
            "trials": list(config.numbers),
            "params": dict(config.params),
            "tps": interval.value,
            "readings": [{"trial": n, "tps": v} for n, v in config.readings],
            "counted": list(self.counted(config)),
            "estimate": interval.value,
            "estimate_all": config.estimate,
            "tps_interval": interval.to_dict(),
            "ppl": config.ppl,
            "ppl_cap": config.ppl_cap,
        }

    def to_dict(self) -> dict[str, Any]:
        speedup = self.speedup
        return {
            "claim": self.claim,
            "confirmed": self.confirmed,
            "statement": self.describe(),
            "incumbent": self._config_dict(self.incumbent),
            "base": self._config_dict(self.base),
            "speedup": speedup.to_dict() if speedup is not None else None,
            "spread": self.spread.to_dict(),
            "prior_check": self.prior_check.to_dict() if self.prior_check is not None else None,
            "basis": self.basis.to_dict() if self.basis is not None else None,
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
