"""``sweeper run``: the overnight, quality-gated search (no arguments: the demo)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import click
from rich.console import Console
from rich.live import Live
from rich.table import Table

from sweeper.cli._held_logs import HeldLogs
from sweeper.cli._options import storage_option, study_option
from sweeper.cli._run_summary import closing_block, command_options
from sweeper.demo import choose_demo_manifest, demo_paths
from sweeper.devices import open_devices
from sweeper.errors import UserInputError
from sweeper.study import DEFAULT_SAMPLER, MODES, SAMPLERS, ConfirmSettings, TrialEvent, is_confirmation
from sweeper.sweep import (
    CHALLENGE_SIZES,
    DEFAULT_NOISE,
    DEMO_PRESET,
    DEMO_SIZES,
    DEMO_STORAGE,
    DEMO_TRIALS,
    GPU_DEMO_NOISE,
    RunPlan,
    execute,
    prepare,
    run_on_gpus,
    several_workers,
)

PHASE_LABELS = {
    "start": "starting the server",
    "ppl": "PPL records",
    "warm-up": "warm-up bridge",
    "tps warm-up": "TPS warm-up requests",
    "tps": "TPS requests",
    "fidelity": "fidelity prompts",
    "teardown": "stopping the server",
}


class TrialCount:
    """Where the study's budget stands: trials counted before this run, done in it, running.

    It counts the searched trials against ``--n-trials``; a trial itself is always
    named by its number in the study (``trial 12``), never by its place in the budget.
    """

    def __init__(self, n_trials: int | None, done_before: int = 0) -> None:
        self.n_trials = n_trials
        self.done_before = done_before
        self.done = 0  # finished in this run
        self.running = False
        self.confirming = False  # the running trial re-measures a configuration (a race)
        self.confirmations = 0  # confirmation trials finished in this run (outside the budget)

    def start(self, role: str) -> None:
        self.running = True
        self.confirming = is_confirmation(role)

    def finish(self) -> None:
        self.running = False
        if self.confirming:
            self.confirmations += 1
        else:
            self.done += 1

    @property
    def finished(self) -> int:
        return self.done_before + self.done

    def line(self) -> str:
        """``searching 3 of 8, 5 to go after it`` while a searched trial runs, ``8 of 8 searched,
        0 to go`` when none does."""
        total = "∞" if self.n_trials is None else str(self.n_trials)
        if self.running and self.confirming:
            return (
                f"race server {self.confirmations + 1} of this run (outside the budget), "
                f"{self.finished} of {total} searched"
            )
        if self.running:
            current = self.finished + 1
            togo = "" if self.n_trials is None else f", {max(0, self.n_trials - current)} to go after it"
            return f"searching {current} of {total}{togo}"
        togo = "" if self.n_trials is None else f", {max(0, self.n_trials - self.finished)} to go"
        return f"{self.finished} of {total} searched{togo}"


def describe_finished(event: TrialEvent) -> str:
    """One line for a finished trial: its params, TPS, PPL and verdict."""
    verdict = event.state or "?"
    if event.state == "complete":
        verdict = "feasible" if event.feasible else "rejected by the gate"
    if event.tps is not None:
        tps = f"{event.tps:.1f} tok/s"
    else:  # stopped before its TPS was measured (the PPL was over the cap), or failed
        tps = "TPS not measured" if event.state == "complete" else "-"
    ppl = f"PPL {event.ppl:.3f}" if event.ppl is not None else "PPL -"
    kind = " (confirmation)" if is_confirmation(event.role) else ""
    return f"trial {event.number}{kind} {dict(event.params)}: {tps}, {ppl}: {verdict}" + (
        f" ({event.error})" if event.error else ""
    )


def describe_phase(phase: str | None, done: int | None, total: int | None) -> str:
    label = PHASE_LABELS.get(phase or "-", phase or "-")
    if total:
        return f"{label} {done or 0}/{total}"
    return label


class LiveView:
    """Trial n of N and the trials to go, the phase with its progress (PPL records,
    warm-up and TPS requests done of total), elapsed time and ETA, the best so far."""

    def __init__(self, console: Console, n_trials: int | None, done_before: int = 0) -> None:
        self.console = console
        self.count = TrialCount(n_trials, done_before)
        self.started = time.monotonic()
        self.trial_started = self.started
        self.durations: list[float] = []
        self.current: TrialEvent | None = None
        self.phase = "-"
        self.best: str = "none yet"
        self.claim: str = "-"
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
            self.count.start(event.role)
            self.trial_started = time.monotonic()
            self.phase = "starting"
        elif event.kind in ("phase", "progress"):
            self.phase = describe_phase(event.phase, event.done, event.total)
        elif event.kind == "finished":
            self.count.finish()
            self.durations.append(time.monotonic() - self.trial_started)
            self.phase = "-"
            self.console.print(describe_finished(event), markup=False, highlight=False)
            if event.best_number is not None and event.best_tps is not None:
                self.best = f"trial {event.best_number}: {event.best_tps:.1f} tok/s"
            self.claim = event.claim or self.claim
        self.live.update(self.render(), refresh=event.kind != "progress")

    def render(self) -> Table:
        elapsed = time.monotonic() - self.started
        table = Table.grid(padding=(0, 2))
        running = self.current is not None and self.count.running
        number = f"trial {self.current.number}: " if running and self.current is not None else ""
        table.add_row("trials", number + self.count.line())
        table.add_row("params", str(dict(self.current.params)) if running else "-")
        table.add_row("phase", self.phase)
        table.add_row("elapsed", _clock(elapsed))
        n_trials = self.count.n_trials
        if self.durations and n_trials:
            mean = sum(self.durations) / len(self.durations)
            left = max(0, n_trials - self.count.finished)
            table.add_row("ETA", _clock(left * mean))
        table.add_row("best feasible", self.best)
        table.add_row("claim", self.claim)
        return table


class PlainView:
    """One plain line per event on stderr, for logs and CI (no cursor movement, no colour).

    Progress within a phase is written when the phase begins and when it is done."""

    def __init__(self, n_trials: int | None, done_before: int = 0, write: Any = None) -> None:
        self.count = TrialCount(n_trials, done_before)
        self.write = write or (lambda line: click.echo(line, err=True))

    def __enter__(self) -> PlainView:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.write(f"trials: {self.count.line()}")

    def __call__(self, event: TrialEvent) -> None:
        if event.kind == "started":
            self.count.start(event.role)
            self.write(f"trial {event.number} ({event.role}) {dict(event.params)}: {self.count.line()}")
        elif event.kind == "phase":
            self.write(f"trial {event.number}: {describe_phase(event.phase, event.done, event.total)}")
        elif event.kind == "progress" and event.total and event.done == event.total:
            self.write(f"trial {event.number}: {describe_phase(event.phase, event.done, event.total)}")
        elif event.kind == "finished":
            self.count.finish()
            line = describe_finished(event)
            if event.best_number is not None and event.best_tps is not None:
                line += f"; best feasible: trial {event.best_number} ({event.best_tps:.1f} tok/s)"
            self.write(f"{line}; {self.count.line()}")


class _QuietView:
    def __enter__(self) -> _QuietView:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def __call__(self, event: TrialEvent) -> None:
        pass


@contextlib.contextmanager
def _log_through(console: Console | None, level: int | None) -> Iterator[None]:
    """Route log records through rich on ``console`` (the Live view stays whole at the
    bottom) and/or raise the level; the handlers are put back afterwards."""
    root = logging.getLogger()
    handlers, old_level = list(root.handlers), root.level
    if console is not None:
        from rich.logging import RichHandler

        handler = RichHandler(console=console, show_path=False, rich_tracebacks=False, markup=False)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        root.handlers = [handler]
    if level is not None:
        root.setLevel(max(level, old_level))
    try:
        yield
    finally:
        root.handlers = handlers
        root.setLevel(old_level)


def gpu_demo_options(options: dict[str, Any], manifest: str) -> dict[str, Any]:
    """The demo's options on its GPU manifest: its data, sizes and budget wherever none is given."""
    demo = demo_paths()
    defaults = {
        "prompts": str(demo.prompts_tuning),
        "ppl_data": str(demo.ppl_tuning),
        "num_prompts": DEMO_SIZES.num_prompts,
        "output_len": DEMO_SIZES.output_len,
        "warmup_requests": DEMO_SIZES.warmup_requests,
        "n_trials": DEMO_TRIALS,
        "noise": GPU_DEMO_NOISE,
    }
    filled = {key: value if options.get(key) is None else options[key] for key, value in defaults.items()}
    return {**options, **filled, "manifest": manifest}


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


