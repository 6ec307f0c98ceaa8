"""Confirmation races: a configuration becomes the study's best only once confirmed.

One TPS figure of a fresh server is noisy (10-20 % between servers on two
shared CPU cores, 13 % on an H200 at demo sizes), so the single fastest
measurement of a study is often a lucky one, and a claim that reuses the
figure that made a configuration look best confirms its luck (the winner's
curse). Here:

* **The first figure screens, never claims.** A new gate-passing
  configuration (a contender) is compared with the study's best so far,
  the **incumbent** (at first the base manifest's own configuration, the
  baseline trial). Measured more than ``screen`` standard errors below it
  (1 by default), it is set aside without a race; otherwise it is
  **raced**.
* **A race decides on figures measured after the selection.** A round
  re-measures the contender, the incumbent and the base (when the
  incumbent is another configuration), one after another, each in a fresh
  server (A B C A B C), as confirmation trials of the study (role
  ``confirm:<contender>:<round>``: stored, resumable, shown like any
  trial). The comparison is made on the rounds' pairs only (log ratio of
  the contender's and the incumbent's figure of the same round), so drift
  on the machine between rounds cancels. From the second round on, at
  each look: a lower bound (one-sided, at ``confidence``) above 1 against
  the incumbent and against the base makes it the incumbent; an upper bound
  below 1 (two-sided at ``confidence``) or a re-measured ratio of 1 or less
  ends the race (it is slower, or no faster: not worth more servers);
  after ``rounds`` rounds it is a **tie**, and a tie goes to the
  configuration closer to the base manifest (fewer parameters changed,
  then smaller relative changes).
* **The spread** is what the interleaved rounds show (log TPS fitted as
  configuration + round, ``evaluators.blocked_spread``), never below what
  all the study's servers show (``pooled_spread``, drift included); a
  prior (``noise``, ``sweeper run --noise``, as ``prior_df`` degrees of freedom) stands in
  until repeats exist. Each look uses the spread known at that point.
* **The claim pays for every race.** The incumbent's speedup over the base
  rests on its figures after selection, paired with the base's of the same
  rounds, at 1 - (1 - confidence) / races for the races the study ran
  (Bonferroni over the races actually run). While that interval still
  includes 1 and reads faster, **claim rounds** re-measure the incumbent
  and the base side by side (up to ``rounds`` of them).

The races are decided one at a time: later contenders wait for the current
race, then meet the incumbent it left. Everything here is a pure function
of the stored trials, so a resumed study or a second worker reaches the
same standing. ``benchmarks/claim_error.py`` measures the share of whole
studies that claim "faster" when nothing is, and that find the truly
faster configuration (docs/noise.md).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from evaluators import (
    DEFAULT_CONFIDENCE,
    PRIOR_SPREAD,
    Interval,
    PriorCheck,
    Spread,
    blocked_spread,
    paired_speedup_interval,
    pooled_spread,
    prior_fit,
    speedup_interval,
    tps_interval,
)
from search_spaces import BASELINE
from storage import TrialRecord, is_answer
from sweeper.errors import UserInputError

logger = logging.getLogger(__name__)

CONFIRM_ROLE = "confirm"
# a race stops once its contender, re-measured, reads no faster than the incumbent
FUTILITY_RATIO = 1.0
# degrees of freedom from interleaved rounds that are trusted on their own; with fewer, the
# spread of all servers (drift included) is a floor (a CPU demo on a busy machine showed 13 %
# within rounds on 10 df and 23 % over all its servers, the machine drifting by 2x)
ROUNDS_DF_ENOUGH = 12
# the study user attribute that marks a race round as queued (one per contender and round)
ROUND_ATTR_PREFIX = "sweeper:race-round:"


class ConfirmSettingsError(UserInputError):
    """A confirmation setting is not valid; ``field``: the setting's name (``rounds``, ``noise``, ...)."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class _Word(str, enum.Enum):
    """A decision stored, compared and printed as its word (``str(Claim.FASTER)`` is ``faster``)."""

    __str__ = str.__str__
    __format__ = str.__format__


