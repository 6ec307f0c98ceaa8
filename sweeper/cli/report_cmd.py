"""``sweeper report``: the study's plots, tables and summary in one folder."""

from __future__ import annotations

import json
import logging

import click

from storage import DEFAULT_URL
from sweeper.manifest import Manifest
from sweeper.report import build_report

logger = logging.getLogger(__name__)


@click.command("report")
@click.option("--study", "study_name", metavar="NAME", help="Study name (needed when the database holds several).")
@click.option(
    "--storage",
    default=DEFAULT_URL,
    show_default=True,
    envvar="SWEEPER_STORAGE",
    help="Study database: SQLAlchemy URL or SQLite path.",
)
@click.option(
    "-o", "--out", "out_dir", type=click.Path(file_okay=False), help="Folder to write into (default: ./report-<study>)."
)
@click.option(
    "--manifest",
    "manifest_path",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="Base manifest, to show how the winner differs from it (default: the recorded one).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def command(
    study_name: str | None, storage: str, out_dir: str | None, manifest_path: str | None, as_json: bool
) -> None:
    """Write the study's report: report.html, the Pareto plot, trials.csv, summary.md.

    report.html opens in any browser with no network: the Pareto plot (TPS
    against PPL, the cap line, feasible / infeasible / failed / verified
    trials, the winner), the best TPS by trial, a slice plot per parameter,
    parameter importance, the verification results and where the time went.
    A study with no trials is an error (nothing is written); one with no
    feasible or no verified trial gets its report and a note saying so.
    """
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
