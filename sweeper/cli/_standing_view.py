"""How a study's standing reads: its best with its one TPS figure, the claim and what it rests on,
the noise, the races, the Pareto set (``sweeper status`` and ``sweeper run --verbose``)."""

from __future__ import annotations

from typing import Any

from storage import StudyStatus
from sweeper._text import percent_text
from sweeper.cli._formats import params_text
from sweeper.study import Configuration, Outcome, Standing, ppl_statement


def answer_ppl_line(status: StudyStatus, number: int) -> str | None:
    """``PPL of trial 3: PPL 2.1502 (95 % interval ...); on 16 new records ...`` (None: no figures)."""
    record = next((r for r in status.trials if r.number == number), None)
    if record is None:
        return None
    statement = ppl_statement(record.ppl, record.extras, record.ppl_cap, status.settings)
    if statement is None or not statement.known:
        return None
    return f"PPL of trial {number}: {statement.text()}"


def standing_lines(now: Standing | None) -> list[str]:
    """The study's claim: its confirmed best, the speedup over the base, the noise behind it.

    Each configuration is stated at its one figure (``Standing.tps_interval``); its
    readings follow, the ones not counted marked, and the base's figure is the one the
    answer's divides to the claim (the same rounds).
    """
    if now is None or now.incumbent is None:
        return []
    inc = now.incumbent
    estimate = now.tps_interval(inc)
    lines = [
        f"best: trial {inc.first}: TPS {estimate.value:.2f} ({_figure_basis(now, inc)}), "
        f"PPL {inc.ppl:.4f} (cap {inc.ppl_cap:.4f}), {params_text(inc.params)}",
        f"claim: {now.describe()}",
    ]
    if now.basis is not None:
        lines.append(f"claim rests on: {now.basis.describe()}")
    lines.append(f"noise: between-server spread {now.spread.relative:.1%} (SD of log TPS; {now.spread.method})")
    if now.prior_text:
        lines.append(f"noise prior: {now.prior_text}")
    if now.base is not None and now.base.key != inc.key:
        base = now.tps_interval(now.base)
        line = f"base manifest: trial {now.base.first}: TPS {base.value:.2f} ({_figure_basis(now, now.base)})"
        speedup = now.speedup
        if speedup is not None and now.basis is not None:
            line += f"; {estimate.value:.2f} / {base.value:.2f} = {percent_text(speedup.value)}, the claim"
        lines.append(line)
    for decision in now.decisions:
        # a contender screened out at once was never raced; one that fell behind
        # after a round was, and its round is shown
        if decision.outcome is not Outcome.SCREENED or decision.rounds > 0:
            lines.append(f"race: {decision.describe()}")
    return lines


def _figure_basis(now: Standing, config: Configuration) -> str:
    """What a configuration's figure is made of, and its readings with the ones not counted marked."""
    counted = now.counted(config)
    n = len(counted)
    claimed = {c.key for c in (now.incumbent, now.base) if c is not None}  # the claim's two sides
    if now.basis is not None and config.key in claimed:
        what = f"geometric mean of the claim's {n} round{'s' if n != 1 else ''}"
    elif n < len(config.tps):
        what = f"geometric mean of {n} server{'s' if n != 1 else ''} after selection"
    elif n > 1:
        what = f"geometric mean of {n} servers"
    else:
        return "one server"
    return f"{what}; every reading: {reading_list(now, config)}"


def reading_list(now: Standing, config: Configuration) -> str:
    """``141.0 (selected it: not counted), 125.2, 123.9``: a configuration's readings in trial order."""
    counted = set(now.counted(config))
    selected = set(now.basis.excluded) if now.basis is not None else set()
    selected |= {n for n in config.numbers if n not in config.confirmed}
    parts = []
    for number, value in config.readings:
        if number in counted:
            parts.append(f"{value:.1f}")
        elif number in selected and not config.is_base:
            parts.append(f"{value:.1f} (selected it: not counted)")
        else:
            parts.append(f"{value:.1f} (outside the claim's rounds: not counted)")
    return ", ".join(parts)


def configuration_figure(now: Standing | None, number: int) -> dict[str, Any] | None:
    """Trial ``number``'s configuration's one TPS figure, and whether this trial's reading is
    among those it is made of (None: the trial is not of a gate-passing configuration)."""
    config = now.configuration_of(number) if now is not None else None
    if now is None or config is None:
        return None
    interval = now.tps_interval(config)
    counted = now.counted(config)
    return {
        "trial": config.first,
        "tps": interval.value,
        "tps_interval": interval.to_dict(),
        "counted": list(counted),
        "this_reading_counted": number in counted,
        "text": f"TPS {interval.value:.2f} ({_figure_basis(now, config)})",
    }


def derivation_lines(status: StudyStatus, now: Standing) -> list[str]:
    """What ``sweeper run --verbose`` adds: the claim's derivation and the Pareto set, as
    ``sweeper status`` words them (``now`` must have an incumbent)."""
    assert now.incumbent is not None, "a standing with an answer"
    lines = standing_lines(now)
    ppl = answer_ppl_line(status, now.incumbent.first)
    if ppl is not None:
        lines.insert(1, ppl)
    for config, interval in now.front():
        counted = now.counted(config)
        after = " after selection" if len(counted) < len(config.tps) else ""
        lines.append(
            f"pareto: trial {config.first} {dict(config.params)}: {interval.value:.1f} tok/s "
            f"({interval.confidence * 100:.0f} % {interval.low:.1f}-{interval.high:.1f}, "
            f"{len(counted)} server(s){after}), PPL {config.ppl:.3f}"
        )
    return lines
