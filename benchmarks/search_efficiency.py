"""How many trials the search needs on families of challenge-shaped landscapes, and where it dwells.

Every run goes through ``sweeper.run_study`` as ``sweeper run`` sets it on
one's own manifest (the base manifest's configuration first, confirmation
races of 6 rounds at a prior spread of 0.10, ``RunPlan.confirm_settings``), with a synthetic evaluator in
place of the server (``landscape.Landscape``: the ``gemma4-e4b-a10g`` knobs
plus a knob that does nothing) whose TPS and PPL readings are both noisy:
TPS at 1 %, 5 % and 10 % (relative) with PPL at 0.002, 0.01 and 0.02
(absolute). Five families of landscapes (``family_shape``): ``challenge``
(landscape.py's draw), ``gate-wide`` (the gate's boundary at a window of
400-500), ``cheap-drafter`` (the best K and top-k high in their ranges),
``flat-window`` (the window barely moves TPS) and ``extra-knob`` (a second
knob of no effect); each with and without the preset's known configurations
enqueued. A run stops once it has measured a configuration that passes the
gate (noise-free) within 1 % of the best feasible TPS (noise-free).

Per cell: the median and 90th percentile of searched trials (the baseline
and enqueued ones included), race servers, and the two together, until
then; how many runs got there within the cap (an unreached run ranks above
every reached one: ">N"); the most searched trials any run spent at one
window before it got there; and how many runs spent more than 8. Under each
noise's summary: what the windows those runs dwelt at held, by the
landscape's truth (a configuration within 1 %, nothing within 1 %, or PPL
over the cap).

    python -m benchmarks.search_efficiency                  # the full grid: 3 noises x 5 families x 2, 20 seeds
    python -m benchmarks.search_efficiency --noises 0.05    # one noise
    python -m benchmarks.search_efficiency --quick          # 5 % noise, 4 seeds a cell, cap 30

``--records FILE`` keeps one JSON line per run with its trials in order
(role, window, TPS, PPL), to see where a run dwelt.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import logging
import math
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import yaml

import search_spaces
import sweeper
from benchmarks.landscape import (
    DEAD_KNOB_SPEC,
    PPL_CAP,
    PRESET,
    TOKENS,
    TOP_KS,
    Landscape,
    LandscapeShape,
    draw_shape,
    search_space,
)
from search_spaces import SearchSpace, space_from_dict
from sweeper.study import ConfirmSettings, Measurement, PplGate, StudyOptions, TrialEvent, is_confirmation

# the user's base manifest: the stock drafter (centroid top-k 32) with 4 speculative tokens
BASE_ENV = {"SPECULATIVE_CONFIG": json.dumps({"method": "mtp", "model": "drafter", "num_speculative_tokens": 4})}


# TPS noise (relative SD of one server's figure) with the PPL noise (absolute SD of one reading) beside it
NOISES = ((0.01, 0.002), (0.05, 0.01), (0.10, 0.02))
FAMILIES = ("challenge", "gate-wide", "cheap-drafter", "flat-window", "extra-knob")
# the extra knob of the extra-knob family: as dead as max_num_seqs, on a log scale
EXTRA_KNOB_SPEC = {
    "name": "max_num_batched_tokens",
    "type": "int",
    "low": 1024,
    "high": 16384,
    "log": True,
    "affects": "speed",
    "default": 8192,
    "env": "MAX_NUM_BATCHED_TOKENS",
}


def confirm_settings() -> ConfirmSettings:
    """The races as ``sweeper run`` sets them on one's own manifest (the code's own defaults)."""
    from sweeper.sweep import RunPlan

    return RunPlan(manifest="base-manifest.yaml").confirm_settings()


def family_shape(family: str, seed: int) -> LandscapeShape:
    """The landscape of ``seed`` in ``family``: landscape.py's draw with one feature moved.

    ``gate-wide``: the gate's boundary at a window of 400-500 (the safe end is 512);
    ``cheap-drafter``: draft passes 3-10x cheaper and acceptance that keeps paying, so
    the best K and top-k sit high in their ranges; ``flat-window``: the window moves
    TPS by at most 1 % over its range; ``challenge`` and ``extra-knob``: the draw
    as it is (``extra-knob`` adds a second knob of no effect to the space).
    """
    shape = draw_shape(seed)
    rng = np.random.default_rng([seed, 48, FAMILIES.index(family)])
    if family == "gate-wide":
        return dataclasses.replace(shape, boundary=rng.uniform(400, 500))
    if family == "cheap-drafter":
        return dataclasses.replace(
            shape,
            draft_cost=rng.uniform(0.005, 0.02),
            draft_cost_per_k=rng.uniform(0.00002, 0.0002),
            acceptance_ratio=rng.uniform(0.85, 0.95),
            accuracy_scale=math.exp(rng.uniform(math.log(25), math.log(60))),
        )
    if family == "flat-window":
        return dataclasses.replace(shape, window_speed=rng.uniform(0.0, 0.01), window_acceptance=0.0)
    return shape


def family_space(family: str) -> SearchSpace:
    """The preset's space plus max_num_seqs; the extra-knob family adds a second dead knob."""
    space = search_space()
    if family != "extra-knob":
        return space
    data = yaml.safe_load((Path(search_spaces.__file__).resolve().parent / "presets" / f"{PRESET}.yaml").read_text())
    data["name"] = f"{PRESET}+2-dead"
    data["parameters"] += [dict(DEAD_KNOB_SPEC), dict(EXTRA_KNOB_SPEC)]
    return space_from_dict(data, source=f"{PRESET} with two dead knobs")


