"""The races replayed over the stored trials: ``standing`` (the rules: ``_race_decision``).

The stored trials are grouped into gate-passing configurations and each
race's rounds (by the role of their confirmation trials), and the spread
each look may use is worked out from the figures measured up to it. Each
contender, in the order it was found, then takes its turn against the
incumbent of its time, and the rules of ``_race_decision`` decide it. Only
the stored trials and the stored ``ConfirmSettings`` go in, so a resumed
study or a second worker reaches the same ``Standing``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from evaluators import (
    Interval,
    Spread,
    blocked_spread,
    paired_speedup_interval,
    pooled_spread,
    prior_fit,
    speedup_interval,
)
from search_spaces import BASELINE
from storage import TrialRecord, is_answer
from sweeper.study._race_decision import (
    TAKES_OVER,
    Outcome,
    break_tie,
    claim_confidence,
    is_screened,
    look,
    race_confidence,
    unraced_outcome,
    wants_claim_round,
)
from sweeper.study._race_settings import ConfirmSettings
from sweeper.study._standing import (
    CONFIRM_ROLE,
    ClaimBasis,
    Configuration,
    Decision,
    Race,
    Standing,
    is_confirmation,
    params_key,
)

# degrees of freedom from interleaved rounds that are trusted on their own; with fewer, the
# spread of all servers (drift included) is a floor (a CPU demo on a busy machine showed 13 %
# within rounds on 10 df and 23 % over all its servers, the machine drifting by 2x)
ROUNDS_DF_ENOUGH = 12


def configurations(records: Iterable[TrialRecord]) -> list[Configuration]:
    """The gate-passing configurations, by first measurement, each with all its TPS figures."""
    grouped: dict[str, list[tuple[TrialRecord, float, float]]] = {}
    for record in sorted(records, key=lambda r: r.number):
        figures = _answer_figures(record)
        if figures is not None:
            grouped.setdefault(params_key(record.params), []).append((record, *figures))
    found = []
    for key, group in grouped.items():
        first, _, first_ppl = next((g for g in group if not is_confirmation(g[0].role)), group[0])
        roles = [r.role for r, _, _ in group]
        found.append(
            Configuration(
                key=key,
                params=dict(first.params),
                numbers=tuple(r.number for r, _, _ in group),
                tps=tuple(tps for _, tps, _ in group),
                ppl=first_ppl,
                ppl_cap=float(first.ppl_cap if first.ppl_cap is not None else first_ppl),
                is_base=any(BASELINE in role.split("+") for role in roles),
                confirmed=tuple(
                    r.number for r, _, _ in group if is_confirmation(r.role) or BASELINE in r.role.split("+")
                ),
            )
        )
    return sorted(found, key=lambda c: c.first)


def _answer_figures(record: TrialRecord) -> tuple[float, float] | None:
    """(TPS, PPL) of a gate-passing trial with a TPS over 0; None for any other trial."""
    if is_answer(record) and record.tps is not None and record.ppl is not None and record.tps > 0:
        return float(record.tps), float(record.ppl)
    return None


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
        raced = first_of.get(params_key(group[0].params))
        if raced is None:
            continue
        rounds = found.setdefault(raced, [])
        rounds.append(Round(contender=raced, index=len(rounds) + 1, trials=tuple(group)))
    return found


def base_params(records: Iterable[TrialRecord]) -> Mapping[str, Any] | None:
    for record in sorted(records, key=lambda r: r.number):
        if BASELINE in record.role.split("+"):
            return dict(record.params)
    return None


def _standard_error(spread: Spread, a: Configuration, b: Configuration) -> float:
    """The standard error of the difference of two configurations' mean log TPS."""
    return spread.relative * math.sqrt(1.0 / len(a.tps) + 1.0 / len(b.tps))


class _Replay:
    """The races replayed over the stored trials, one decision after another."""

    def __init__(self, records: Sequence[TrialRecord], settings: ConfirmSettings) -> None:
        self.records = list(records)
        self.settings = settings
        self.configs = configurations(self.records)
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
    """Replay the races over the stored trials (the rules: ``_race_decision``).

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
        if decision.outcome in TAKES_OVER:
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


def _base_over_cap(records: Iterable[TrialRecord]) -> bool:
    """Was the base manifest's own trial measured over the PPL cap?"""
    return any(BASELINE in r.role.split("+") and r.state == "complete" and r.feasible is False for r in records)


def _unraced_turn(
    contender: Configuration, incumbent: Configuration, spread: Spread, settings: ConfirmSettings
) -> Decision:
    """Races off: the figures as measured decide; a contender that reads faster takes over."""
    interval = speedup_interval(contender.tps, incumbent.tps, spread=spread, confidence=settings.confidence)
    outcome = unraced_outcome(interval)
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
        if is_screened(interval, _standard_error(spread, contender, incumbent), settings):
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
        outcome = break_tie(
            contender.params, incumbent.params, base.params if base is not None else base_params(replay.records)
        )
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
        over_base = functools.partial(_over_base, replay, seen, contender, incumbent, base, spread, level)
        decided = look(n, settings, interval, plain, over_base)
        if decided is not None:
            return decided[0], decided[1], looked
    if interval is None:  # not re-measured yet (or no round had both figures)
        spread = replay.spread_until(None)
        interval = speedup_interval(contender.tps, incumbent.tps, spread=spread, confidence=level)
        if len(rounds) >= settings.rounds:
            return Outcome.TIE_UNDECIDED, interval, 0
    return outcome, interval, looked


def _over_base(
    replay: _Replay,
    seen: Sequence[Round],
    contender: Configuration,
    incumbent: Configuration,
    base: Configuration | None,
    spread: Spread,
    level: float,
) -> bool:
    """Is the contender shown faster than the base on the rounds ``seen`` (at ``level``)? Where
    the incumbent is the base (or no base was measured), beating the incumbent is enough."""
    if base is None or incumbent.key == base.key:
        return True
    vs_base = [(x[1], y[1]) for x, y in replay.pairs(seen, contender, base)]
    return bool(vs_base) and paired_speedup_interval(vs_base, spread=spread, confidence=level).low > 1.0


def _claim_round(replay: _Replay, incumbent: Configuration, base: Configuration, basis: ClaimBasis) -> Race | None:
    """Another claim round while the incumbent's claim over the base is still unclear
    (``wants_claim_round``)."""
    done = len(replay.claim_rounds.get(incumbent.first, []))
    if not wants_claim_round(basis.interval, done, replay.settings):
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
