"""What an ablation says of each switch: its figures, and the one place its verdict is decided.

**Speed.** Each switch's effect is the subject value's TPS over the
reference value's, from the rounds of its block (``_schedule``): its arm's
figure paired with the base's figure of the same round, on the spread
that the blocks' rounds show (``evaluators.blocked_spread``: arm + round,
so the host's drift between rounds cancels; the prior stands in until
repeats exist). Every figure is measured by the fixed schedule, none was
picked by a reading, so all of them count. The error is controlled over
the whole ablation, not per switch: each switch's two-sided interval is at
1 - (1 - confidence) / K for K switches (Bonferroni), so the chance that
any switch of the study is called faster or slower when none is stays
under 1 - confidence, whether 4 switches are ablated or 30
(``benchmarks/ablation_error.py`` measures it).

**Quality.** PPL on the same records, as a paired difference
(``evaluators.paired_log_ppl``) with its interval at the same level, and
greedy fidelity: the tokens generated for a fixed prompt set, compared
token for token with the base's. The base's own second server is the
control: when the base does not reproduce its own tokens, the server is
not deterministic and fidelity cannot tell a change (PPL still can).

**The verdict** (``judge_switch``): fails to start, helps (faster, quality
unchanged), helps but changes the outputs or PPL, hurts (slower), or no
effect within the noise. ``export_value`` turns a verdict into the value
the exported manifest sets, and ``judge_closing`` decides what the closing
race of that manifest against the original says (``_closing``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from evaluators import (
    DEFAULT_CONFIDENCE,
    PRIOR_SPREAD,
    FidelityResult,
    Interval,
    PairedPpl,
    Spread,
    blocked_spread,
    paired_speedup_interval,
)
from sweeper.ablation._schedule import Slot, blocks
from sweeper.ablation._switches import AblationMode, Switch
from sweeper.words import Word

# a PPL ratio within this of 1 is the same PPL (float rounding of the logprobs
# moves log PPL by far less; a change the gate could notice is larger)
PPL_SAME_WITHIN = 0.001


class Speed(Word):
    FASTER = "faster"
    SLOWER = "slower"
    NO_EFFECT = "no effect"
    UNMEASURED = "unmeasured"


class OutputCheck(Word):
    """Greedy fidelity of a switch's arm against the base's tokens."""

    SAME = "same tokens"
    CHANGED = "changed tokens"
    NOT_DETERMINISTIC = "base not deterministic"  # the base's own control differed
    NOT_MEASURED = "not measured"


class PplCheck(Word):
    SAME = "no PPL change"  # within PPL_SAME_WITHIN, or not shown at the study-wise level
    HIGHER = "higher PPL"
    LOWER = "lower PPL"
    NOT_MEASURED = "not measured"


class SwitchVerdict(Word):
    """What the ablation says of one switch (``judge_switch``)."""

    HELPS = "helps"  # faster, outputs and PPL unchanged
    HELPS_CHANGES_OUTPUT = "helps, changes outputs"  # faster, but the tokens or PPL moved
    NO_EFFECT = "no effect"  # within the noise
    HURTS = "hurts"  # slower
    FAILS_TO_START = "fails to start"  # the arm's server never measured


class ClosingVerdict(Word):
    """What the closing race of the exported manifest against the original says."""

    CONFIRMED = "confirmed faster"  # faster at the race's level, the same tokens
    FASTER_CHANGES_OUTPUT = "faster, changes outputs"  # the switches together moved the tokens
    NOT_SHOWN = "not shown faster"  # the interval holds 1
    SLOWER = "slower"
    UNMEASURED = "unmeasured"  # under two complete pairs


@dataclasses.dataclass(frozen=True, kw_only=True)
class SlotFigure:
    """One server of the schedule and what it read (``tps`` None: it failed, ``failure`` says how)."""

    slot: Slot
    tps: float | None
    failure: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class TpsEffects:
    """Each switch's speed effect (subject over reference) at the study-wise ``level``."""

    level: float
    spread: Spread
    effects: tuple[Interval | None, ...]  # None: no complete pair
    pairs: tuple[int, ...]
    failures: tuple[tuple[str, ...], ...]  # the failure kinds of each switch's arm servers