class NoisyLandscape(Landscape):
    """A landscape whose PPL readings carry Gaussian noise too (the truth stays noise-free)."""

    def __init__(self, seed: int, *, noise: float, ppl_noise: float, shape: LandscapeShape) -> None:
        super().__init__(seed, noise=noise, shape=shape)
        self.ppl_noise = ppl_noise
        self._ppl_rng = np.random.default_rng([seed, int(round(ppl_noise * 1e5)), 11])

    def __call__(self, params: Mapping[str, Any], context: Any = None) -> Measurement:
        measured = super().__call__(params, context)
        assert measured.ppl is not None  # the landscape always reads a PPL
        ppl = measured.ppl + self.ppl_noise * float(self._ppl_rng.standard_normal())
        return Measurement(tps=measured.tps, ppl=ppl)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cell:
    family: str
    enqueue: bool  # the preset's known configs (VIDRAFT and the baseline) first
    noise: float  # relative TPS noise per server
    ppl_noise: float  # absolute PPL noise per reading
    sampler: str = "guided"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Outcome:
    """One run: the trials until it first measured a configuration within 1 % of the best."""

    searched: int | None  # searched trials (enqueued and the baseline included); None: not reached
    races: int | None  # race servers (confirmation trials) by then
    dwell: int  # the most searched trials at one window before it got there (or in all, if never)
    dwell_window: int | None
    windows: int  # distinct windows searched by then
    seconds: float
    trials: tuple[tuple[str, int, float | None, float | None], ...] = ()  # (role, window, TPS, PPL) in order

    @property
    def together(self) -> int | None:
        return None if self.searched is None or self.races is None else self.searched + self.races


