"""``sweeper run``: the overnight, quality-gated search (no arguments: the demo)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from typing import Any

import click
from rich.console import Console

from storage import study_names, study_status
from sweeper.answer import Answer, study_answer, study_data
from sweeper.cli._held_logs import HeldLogs
from sweeper.cli._options import (
    json_option,
    num_prompts_option,
    output_len_option,
    ppl_data_option,
    ppl_records_option,
    prompts_option,
    ready_timeout_option,
    storage_option,
    study_option,
    warmup_prompts_option,
    warmup_requests_option,
)
from sweeper.cli._run_summary import closing_block, command_options
from sweeper.cli._run_view import ViewMode, log_through, logs_for, open_view, view_mode
from sweeper.cli._standing_view import derivation_lines
from sweeper.demo import choose_demo_manifest
from sweeper.devices import open_devices
from sweeper.errors import UserInputError
from sweeper.study import DEFAULT_NOISE, DEFAULT_SAMPLER, MODES, SAMPLERS, ConfirmSettings, StudyResult
from sweeper.sweep import (
    CHALLENGE_SIZES,
    DEMO_PRESET,
    DEMO_SIZES,
    DEMO_STORAGE,
    DEMO_TRIALS,
    GPU_DEMO_NOISE,
    PreparedRun,
    RunPlan,
    execute,
    gpu_demo_options,
    prepare,
    run_on_gpus,
    several_workers,
)


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
@prompts_option(help="Tuning prompt set for TPS, a file or hub id (needed with --manifest; the demo has its own).")
@ppl_data_option(help="Tuning PPL records, a file or hub id (needed with --manifest; the demo has its own).")
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
@num_prompts_option(
    default=None,
    help=f"Prompts per TPS measurement (default: {CHALLENGE_SIZES.num_prompts}; demo {DEMO_SIZES.num_prompts}).",
)
@output_len_option(
    default=None,
    help=f"Output tokens per request (default: {CHALLENGE_SIZES.output_len}; demo {DEMO_SIZES.output_len}).",
)
@warmup_requests_option(
    default=None,
    help=f"Untimed chat requests before each TPS measurement (default: {CHALLENGE_SIZES.warmup_requests}; demo {DEMO_SIZES.warmup_requests}).",
)
@warmup_prompts_option(
    help="Warm-up bridge prompts (max_tokens=1) after start (default: the manifest's WARMUP_NUM_PROMPTS or 64)."
)
@ppl_records_option(name="ppl_max_records", help="Score only the first N PPL records (default: all).")
@click.option("--run-dir", default="sweeper-runs", show_default=True, help="Where server logs go.")
@ready_timeout_option(name="ready_timeout_s", help="Seconds a server may take to answer /v1/models.")
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
@json_option(help="Print the result as one JSON object.")
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
    held = HeldLogs()  # a bad input is one line: what is logged before all input checked out shows after
    plan = _checked_plan(options, held, quiet=quiet)
    console = Console(stderr=True)
    mode = view_mode(quiet=quiet, plain=plain, terminal=console.is_terminal)
    with logs_for(mode, console):
        with held.holding():
            prepared = prepare(plan)
        held.replay()
        result = _run_study(plan, prepared, mode, console)
    if plan.verify_top:  # the verifications came after the study's status was read
        result = dataclasses.replace(result, status=study_status(plan.storage, prepared.study_name))
    answer = study_answer(
        result.status.trials, result.status.verifications, ConfirmSettings.from_settings(result.status.settings)
    )
    if as_json:
        click.echo(json.dumps({"stop_reason": result.stop_reason, **study_data(result.status, answer)}, default=str))
        return
    _print_closing(
        plan,
        result,
        answer,
        seconds=time.monotonic() - started,
        verbose=verbose,
        given_study=options["study_name"] is not None,
    )


def _checked_plan(options: dict[str, Any], held: HeldLogs, *, quiet: bool) -> RunPlan:
    """Every option checked (errors come before any output); no options: the demo, on its GPU
    manifest where a GPU is seen."""
    options["ppl_cap_rel"] = None if options["ppl_cap"] is not None else options["ppl_cap_rel"]
    with held.holding():
        if options["manifest"] is None:
            with log_through(None, logging.WARNING) if quiet else contextlib.nullcontext():
                choice = choose_demo_manifest(open_devices)  # logs which manifest and why
            if choice.gpu:
                options = gpu_demo_options(options, str(choice.manifest))
        return RunPlan(**options)


def _run_study(plan: RunPlan, prepared: PreparedRun, mode: ViewMode, console: Console) -> StudyResult:
    """The study, in this process under the view, or one worker process per GPU group of ``--gpus``."""
    if mode is not ViewMode.QUIET:
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
            f"{plan.gpus}: one worker per GPU group; their logs in {plan.run_dir}/{prepared.study_name}/", err=True
        )
        return run_on_gpus(prepared)
    with open_view(mode, console, plan.trial_budget, prepared.trials_done) as view:
        return execute(prepared, progress=view)


def _print_closing(
    plan: RunPlan, result: StudyResult, answer: Answer, *, seconds: float, verbose: bool, given_study: bool
) -> None:
    """The closing block (with ``--verbose``, the claim's derivation first); exit code 1 when no
    configuration has passed the gate."""
    now = answer.standing
    if now is None or now.incumbent is None:
        click.echo(f"stopped: {result.stop_reason}; {result.trials_run} trial(s) run this time")
        click.echo("no configuration has passed the gate yet (see `sweeper status`)")
        raise SystemExit(1)
    if verbose:
        for line in derivation_lines(result.status, now):
            click.echo(line)
    several = not given_study and len(study_names(plan.storage)) > 1
    for line in closing_block(
        records=result.status.trials,
        now=now,
        settings=result.status.settings,
        stop_reason=result.stop_reason,
        seconds=seconds,
        trials_run=result.trials_run,
        options=command_options(plan.storage, result.status.study_name, name_study=given_study or several),
        verified=answer.verified and answer.is_the_claim,
        verifications=result.status.verifications.values(),
    ):
        click.echo(line)