def study_level(confidence: float, switches: int) -> float:
    """The level of each switch's interval so that the whole ablation errs with at most 1 - ``confidence``."""
    return 1.0 - (1.0 - confidence) / max(switches, 1)


def tps_effects(
    figures: Sequence[SlotFigure],
    switches: Sequence[Switch],
    mode: AblationMode,
    *,
    block_size: int,
    confidence: float = DEFAULT_CONFIDENCE,
    prior: float = PRIOR_SPREAD,
    prior_df: float = 2.0,
) -> TpsEffects:
    """The speed effects of ``switches`` from the ``figures`` measured so far (any order, failures in)."""
    by_slot = {(f.slot.round, f.slot.block, f.slot.arm): f for f in figures}
    rounds = sorted({f.slot.round for f in figures})
    level = study_level(confidence, len(switches))

    def tps(round_number: int, block: int, arm: int | None) -> float | None:
        figure = by_slot.get((round_number, block, arm))
        return figure.tps if figure is not None else None

    block_list = blocks(len(switches), block_size)
    races: list[list[list[float]]] = []
    for block_index, members in enumerate(block_list):
        columns: list[int | None] = [None, *members]
        measured = [c for c in columns if sum(tps(r, block_index, c) is not None for r in rounds) >= 2]
        if None not in measured or len(measured) < 2:
            continue
        rows = [[tps(r, block_index, c) for c in measured] for r in rounds]
        races.append([[float(v) for v in row if v is not None] for row in rows if all(v is not None for v in row)])
    spread = blocked_spread(races, prior=prior, prior_df=prior_df)

    effects: list[Interval | None] = []
    pair_counts: list[int] = []
    failures: list[tuple[str, ...]] = []
    for block_index, members in enumerate(block_list):
        for index in members:
            pairs = []
            failed = []
            for r in rounds:
                arm, base = tps(r, block_index, index), tps(r, block_index, None)
                if arm is not None and base is not None:
                    pairs.append((arm, base))
                figure = by_slot.get((r, block_index, index))
                if figure is not None and figure.tps is None:
                    failed.append(figure.failure or "failed")
            failures.append(tuple(failed))
            pair_counts.append(len(pairs))
            if not pairs:
                effects.append(None)
                continue
            interval = paired_speedup_interval(pairs, spread=spread, confidence=level)
            effects.append(interval if switches[index].effect_sign(mode) > 0 else invert(interval))
    return TpsEffects(
        level=level, spread=spread, effects=tuple(effects), pairs=tuple(pair_counts), failures=tuple(failures)
    )


def invert(interval: Interval) -> Interval:
    """The interval of 1 / x: the reference's TPS over the subject's turned round."""
    return dataclasses.replace(interval, value=1.0 / interval.value, low=1.0 / interval.high, high=1.0 / interval.low)


def speed_of(effect: Interval | None) -> Speed:
    if effect is None:
        return Speed.UNMEASURED
    if effect.low > 1.0:
        return Speed.FASTER
    if effect.high < 1.0:
        return Speed.SLOWER
    return Speed.NO_EFFECT


def ppl_check(paired: PairedPpl | None, level: float) -> tuple[PplCheck, Interval | None]:
    """Whether the subject's PPL differs from the reference's, at the study-wise ``level``."""
    if paired is None:
        return PplCheck.NOT_MEASURED, None
    interval = paired.interval(level)
    if abs(paired.ratio - 1.0) <= PPL_SAME_WITHIN:
        return PplCheck.SAME, interval
    if interval.low > 1.0:
        return PplCheck.HIGHER, interval
    if interval.high < 1.0:
        return PplCheck.LOWER, interval
    return PplCheck.SAME, interval


def output_check(arm: FidelityResult | None, control: FidelityResult | None) -> OutputCheck:
    """Greedy fidelity of the arm, read against the base's own control (base vs base)."""
    if arm is None or arm.compared == 0:
        return OutputCheck.NOT_MEASURED
    if control is not None and control.compared and control.identical < control.compared:
        return OutputCheck.NOT_DETERMINISTIC
    return OutputCheck.SAME if arm.identical == arm.compared else OutputCheck.CHANGED