class Outcome(_Word):
    """How a contender's race against the incumbent ended (or stands)."""

    FASTER = "faster"
    SLOWER = "slower"
    BEHIND = "behind"
    SCREENED = "screened"
    TIE_KEPT = "tie-kept"
    TIE_WON = "tie-won"
    RACING = "racing"
    UNCONFIRMED = "unconfirmed"
    TIE_UNDECIDED = "tie-undecided"  # a race that ran its rounds, before the tie is broken


class Claim(_Word):
    """What the study claims of a configuration against the base manifest."""

    FASTER = "faster"
    INDISTINCT = "indistinct"  # not distinguishable from the base
    BASE = "base"  # it is the base manifest's configuration
    SLOWER = "slower"
    NONE = "none"  # nothing to state: no configuration, or no base measured


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
    noise: float = PRIOR_SPREAD
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


def params_key(params: Mapping[str, Any]) -> str:
    return json.dumps(dict(params), sort_keys=True, default=str)


def is_confirmation(role: str) -> bool:
    """A re-measurement of a race (``confirm``, or ``confirm:<contender>:<round>``)."""
    return role == CONFIRM_ROLE or role.startswith(CONFIRM_ROLE + ":")


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
            f"{_percent(iv.value)} ({_level(iv.confidence)} interval {_percent(iv.low)} to {_percent(iv.high)}, "
            f"{basis}), {self.rounds} round{'s' if self.rounds != 1 else ''}"
        )
        return f"{text}: {_OUTCOME_WORDS[self.outcome]}"


_OUTCOME_WORDS = {
    Outcome.FASTER: "faster, confirmed: the new incumbent",
    Outcome.SLOWER: "slower, confirmed",
    Outcome.BEHIND: "no faster once re-measured: not raced further",
    Outcome.SCREENED: "slower as measured: not raced further",
    Outcome.TIE_KEPT: "a tie; the incumbent is closer to the base manifest and stays",
    Outcome.TIE_WON: "a tie; the contender is closer to the base manifest and takes over",
    Outcome.RACING: "not clear yet: re-measuring",
    Outcome.UNCONFIRMED: "faster as measured; races are off, so it takes over unconfirmed",
}


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
        if speedup.low > 1.0:
            return Claim.FASTER
        if speedup.high < 1.0:
            return Claim.SLOWER
        return Claim.INDISTINCT

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
                f"study-wise {_level(self.settings.confidence)} interval {_percent(iv.low)} to "
                f"{_percent(iv.high)}, from {len(self.basis.answer_trials)} round(s) after selection"
            )
        else:
            span = f"{_level(iv.confidence)} interval {_percent(iv.low)} to {_percent(iv.high)}"
        if self.claim is Claim.FASTER:
            head = f"{_percent(iv.value)} faster than the base manifest ({span})"
        elif self.claim is Claim.SLOWER:
            head = f"{_percent(iv.value)} against the base manifest ({span}): slower"
        else:
            head = f"not distinguishable from the base manifest: {_percent(iv.value)} ({span}, which includes 0 %)"
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


def _level(confidence: float) -> str:
    percent = confidence * 100
    return f"{percent:.0f} %" if abs(percent - round(percent)) < 1e-9 else f"{percent:.2f} %"


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
                confirmed=tuple(r.number for r in group if is_confirmation(r.role) or BASELINE in r.role.split("+")),
            )
        )
    return sorted(found, key=lambda c: c.first)


def confirmation_role(contender: int, round_number: int, *, claim: bool = False) -> str:
    """The role of a confirmation trial: ``contender``'s race (or, ``claim``, the
    incumbent's claim rounds beside the base), round ``round_number``."""
    kind = "claim:" if claim else ""
    return f"{CONFIRM_ROLE}:{kind}{contender}:{round_number}"


