"""``sweeper report``: a study's or an ablation's plots, tables and summary in one folder."""

from __future__ import annotations

import json
import logging

import click

from sweeper.cli._options import base_manifest_option, json_option, storage_option, study_option
from sweeper.errors import UserInputError
from sweeper.manifest import Manifest
from sweeper.report import build_ablation_report, build_report

logger = logging.getLogger(__name__)


@click.command("report")
@study_option()
@click.option(
    "--ablation",
    "ablation_name",
    metavar="NAME",
    help="Report a stored ablation (sweeper ablate) instead of a study; not with --study.",
)
@storage_option()
@click.option(
    "-o",
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    help="Folder to write into (default: ./report-<study>, or ./report-ablation-<name> with --ablation).",
)
@base_manifest_option(
    help="Base manifest, to show how the winner differs from it (default: the recorded one; studies only)."
)
@json_option()
def command(
    study_name: str | None,
    ablation_name: str | None,
    storage: str,
    out_dir: str | None,
    manifest_path: str | None,
    as_json: bool,
) -> None:
    """Write a study's report, or with --ablation NAME an ablation's (not both at once).

    A study's (--study NAME): report.html, the Pareto plot, trials.csv and
    summary.md. report.html opens in any browser with no network: the Pareto
    plot (TPS against PPL, the cap line, feasible / infeasible / failed /
    verified trials, the winner), the best TPS by trial, a slice plot per
    parameter, parameter importance, the verification results and where
    the time went. A study with no trials is an error (nothing is written);
    one with no feasible or no verified trial gets its report and a note
    saying so.

    An ablation's (--ablation NAME): ablation.html, effects.png,
    switches.csv, servers.csv and summary.md. ablation.html opens offline:
    each switch's TPS effect in percent with its interval (coloured by
    verdict, a line at 0 %), the verdicts with their PPL and output checks,
    what the intervals rest on, the closing race and every server. An
    ablation with no servers stored is an error (nothing is written); a
    running or interrupted one gets the report of what is stored and a
    note saying so.
    """
    if ablation_name is not None:
        if study_name is not None:
            raise UserInputError("give --study or --ablation, not both: a report is of one study or one ablation")
        if manifest_path is not None:
            raise UserInputError("--manifest is for a study's report; an ablation's report reads its own manifest")
        _ablation_report(storage, ablation_name, out_dir, as_json=as_json)
        return
    manifest = Manifest.load(manifest_path) if manifest_path else None
    written = build_report(storage, study_name, out_dir, base_manifest=manifest)
    for message in written.messages:
        click.echo(f"note: {message}", err=True)
    if as_json:
        click.echo(json.dumps(written.to_dict(), indent=2))
        return
    click.echo(f"report of study {written.data.study_name!r} written to {written.out_dir}")
    click.echo(f"  open {written.page}")
    answer = written.data.answer
    if answer.record is not None:
        click.echo(f"  winner: {answer.describe()}")


def _ablation_report(storage: str, name: str, out_dir: str | None, *, as_json: bool) -> None:
    written = build_ablation_report(storage, name, out_dir)
    for message in written.messages:
        click.echo(f"note: {message}", err=True)
    if as_json:
        click.echo(json.dumps(written.to_dict(), indent=2))
        return
    click.echo(f"report of ablation {written.data.name!r} written to {written.out_dir}")
    click.echo(f"  open {written.page}")
    for report in written.data.result.reports:
        click.echo(f"  {report.switch.label} vs {report.switch.reference_text}: {report.verdict.value}")
