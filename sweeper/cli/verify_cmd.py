"""``sweeper verify``: re-measure the best feasible trials on held-out data."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from storage import BASE, Control, VerificationRecord, VerificationStatus
from sweeper.answer import (
    VerifyEvent,
    VerifyResult,
    VerifySettings,
    heldout_speedup,
    heldout_statement,
    heldout_text,
    speedup_text,
    verify_study,
)
from sweeper.cli._options import storage_option, study_option
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
@click.option(
    "--manifest",
    "manifest_path",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="Base manifest the study ran on (default: the one the study recorded).",
)
@click.option("--prompts", metavar="P", help="Held-out prompt set (default: recorded, or the demo's held-out set).")
@click.option("--ppl-data", metavar="D", help="Held-out PPL records (default: recorded, or the demo's held-out set).")
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
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
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
    if spread_prior is not None:
        if noise is not None:
            raise UserInputError("--spread-prior is the old name of --noise: give --noise only")
        click.echo("warning: --spread-prior is deprecated: use --noise (the same prior, by its one name)", err=True)
        noise = spread_prior
    settings = VerifySettings(
        top=top,
        repeats=repeats,
        tolerance=tolerance,
        redo=redo,
        control=not no_control,
        noise=noise,
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
    _exit_status(result)


def _exit_status(result: VerifyResult) -> None:
    if result.answer.verified:
        return
    tried = len(result.verifications) + len(result.skipped)
    raise NotVerifiedError(
        f"none of the {tried} candidate(s) of study {result.study_name!r} is verified; "
        f"try more candidates with --top, or look at the reasons above"
    )


def verification_table(verifications: Iterable[VerificationRecord], *, title: str) -> Table:
    """One row per verification (also used by 'sweeper status'); one line per row in 80 columns:
    a cap shared by every row is named in the caption instead of a column of its own."""
    verifications = list(verifications)
    caps = {v.ppl_cap for v in verifications}
    shared_cap = next(iter(caps)) if len(caps) == 1 else None
    table = Table(title=title)
    columns = ["trial", "status", "tuned", "held-out", "dev", "vs base", "PPL"]
    columns += ["runs"] if shared_cap is not None else ["cap", "runs"]
    for column in columns:
        table.add_column(column, justify="left" if column == "status" else "right", no_wrap=True)
    for v in verifications:
        style = "green" if v.verified else "red" if v.status is VerificationStatus.FAILED else "yellow"
        cells = [
            f"#{v.trial_number}",
            f"[{style}]{v.status.upper()}[/{style}]",
            f"{v.tuned_tps:.2f}",
            "-" if v.median_tps is None else f"{v.median_tps:.2f}",
            "-" if v.tps_deviation is None else f"{v.tps_deviation:+.1%}",
            _versus_base(v),
            "-" if v.max_ppl is None else f"{v.max_ppl:.4f}",
        ]
        cells += [] if shared_cap is not None else [f"{v.ppl_cap:.4f}"]
        table.add_row(*cells, f"{len(v.runs)}/{v.repeats}")
    table.caption = (
        "TPS tuned vs held-out (median of the runs), dev = their gap; vs base: the held-out "
        "speedup over the base configuration; PPL: the highest held-out"
        + (f" (cap {shared_cap:.4f})" if shared_cap is not None else "")
    )
    return table


def _versus_base(v: VerificationRecord) -> str:
    if v.control is Control.IS_BASE:
        return "is base"
    if v.control is Control.OFF:
        return "off"
    interval = heldout_speedup(v)
    return "-" if interval is None else f"{(interval.value - 1) * 100:+.1f}%"


def control_lines(verifications: Iterable[VerificationRecord]) -> list[str]:
    """The held-out speedup over the base of each verification that measured the control
    (left out where a failure line already says it)."""
    lines = []
    for v in verifications:
        interval = heldout_speedup(v)
        if interval is None:
            continue
        text = speedup_text(interval)
        if not v.verified and text in v.reason:
            continue
        claim = "" if v.claimed_speedup else " (no speedup claimed)"
        lines.append(f"trial #{v.trial_number}: {text}{claim}")
    return lines


def heldout_ppl_lines(verifications: Iterable[VerificationRecord], settings: Mapping[str, Any]) -> list[str]:
    """Each verification's held-out PPL with its interval and the re-run's chance (also used by
    'sweeper status'); one within the noise of the cap is flagged even when it passed. A
    verification without per-record figures (an evaluator of one's own) has no line."""
    lines = []
    for v in verifications:
        statement = heldout_statement(v, settings)
        if statement is not None and statement.known:
            lines.append(f"trial #{v.trial_number}: {heldout_text(statement)}")
    return lines


def failure_lines(verifications: Iterable[VerificationRecord]) -> list[str]:
    """Why each failed verification failed (the table leaves the reasons out)."""
    return [f"trial #{v.trial_number} {v.status}: {v.reason}" for v in verifications if not v.verified]


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
            self.console.print(f"  repeat {event.repeat + 1}/{self.repeats}, {whose}: starting a fresh server")
        elif event.kind == "repeat-finished" and event.run is not None:
            run = event.run
            if run.state == "complete":
                tps = "-" if run.tps is None else f"{run.tps:.2f}"
                ppl = "-" if run.ppl is None else f"{run.ppl:.4f}"
                self.console.print(f"  repeat {event.repeat + 1}, {whose}: TPS {tps}, PPL {ppl} ({run.seconds:.0f} s)")
            else:
                self.console.print(f"  repeat {event.repeat + 1}, {whose}: [red]failed[/red]: {run.error_message}")
        elif event.kind == "verdict" and event.verification is not None:
            v = event.verification
            style = "green" if v.verified else "red"
            self.console.print(f"  [{style}]{v.status.upper()}[/{style}]: {v.reason}")