# where the speed alone decides (everything but faster), a switch's verdict and the closing race's;
# faster, the outputs decide between the last two of each
_SWITCH_BY_SPEED = {
    Speed.UNMEASURED: SwitchVerdict.FAILS_TO_START,
    Speed.SLOWER: SwitchVerdict.HURTS,
    Speed.NO_EFFECT: SwitchVerdict.NO_EFFECT,
}
_CLOSING_BY_SPEED = {
    Speed.UNMEASURED: ClosingVerdict.UNMEASURED,
    Speed.SLOWER: ClosingVerdict.SLOWER,
    Speed.NO_EFFECT: ClosingVerdict.NOT_SHOWN,
}


def judge_switch(speed: Speed, outputs: OutputCheck, ppl: PplCheck) -> SwitchVerdict:
    """The one place a switch's verdict is decided."""
    if speed is not Speed.FASTER:
        return _SWITCH_BY_SPEED[speed]
    changed = outputs is OutputCheck.CHANGED or ppl in (PplCheck.HIGHER, PplCheck.LOWER)
    return SwitchVerdict.HELPS_CHANGES_OUTPUT if changed else SwitchVerdict.HELPS


def judge_closing(speed: Speed, outputs: OutputCheck) -> ClosingVerdict:
    """The one place the closing race's verdict is decided."""
    if speed is not Speed.FASTER:
        return _CLOSING_BY_SPEED[speed]
    if outputs is OutputCheck.CHANGED:
        return ClosingVerdict.FASTER_CHANGES_OUTPUT
    return ClosingVerdict.CONFIRMED


def export_value(switch: Switch, verdict: SwitchVerdict, *, allow_output_change: bool = False) -> str | None:
    """The value the exported manifest sets for ``switch`` (None: leave the key unset).

    Helps: the subject value. Helps but changes outputs: the reference value
    unless ``allow_output_change`` (the challenge's rule is to stack only
    speedups that keep the outputs). Hurts or fails to start: the reference
    value. No effect: the manifest's own value, unchanged.
    """
    if verdict is SwitchVerdict.HELPS or (verdict is SwitchVerdict.HELPS_CHANGES_OUTPUT and allow_output_change):
        return switch.subject
    if verdict is SwitchVerdict.NO_EFFECT:
        return switch.manifest_value
    return switch.reference


@dataclasses.dataclass(frozen=True, kw_only=True)
class SwitchReport:
    """Everything the ablation says of one switch."""

    switch: Switch
    verdict: SwitchVerdict
    speed: Speed
    tps_effect: Interval | None
    pairs: int
    ppl: PplCheck
    ppl_ratio: Interval | None
    outputs: OutputCheck
    fidelity: FidelityResult | None
    failures: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "switch": self.switch.label,
            "key": self.switch.key,
            "subject": self.switch.subject,
            "reference": self.switch.reference_text,
            "verdict": self.verdict.value,
            "speed": self.speed.value,
            "tps_effect": self.tps_effect.to_dict() if self.tps_effect else None,
            "pairs": self.pairs,
            "ppl": self.ppl.value,
            "ppl_ratio": self.ppl_ratio.to_dict() if self.ppl_ratio else None,
            "outputs": self.outputs.value,
            "fidelity": self.fidelity.to_dict() if self.fidelity else None,
            "failures": list(self.failures),
        }


def report_switches(
    effects: TpsEffects,
    switches: Sequence[Switch],
    *,
    ppl: Mapping[int, PairedPpl | None],
    fidelity: Mapping[int, FidelityResult | None],
    control: FidelityResult | None,
) -> tuple[SwitchReport, ...]:
    """One ``SwitchReport`` per switch: ``ppl`` and ``fidelity`` are keyed by switch index and
    already oriented subject over reference."""
    reports = []
    for index, switch in enumerate(switches):
        effect = effects.effects[index]
        speed = speed_of(effect)
        ppl_state, ppl_interval = ppl_check(ppl.get(index), effects.level)
        outputs = output_check(fidelity.get(index), control)
        reports.append(
            SwitchReport(
                switch=switch,
                verdict=judge_switch(speed, outputs, ppl_state),
                speed=speed,
                tps_effect=effect,
                pairs=effects.pairs[index],
                ppl=ppl_state,
                ppl_ratio=ppl_interval,
                outputs=outputs,
                fidelity=fidelity.get(index),
                failures=effects.failures[index],
            )
        )
    return tuple(reports)
