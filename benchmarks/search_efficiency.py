"""How many trials each sampler needs on a family of challenge-shaped landscapes.

Every run goes through ``sweeper.run_study`` with the pluggable evaluator
(``landscape.Landscape``: the ``gemma4-e4b-a10g`` knobs plus a knob that does
nothing, the gate's boundary anywhere in the window range, drafters that
saturate early or late, cheap or dear draft passes; see that module) and a
fresh SQLite study, at 1 % and at 5 % TPS noise. A run stops as soon as it
has evaluated a gate-passing configuration whose noise-free TPS is within
1 % of the best feasible TPS; the table shows the median number of trials
that took over seeds (every trial counts, enqueued ones included; ">N" when
most seeds did not get there within N trials), how many seeds got there,
and the median number of distinct windows measured by then (the PPL runs
needed when PPL is reused where only speed knobs changed).

    python benchmarks/search_efficiency.py            # the full table
    python benchmarks/search_efficiency.py --quick    # fewer seeds and trials
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import multiprocessing
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import optuna

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from landscape import PPL_CAP, Landscape, search_space  # noqa: E402

import sweeper  # noqa: E402
from sweeper.study import TrialEvent  # noqa: E402

# the user's base manifest: the stock drafter (centroid top-k 32) with 4 speculative tokens
BASE_ENV = {"SPECULATIVE_CONFIG": json.dumps({"method": "mtp", "model": "drafter", "num_speculative_tokens": 4})}


NOISES = (0.01, 0.05)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Row:
    mode: str
    sampler: str
    enqueue: bool  # the preset's known configs (VIDRAFT and the baseline) first
    noise: float = 0.01  # relative TPS noise per measurement
    slow: bool = False  # GP-based: fewer seeds, a lower cap
    note: str = ""


ROW_KINDS = (
    Row(mode="tps", sampler="guided", enqueue=False, note="guided, no known configs"),
    Row(mode="tps", sampler="guided", enqueue=True, note="the default"),
    Row(mode="tps", sampler="gp", enqueue=False, slow=True, note="plain Optuna"),
    Row(mode="tps", sampler="tpe", enqueue=False, note="plain Optuna"),
)
ROWS = tuple(dataclasses.replace(row, noise=noise) for noise in NOISES for row in ROW_KINDS)


@dataclasses.dataclass
class Outcome:
    trials: int | None  # None: not reached within the cap
    windows: int | None
    seconds: float


def run_one(row: Row, seed: int, cap: int, folder: Path) -> Outcome:
    landscape = Landscape(seed, noise=row.noise)
    space = search_space().bind(BASE_ENV)
    stop = threading.Event()
    seen: list[dict] = []
    reached: list[int] = []

    def progress(event: TrialEvent) -> None:
        if event.kind != "finished" or reached:
            return
        seen.append(dict(event.params))
        if landscape.is_near_best(event.params):
            reached.append(len(seen))
            stop.set()

    name = f"{row.mode}-{row.sampler}-{row.enqueue}-{row.noise:g}-{seed}"
    start = time.monotonic()
    sweeper.run_study(
        space,
        landscape,
        study_name=name,
        storage=str(folder / f"{name}.db"),
        n_trials=cap,
        ppl_cap=PPL_CAP,
        sampler=row.sampler,
        mode=row.mode,
        seed=seed,
        enqueue_space_configs=row.enqueue,
        progress=progress,
        stop_event=stop,
        handle_signals=False,
    )
    if not reached:
        return Outcome(trials=None, windows=None, seconds=time.monotonic() - start)
    windows = len({params["sliding_window"] for params in seen})
    return Outcome(trials=reached[0], windows=windows, seconds=time.monotonic() - start)


def median_text(values: list[int | None], cap: int) -> str:
    """Median with unreached runs counted as worse than the cap."""
    ranked = sorted(v if v is not None else cap + 1 for v in values)
    middle = statistics.median(ranked)
    return f">{cap}" if middle > cap else f"{middle:g}"


def _task(task: tuple[Row, int, int, str]) -> Outcome:
    logging.basicConfig(level=logging.ERROR)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    row, seed, cap, folder = task
    return run_one(row, seed, cap, Path(folder))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=21, help="seeds per row (default 21)")
    parser.add_argument("--slow-seeds", type=int, default=3, help="seeds per GP row (default 3)")
    parser.add_argument("--cap", type=int, default=40, help="trial cap per run (default 40)")
    parser.add_argument("--slow-cap", type=int, default=30, help="trial cap per GP run (default 30)")
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel (default 2)")
    parser.add_argument("--quick", action="store_true", help="3 seeds, caps 30/20")
    parser.add_argument("--only", default="", help="comma-separated samplers to run")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.slow_seeds, args.cap, args.slow_cap = 3, 3, 30, 20
    only = {name for name in args.only.split(",") if name}
    rows = [row for row in ROWS if not only or row.sampler in only]

    print(
        "Trials to a config within 1 % of the best feasible TPS "
        "(gemma4-e4b-a10g space plus a dead knob, synthetic challenge-shaped landscapes)\n"
    )
    print(
        "| TPS noise | sampler | known configs first | seeds | median trials | reached | "
        "median windows measured | note |"
    )
    print("|---|---|---|---|---|---|---|---|", flush=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sweeper-bench-") as tmp:
        tasks = [
            (row, seed, args.slow_cap if row.slow else args.cap, tmp)
            for row in rows
            for seed in range(args.slow_seeds if row.slow else args.seeds)
        ]
        context = multiprocessing.get_context("spawn")
        with context.Pool(max(1, args.jobs), maxtasksperchild=8) as pool:
            results = iter(pool.imap(_task, tasks))
            for row in rows:
                seeds = args.slow_seeds if row.slow else args.seeds
                cap = args.slow_cap if row.slow else args.cap
                outcomes = [next(results) for _ in range(seeds)]
                trials = [o.trials for o in outcomes]
                windows = [o.windows for o in outcomes if o.windows is not None]
                reached = sum(t is not None for t in trials)
                print(
                    f"| {row.noise:.0%} | {row.sampler} | {'yes' if row.enqueue else 'no'} | "
                    f"{seeds} | "
                    f"{median_text(trials, cap)} | {reached}/{seeds} within {cap} | "
                    f"{statistics.median(windows) if windows else '-'} | {row.note} |",
                    flush=True,
                )
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = children.ru_utime + children.ru_stime
    print(
        f"\n{time.monotonic() - started:.0f} s in all ({args.jobs} parallel runs), "
        f"{cpu / 60:.1f} CPU-minutes in the runs"
    )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # the GP's torch: one thread per run
    sys.exit(main())