def _round_of(role: str) -> tuple[bool, int, int] | None:
    """(claim, contender, round) of a tagged confirmation role; None for the untagged form."""
    parts = role.split(":")
    claim = len(parts) == 4 and parts[1] == "claim"
    if parts[0] == CONFIRM_ROLE and len(parts) == (4 if claim else 3):
        try:
            return claim, int(parts[-2]), int(parts[-1])
        except ValueError:
            return None
    return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Round:
    """One round of a race: each configuration's confirmation trial, in the order they ran
    (the lineup's, which turns round by round)."""

    contender: int  # the contender's first trial
    index: int  # from 1
    trials: tuple[TrialRecord, ...]

    @property
    def last(self) -> int:
        return max(r.number for r in self.trials)

    def figure(self, key: str) -> tuple[int, float] | None:
        """(trial, TPS) of configuration ``key`` in this round, if it passed the gate with a figure."""
        for record in self.trials:
            if params_key(record.params) == key and is_answer(record) and record.tps and record.tps > 0:
                return record.number, float(record.tps)
        return None


def race_rounds(
    records: Sequence[TrialRecord], configs: Sequence[Configuration], *, claim: bool = False
) -> dict[int, list[Round]]:
    """The confirmation trials grouped into rounds, by the contender (first trial) raced.

    Tagged roles (``confirm:<contender>:<round>``) name both. The untagged
    form of older studies is grouped by order: a round is a run of
    confirmation trials of distinct configurations, the first of which is
    the contender.
    """
    first_of = {c.key: c.first for c in configs}
    tagged: dict[tuple[bool, int, int], list[TrialRecord]] = {}
    untagged: list[list[TrialRecord]] = []
    for record in sorted(records, key=lambda r: r.number):
        if not is_confirmation(record.role) or record.state in ("running", "interrupted"):
            continue
        where = _round_of(record.role)
        if where is not None:
            tagged.setdefault(where, []).append(record)
            continue
        key = params_key(record.params)
        if not untagged or key in {params_key(r.params) for r in untagged[-1]}:
            untagged.append([])
        untagged[-1].append(record)
    found: dict[int, list[Round]] = {}
    for (is_claim, contender, index), group in sorted(tagged.items()):
        if is_claim == claim:
            found.setdefault(contender, []).append(Round(contender=contender, index=index, trials=tuple(group)))
    for group in untagged if not claim else ():
        contender = first_of.get(params_key(group[0].params))
        if contender is None:
            continue
        rounds = found.setdefault(contender, [])
        rounds.append(Round(contender=contender, index=len(rounds) + 1, trials=tuple(group)))
    return found


def rounds_run(records: Sequence[TrialRecord], key: str) -> int:
    """Confirmation trials that re-measured configuration ``key`` and ended (in any state)."""
    return sum(
        1
        for r in records
        if is_confirmation(r.role) and params_key(r.params) == key and r.state not in ("running", "interrupted")
    )


def base_params(records: Iterable[TrialRecord]) -> Mapping[str, Any] | None:
    for record in sorted(records, key=lambda r: r.number):
        if BASELINE in record.role.split("+"):
            return dict(record.params)
    return None


def _standard_error(spread: Spread, a: Configuration, b: Configuration) -> float:
    """The standard error of the difference of two configurations' mean log TPS."""
    return spread.relative * math.sqrt(1.0 / len(a.tps) + 1.0 / len(b.tps))


def race_confidence(settings: ConfirmSettings) -> float:
    """The level of the intervals that decide a race at each of its looks.

    A race only decides what the study re-measures and which configuration
    it puts forward; its lower bound is a one-sided bound at the study's
    confidence (a two-sided 90 % interval at 95 %). What the study claims
    pays for every race it ran (``claim_confidence``). Dividing the race's
    own level by its number as well (1 - alpha / race) made a contender
    raced late nearly unable to take over, and found the truly best
    configuration less often for no lower claim error (in 60 simulated
    studies of 8 trials at 10 % noise, 42 against 45 claimed the one 25 %
    faster; in 150 null ones, 4 against 2 claimed "faster").
    """
    return 1.0 - 2.0 * (1.0 - settings.confidence)


def claim_confidence(settings: ConfirmSettings, races: int) -> float:
    """The level of the claim's interval over the base when the study ran ``races`` races.

    Bonferroni over the races actually run (1 - alpha / races): each race
    was a chance to claim a configuration that is not faster, so the claim
    pays for all of them. With the races' own looks, this kept the share
    of null studies that claim "faster" under alpha in
    benchmarks/claim_error.py (docs/noise.md).
    """
    return 1.0 - (1.0 - settings.confidence) / max(races, 1)


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