def run_one(cell: Cell, seed: int, cap: int, folder: Path) -> Outcome:
    landscape = NoisyLandscape(seed, noise=cell.noise, ppl_noise=cell.ppl_noise, shape=family_shape(cell.family, seed))
    space = family_space(cell.family).bind(BASE_ENV)
    stop = threading.Event()
    searched: Counter = Counter()
    trials: list[tuple[str, int, float | None, float | None]] = []
    reached: list[tuple[int, int]] = []

    def progress(event: TrialEvent) -> None:
        if event.kind != "finished" or reached:
            return
        window = int(event.params.get("sliding_window", -1))
        trials.append((event.role, window, event.tps, event.ppl))
        if not is_confirmation(event.role):
            searched[window] += 1
        if event.state == "complete" and landscape.is_near_best(event.params):
            races = sum(is_confirmation(role) for role, *_ in trials)
            reached.append((sum(searched.values()), races))
            stop.set()

    name = f"{cell.family}-{cell.sampler}-{cell.enqueue}-{cell.noise:g}-{seed}"
    start = time.monotonic()
    sweeper.run_study(
        space,
        landscape,
        StudyOptions(
            study_name=name,
            storage=str(folder / f"{name}.db"),
            n_trials=cap,
            gate=PplGate(cap=PPL_CAP),
            sampler=cell.sampler,
            seed=seed,
            enqueue_space_configs=cell.enqueue,
            enqueue_base=True,
            confirm=confirm_settings(),
            progress=progress,
            stop_event=stop,
            handle_signals=False,
        ),
    )
    (folder / f"{name}.db").unlink(missing_ok=True)
    window, dwell = searched.most_common(1)[0] if searched else (None, 0)
    return Outcome(
        searched=reached[0][0] if reached else None,
        races=reached[0][1] if reached else None,
        dwell=dwell,
        dwell_window=window,
        windows=len(searched),
        seconds=time.monotonic() - start,
        trials=tuple(trials),
    )


def ranked_quantile(values: Sequence[int | None], q: float) -> float:
    """The ``q`` quantile (linear between order statistics) with an unreached run (None) ranked above
    every reached one; inf where it falls on or beside an unreached run, or where there are no runs."""
    if not values:
        return math.inf
    with np.errstate(invalid="ignore"):  # between a reached run and an unreached one: inf - inf
        value = float(np.quantile([math.inf if v is None else v for v in values], q, method="linear"))
    return math.inf if math.isnan(value) else value


def quantile_text(values: Sequence[int | None], q: float, cap: int | None) -> str:
    """``ranked_quantile`` as a table shows it: over the cap (or "-" without one) where it is unreached."""
    value = ranked_quantile(values, q)
    if math.isinf(value):
        return f">{cap}" if cap is not None else "-"
    return f"{value:g}"


HEADER = (
    "| TPS / PPL noise | family | known configs first | seeds | searched trials median | p90 | "
    "race servers median | p90 | together median | p90 | reached | longest dwell at one window | runs dwelling > 8 |"
)


def row_text(cell: Cell, outcomes: Sequence[Outcome], cap: int) -> str:
    searched = [o.searched for o in outcomes]
    races = [o.races for o in outcomes]
    together = [o.together for o in outcomes]
    reached = sum(v is not None for v in searched)
    return (
        f"| {cell.noise:.0%} / {cell.ppl_noise:g} | {cell.family} | {'yes' if cell.enqueue else 'no'} | "
        f"{len(outcomes)} | {quantile_text(searched, 0.5, cap)} | {quantile_text(searched, 0.9, cap)} | "
        f"{quantile_text(races, 0.5, None)} | {quantile_text(races, 0.9, None)} | "
        f"{quantile_text(together, 0.5, None)} | {quantile_text(together, 0.9, None)} | "
        f"{reached}/{len(outcomes)} within {cap} | {max(o.dwell for o in outcomes)} | "
        f"{sum(o.dwell > 8 for o in outcomes)} |"
    )


def summary_text(noise: float, rows: Sequence[tuple[Cell, Sequence[Outcome]]], cap: int) -> str:
    """Over one noise's cells: the worst median and 90th percentile of searched trials, the longest dwell."""

    cells = [outcomes for cell, outcomes in rows if cell.noise == noise]
    if not cells:
        return ""
    worst_median = max(ranked_quantile([o.searched for o in c], 0.5) for c in cells)
    worst_p90 = max(ranked_quantile([o.searched for o in c], 0.9) for c in cells)
    dwell = max(o.dwell for c in cells for o in c)
    runs = sum(len(c) for c in cells)

    def shown(value: float) -> str:
        return f">{cap}" if math.isinf(value) else f"{value:g}"

    return (
        f"{noise:.0%} TPS noise, {runs} runs: worst median {shown(worst_median)} searched trials, "
        f"worst 90th percentile {shown(worst_p90)}, longest dwell at one window {dwell}"
    )