@click.command("run")
@click.option("--manifest", "manifest", metavar="FILE", help="Base manifest (default: the bundled demo's).")
@click.option(
    "--space",
    help=f"Search-space preset or YAML/TOML file (default: {DEMO_PRESET} for the demo, else the preset that fits the manifest).",
)
@study_option(help="Study name (default: derived from manifest and space).")
@storage_option(default=DEMO_STORAGE)
@click.option(
    "--n-trials",
    type=int,
    help=f"Trials in the study, resumes count (default: 8; the demo {DEMO_TRIALS}; no limit with --timeout, except on the demo).",
)
@click.option("--timeout", help="Stop starting new trials after this long (e.g. 8h, 90m).")
@click.option(
    "--mode",
    type=click.Choice(list(MODES)),
    default="tps",
    show_default=True,
    help="tps: the fastest configuration under the PPL cap; pareto: TPS and PPL both, as a trade-off.",
)
@click.option("--sampler", type=click.Choice(list(SAMPLERS)), help=f"Optuna sampler (default: {DEFAULT_SAMPLER}).")
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of the sampler, for a run that can be repeated."
)
@click.option("--ppl-cap", type=float, help="Absolute PPL cap (e.g. 2.42).")
@click.option(
    "--ppl-cap-rel",
    type=float,
    default=1.05,
    show_default=True,
    help="Cap relative to the baseline PPL measured first (ignored with --ppl-cap).",
)
@click.option(
    "--ppl-confidence",
    metavar="LEVEL",
    help="Pass only where the PPL's upper bound at this level (0.9 or 90%) on --ppl-rerun-records "
    "new records is under the cap (default 0.9; none: the point estimate; a study keeps its own).",
)
@click.option(
    "--ppl-rerun-records",
    type=int,
    metavar="N",
    help="Records of the re-run the confidence gate promises to pass (default: the held-out "
    "PPL records verify scores).",
)
@click.option(
    "--reuse-quality/--no-reuse-quality",
    default=True,
    show_default=True,
    help="Reuse a PPL measured for the same quality knobs when only speed knobs changed.",
)
@click.option(
    "--confirm-rounds",
    type=int,
    help="Rounds (beside the best and the base, fresh servers) a configuration reading as fast "
    "as the best may take before it is a tie (default: 6; the demo 4; 0: no races; docs/noise.md).",
)
@click.option(
    "--screen",
    metavar="PxT",
    help="Multi-fidelity: a short TPS screen (e.g. 16x128) before each new configuration's full "
    "measurement, which is skipped when the screen reads clearly below the best's screen.",
)
@click.option(
    "--noise",
    type=float,
    help=f"Between-server spread of a TPS figure (SD of log TPS) assumed until the study's repeats "
    f"measure it (default: {DEFAULT_NOISE}; the GPU demo {GPU_DEMO_NOISE}); verify judges with it too.",
)
@click.option(
    "--prompts",
    metavar="P",
    help="Tuning prompt set for TPS, a file or hub id (needed with --manifest; the demo has its own).",
)
@click.option(
    "--ppl-data",
    metavar="D",
    help="Tuning PPL records, a file or hub id (needed with --manifest; the demo has its own).",
)
@click.option(
    "--heldout-prompts", metavar="P", help="Held-out prompts for verify (or split them off with --heldout-fraction)."
)
@click.option(
    "--heldout-ppl-data",
    metavar="D",
    help="Held-out PPL records for verify (or split them off with --heldout-fraction).",
)
@click.option(
    "--heldout-fraction",
    type=float,
    metavar="F",
    help="Hold this fraction of the tuning prompts / PPL records out for verify (e.g. 0.25), seeded by --split-seed.",
)
@click.option("--split-seed", type=int, default=0, show_default=True, help="Seed of the --heldout-fraction split.")
@click.option(
    "--num-prompts",
    type=int,
    help=f"Prompts per TPS measurement (default: {CHALLENGE_SIZES.num_prompts}; demo {DEMO_SIZES.num_prompts}).",
)
@click.option(
    "--output-len",
    type=int,
    help=f"Output tokens per request (default: {CHALLENGE_SIZES.output_len}; demo {DEMO_SIZES.output_len}).",
)
@click.option(
    "--warmup-requests",
    type=int,
    help=f"Untimed chat requests before each TPS measurement (default: {CHALLENGE_SIZES.warmup_requests}; demo {DEMO_SIZES.warmup_requests}).",
)
@click.option(
    "--warmup-prompts",
    type=int,
    help="Warm-up bridge prompts (max_tokens=1) after start (default: the manifest's WARMUP_NUM_PROMPTS or 64).",
)
@click.option("--ppl-records", "ppl_max_records", type=int, help="Score only the first N PPL records (default: all).")
@click.option("--run-dir", default="sweeper-runs", show_default=True, help="Where server logs go.")
@click.option(
    "--ready-timeout",
    "ready_timeout_s",
    type=float,
    default=900.0,
    show_default=True,
    help="Seconds a server may take to answer /v1/models.",
)
@click.option(
    "--server-python", metavar="PATH", help="Run the manifest's 'python ...' serve command with this interpreter."
)
@click.option(
    "--server-venv",
    is_flag=True,
    help="Install the manifest's dependencies into a cached venv (see 'sweeper env') and serve with its python.",
)
@click.option(
    "--keep-port",
    is_flag=True,
    help="Start servers on the manifest's own port (for a serve script that ignores $PORT).",
)
@click.option(
    "--fresh-servers",
    is_flag=True,
    help="Start every server as a new process (by default a searched trial's server is forked from one "
    "that imported vLLM once; the servers a claim rests on always start fresh).",
)
@click.option(
    "--fresh-cache",
    is_flag=True,
    help="Compile every server's graphs anew, in an empty folder of its own, instead of reusing this "
    "host's compile cache (kept per speculative-token count; see docs/serve.md).",
)
@click.option(
    "--verify-top",
    type=int,
    default=0,
    show_default=True,
    help="After the sweep, verify the N best feasible trials on held-out data.",
)
@click.option(
    "--enqueue",
    multiple=True,
    metavar="NAME=V[,NAME=V]",
    help="A configuration to try first (repeatable), e.g. sliding_window=16,num_speculative_tokens=2.",
)
@click.option(
    "--trial-timeout",
    metavar="DURATION",
    help="Wall-clock limit of one trial (e.g. 45m); past it the trial fails with kind "
    "timeout and its server is stopped (default: derived from the sizes).",
)
@click.option("--quiet", is_flag=True, help="No live view and no log lines: only warnings and the final result.")
@click.option(
    "--plain",
    is_flag=True,
    help="One plain line per event instead of the live view (the default when stderr is not a terminal).",
)
@click.option(
    "--gpus",
    metavar="IDS",
    help="GPUs of this host to use, e.g. 0,1,2,3: one worker per GPU "
    "(per TENSOR_PARALLEL_SIZE GPUs), all on the same study.",
)
@click.option(
    "--verbose",
    is_flag=True,
    help="Before the closing block, the claim's derivation as 'sweeper status' shows it: its rounds "
    "and pairs, the between-server spread, the races and the Pareto set.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def command(**options: Any) -> None:
    """Run a quality-gated study; with no options, the demo on the bundled model.

    Every trial starts a real server with the sampled settings, measures PPL
    (stopping early when clearly over the cap) and TPS, and records it all.
    Running the same command again resumes the study. Ctrl-C ends cleanly:
    the server is stopped and the running trial is marked. It ends with a
    short block: the servers run, the answer with its TPS after selection,
    the claim over the base with its interval, the PPL with the chance a
    re-run passes the cap, and the commands to run next.
    """
    as_json, verbose = options.pop("as_json"), options.pop("verbose")
    started = time.monotonic()
    quiet, plain = options.pop("quiet"), options.pop("plain")
    if quiet and plain:
        raise UserInputError("--quiet and --plain: give one of them, not both")
    options["ppl_cap_rel"] = None if options["ppl_cap"] is not None else options["ppl_cap_rel"]
    held = HeldLogs()  # a bad input is one line: what is logged before all input checked out shows after
    with held.holding():
        if options["manifest"] is None:  # the demo: its GPU manifest where a GPU is seen
            with _log_through(None, logging.WARNING) if quiet else contextlib.nullcontext():
                choice = choose_demo_manifest(open_devices)  # logs which manifest and why
            if choice.gpu:
                options = gpu_demo_options(options, str(choice.manifest))
        plan = RunPlan(**options)  # every option checked: errors come before any output
    console = Console(stderr=True)
    if quiet:
        mode = "quiet"
    elif plain or not console.is_terminal:
        mode = "plain"
    else:
        mode = "live"
    if mode == "live":
        logs: Any = _log_through(console, None)
    elif mode == "quiet":
        logs = _log_through(None, logging.WARNING)
    else:
        logs = contextlib.nullcontext()
    with logs:
        with held.holding():
            prepared = prepare(plan)
        held.replay()
        budget, before = plan.trial_budget, prepared.trials_done
        if mode == "live":
            view: Any = LiveView(console, budget, before)
        elif mode == "plain":
            view = PlainView(budget, before)
        else:
            view = _QuietView()
        if mode != "quiet":
            sizes = plan.sizes
            click.echo(
                f"study {prepared.study_name}: space {prepared.space.name} "
                f"({', '.join(prepared.space.names)}), {sizes.num_prompts} prompts x "
                f"{sizes.output_len} tokens, storage {plan.storage}",
                err=True,
            )
            click.echo(f"gate: {prepared.gate.describe()}", err=True)
        if several_workers(plan, prepared.manifest.env):  # --gpus: one process per worker
            click.echo(
                f"{plan.gpus}: one worker per GPU group; their logs in {plan.run_dir}/{prepared.study_name}/",
                err=True,
            )
            result = run_on_gpus(prepared)
        else:
            with view:
                result = execute(prepared, progress=view)
    if plan.verify_top:
        from storage import study_status

        result = dataclasses.replace(result, status=study_status(plan.storage, prepared.study_name))
    from sweeper.answer import study_answer, study_data

    answer = study_answer(
        result.status.trials, result.status.verifications, ConfirmSettings.from_settings(result.status.settings)
    )
    now = answer.standing
    if as_json:
        click.echo(json.dumps({"stop_reason": result.stop_reason, **study_data(result.status, answer)}, default=str))
        return
    if now is None or now.incumbent is None:
        click.echo(f"stopped: {result.stop_reason}; {result.trials_run} trial(s) run this time")
        click.echo("no configuration has passed the gate yet (see `sweeper status`)")
        raise SystemExit(1)
    if verbose:
        for line in derivation_lines(result.status, now):
            click.echo(line)
    from storage import study_names

    given_study = options["study_name"] is not None
    several = not given_study and len(study_names(plan.storage)) > 1
    for line in closing_block(
        records=result.status.trials,
        now=now,
        settings=result.status.settings,
        stop_reason=result.stop_reason,
        seconds=time.monotonic() - started,
        trials_run=result.trials_run,
        options=command_options(plan.storage, result.status.study_name, name_study=given_study or several),
        verified=answer.verified and answer.is_the_claim,
        verifications=result.status.verifications.values(),
    ):
        click.echo(line)


def derivation_lines(status: Any, now: Any) -> list[str]:
    """What ``--verbose`` adds: the claim's derivation and the Pareto set, as ``sweeper status`` words them."""
    from sweeper.cli.status_cmd import answer_ppl_line, standing_lines

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