class _Replay:
    """The races replayed over the stored trials, one decision after another."""

    def __init__(self, records: Sequence[TrialRecord], settings: ConfirmSettings) -> None:
        self.records = list(records)
        self.settings = settings
        self.configs = configurations(self.records)
        self.by_key = {c.key: c for c in self.configs}
        self.rounds = race_rounds(self.records, self.configs)
        self.claim_rounds = race_rounds(self.records, self.configs, claim=True)

    def figures_until(self, last: int | None) -> list[tuple[float, ...]]:
        """Each configuration's TPS figures from trials numbered up to ``last`` (None: all)."""
        groups = []
        for config in self.configs:
            values = tuple(v for n, v in zip(config.numbers, config.tps) if last is None or n <= last)
            if values:
                groups.append(values)
        return groups

    def blocks_until(self, last: int | None) -> list[list[tuple[float, ...]]]:
        """Each race's complete rounds (every configuration of the round has a figure), up to ``last``."""
        races = []
        for rounds in [*self.rounds.values(), *self.claim_rounds.values()]:
            complete = []
            for round_ in rounds:
                if last is not None and round_.last > last:
                    continue
                # the same column for a configuration in every round, whatever order it ran in
                keys = sorted({params_key(r.params) for r in round_.trials})
                values = [round_.figure(key) for key in keys]
                if len(keys) >= 2 and all(v is not None for v in values):
                    complete.append(tuple(v[1] for v in values if v is not None))
            widths = {len(row) for row in complete}
            if len(widths) > 1:  # rounds of one race with different lineups: keep the most common
                width = max(widths, key=lambda w: sum(len(row) == w for row in complete))
                complete = [row for row in complete if len(row) == width]
            if complete:
                races.append(complete)
        return races

    def spread_until(self, last: int | None) -> Spread:
        """The spread a decision uses: what the interleaved rounds show; while they have fewer
        than ``ROUNDS_DF_ENOUGH`` degrees of freedom, never below what all the study's
        servers have shown (their pooled spread, drift included), so that a few lucky
        rounds cannot shrink an interval."""
        settings = self.settings
        everything = pooled_spread(self.figures_until(last), prior=settings.noise, prior_df=settings.prior_df)
        blocked = blocked_spread(self.blocks_until(last), prior=settings.noise, prior_df=settings.prior_df)
        prior = f"prior {settings.noise:.0%} as {settings.prior_df:g} df"
        if blocked.measured_df >= ROUNDS_DF_ENOUGH:
            return dataclasses.replace(
                blocked, method=f"{blocked.measured_df} df from interleaved rounds, round drift removed, {prior}"
            )
        if blocked.relative > everything.relative:
            return dataclasses.replace(
                blocked,
                df=everything.df,
                method=(
                    f"{blocked.measured_df} df from interleaved rounds, round drift removed, {prior}; "
                    f"not below all servers' {everything.relative:.1%} on {everything.df:g} df"
                ),
            )
        rounds = (
            f"; interleaved rounds alone show {blocked.relative:.1%} on {blocked.measured_df} df"
            if blocked.measured_df
            else ""
        )
        return dataclasses.replace(everything, method=f"{everything.measured_df} df from repeats, {prior}{rounds}")

    @staticmethod
    def pairs(
        rounds: Iterable[Round], a: Configuration, b: Configuration
    ) -> list[tuple[tuple[int, float], tuple[int, float]]]:
        found = []
        for round_ in rounds:
            x, y = round_.figure(a.key), round_.figure(b.key)
            if x is not None and y is not None:
                found.append((x, y))
        return found

    def all_rounds(self) -> list[Round]:
        every = [*self.rounds.values(), *self.claim_rounds.values()]
        return sorted((r for rounds in every for r in rounds), key=lambda r: r.last)


