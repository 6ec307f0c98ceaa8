"""``sweeper verify``: re-measure the best feasible trials on held-out data."""

from __future__ import annotations

import dataclasses
import json
import logging

import click
from rich.console import Console

from storage import BASE
from sweeper.answer import VerifyEvent, VerifyResult, VerifySettings, verify_study
from sweeper.cli._options import (
    base_manifest_option,
    json_option,
    ppl_data_option,
    prompts_option,
    storage_option,
    study_option,
)
from sweeper.cli._verification_view import control_lines, failure_lines, heldout_ppl_lines, verification_table
from sweeper.errors import StudyError, UserInputError
from sweeper.manifest import Manifest
from sweeper.sweep import demo_data

logger = logging.getLogger(__name__)


class NotVerifiedError(StudyError):
    """Verification ran, and no candidate passed it."""


@click.command("verify")
@study_option()
@storage_option()
@click.option("--top", default=3, show_default=True, help="Verify the N best feasible configurations.")
@click.option("--repeats", default=3, show_default=True, help="Fresh servers per candidate.")
@click.option(
    "--tolerance",
    default=0.05,
    show_default=True,
    help="Largest allowed gap between held-out median TPS and tuned TPS (0.05 = 5 %).",
)
@base_manifest_option()
@prompts_option(help="Held-out prompt set (default: recorded, or the demo's held-out set).")
@ppl_data_option(help="Held-out PPL records (default: recorded, or the demo's held-out set).")
@click.option("--run-dir", type=click.Path(file_okay=False), help="Where the servers' logs go.")
@click.option("--redo", is_flag=True, help="Verify again candidates that already have a verdict.")
@click.option(
    "--no-control",
    "no_control",
    is_flag=True,
    help="Do not measure the base configuration beside each candidate (half the servers; "
    "the speedup over the base is then not checked).",
)
@click.option(
    "--noise",
    type=float,
    help="Between-server TPS spread (SD of log TPS, 0.10 = 10 %) assumed until the repeats "
    "show their own (default: the study's, its 'sweeper run --noise').",
)
@click.option("--spread-prior", type=float, hidden=True, help="Deprecated: the old name of --noise.")
@json_option()
def command(
    study_name: str | None,
    storage: str,
    top: int,
    repeats: int,
    tolerance: float,
    manifest_path: str | None,
    prompts: str | None,
    ppl_data: str | None,
    run_dir: str | None,
    redo: bool,
    no_control: bool,
    noise: float | None,
    spread_prior: float | None,
    as_json: bool,
) -> None:
    """Re-measure the study's best feasible configurations on held-out data.

    Each candidate runs REPEATS times, each time in a fresh server, on
    prompts and PPL records the study never tuned on, alternating with the
    study's base configuration (the control). It is VERIFIED when its
    held-out PPL stays under the cap in every repeat, its median held-out
    TPS is within TOLERANCE of its tuned TPS and, when the study claims it
    is faster than the base, the held-out speedup over the base is confirmed
    (the low end of its 95 % interval is above 0 %). Results are stored in
    the study database (see 'sweeper status', 'sweeper report'); an
    interrupted verify goes on where it stopped. Exits with code 1 when no
    candidate is verified.
    """
    settings = VerifySettings(
        top=top,
        repeats=repeats,
        tolerance=tolerance,
        redo=redo,
        control=not no_control,
        noise=_noise(noise, spread_prior),
        prompts=prompts,
        ppl_data=ppl_data,
        data_defaults=demo_data(),
        run_dir=run_dir,
    )
    manifest = Manifest.load(manifest_path) if manifest_path else None
    console = Console(stderr=True)
    settings = dataclasses.replace(settings, base_manifest=manifest, progress=_Progress(console, repeats))
    result = verify_study(settings, storage=storage, study_name=study_name)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        _print_result(result)
    _exit_status(result)


def _noise(noise: float | None, spread_prior: float | None) -> float | None:
    """``--noise``, or the value given by its deprecated name ``--spread-prior`` (with a warning)."""
    if spread_prior is None:
        return noise
    if noise is not None:
        raise UserInputError("--spread-prior is the old name of --noise: give --noise only")
    click.echo("warning: --spread-prior is deprecated: use --noise (the same prior, by its one name)", err=True)
    return spread_prior


def _print_result(result: VerifyResult) -> None:
    """The verifications' table, why each failed, the held-out speedups and PPL, the candidates
    skipped (with their earlier held-out PPL) and the answer."""
    if result.verifications:
        Console().print(verification_table(result.verifications, title=f"sweeper verify: {result.study_name}"))
    for line in failure_lines(result.verifications):
        click.echo(line)
    for line in control_lines(result.verifications):
        click.echo(line)
    for line in heldout_ppl_lines(result.verifications, result.settings):
        click.echo(line)
    previous = {v.trial_number: v for v in result.previous}
    for number, why in result.skipped:
        click.echo(f"trial #{number}: {why}")
        if number in previous:
            for line in heldout_ppl_lines([previous[number]], result.settings):
                click.echo(f"  {line}")
    click.echo(f"answer: {result.answer.describe()}")


def _exit_status(result: VerifyResult) -> None:
    if result.answer.verified:
        return
    tried = len(result.verifications) + len(result.skipped)
    raise NotVerifiedError(
        f"none of the {tried} candidate(s) of study {result.study_name!r} is verified; "
        f"try more candidates with --top, or look at the reasons above"
    )


class _Progress:
    """One line per repeat on stderr."""

    def __init__(self, console: Console, repeats: int) -> None:
        self.console = console
        self.repeats = repeats

    def __call__(self, event: VerifyEvent) -> None:
        whose = "base" if event.subject == BASE else "candidate"
        if event.kind == "candidate":
            note = f" ({event.message})" if event.message else ""
            self.console.print(f"[bold]trial #{event.trial_number}[/bold]: verifying on held-out data{note}")
        elif event.kind == "repeat-started":
            self.console.print(f"  repeat {_repeat_number(event)}/{self.repeats}, {whose}: starting a fresh server")
        elif event.kind == "repeat-finished" and event.run is not None:
            run, repeat = event.run, _repeat_number(event)
            if run.state == "complete":
                tps = "-" if run.tps is None else f"{run.tps:.2f}"
                ppl = "-" if run.ppl is None else f"{run.ppl:.4f}"
                self.console.print(f"  repeat {repeat}, {whose}: TPS {tps}, PPL {ppl} ({run.seconds:.0f} s)")
            else:
                self.console.print(f"  repeat {repeat}, {whose}: [red]failed[/red]: {run.error_message}")
        elif event.kind == "verdict" and event.verification is not None:
            v = event.verification
            style = "green" if v.verified else "red"
            self.console.print(f"  [{style}]{v.status.upper()}[/{style}]: {v.reason}")


def _repeat_number(event: VerifyEvent) -> int:
    """A repeat's number as the user counts them, from 1."""
    assert event.repeat is not None, f"a {event.kind} event names its repeat"
    return event.repeat + 1
