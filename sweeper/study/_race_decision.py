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
race, then meet the incumbent it left. Everything is a pure function of the
stored trials, so a resumed study or a second worker reaches the same
standing. ``benchmarks/claim_error.py`` measures the share of whole studies
that claim "faster" when nothing is, and that find the truly faster
configuration (docs/noise.md).

This module holds the decisions: ``Outcome`` and ``Claim``, the levels, and
the rules that turn intervals into them. ``_race_replay`` replays the races
over the stored trials and asks these rules at each turn; ``_standing``
holds what they give (``Standing``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from evaluators import Interval
from sweeper.study._race_settings import ConfirmSettings
from sweeper.words import Word

# a race stops once its contender, re-measured, reads no faster than the incumbent
FUTILITY_RATIO = 1.0


class Outcome(Word):
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


class Claim(Word):
    """What the study claims of a configuration against the base manifest."""

    FASTER = "faster"
    INDISTINCT = "indistinct"  # not distinguishable from the base
    BASE = "base"  # it is the base manifest's configuration
    SLOWER = "slower"
    NONE = "none"  # nothing to state: no configuration, or no base measured


# the outcomes that make the contender the incumbent
TAKES_OVER = (Outcome.FASTER, Outcome.TIE_WON, Outcome.UNCONFIRMED)


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


def break_tie(contender: Mapping[str, Any], incumbent: Mapping[str, Any], base: Mapping[str, Any] | None) -> Outcome:
    """A tie goes to the configuration (by its parameters) closer to the base manifest; the
    incumbent keeps an even one."""
    if base is not None and distance_to_base(contender, base) < distance_to_base(incumbent, base):
        return Outcome.TIE_WON
    return Outcome.TIE_KEPT


def unraced_outcome(interval: Interval) -> Outcome:
    """Races off: the figures as measured decide; a contender that reads faster takes over."""
    if interval.low > 1.0:
        return Outcome.FASTER
    if interval.high < 1.0:
        return Outcome.SLOWER
    if interval.value <= 1.0:
        return Outcome.SCREENED
    return Outcome.UNCONFIRMED


def is_screened(interval: Interval, standard_error: float, settings: ConfirmSettings) -> bool:
    """The first figure screens: a contender measured clearly below the incumbent is not raced.

    ``interval``: its first figures over the incumbent's; ``standard_error``: of the
    difference of their mean log TPS.
    """
    below = math.log(interval.value) < -settings.screen * standard_error
    return interval.high < 1.0 or below or (settings.screen == 0.0 and interval.value < 1.0)


def look(
    n: int, settings: ConfirmSettings, interval: Interval, plain: Interval, over_base: Callable[[], bool]
) -> tuple[Outcome, Interval] | None:
    """A race's decision at its look after round ``n`` and the interval it rests on; None: it
    goes on.

    ``interval``: the contender over the incumbent on the rounds' pairs, at
    ``race_confidence``; ``plain``: the same pairs at the study's confidence;
    ``over_base``: whether the contender is shown faster than the base as well (asked only
    once it is ahead of the incumbent at a look it may take over at).
    """
    may_look = n >= min(2, settings.rounds)
    if may_look and interval.low > 1.0 and over_base():
        return Outcome.FASTER, interval
    if plain.high < 1.0:
        return Outcome.SLOWER, plain
    if interval.value <= FUTILITY_RATIO:
        return Outcome.BEHIND, interval
    if n >= settings.rounds:
        return Outcome.TIE_UNDECIDED, interval
    return None


def wants_claim_round(interval: Interval, done: int, settings: ConfirmSettings) -> bool:
    """Another claim round while the incumbent's claim over the base is still unclear.

    The races chose the incumbent; its claim then rests on its figures
    paired with the base's (``interval``). While that interval still
    includes 1, reads faster and fewer than ``rounds`` claim rounds ran
    (``done``), the two are re-measured side by side once more.
    """
    settled = interval.low > 1.0 or interval.high < 1.0 or interval.value <= FUTILITY_RATIO
    return not (settled or done >= settings.rounds)


def claim_from(speedup: Interval) -> Claim:
    """What a speedup over the base claims: faster or slower where its interval excludes 1,
    else not distinguishable."""
    if speedup.low > 1.0:
        return Claim.FASTER
    if speedup.high < 1.0:
        return Claim.SLOWER
    return Claim.INDISTINCT