class DwellPlace(enum.Enum):
    """Where a run that dwelt spent its trials, by the landscape's truth."""

    NEAR_BEST = "a configuration within 1 % there"  # the speed search was the slow part
    NOTHING_NEAR = "nothing within 1 %"  # the boundary settled too safe, or the speed knobs cannot get there
    OVER_CAP = "PPL over the cap"  # read as feasible, truly not


def dwell_place(family: str, seed: int, window: int) -> DwellPlace:
    """What the window a run dwelt at holds, noise-free (over ``Landscape.best_tps``'s grid of top-k and K)."""
    landscape = Landscape(seed, shape=family_shape(family, seed))
    if not landscape.is_feasible({"sliding_window": window}):
        return DwellPlace.OVER_CAP
    k, c = np.meshgrid(TOKENS, TOP_KS, indexing="ij")
    fastest = float(landscape.true_tps(window, c, k).max())
    return DwellPlace.NEAR_BEST if fastest >= 0.99 * landscape.best_tps else DwellPlace.NOTHING_NEAR


def dwell_text(noise: float, runs: Sequence[tuple[Cell, int, Outcome]]) -> str:
    """Over one noise's runs that spent more than 8 searched trials at one window: what that window held."""
    dwelt = [(cell, seed, o) for cell, seed, o in runs if cell.noise == noise and o.dwell > 8]
    if not dwelt:
        return ""
    places = Counter(dwell_place(cell.family, seed, int(o.dwell_window or 0)) for cell, seed, o in dwelt)
    held = ", ".join(f"{place.value} in {places[place]}" for place in DwellPlace)
    return f"{noise:.0%} TPS noise, {len(dwelt)} runs dwelling over 8 searched trials at one window: {held}"


def _record(cell: Cell, seed: int, outcome: Outcome) -> dict[str, Any]:
    return {
        **dataclasses.asdict(cell),
        "seed": seed,
        **{k: v for k, v in dataclasses.asdict(outcome).items() if k != "trials"},
        "trials": [list(t) for t in outcome.trials],
    }


CELL_FIELDS = tuple(field.name for field in dataclasses.fields(Cell))


def _outcome(record: Mapping[str, Any]) -> Outcome:
    fields = {field.name for field in dataclasses.fields(Outcome)}
    values = {k: v for k, v in record.items() if k in fields}
    values["trials"] = tuple(tuple(t) for t in record.get("trials", ()))
    return Outcome(**values)