def standing(records: Iterable[TrialRecord], settings: ConfirmSettings) -> Standing:
    """Replay the races over the stored trials (see the module docstring).

    Each gate-passing configuration, in the order it was found, meets the
    incumbent of its time (at first the base, else the first one found):
    with races (``rounds`` > 0) it is screened or raced (``_race_turn``);
    with races off its figures as measured decide (``_unraced_turn``), as
    plain Optuna's best would.
    """
    replay = _Replay(list(records), settings)
    configs = replay.configs
    spread = replay.spread_until(None)
    base = next((c for c in configs if c.is_base), None)
    incumbent = base
    promoted_by = 0  # the race that made the incumbent (0: it is the base, no race, or races off)
    decisions: list[Decision] = []
    race: Race | None = None
    races = 0
    for contender in configs:
        if incumbent is None:
            incumbent = contender  # no base measured: the first gate-passing one starts
            continue
        if contender.key == incumbent.key or contender.is_base:
            continue
        if settings.rounds == 0:
            decision = _unraced_turn(contender, incumbent, spread, settings)
        else:
            decision, race = _race_turn(replay, contender, incumbent, base, spread, races + 1)
            races = max(races, decision.race)
        decisions.append(decision)
        if race is not None:
            break
        if decision.outcome in _TAKES_OVER:
            incumbent, promoted_by = contender, decision.race
    basis = _claim_basis(replay, incumbent, base, promoted_by, races, spread)
    if race is None and basis is not None and incumbent is not None and base is not None:
        race = _claim_round(replay, incumbent, base, basis)
    return Standing(
        settings=settings,
        configurations=tuple(configs),
        spread=spread,
        base=base,
        incumbent=incumbent,
        decisions=tuple(decisions),
        race=race,
        basis=basis,
        base_over_cap=base is None and _base_over_cap(replay.records),
        prior_check=prior_fit(replay.figures_until(None), prior=settings.noise),
    )


# the outcomes that make the contender the incumbent
_TAKES_OVER = (Outcome.FASTER, Outcome.TIE_WON, Outcome.UNCONFIRMED)


def _base_over_cap(records: Iterable[TrialRecord]) -> bool:
    """Was the base manifest's own trial measured over the PPL cap?"""
    return any(BASELINE in r.role.split("+") and r.state == "complete" and r.feasible is False for r in records)


def _unraced_turn(
    contender: Configuration, incumbent: Configuration, spread: Spread, settings: ConfirmSettings
) -> Decision:
    """Races off: the figures as measured decide; a contender that reads faster takes over."""
    interval = speedup_interval(contender.tps, incumbent.tps, spread=spread, confidence=settings.confidence)
    if interval.low > 1.0:
        outcome = Outcome.FASTER
    elif interval.high < 1.0:
        outcome = Outcome.SLOWER
    elif interval.value <= 1.0:
        outcome = Outcome.SCREENED
    else:
        outcome = Outcome.UNCONFIRMED
    return Decision(contender=contender.first, incumbent=incumbent.first, outcome=outcome, interval=interval, rounds=0)


def _race_turn(
    replay: _Replay,
    contender: Configuration,
    incumbent: Configuration,
    base: Configuration | None,
    spread: Spread,
    number: int,
) -> tuple[Decision, Race | None]:
    """Screen the contender on its first figures, or race it as race ``number`` of the study;
    the race that wants another round comes back with the decision."""
    settings = replay.settings
    rounds = replay.rounds.get(contender.first, [])
    if not rounds:
        # the first figure screens: a contender measured clearly below is not raced
        interval = speedup_interval(contender.tps, incumbent.tps, spread=spread, confidence=settings.confidence)
        below = math.log(interval.value) < -settings.screen * _standard_error(spread, contender, incumbent)
        if interval.high < 1.0 or below or (settings.screen == 0.0 and interval.value < 1.0):
            screened = Decision(
                contender=contender.first,
                incumbent=incumbent.first,
                outcome=Outcome.SCREENED,
                interval=interval,
                rounds=0,
            )
            return screened, None
    outcome, interval, looked = _judge_race(replay, contender, incumbent, base, rounds)
    race = None
    if outcome is Outcome.RACING:
        race = Race(contender=contender, incumbent=incumbent, base=base, round=len(rounds) + 1)
    elif outcome is Outcome.TIE_UNDECIDED:
        outcome = _break_tie(contender, incumbent, base.params if base is not None else base_params(replay.records))
    decision = Decision(
        contender=contender.first,
        incumbent=incumbent.first,
        outcome=outcome,
        interval=interval,
        rounds=len(rounds),
        race=number,
        pairs=looked,
    )
    return decision, race


