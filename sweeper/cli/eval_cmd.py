"""``sweeper eval MANIFEST``: start the server, measure TPS / PPL / fidelity, stop it."""

from __future__ import annotations

import json
import logging
from typing import Any

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from evaluators import PplSettings, TpsSettings, WarmupSettings
from evaluators.tps import CONNECTIONS
from sweeper.cli._held_logs import logs_after_checks
from sweeper.cli._options import (
    json_option,
    num_prompts_option,
    output_len_option,
    ppl_data_option,
    ppl_records_option,
    prompts_option,
    ready_timeout_option,
    set_option,
    warmup_prompts_option,
    warmup_requests_option,
)
from sweeper.demo import demo_paths
from sweeper.errors import MeasurementError
from sweeper.manifest import Manifest, parse_assignments
from sweeper.measure import EvalResult, EvalSettings, evaluate, load_eval_data, warmup_settings_from
from sweeper.serving import check_serve_env

logger = logging.getLogger(__name__)

# the progress phases of ``evaluate`` as the eval command's bars name them (``sweeper run``'s live
# view has its own: LIVE_PHASE_WORDS); ``sweeper.measure.PHASE_LABELS`` names the stored timing phases
EVAL_PROGRESS_WORDS = {
    "server": "starting server",
    "warm-up": "warm-up bridge",
    "ppl": "PPL records",
    "tps warm-up": "TPS warm-up requests",
    "tps": "TPS requests",
    "fidelity": "fidelity prompts",
    "fidelity reference": "reference prompts",
    "teardown": "stopping server",
}