def run_all(cells: Sequence[Cell], seeds: range, cap: int, records: str | None) -> dict[tuple[Cell, int], Outcome]:
    """Every cell at every seed, seed by seed (a run stopped early has every cell at its first seeds)."""
    results: dict[tuple[Cell, int], Outcome] = {}
    log = open(records, "w", encoding="utf-8") if records else None  # noqa: SIM115
    total, started = len(cells) * len(seeds), time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="sweeper-bench-") as tmp:
            for seed in seeds:
                for cell in cells:
                    outcome = run_one(cell, seed, cap, Path(tmp))
                    results[(cell, seed)] = outcome
                    if log:
                        log.write(json.dumps({**_record(cell, seed, outcome), "cap": cap}) + "\n")
                        log.flush()
                print(
                    f"[seed {seed}: {len(results)}/{total} runs, {time.monotonic() - started:.0f} s]", file=sys.stderr
                )
    finally:
        if log:
            log.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeds per cell (default 20)")
    parser.add_argument("--first-seed", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--cap", type=int, default=40, help="searched trials per run (default 40)")
    parser.add_argument("--noises", default="0.01,0.05,0.1", help="TPS noises to run (default 0.01,0.05,0.1)")
    parser.add_argument("--families", default=",".join(FAMILIES), help=f"default {','.join(FAMILIES)}")
    parser.add_argument(
        "--enqueue", default="no,yes", help="known configs first: no, yes, or both (the default, also written no,yes)"
    )
    parser.add_argument("--sampler", default="guided", help="guided (default), gp, tpe, random")
    parser.add_argument("--quick", action="store_true", help="5 %% noise only, 4 seeds a cell, cap 30")
    parser.add_argument("--records", help="write one JSON line per run (with its trials) to this file")
    parser.add_argument("--from-records", nargs="+", help="print the table from record files; run nothing")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.cap, args.noises = 4, 30, "0.05"
    ppl_noise = dict(NOISES)
    noises = [float(n) for n in args.noises.split(",") if n]
    families = [f for f in args.families.split(",") if f]
    unknown = [f for f in families if f not in FAMILIES]
    if unknown or any(n not in ppl_noise for n in noises):
        parser.error(f"families from {FAMILIES}, noises from {sorted(ppl_noise)}")
    choices = {"no": [False], "yes": [True], "both": [False, True]}
    enqueue = []
    for word in (e.strip() for e in args.enqueue.split(",") if e.strip()):
        if word not in choices:
            parser.error(f"--enqueue: {word!r} is not one of no, yes, both")
        enqueue += [e for e in choices[word] if e not in enqueue]
    cells = [
        Cell(family=f, enqueue=e, noise=n, ppl_noise=ppl_noise[n], sampler=args.sampler)
        for n in noises
        for f in families
        for e in enqueue
    ]
    seeds: Sequence[int] = range(args.first_seed, args.first_seed + args.seeds)
    found: list[dict[str, Any]] = []
    if args.from_records:
        # the records say which seeds and cap they ran with, not the defaults of this command
        found = [json.loads(line) for name in args.from_records for line in Path(name).read_text().splitlines()]
        seeds = sorted({r["seed"] for r in found})
        caps = {r.get("cap", args.cap) for r in found}
        if len(caps) > 1:
            parser.error(f"the records ran with different caps: {sorted(caps)}")
        args.cap = caps.pop() if caps else args.cap
    print(
        f"Trials to a configuration within 1 % of the best feasible TPS ({args.sampler}; "
        f"races of {confirm_settings().rounds} rounds, the base first; a cap of {args.cap} searched trials; "
        f"{seeds_text(seeds)})\n"
    )
    print(HEADER)
    print("|---" * (HEADER.count("|") - 1) + "|", flush=True)
    started = time.monotonic()
    if args.from_records:
        results = {(Cell(**{k: r[k] for k in CELL_FIELDS}), r["seed"]): _outcome(r) for r in found}
    else:
        results = run_all(cells, range(seeds[0], seeds[-1] + 1), args.cap, args.records)
    rows: list[tuple[Cell, list[Outcome]]] = []
    runs: list[tuple[Cell, int, Outcome]] = []
    for cell in cells:
        ran = [(cell, seed, results[(cell, seed)]) for seed in seeds if (cell, seed) in results]
        if ran:
            runs += ran
            rows.append((cell, [outcome for _, _, outcome in ran]))
            print(row_text(cell, rows[-1][1], args.cap), flush=True)
    print()
    for noise in noises:
        print(summary_text(noise, rows, args.cap))
        if dwelt := dwell_text(noise, runs):
            print(dwelt)
    if args.from_records:
        print(f"\n{sum(o.seconds for _, outcomes in rows for o in outcomes):.0f} s of runs in the records shown")
    else:
        print(f"\n{time.monotonic() - started:.0f} s in all, one run at a time")
    return 0


def seeds_text(seeds: Sequence[int]) -> str:
    """'seeds 0-19' for a contiguous range, else every seed named."""
    if not seeds:
        return "no seeds"
    if list(seeds) == list(range(seeds[0], seeds[-1] + 1)):
        return f"seeds {seeds[0]}-{seeds[-1]}"
    return "seeds " + ", ".join(str(seed) for seed in seeds)


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # the GP's torch: one thread
    sys.exit(main())