def _break_tie(contender: Configuration, incumbent: Configuration, base: Mapping[str, Any] | None) -> Outcome:
    """A tie goes to the configuration closer to the base manifest; the incumbent keeps an even one."""
    if base is not None and distance_to_base(contender.params, base) < distance_to_base(incumbent.params, base):
        return Outcome.TIE_WON
    return Outcome.TIE_KEPT


def _judge_race(
    replay: _Replay,
    contender: Configuration,
    incumbent: Configuration,
    base: Configuration | None,
    rounds: Sequence[Round],
) -> tuple[Outcome, Interval, int]:
    """Decide a race at each of its looks, on the spread known then; (outcome, interval, pairs)."""
    settings = replay.settings
    level = race_confidence(settings)
    outcome, interval, looked = Outcome.RACING, None, 0
    for n in range(1, len(rounds) + 1):
        seen = rounds[:n]
        spread = replay.spread_until(seen[-1].last)
        against = replay.pairs(seen, contender, incumbent)
        if not against:
            continue
        ratios = [(x[1], y[1]) for x, y in against]
        interval = paired_speedup_interval(ratios, spread=spread, confidence=level)
        looked = len(against)
        plain = paired_speedup_interval(ratios, spread=spread, confidence=settings.confidence)
        may_look = n >= min(2, settings.rounds)
        if may_look and interval.low > 1.0:
            over_base = True
            if base is not None and incumbent.key != base.key:
                vs_base = [(x[1], y[1]) for x, y in replay.pairs(seen, contender, base)]
                over_base = (
                    bool(vs_base) and paired_speedup_interval(vs_base, spread=spread, confidence=level).low > 1.0
                )
            if over_base:
                return Outcome.FASTER, interval, looked
        if plain.high < 1.0:
            return Outcome.SLOWER, plain, looked
        if interval.value <= FUTILITY_RATIO:
            return Outcome.BEHIND, interval, looked
        if n >= settings.rounds:
            return Outcome.TIE_UNDECIDED, interval, looked
    if interval is None:  # not re-measured yet (or no round had both figures)
        spread = replay.spread_until(None)
        interval = speedup_interval(contender.tps, incumbent.tps, spread=spread, confidence=level)
        if len(rounds) >= settings.rounds:
            return Outcome.TIE_UNDECIDED, interval, 0
    return outcome, interval, looked


def _claim_round(replay: _Replay, incumbent: Configuration, base: Configuration, basis: ClaimBasis) -> Race | None:
    """Another claim round while the incumbent's claim over the base is still unclear.

    The races chose the incumbent; its claim then rests on its figures
    paired with the base's. While that interval still includes 1, reads
    faster and fewer than ``rounds`` claim rounds ran, the two are
    re-measured side by side once more.
    """
    done = len(replay.claim_rounds.get(incumbent.first, []))
    iv = basis.interval
    if iv.low > 1.0 or iv.high < 1.0 or iv.value <= FUTILITY_RATIO or done >= replay.settings.rounds:
        return None
    return Race(contender=incumbent, incumbent=base, base=base, round=done + 1, claim=True)


def _claim_basis(
    replay: _Replay,
    incumbent: Configuration | None,
    base: Configuration | None,
    promoted_by: int,
    races: int,
    spread: Spread,
) -> ClaimBasis | None:
    """The incumbent's speedup over the base from the rounds after its selection, paired."""
    if incumbent is None or base is None or incumbent.key == base.key or promoted_by == 0:
        return None
    pairs = replay.pairs(replay.all_rounds(), incumbent, base)
    if not pairs:
        return None
    level = claim_confidence(replay.settings, races)
    interval = paired_speedup_interval([(x[1], y[1]) for x, y in pairs], spread=spread, confidence=level)
    selected = tuple(n for n in incumbent.numbers if n not in {x[0] for x, _ in pairs})
    return ClaimBasis(
        answer_trials=tuple(x[0] for x, _ in pairs),
        base_trials=tuple(y[0] for _, y in pairs),
        excluded=selected,
        race=promoted_by,
        races=races,
        confidence=level,
        study_confidence=replay.settings.confidence,
        spread=spread,
        interval=interval,
    )