@click.command("eval")
@click.argument("manifest_path", metavar="MANIFEST", type=click.Path(dir_okay=False))
@click.option("--tps", "want_tps", is_flag=True, help="Measure TPS (default: TPS and PPL).")
@click.option("--ppl", "want_ppl", is_flag=True, help="Measure PPL (default: TPS and PPL).")
@click.option(
    "--fidelity",
    "fidelity_ref",
    metavar="REF",
    type=click.Path(dir_okay=False),
    help="Compare greedy token ids with this reference file.",
)
@click.option(
    "--save-reference",
    metavar="PATH",
    type=click.Path(dir_okay=False),
    help="Write this server's greedy token ids as a fidelity reference.",
)
@click.option(
    "--reference-prompts",
    default=8,
    show_default=True,
    help="Prompts recorded by --save-reference.",
)
@prompts_option(help="Prompt set (file or hub id; default: demo tuning set).")
@ppl_data_option(help="PPL reference set (default: demo tuning set).")
@set_option()
@num_prompts_option()
@output_len_option()
@warmup_requests_option()
@click.option("--stream", is_flag=True, help="Stream TPS requests (records TTFT and ITL).")
@click.option(
    "--connection",
    type=click.Choice(CONNECTIONS),
    default=TpsSettings.connection,
    show_default=True,
    help="harness: each TPS request on a connection of its own, as the harness's client sends "
    "them; keep-alive: all on one.",
)
@warmup_prompts_option(help="Warm-up bridge prompts (default: manifest or 64).")
@click.option("--warmup-seed", type=int, help="Warm-up bridge seed (default: manifest or 42).")
@click.option("--no-warmup", is_flag=True, help="Skip the warm-up bridge.")
@ppl_records_option(help="Score only the first N PPL records.")
@click.option("--ppl-cap", type=float, help="Stop PPL early (and skip TPS) when clearly over it.")
@click.option("--log", "log_path", type=click.Path(dir_okay=False), help="Server log file.")
@ready_timeout_option(help="Seconds to wait for the server.")
@json_option(help="Print one JSON object instead of a table.")
def command(
    manifest_path: str,
    want_tps: bool,
    want_ppl: bool,
    fidelity_ref: str | None,
    save_reference: str | None,
    reference_prompts: int,
    prompts: str | None,
    ppl_data: str | None,
    assignments: tuple[str, ...],
    num_prompts: int,
    output_len: int,
    warmup_requests: int,
    stream: bool,
    connection: str,
    warmup_prompts: int | None,
    warmup_seed: int | None,
    no_warmup: bool,
    ppl_records: int | None,
    ppl_cap: float | None,
    log_path: str | None,
    ready_timeout: float,
    as_json: bool,
) -> None:
    """Measure MANIFEST's server as the challenge does: warm-up, PPL, TPS, fidelity.

    Without --tps or --ppl both are measured. The defaults are the
    challenge's: 128 prompts, 512 output tokens, 4 warm-up requests, after a
    warm-up bridge of 64 one-token prompts (seed 42). Exits with code 1 if a
    request failed or the PPL is not finite.
    """
    if not logging.getLogger().isEnabledFor(logging.DEBUG):
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    manifest = Manifest.load(manifest_path)
    overrides = parse_assignments(assignments)
    check_serve_env(manifest.render(overrides))  # every value, before a server starts
    both = not want_tps and not want_ppl
    warmup = _warmup_settings(manifest, overrides, no_warmup, warmup_prompts, warmup_seed)
    demo = demo_paths()  # the data measured where none is given
    try:
        settings = EvalSettings(
            prompts=prompts,
            ppl_data=ppl_data,
            default_prompts=demo.prompts_tuning,
            default_ppl_data=demo.ppl_tuning,
            tps=TpsSettings(
                num_prompts=num_prompts,
                output_len=output_len,
                warmup_requests=warmup_requests,
                stream=stream,
                connection=connection,
            )
            if both or want_tps
            else None,
            ppl=PplSettings(max_records=ppl_records, stop_above=ppl_cap) if both or want_ppl else None,
            warmup=warmup,
            fidelity_reference=fidelity_ref,
            save_reference=save_reference,
            reference_prompts=reference_prompts,
            overrides=overrides,
            ready_timeout_s=ready_timeout,
            log_path=log_path,
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    with logs_after_checks():  # a bad data set is one line
        data = load_eval_data(manifest, settings)
    with _ProgressDisplay(Console(stderr=True)) as display:
        result = evaluate(manifest, settings, data=data, progress=display.update)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        Console().print(_table(result, ppl_cap))
    _raise_for_failures(result)


def _warmup_settings(
    manifest: Manifest,
    overrides: dict[str, str],
    no_warmup: bool,
    warmup_prompts: int | None,
    warmup_seed: int | None,
) -> WarmupSettings | None:
    """The warm-up bridge the options ask for (None: the manifest's own)."""
    if not no_warmup and warmup_prompts is None and warmup_seed is None:
        return None
    base = warmup_settings_from(manifest, overrides)
    return WarmupSettings(
        enabled=not no_warmup,
        num_prompts=base.num_prompts if warmup_prompts is None else warmup_prompts,
        max_tokens=base.max_tokens,
        seed=base.seed if warmup_seed is None else warmup_seed,
    )


def _raise_for_failures(result: EvalResult) -> None:
    """Exit code 1 when a TPS request failed or the PPL is not finite (the table is shown first)."""
    if result.tps is not None and not result.tps.ok:
        result.tps.raise_for_failures()
    if result.ppl is not None and not result.ppl.finite:
        raise MeasurementError(
            "PPL is infinite (non-finite logprobs in records "
            f"{', '.join(result.ppl.nonfinite_records) or '?'}): the trial fails the gate"
        )


class _ProgressDisplay:
    """rich progress bars on stderr, one per phase, fed by the evaluators' callback."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.tasks: dict[str, Any] = {}
        self.current: str | None = None

    def __enter__(self) -> _ProgressDisplay:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)  # type: ignore[arg-type]

    def update(self, phase: str, done: int, total: int) -> None:
        if phase != self.current and self.current in self.tasks:
            self.progress.update(self.tasks[self.current], visible=False)
        self.current = phase
        if phase not in self.tasks:
            label = EVAL_PROGRESS_WORDS.get(phase, phase)
            self.tasks[phase] = self.progress.add_task(label, total=total or None)
        task = self.tasks[phase]
        self.progress.update(task, completed=done, total=total or None, visible=True)


def _fmt(value: Any, spec: str = "") -> str:
    if value is None:
        return "-"
    return format(value, spec) if spec else str(value)


def _table(result: EvalResult, ppl_cap: float | None) -> Table:
    data = result.to_dict(details=False)
    table = Table(title=f"sweeper eval: {result.manifest}", show_header=False)
    table.add_column("metric", style="bold")
    table.add_column("value")
    if result.tps is not None:
        tps = result.tps
        table.add_row("TPS", _fmt(tps.tps, ".2f") if tps.ok else "FAILED")
        table.add_row("completed", f"{tps.completed}/{tps.total}")
        table.add_row("output tokens", str(tps.output_tokens))
        table.add_row("duration", f"{tps.duration_s:.2f} s")
        for key, value in tps.latency_summary().items():
            if value is not None:
                table.add_row(key.replace("_s", "").replace("_", " "), f"{value * 1000:.1f} ms")
        for failure in tps.failures[:5]:
            table.add_row(f"failed #{failure.index}", f"{failure.prompt_id}: {failure.error}")
    if result.ppl is not None:
        ppl = result.ppl
        ppl_cell = f"{ppl.ppl:.4f}" if ppl.finite else "inf (gate failure)"
        if ppl.stopped_early:
            ppl_cell += f" (stopped after {ppl.records_scored}/{ppl.records_total} records)"
        elif ppl_cap is not None and ppl.finite:
            ppl_cell += "  passes the cap" if ppl.passes(ppl_cap) else "  OVER the cap"
        table.add_row("PPL", ppl_cell)
        table.add_row("PPL tokens", f"{ppl.tokens} in {ppl.records_scored} records")
    if data["spec_drafts"] is not None:
        table.add_row("mean acceptance length", _fmt(data["mean_acceptance_length"], ".3f"))
        table.add_row("acceptance rate", _fmt(data["spec_acceptance_rate"], ".3f"))
        per_position = ", ".join(f"{v:.2f}" for v in data["spec_per_position_acceptance"])
        table.add_row("per-position acceptance", per_position or "-")
        table.add_row(
            "drafts / draft tokens / accepted",
            f"{data['spec_drafts']} / {data['spec_draft_tokens']} / {data['spec_accepted_tokens']}",
        )
    if result.fidelity is not None:
        fid = result.fidelity
        table.add_row("greedy fidelity", f"{fid.identical}/{fid.compared} identical")
        for div in fid.divergences[:5]:
            table.add_row(f"diverges: {div.id}", f"position {div.position}")
    if result.reference_saved:
        table.add_row("reference written", result.reference_saved)
    for reason in result.skipped:
        table.add_row("skipped", reason)
    table.add_row("timings", ", ".join(f"{k} {v:.1f} s" for k, v in result.timings.items()))
    return table
