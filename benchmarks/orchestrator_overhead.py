"""What sweeper itself costs per trial, on the bundled tiny model with real vLLM.

Runs a short study (the baseline, one configuration far over the PPL cap so
that it is stopped early, and a few sampled ones) and prints, per trial:
its wall time, the time spent in server start, warm-up, measurement and
teardown, the rest (the orchestrator's overhead) and its share; then the
gap from one trial's end to the next one's server launch, and the cost of
an early-stopped trial against a full one.

Goals: overhead at most 3 % of trial wall time, at most 5 s from one
trial's teardown to the next launch, an early-stopped trial costing at most
half of a full one.

    python -m benchmarks.orchestrator_overhead [--trials 4] [--keep DIR]
    python -m benchmarks.orchestrator_overhead --num-prompts 32 --output-len 256

The default sizes are the demo's (8 prompts x 128 tokens, all 32 tuning PPL
records): there a trial is mostly its server start, which an early stop
cannot save. The second line gives the measurement the weight it has in the
challenge's trials (128 prompts x 512 tokens after a server start of one to
two minutes), scaled to the tiny model's speed.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from storage import TrialStore
from sweeper.study import PplGate, StudyOptions, run_study
from sweeper.sweep import DEMO_SIZES, RunPlan, prepare

MEASURED_PHASES = ("start", "spawn", "engine init", "api ready", "warmup", "ppl", "tps", "fidelity", "teardown")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4, help="trials in the study (at least 3)")
    parser.add_argument("--keep", help="folder for the database and logs (default: a temp dir)")
    parser.add_argument("--num-prompts", type=int, default=DEMO_SIZES.num_prompts, help="TPS prompts per trial")
    parser.add_argument("--output-len", type=int, default=DEMO_SIZES.output_len, help="output tokens per prompt")
    args = parser.parse_args()
    folder = Path(args.keep or tempfile.mkdtemp(prefix="sweeper-overhead-"))
    folder.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{folder / 'study.db'}"
    plan = RunPlan(
        storage=url,
        run_dir=str(folder / "runs"),
        n_trials=args.trials,
        study_name="overhead",
        num_prompts=args.num_prompts,
        output_len=args.output_len,
    )
    prepared = prepare(plan)
    smallest = prepared.space.parameter("sliding_window").low
    result = run_study(
        prepared.space,
        prepared.evaluator,
        StudyOptions(
            study_name=prepared.study_name,
            storage=url,
            n_trials=max(3, args.trials),
            gate=PplGate(cap_rel=plan.ppl_cap_rel),
            seed=0,
            reuse_quality=True,
            enqueue=[{"sliding_window": smallest}],
        ),
    )
    store = TrialStore(url)
    records = sorted(store.records(result.study_name, details=True), key=lambda r: r.number)
    print(
        f"study {result.study_name}: {len(records)} trials, {args.num_prompts} prompts x "
        f"{args.output_len} tokens per trial, database {url}"
    )
    header = f"{'trial':>5} {'state':<9} {'wall s':>7} {'measured s':>10} {'overhead s':>10} {'share':>6}  phases"
    print(header)
    shares: list[float] = []
    full: list[float] = []
    early: list[float] = []
    for record in records:
        if record.finished_at is None:
            continue
        wall = (record.finished_at - record.started_at).total_seconds()
        phases = dict(record.phases)
        measured = sum(seconds for name, seconds in phases.items() if name in MEASURED_PHASES)
        overhead = wall - measured
        shares.append(overhead / wall)
        (early if record.early_stopped else full).append(wall)
        detail = ", ".join(f"{name} {seconds:.1f}" for name, seconds in record.phases)
        state = "early" if record.early_stopped else record.state
        print(
            f"{record.number:>5} {state:<9} {wall:>7.1f} {measured:>10.1f} {overhead:>10.2f} "
            f"{overhead / wall:>6.1%}  {detail}"
        )
    gaps = [
        (after.started_at - before.finished_at).total_seconds()
        for before, after in zip(records, records[1:])
        if before.finished_at is not None
    ]
    print()
    print(f"overhead share: median {statistics.median(shares):.2%}, max {max(shares):.2%} (goal <= 3 %)")
    if gaps:
        print(
            f"trial end -> next trial start: median {statistics.median(gaps):.2f} s, max {max(gaps):.2f} s (goal <= 5 s)"
        )
    if full and early:
        ratio = statistics.median(early) / statistics.median(full)
        print(f"early-stopped trial / full trial wall time: {ratio:.2f} (goal <= 0.5)")
    else:
        print("no early-stopped trial in this run: cost ratio not measured")


if __name__ == "__main__":
    main()
