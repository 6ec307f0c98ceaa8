"""``sweeper run``: the overnight, quality-gated search (no arguments: the demo)."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import click
from rich.console import Console
from rich.live import Live
from rich.table import Table

from sweeper.study import DEFAULT_SAMPLER, MODES, SAMPLERS, TrialEvent
from sweeper.sweep import DEMO_PRESET, DEMO_STORAGE, RunPlan, execute, prepare
from sweeper.sweep import run_on_gpus, several_workers


class LiveView:
    """Trial n of N, its phase, elapsed time and ETA, the best feasible config so far."""

    def __init__(self, console: Console, n_trials: int | None) -> None:
        self.console = console
        self.n_trials = n_trials
        self.started = time.monotonic()
        self.trial_started = self.started
        self.durations: list[float] = []
        self.current: TrialEvent | None = None
        self.phase = "-"
        self.best: str = "none yet"
        self.done = 0
        self.live = Live(self.render(), console=console, refresh_per_second=2, transient=False)

    def __enter__(self) -> LiveView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.live.update(self.render())
        self.live.__exit__(*exc)

    def __call__(self, event: TrialEvent) -> None:
        if event.kind == "started":
            self.current = event
            self.trial_started = time.monotonic()
            self.phase = "starting"
        elif event.kind == "phase":
            self.phase = event.phase or "-"
        elif event.kind == "finished":
            self.done += 1
            self.durations.append(time.monotonic() - self.trial_started)
            verdict = event.state or "?"
            if event.state == "complete":
                verdict = "feasible" if event.feasible else "rejected by the gate"
            tps = f"{event.tps:.1f} tok/s" if event.tps is not None else "-"
            ppl = f"PPL {event.ppl:.3f}" if event.ppl is not None else "PPL -"
            self.console.print(
                f"trial {event.number} {dict(event.params)}: {tps}, {ppl}: {verdict}"
                + (f" ({event.error})" if event.error else "")
            )
            if event.best_number is not None and event.best_tps is not None:
                self.best = f"trial {event.best_number}: {event.best_tps:.1f} tok/s"
        self.live.update(self.render())

    def render(self) -> Table:
        elapsed = time.monotonic() - self.started
        table = Table.grid(padding=(0, 2))
        number = self.current.number if self.current else "-"
        total = self.n_trials or "∞"
        table.add_row("trial", f"{self.done + (1 if self.current else 0)} of {total} (#{number})")
        table.add_row("params", str(dict(self.current.params)) if self.current else "-")
        table.add_row("phase", self.phase)
        table.add_row("elapsed", _clock(elapsed))
        if self.durations and self.n_trials:
            mean = sum(self.durations) / len(self.durations)
            table.add_row("ETA", _clock(max(0.0, (self.n_trials - self.done) * mean)))
        table.add_row("best feasible", self.best)
        return table


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


@click.command("run")
@click.option("--manifest", "manifest", metavar="FILE", help="Base manifest (default: the bundled demo's).")
@click.option("--space", help=f"Search-space preset or YAML/TOML file (default: {DEMO_PRESET} for the demo, else the preset that fits the manifest).")
@click.option("--study", "study_name", help="Study name (default: derived from manifest and space).")
@click.option("--storage", default=DEMO_STORAGE, show_default=True, help="SQLAlchemy URL or SQLite path.")
@click.option("--n-trials", type=int, default=8, show_default=True, help="Trials in the study (resumes count).")
@click.option("--timeout", help="Stop starting new trials after this long (e.g. 8h, 90m).")
@click.option("--mode", type=click.Choice(list(MODES)), default="tps", show_default=True)
@click.option("--sampler", type=click.Choice(list(SAMPLERS)), help=f"Optuna sampler (default: {DEFAULT_SAMPLER}).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--ppl-cap", type=float, help="Absolute PPL cap (e.g. 2.42).")
@click.option(
    "--ppl-cap-rel",
    type=float,
    default=1.05,
    show_default=True,
    help="Cap relative to the baseline PPL measured first (ignored with --ppl-cap).",
)
@click.option("--reuse-quality/--no-reuse-quality", default=True, show_default=True,
              help="Reuse a PPL measured for the same quality knobs when only speed knobs changed.")
@click.option("--prompts", metavar="FILE", help="Prompt set for TPS (default: the demo's tuning set).")
@click.option("--ppl-data", metavar="FILE", help="PPL reference records (default: the demo's tuning set).")
@click.option("--num-prompts", type=int, default=8, show_default=True, help="Prompts per TPS measurement.")
@click.option("--output-len", type=int, default=128, show_default=True, help="Output tokens per request.")
@click.option("--warmup-requests", type=int, default=1, show_default=True,
              help="Untimed chat requests before each TPS measurement.")
@click.option("--warmup-prompts", type=int,
              help="Warm-up bridge prompts (max_tokens=1) after start (default: the manifest's WARMUP_NUM_PROMPTS or 64).")
@click.option("--run-dir", default="sweeper-runs", show_default=True, help="Where server logs go.")
@click.option("--verify-top", type=int, default=0, show_default=True,
              help="After the sweep, verify the N best feasible trials on held-out data.")
@click.option("--enqueue", multiple=True, metavar="NAME=V[,NAME=V]",
              help="A configuration to try first (repeatable), e.g. sliding_window=16,num_speculative_tokens=2.")
@click.option("--gpus", metavar="IDS", help="GPUs of this host to use, e.g. 0,1,2,3: one worker per GPU "
              "(per TENSOR_PARALLEL_SIZE GPUs), all on the same study.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def command(**options: Any) -> None:
    """Run a quality-gated study; with no options, the demo on the bundled model.

    Every trial starts a real server with the sampled settings, measures PPL
    (stopping early when clearly over the cap) and TPS, and records it all.
    Running the same command again resumes the study. Ctrl-C ends cleanly:
    the server is stopped and the running trial is marked.
    """
    as_json = options.pop("as_json")
    options["ppl_cap_rel"] = None if options["ppl_cap"] is not None else options["ppl_cap_rel"]
    plan = RunPlan(**options)
    prepared = prepare(plan)
    console = Console(stderr=True)
    console.print(
        f"study [bold]{prepared.study_name}[/bold]: space {prepared.space.name} "
        f"({', '.join(prepared.space.names)}), storage {plan.storage}"
    )
    if several_workers(plan, prepared.manifest.env):  # --gpus: one process per worker
        console.print(f"{plan.gpus}: one worker per GPU group; logs in {plan.run_dir}/{prepared.study_name}/")
        result = run_on_gpus(prepared)
    else:
        with LiveView(console, plan.n_trials) as view:
            result = execute(prepared, progress=view)
    if plan.verify_top:
        from storage import study_status

        result = dataclasses.replace(result, status=study_status(plan.storage, prepared.study_name))
    best = result.best
    if as_json:
        click.echo(json.dumps({"stop_reason": result.stop_reason, **result.status.to_dict()}))
        return
    click.echo(f"stopped: {result.stop_reason}; {result.trials_run} trial(s) run this time")
    if best is None:
        click.echo("no feasible configuration yet (see `sweeper status`)")
        raise SystemExit(1)
    click.echo(
        f"Pareto-best feasible: trial {best.number} {dict(best.params)}: "
        f"{best.tps:.1f} tok/s at PPL {best.ppl:.3f} (cap {best.ppl_cap:.3f})"
    )
    for record in result.pareto:
        click.echo(f"  pareto: trial {record.number} {dict(record.params)} tps={record.tps:.1f} ppl={record.ppl:.3f}")
