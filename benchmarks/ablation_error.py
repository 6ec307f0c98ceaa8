"""How often an ablation calls a switch a help when none is, and how often it finds one that is.

Issue 38's error question, without a server: whole ablation studies are simulated server by server
through sweeper's own schedule and verdicts (``sweeper.ablation``: ``schedule``, ``tps_effects``,
``speed_of``), on nights of many switches, in leave-one-out mode from a manifest with every switch on.

**The machine.** One GPU; servers run one after another in the schedule's order, each paying
``start + bridge + run`` seconds (the first round's servers also ``ppl``). The log TPS of a server
of arm a ending at time t is

    log base + effect(a) + b + w + drift(t)

with ``b`` drawn once per fresh server (SD ``--sd-between``), ``w`` for its one TPS run (SD
``--sd-within``), ``drift`` a Brownian walk in time (SD ``--drift-per-hour`` per sqrt(hour));
``--tail-df 3`` draws b and w from a Student-t scaled to the same SD. ``effect`` is 0 for every
switch on a **null** study; on an **alt** study one switch (drawn per study) is truly 10 % faster
on (``--alt-effect``), so turning it off reads 1 / 1.10.

**A study** has K switches (``--switches 10-20``: drawn uniformly per study), a block size
(switches sharing one base server a round; 1 is a base server of its own for every switch) and a
number of rounds; every switch's interval is at the study-wise level 1 - 0.05 / K
(``study_level``). Quality is not simulated (every switch keeps the outputs).

**What it counts.** Null: the share of studies that call any switch faster (a false "helps"), and
any switch faster or slower (any false verdict), with 95 % Clopper-Pearson intervals. Alt: the
share that call the truly faster switch faster (found), and that call any other switch faster.
Also the GPU hours a study takes and the median interval width of the true switch (high / low - 1).

    python -m benchmarks.ablation_error --studies 500 --seed 1
    python -m benchmarks.ablation_error --quick
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import shlex
import statistics
import sys
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from benchmarks.night import binomial_interval
from evaluators import DEFAULT_CONFIDENCE, PRIOR_SPREAD
from sweeper.ablation import (
    AblationMode,
    SlotFigure,
    Speed,
    Switch,
    schedule,
    speed_of,
    tps_effects,
)

MODE = AblationMode.LEAVE_ONE_OUT


@dataclasses.dataclass(frozen=True, kw_only=True)
class Machine:
    """Seconds per phase and the nested noise of log TPS."""

    start_s: float = 167.0
    ppl_s: float = 20.0
    bridge_s: float = 10.0
    run_s: float = 131.0
    sd_between: float = 0.08
    sd_within: float = 0.05
    drift_per_hour: float = 0.03
    tail_df: float | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Design:
    """``rounds`` x ``block_size``; with ``keep``, a second stage: the ``keep`` switches whose first-stage
    effect reads farthest from 1 are measured again in ``rounds2`` fresh rounds, and only those figures
    judge them (at 1 - 0.05 / keep); the others are "no effect"."""

    rounds: int
    block_size: int
    keep: int = 0
    rounds2: int = 0

    @property
    def name(self) -> str:
        first = f"{self.rounds} rounds, blocks of {self.block_size}"
        return first if not self.keep else f"{first}, then the top {self.keep} in {self.rounds2} rounds"

    @property
    def label(self) -> str:
        first = f"{self.rounds}x{self.block_size}"
        return first if not self.keep else f"{first}+{self.rounds2}/{self.keep}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class StudyOutcome:
    switches: int
    true_switch: int | None
    speeds: tuple[Speed, ...]
    true_width: float | None
    gpu_s: float
    design: Design

    @property
    def servers(self) -> int:
        first = len(schedule(self.switches, rounds=self.design.rounds, block_size=self.design.block_size))
        if not self.design.keep:
            return first
        keep = min(self.design.keep, self.switches)
        return first + len(schedule(keep, rounds=self.design.rounds2, block_size=self.design.block_size))

    @property
    def false_faster(self) -> bool:
        return any(s is Speed.FASTER for i, s in enumerate(self.speeds) if i != self.true_switch)

    @property
    def any_false(self) -> bool:
        return any(s in (Speed.FASTER, Speed.SLOWER) for i, s in enumerate(self.speeds) if i != self.true_switch)

    @property
    def found(self) -> bool:
        return self.true_switch is not None and self.speeds[self.true_switch] is Speed.FASTER


def draw(rng: np.random.Generator, sd: float, tail_df: float | None) -> float:
    """One draw of SD ``sd``: normal, or Student-t on ``tail_df`` scaled to the same SD."""
    if sd == 0:
        return 0.0
    if tail_df is None:
        return float(rng.normal(0.0, sd))
    return float(rng.standard_t(tail_df)) * sd / math.sqrt(tail_df / (tail_df - 2.0))


def measure_stage(
    machine: Machine,
    rng: np.random.Generator,
    clock: float,
    drift: float,
    *,
    effects: list[float],
    rounds: int,
    block_size: int,
    ppl_first_round: bool,
) -> tuple[list[SlotFigure], float, float]:
    """Every server of one ablation over switches whose true log effect of turning is ``effects``."""
    figures = []
    for slot in schedule(len(effects), rounds=rounds, block_size=block_size):
        seconds = machine.start_s + machine.bridge_s + machine.run_s
        seconds += machine.ppl_s if ppl_first_round and slot.round == 1 else 0.0
        clock += seconds
        drift += float(rng.normal(0.0, machine.drift_per_hour * math.sqrt(seconds / 3600.0)))
        log_tps = (
            math.log(500.0)
            + (effects[slot.arm] if slot.arm is not None else 0.0)
            + draw(rng, machine.sd_between, machine.tail_df)
            + draw(rng, machine.sd_within, machine.tail_df)
            + drift
        )
        figures.append(SlotFigure(slot=slot, tps=math.exp(log_tps)))
    return figures, clock, drift


def simulate_study(
    machine: Machine,
    design: Design,
    *,
    switch_count: int,
    true_switch: int | None,
    alt_effect: float,
    seed: int,
) -> StudyOutcome:
    """One ablation study of ``switch_count`` switches, all on in the manifest; returns its verdicts."""
    rng = np.random.default_rng(seed)
    switches = [Switch(key=f"FLAG_{i}", subject="1", reference="0", manifest_value="1") for i in range(switch_count)]
    # leave-one-out from a manifest with every switch on: the true switch's arm (off) reads 1 / alt_effect
    truth = [-math.log(alt_effect) if index == true_switch else 0.0 for index in range(switch_count)]
    figures, clock, drift = measure_stage(
        machine, rng, 0.0, 0.0, effects=truth, rounds=design.rounds, block_size=design.block_size, ppl_first_round=True
    )
    first = tps_effects(
        figures, switches, MODE, block_size=design.block_size, confidence=DEFAULT_CONFIDENCE, prior=PRIOR_SPREAD
    )
    judged = list(range(switch_count))
    effects = list(first.effects)
    if design.keep:
        distance = [abs(math.log(e.value)) if e is not None else -1.0 for e in first.effects]
        judged = sorted(sorted(range(switch_count), key=lambda i: -distance[i])[: design.keep])
        figures, clock, _ = measure_stage(
            machine,
            rng,
            clock,
            drift,
            effects=[truth[i] for i in judged],
            rounds=design.rounds2,
            block_size=design.block_size,
            ppl_first_round=False,
        )
        second = tps_effects(
            figures,
            [switches[i] for i in judged],
            MODE,
            block_size=design.block_size,
            confidence=DEFAULT_CONFIDENCE,
            prior=PRIOR_SPREAD,
        )
        effects = [None] * switch_count
        for position, index in enumerate(judged):
            effects[index] = second.effects[position]
    speeds = tuple(speed_of(e) if e is not None else Speed.NO_EFFECT for e in effects)
    width = None
    interval = effects[true_switch] if true_switch is not None else None
    if interval is not None:
        width = interval.high / interval.low - 1.0
    return StudyOutcome(
        switches=switch_count, true_switch=true_switch, speeds=speeds, true_width=width, gpu_s=clock, design=design
    )


def run_design(
    machine: Machine, design: Design, *, studies: int, switches: tuple[int, int], alt_effect: float, seed: int
) -> dict[str, object]:
    """``studies`` null and ``studies`` alt studies of one design, on seeds shared by every design."""
    null, alt = [], []
    for index in range(studies):
        rng = np.random.default_rng(seed * 1_000_003 + index)
        count = int(rng.integers(switches[0], switches[1] + 1))
        true_switch = int(rng.integers(0, count))
        null.append(
            simulate_study(
                machine, design, switch_count=count, true_switch=None, alt_effect=alt_effect, seed=seed + 2 * index
            )
        )
        alt.append(
            simulate_study(
                machine,
                design,
                switch_count=count,
                true_switch=true_switch,
                alt_effect=alt_effect,
                seed=seed + 2 * index + 1,
            )
        )
    false_faster = sum(o.false_faster for o in null)
    any_false = sum(o.any_false for o in null)
    found = sum(o.found for o in alt)
    widths = [o.true_width for o in alt if o.true_width is not None]
    return {
        "design": design.name,
        "studies": studies,
        "null_false_faster": false_faster,
        "null_false_faster_ci": binomial_interval(false_faster, studies),
        "null_any_false": any_false,
        "null_any_false_ci": binomial_interval(any_false, studies),
        "alt_found": found,
        "alt_found_ci": binomial_interval(found, studies),
        "alt_other_faster": sum(o.false_faster for o in alt),
        "median_width": statistics.median(widths) if widths else math.nan,
        "gpu_h": statistics.median(o.gpu_s for o in null) / 3600.0,
        "servers": statistics.median(o.servers for o in null),
    }


def format_row(row: Mapping[str, Any]) -> str:
    def share(hits: int, ci: tuple[float, float]) -> str:
        low, high = ci
        return f"{hits / row['studies']:.1%} ({low:.1%}-{high:.1%})"

    return (
        f"| {row['design']} | {row['studies']} | {row['servers']:g} | {row['gpu_h']:.1f} | "
        f"{share(row['null_false_faster'], row['null_false_faster_ci'])} | "
        f"{share(row['null_any_false'], row['null_any_false_ci'])} | "
        f"{share(row['alt_found'], row['alt_found_ci'])} | "
        f"{row['alt_other_faster'] / row['studies']:.1%} | {row['median_width']:.3f} |"
    )


HEADER = (
    "| design | studies (null/alt each) | servers a study (median) | GPU h a study (median) | "
    "null: any switch called faster (95 %) | null: any switch called faster or slower | "
    "alt: the 10 % switch found | alt: another called faster | alt: width of its interval |\n"
    "|---|---|---|---|---|---|---|---|---|"
)


def parse_designs(text: str) -> list[Design]:
    """``3x4,6x1,2x4+6/3``: rounds x block size[+second-stage rounds/switches kept], comma-separated."""
    designs = []
    for part in text.split(","):
        first, _, second = part.strip().partition("+")
        rounds, _, block = first.partition("x")
        rounds2, _, keep = second.partition("/")
        try:
            design = Design(
                rounds=int(rounds),
                block_size=int(block),
                rounds2=int(rounds2) if second else 0,
                keep=int(keep) if second else 0,
            )
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--designs {part!r}: ROUNDSxBLOCK[+ROUNDS/KEEP], for example 4x4 or 2x4+6/3"
            ) from None
        if design.rounds < 1 or design.block_size < 1 or (second and (design.rounds2 < 1 or design.keep < 1)):
            raise argparse.ArgumentTypeError(f"--designs {part!r}: every count must be at least 1")
        designs.append(design)
    return designs


def parse_range(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    try:
        pair = (int(low), int(high or low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--switches {text!r}: LOW-HIGH, for example 10-20") from None
    if not 1 <= pair[0] <= pair[1]:
        raise argparse.ArgumentTypeError(f"--switches {text!r}: need 1 <= LOW <= HIGH")
    return pair


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--studies", type=int, default=500, help="null and alt studies per design (default 500)")
    parser.add_argument("--switches", type=parse_range, default=(10, 20), help="switches per study, LOW-HIGH")
    parser.add_argument("--designs", type=parse_designs, default=parse_designs("2x4,3x4,4x4,6x4,4x1"))
    parser.add_argument("--alt-effect", type=float, default=1.10, help="the true switch's speedup (default 1.10)")
    parser.add_argument("--sd-between", type=float, default=0.08)
    parser.add_argument("--sd-within", type=float, default=0.05)
    parser.add_argument("--drift-per-hour", type=float, default=0.03)
    parser.add_argument("--tail-df", type=float, default=None, help="Student-t tails (default: normal)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="60 studies, two designs (a smoke run)")
    args = parser.parse_args(argv)
    if args.quick:
        args.studies, args.designs = 60, parse_designs("3x4,4x1")
    if args.studies < 1 or args.alt_effect <= 0:
        parser.error("--studies must be at least 1 and --alt-effect positive")
    machine = Machine(
        sd_between=args.sd_between,
        sd_within=args.sd_within,
        drift_per_hour=args.drift_per_hour,
        tail_df=args.tail_df,
    )
    print("python -m benchmarks.ablation_error " + shlex.join(argv if argv is not None else sys.argv[1:]))
    print(
        f"machine: start {machine.start_s:g} s, PPL {machine.ppl_s:g} s, bridge {machine.bridge_s:g} s, "
        f"TPS run {machine.run_s:g} s; noise: between {machine.sd_between}, within {machine.sd_within}, "
        f"drift {machine.drift_per_hour}/sqrt(h), {'normal' if machine.tail_df is None else f't{machine.tail_df:g}'}; "
        f"{args.switches[0]}-{args.switches[1]} switches a study, alt effect {args.alt_effect}"
    )
    print(HEADER)
    for design in args.designs:
        began = time.process_time()
        row = run_design(
            machine, design, studies=args.studies, switches=args.switches, alt_effect=args.alt_effect, seed=args.seed
        )
        print(format_row(row), flush=True)
        print(f"[{design.name}] {time.process_time() - began:.0f} s CPU", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
