"""GPU time to a confirmed answer, with and without a short TPS screen (multi-fidelity).

Every run goes through ``sweeper.run_study`` (the default guided search, the
challenge preset's known configurations first, confirmation races on, PPL
reused where only speed knobs changed) on the challenge-shaped landscape of
``landscape.py``, and charges each trial the GPU seconds it would take on the
challenge's sizes:

* a server start (``--start-s``, 60 s: a warm compile cache on the H200,
  docs/gpu.md) and a teardown of 2 s;
* a PPL run (``--ppl-s``, 30 s) where the window was not measured before;
* the full TPS run: 4 warm-up requests and 128 prompts x 512 tokens at the
  configuration's TPS;
* with screening, a 16 x 128 screen first (``--screen``), in the same server.

Noise: one fresh server reads the configuration's TPS times ``exp(s)``,
``s ~ N(0, --server-noise)`` (5 %), shared by the screen and the full run of
that server; the screen adds its own ``N(0, --screen-noise)`` (3 %) and reads
``--screen-bias`` (0.95) of the full figure (short requests spend a larger share
in prefill). A screened-out trial costs its start, its PPL if any, and the
screen. The clock stops when the study's confirmed best (the standing's
incumbent, no race open) is a configuration within 1 % of the best feasible
TPS (noise-free); the table gives the median GPU time and trials to that point,
and, for the whole study (its budget of trials and the races), the GPU hours,
the trials, and the final answer's true TPS as a share of the best.

    python -m benchmarks.screening            # 7 seeds, a few minutes
    python -m benchmarks.screening --quick    # 3 seeds
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import statistics
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import optuna

import sweeper
from benchmarks.landscape import PPL_CAP, Landscape
from search_spaces import load_preset
from storage import TrialStore
from sweeper.study import ConfirmSettings, Measurement, PplGate, StudyOptions, TrialEvent, standing

BASE_ENV = {"SPECULATIVE_CONFIG": '{"method": "mtp", "model": "drafter", "num_speculative_tokens": 4}'}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Costs:
    start_s: float = 60.0
    teardown_s: float = 2.0
    ppl_s: float = 30.0
    full: tuple[int, int, int] = (128, 512, 4)  # prompts, tokens, warm-up requests
    screen: tuple[int, int] = (16, 128)
    server_noise: float = 0.05
    screen_noise: float = 0.03
    screen_bias: float = 0.95


class GpuClock:
    """The landscape as a timed GPU server: each call adds the seconds it would take."""

    def __init__(self, landscape: Landscape, costs: Costs, seed: int, *, screening: bool) -> None:
        self.landscape = landscape
        self.costs = costs
        self.screening = screening
        self.rng = np.random.default_rng(seed + 20_000)
        self.seconds = 0.0
        self.screened_out = 0

    def __call__(self, params: Mapping[str, Any], context: Any) -> Measurement:
        costs = self.costs
        truth = self.landscape.tps_of(params)
        server = truth * math.exp(costs.server_noise * float(self.rng.standard_normal()))
        self.seconds += costs.start_s + costs.teardown_s
        ppl = None
        if context.known_ppl is None:
            ppl = float(self.landscape.ppl(params["sliding_window"]))
            self.seconds += costs.ppl_s
            if ppl > PPL_CAP:  # the gate's early stop: no TPS at all
                return Measurement(tps=None, ppl=ppl, early_stopped=True)
        floor = getattr(context, "screen_floor", None)
        extras: dict[str, Any] = {}
        if self.screening and floor is not None:
            screen = server * costs.screen_bias * math.exp(costs.screen_noise * float(self.rng.standard_normal()))
            prompts, tokens = costs.screen
            self.seconds += prompts * tokens / screen
            extras["tps_screen"] = screen
            if screen < floor:
                self.screened_out += 1
                return Measurement(tps=None, ppl=ppl, screened=True, extras=extras)
        prompts, tokens, warmup = costs.full
        self.seconds += (prompts + warmup) * tokens / server
        return Measurement(tps=server, ppl=ppl, extras=extras)


@dataclasses.dataclass
class Outcome:
    gpu_s: float | None  # None: no confirmed near-best answer within the cap
    trials: int | None
    screened_out: int
    total_gpu_s: float  # the whole study, budget and races
    total_trials: int
    answer_share: float  # the final confirmed answer's true TPS over the best feasible


def run_one(seed: int, *, screening: bool, cap: int, costs: Costs, folder: Path) -> Outcome:
    landscape = Landscape(seed)
    clock = GpuClock(landscape, costs, seed, screening=screening)
    space = load_preset("gemma4-e4b-a10g").bind(BASE_ENV)
    confirm = ConfirmSettings(rounds=2, noise=costs.server_noise)
    name = f"screen-{screening}-{seed}"
    url = f"sqlite:///{folder / name}.db"
    reached: list[tuple[float, int]] = []
    store = TrialStore(url)

    def progress(event: TrialEvent) -> None:
        if event.kind != "finished" or reached:
            return
        records = store.records(name)
        now = standing(records, confirm)
        if now.confirmed and now.incumbent is not None and landscape.is_near_best(now.incumbent.params):
            reached.append((clock.seconds, len(records)))

    try:
        result = sweeper.run_study(
            space,
            clock,
            StudyOptions(
                study_name=name,
                storage=url,
                n_trials=cap,
                gate=PplGate(cap=PPL_CAP),
                seed=seed,
                reuse_quality=True,
                confirm=confirm,
                enqueue_base=True,
                progress=progress,
                handle_signals=False,
            ),
        )
    finally:
        store.close()
    final = standing(result.status.trials, confirm).incumbent
    share = landscape.tps_of(final.params) / landscape.best_tps if final is not None else 0.0
    found = reached[0] if reached else (None, None)
    return Outcome(
        gpu_s=found[0],
        trials=found[1],
        screened_out=clock.screened_out,
        total_gpu_s=clock.seconds,
        total_trials=len(result.status.trials),
        answer_share=share,
    )


def _median(values: list[float | None]) -> str:
    found = [v for v in values if v is not None]
    if len(found) * 2 <= len(values):
        return "-"
    ranked = sorted(v if v is not None else math.inf for v in values)
    return f"{statistics.median(ranked):.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=7)
    parser.add_argument("--cap", type=int, default=40, help="trials per study (budget), default 40")
    parser.add_argument("--quick", action="store_true", help="3 seeds, a cap of 30")
    parser.add_argument("--start-s", type=float, default=Costs.start_s)
    parser.add_argument("--ppl-s", type=float, default=Costs.ppl_s)
    parser.add_argument("--server-noise", type=float, default=Costs.server_noise)
    parser.add_argument("--screen-noise", type=float, default=Costs.screen_noise)
    parser.add_argument("--screen-bias", type=float, default=Costs.screen_bias)
    args = parser.parse_args(argv)
    seeds, cap = (3, 30) if args.quick else (args.seeds, args.cap)
    costs = Costs(
        start_s=args.start_s,
        ppl_s=args.ppl_s,
        server_noise=args.server_noise,
        screen_noise=args.screen_noise,
        screen_bias=args.screen_bias,
    )
    logging.basicConfig(level=logging.ERROR)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for screening in (False, True):
            outcomes = [
                run_one(seed, screening=screening, cap=cap, costs=costs, folder=Path(folder)) for seed in range(seeds)
            ]
            rows.append((screening, outcomes))
    print(
        "| screen | seeds | confirmed near-best reached | median GPU s to it | median trials to it "
        "| GPU h per study (median) | trials per study (median) | answer / best TPS (median, min) "
        "| screened out (mean) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for screening, outcomes in rows:
        reached = sum(o.gpu_s is not None for o in outcomes)
        shares = [o.answer_share for o in outcomes]
        print(
            f"| {'16x128' if screening else 'none'} | {len(outcomes)} | {reached}/{len(outcomes)} "
            f"| {_median([o.gpu_s for o in outcomes])} | {_median([o.trials for o in outcomes])} "
            f"| {statistics.median(o.total_gpu_s for o in outcomes) / 3600:.2f} "
            f"| {statistics.median(o.total_trials for o in outcomes):g} "
            f"| {statistics.median(shares):.3f}, {min(shares):.3f} "
            f"| {statistics.fmean(o.screened_out for o in outcomes):.1f} |"
        )
    print(
        f"\ncosts: start {costs.start_s:g} s, PPL {costs.ppl_s:g} s, full {costs.full[0]}x{costs.full[1]}, "
        f"screen {costs.screen[0]}x{costs.screen[1]}; noise: server {costs.server_noise:.0%}, "
        f"screen {costs.screen_noise:.0%}, screen bias {costs.screen_bias:g}; cap {cap} trials"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
